// shardtrain/kernels/layernorm.cpp
// Owns LayerNorm over the last dimension of (N, C) rows with affine w, b.
// Invariants (see layernorm.hpp):
//  - forward OVERWRITES y, mean, rstd; statistics are two-pass (mean, then the
//    biased variance of x - mean), accumulated in T with 8 fixed lanes
//    (vec_math.hpp) so they are deterministic and vectorise;
//  - backward ACCUMULATES into dx, dw and db (+=), like llm.c's layernorm: dx +=
//    lets the caller fold the residual gradient in without an extra pass, dw/db +=
//    lets micro-batches add up;
//  - dx is computed per row (rows in parallel); dw/db per block of columns with
//    the rows visited in order, so no atomics and results do not depend on the
//    thread count. x-hat is recomputed from (x, mean, rstd), never stored.
//  - T = f16 / bf16 (half_tiles.hpp): tiles of tile_rows(C) rows are converted to
//    fp32 (w, b once per call) and run through layernorm_forward<float> /
//    layernorm_backward<float>, so y, mean, rstd and dx are the fp32 results on the
//    16-bit inputs rounded once (bit for bit: rows are independent). dx tiles are
//    loaded before the fp32 backward adds to them; dw and db are loaded once into
//    fp32 accumulators that every tile adds to and are rounded back once.
//    Scratch: layernorm_half_scratch_elems.
#include "kernels/layernorm.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/half_tiles.hpp"
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

const std::string kLabelForward = "LayerNorm::forward";
const std::string kLabelBackwardInput = "LayerNorm::backward_input";
const std::string kLabelBackwardParams = "LayerNorm::backward_params";

constexpr std::int64_t kColBlock = 64;  // columns per work item of the dw/db reduction

template <class... V>
bool contiguous(const V&... v) {
  return (v.span_is_contiguous() && ...);
}

template <class T>
SHARDTRAIN_TARGET_CLONES
void forward_row(const T* __restrict x, const T* __restrict w, const T* __restrict b,
                 T* __restrict y, T* __restrict mean, T* __restrict rstd, T eps, std::int64_t c) {
  const T mu = vec::sum(x, c) / T(c);
  const T var = vec::sum_sq_dev(x, mu, c) / T(c);
  const T rs = T(1) / std::sqrt(var + eps);
  for (std::int64_t j = 0; j < c; ++j) y[j] = (x[j] - mu) * rs * w[j] + b[j];
  *mean = mu;
  *rstd = rs;
}

// sum_j dy[j] w[j] (x[j] - mu): one accumulator array per pass keeps the lanes in
// registers (two arrays in one loop spill to the stack under GCC 12).
template <class T>
SHARDTRAIN_ALWAYS_INLINE T dot_centered(const T* __restrict dy, const T* __restrict w,
                                        const T* __restrict x, T mu, std::int64_t c) {
  T acc[vec::kLanes] = {};
  std::int64_t j = 0;
  for (; j + vec::kLanes <= c; j += vec::kLanes)
    for (int l = 0; l < vec::kLanes; ++l) acc[l] += dy[j + l] * w[j + l] * (x[j + l] - mu);
  T tail = T(0);
  for (; j < c; ++j) tail += dy[j] * w[j] * (x[j] - mu);
  return vec::combine_lanes(acc) + tail;
}

// dx += rs * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * w,  xhat = (x - mu) * rs
template <class T>
SHARDTRAIN_TARGET_CLONES
void backward_input_row(const T* __restrict x, const T* __restrict w, const T* __restrict dy,
                        T mu, T rs, T* __restrict dx, std::int64_t c) {
  const T mean_g = vec::dot(dy, w, c) / T(c);
  const T mean_gx = rs * dot_centered(dy, w, x, mu, c) / T(c);
  for (std::int64_t k = 0; k < c; ++k)
    dx[k] += rs * (dy[k] * w[k] - mean_g - (x[k] - mu) * rs * mean_gx);
}

// dw[j] += sum_i dy(i,j) xhat(i,j),  db[j] += sum_i dy(i,j),  for j in [j0, j0 + nj)
template <class T>
SHARDTRAIN_TARGET_CLONES
void backward_params_block(const T* __restrict x, const T* __restrict dy,
                           const T* __restrict mean, const T* __restrict rstd, T* __restrict dw,
                           T* __restrict db, std::int64_t n, std::int64_t c, std::int64_t j0,
                           std::int64_t nj) {
  T acc_w[kColBlock];
  T acc_b[kColBlock];
  for (std::int64_t j = 0; j < nj; ++j) acc_w[j] = acc_b[j] = T(0);
  for (std::int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * c + j0;
    const T* dyr = dy + i * c + j0;
    const T mu = mean[i], rs = rstd[i];
    for (std::int64_t j = 0; j < nj; ++j) {
      acc_w[j] += dyr[j] * ((xr[j] - mu) * rs);
      acc_b[j] += dyr[j];
    }
  }
  for (std::int64_t j = 0; j < nj; ++j) {
    dw[j0 + j] += acc_w[j];
    db[j0 + j] += acc_b[j];
  }
}

// Tile geometry of the 16-bit path for rows of c channels (n rows in the call).
struct HalfLayerNormTiles {
  std::int64_t rows, c;
  // forward: w, b | x, y tiles | mean, rstd tiles
  std::int64_t forward_elems() const { return 2 * c + 2 * rows * c + 2 * rows; }
  // backward: w, dw, db | x, dy, dx tiles | mean, rstd tiles
  std::int64_t backward_elems() const { return 3 * c + 3 * rows * c + 2 * rows; }
};

HalfLayerNormTiles half_layernorm_tiles(std::int64_t n, std::int64_t c) {
  return {half_tiles::min(n, half_tiles::tile_rows(c)), c};
}

// Shapes checked by layernorm_forward; n > 0.
template <class H>
void layernorm_forward_half(CView2<H> x, CView1<H> w, CView1<H> b, View2<H> y, View1<H> mean,
                            View1<H> rstd, float eps) {
  using namespace half_tiles;
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const std::int64_t c = static_cast<std::int64_t>(x.extent(1));
  check_host("layernorm_forward");
  const HalfLayerNormTiles tiles = half_layernorm_tiles(n, c);
  Scratch scratch(tiles.forward_elems(), "layernorm_forward");
  float* wt = scratch.take(c);
  float* bt = scratch.take(c);
  float* xt = scratch.take(tiles.rows * c);
  float* yt = scratch.take(tiles.rows * c);
  float* mt = scratch.take(tiles.rows);
  float* rt = scratch.take(tiles.rows);
  to_f32(w.data(), wt, c);
  to_f32(b.data(), bt, c);
  for (std::int64_t i0 = 0; i0 < n; i0 += tiles.rows) {
    const std::int64_t nr = min(tiles.rows, n - i0);
    to_f32(x.data() + i0 * c, xt, nr * c);
    layernorm_forward<float>(CView2<float>(xt, nr, c), CView1<float>(wt, c), CView1<float>(bt, c),
                             View2<float>(yt, nr, c), View1<float>(mt, nr), View1<float>(rt, nr),
                             eps);
    from_f32(yt, y.data() + i0 * c, nr * c);
    from_f32(mt, mean.data() + i0, nr);
    from_f32(rt, rstd.data() + i0, nr);
  }
}

// Shapes checked by layernorm_backward; n > 0.
template <class H>
void layernorm_backward_half(CView2<H> x, CView1<H> w, CView1<H> mean, CView1<H> rstd,
                             CView2<H> dy, View2<H> dx, View1<H> dw, View1<H> db) {
  using namespace half_tiles;
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const std::int64_t c = static_cast<std::int64_t>(x.extent(1));
  check_host("layernorm_backward");
  const HalfLayerNormTiles tiles = half_layernorm_tiles(n, c);
  Scratch scratch(tiles.backward_elems(), "layernorm_backward");
  float* wt = scratch.take(c);
  float* dwt = scratch.take(c);
  float* dbt = scratch.take(c);
  float* xt = scratch.take(tiles.rows * c);
  float* dyt = scratch.take(tiles.rows * c);
  float* dxt = scratch.take(tiles.rows * c);
  float* mt = scratch.take(tiles.rows);
  float* rt = scratch.take(tiles.rows);
  to_f32(w.data(), wt, c);
  to_f32(dw.data(), dwt, c);
  to_f32(db.data(), dbt, c);
  for (std::int64_t i0 = 0; i0 < n; i0 += tiles.rows) {
    const std::int64_t nr = min(tiles.rows, n - i0);
    to_f32(x.data() + i0 * c, xt, nr * c);
    to_f32(dy.data() + i0 * c, dyt, nr * c);
    to_f32(dx.data() + i0 * c, dxt, nr * c);
    to_f32(mean.data() + i0, mt, nr);
    to_f32(rstd.data() + i0, rt, nr);
    layernorm_backward<float>(CView2<float>(xt, nr, c), CView1<float>(wt, c),
                              CView1<float>(mt, nr), CView1<float>(rt, nr),
                              CView2<float>(dyt, nr, c), View2<float>(dxt, nr, c),
                              View1<float>(dwt, c), View1<float>(dbt, c));
    from_f32(dxt, dx.data() + i0 * c, nr * c);
  }
  from_f32(dwt, dw.data(), c);
  from_f32(dbt, db.data(), c);
}

}  // namespace

std::int64_t layernorm_half_scratch_elems(std::int64_t c) {
  if (c <= 0) return 0;
  const HalfLayerNormTiles tiles = half_layernorm_tiles(half_tiles::tile_rows(c), c);
  return std::max(tiles.forward_elems(), tiles.backward_elems());
}

template <class T>
void layernorm_forward(CView2<T> x, CView1<T> w, CView1<T> b, View2<T> y, View1<T> mean,
                       View1<T> rstd, T eps) {
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const std::int64_t c = static_cast<std::int64_t>(x.extent(1));
  SHARDTRAIN_CHECK(w.extent(0) == x.extent(1) && b.extent(0) == x.extent(1) &&
                       y.extent(0) == x.extent(0) && y.extent(1) == x.extent(1) &&
                       mean.extent(0) == x.extent(0) && rstd.extent(0) == x.extent(0),
                   "layernorm_forward: shapes do not match x(" + std::to_string(n) + "," +
                       std::to_string(c) + ")");
  SHARDTRAIN_CHECK(contiguous(x, w, b, y, mean, rstd),
                   "layernorm_forward: views must be contiguous");
  SHARDTRAIN_CHECK(c > 0 || n == 0, "layernorm_forward: zero channels");
  if constexpr (is_half_v<T>) {
    if (n > 0) layernorm_forward_half(x, w, b, y, mean, rstd, to_float(eps));
  } else {
    const T* xp = x.data();
    const T* wp = w.data();
    const T* bp = b.data();
    T* yp = y.data();
    T* meanp = mean.data();
    T* rstdp = rstd.data();
    Kokkos::parallel_for(kLabelForward, range(n), KOKKOS_LAMBDA(const std::int64_t i) {
      forward_row(xp + i * c, wp, bp, yp + i * c, meanp + i, rstdp + i, eps, c);
    });
  }
}

template <class T>
void layernorm_backward(CView2<T> x, CView1<T> w, CView1<T> mean, CView1<T> rstd, CView2<T> dy,
                        View2<T> dx, View1<T> dw, View1<T> db) {
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const std::int64_t c = static_cast<std::int64_t>(x.extent(1));
  SHARDTRAIN_CHECK(w.extent(0) == x.extent(1) && mean.extent(0) == x.extent(0) &&
                       rstd.extent(0) == x.extent(0) && dy.extent(0) == x.extent(0) &&
                       dy.extent(1) == x.extent(1) && dx.extent(0) == x.extent(0) &&
                       dx.extent(1) == x.extent(1) && dw.extent(0) == x.extent(1) &&
                       db.extent(0) == x.extent(1),
                   "layernorm_backward: shapes do not match x(" + std::to_string(n) + "," +
                       std::to_string(c) + ")");
  SHARDTRAIN_CHECK(contiguous(x, w, mean, rstd, dy, dx, dw, db),
                   "layernorm_backward: views must be contiguous");
  if constexpr (is_half_v<T>) {
    if (n > 0) layernorm_backward_half(x, w, mean, rstd, dy, dx, dw, db);
  } else {
    const T* xp = x.data();
    const T* wp = w.data();
    const T* meanp = mean.data();
    const T* rstdp = rstd.data();
    const T* dyp = dy.data();
    T* dxp = dx.data();
    T* dwp = dw.data();
    T* dbp = db.data();
    Kokkos::parallel_for(kLabelBackwardInput, range(n), KOKKOS_LAMBDA(const std::int64_t i) {
      backward_input_row(xp + i * c, wp, dyp + i * c, meanp[i], rstdp[i], dxp + i * c, c);
    });
    const std::int64_t blocks = (c + kColBlock - 1) / kColBlock;
    Kokkos::parallel_for(
        kLabelBackwardParams, range(blocks), KOKKOS_LAMBDA(const std::int64_t blk) {
          const std::int64_t j0 = blk * kColBlock;
          const std::int64_t nj = (c - j0) < kColBlock ? (c - j0) : kColBlock;
          backward_params_block(xp, dyp, meanp, rstdp, dwp, dbp, n, c, j0, nj);
        });
  }
}

#define SHARDTRAIN_INSTANTIATE_LAYERNORM(T)                                                   \
  template void layernorm_forward<T>(CView2<T>, CView1<T>, CView1<T>, View2<T>, View1<T>,    \
                                     View1<T>, T);                                           \
  template void layernorm_backward<T>(CView2<T>, CView1<T>, CView1<T>, CView1<T>, CView2<T>, \
                                      View2<T>, View1<T>, View1<T>);
SHARDTRAIN_INSTANTIATE_LAYERNORM(float)
SHARDTRAIN_INSTANTIATE_LAYERNORM(double)
SHARDTRAIN_INSTANTIATE_LAYERNORM(f16)
SHARDTRAIN_INSTANTIATE_LAYERNORM(bf16)
#undef SHARDTRAIN_INSTANTIATE_LAYERNORM

}  // namespace shardtrain
