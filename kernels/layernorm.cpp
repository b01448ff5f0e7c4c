// shardtrain/kernels/layernorm.cpp
// Owns LayerNorm over the last dimension of (N, C) rows with affine w, b.
// Invariants (see layernorm.hpp):
//  - forward OVERWRITES y, mean, rstd; statistics are two-pass (mean, then the
//    biased variance of x - mean), accumulated in compute_t<T> with 16 fixed lanes
//    (vec_math.hpp) so they are deterministic and vectorise;
//  - backward ACCUMULATES into dx, dw and db (+=), like llm.c's layernorm: dx +=
//    lets the caller fold the residual gradient in without an extra pass, dw/db +=
//    lets micro-batches add up;
//  - dx is computed per row (rows in parallel); dw/db per block of columns with
//    the rows visited in order, so no atomics and results do not depend on the
//    thread count. x-hat is recomputed from (x, mean, rstd), never stored.
//  - One row / column-block function per pass for every storage type S: operands
//    are widened to compute_t<S> in registers (vec_math.hpp) and every output is
//    rounded once on store. So T = f16 / bf16 runs directly on 16-bit memory (no
//    scratch: layernorm_half_scratch_elems is 0) and its y, mean, rstd, dx are the
//    fp32 kernel's results on the same 16-bit inputs rounded once, bit for bit. y
//    is computed from the fp32 mean and rstd of the row; only the saved statistics
//    are rounded, and backward reads those rounded values, as the fp32 kernel
//    given them would. dx is loaded, added to in fp32 and rounded once; dw and db
//    are summed over ALL rows of the call in fp32 registers (the fp32 kernel's
//    order), added to the loaded dw / db and rounded once per call, so they too
//    equal the fp32 kernel's results rounded once.
//  - A 16-bit row up to kRowMax (4096) values wide is widened once into fp32 row
//    buffers on the stack (forward: x; backward: x - mean and g = dy w), and the fp32
//    operations run on those in the same order: the same bits, without widening
//    each value in every pass (quickstart shapes on a Zen 4, tests/bench/
//    elementwise_ops: forward 51 -> 47 us, backward 64 -> 44 us). Wider rows read
//    16-bit memory in every pass, as before (test LayerNorm.SixteenBitWideRows*).
#include "kernels/layernorm.hpp"

#include <cmath>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/half_tiles.hpp"  // check_host
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

const std::string kLabelForward = "LayerNorm::forward";
const std::string kLabelBackwardInput = "LayerNorm::backward_input";
const std::string kLabelBackwardParams = "LayerNorm::backward_params";

constexpr std::int64_t kColBlock = 64;  // columns per work item of the dw/db reduction
constexpr std::int64_t kRowMax = 4096;  // 16-bit rows up to this width are widened once into fp32

template <class S, class T = compute_t<S>>
SHARDTRAIN_TARGET_CLONES
void forward_row(const S* __restrict x, const S* __restrict w, const S* __restrict b,
                 S* __restrict y, S* __restrict mean, S* __restrict rstd, T eps, std::int64_t c) {
  if constexpr (!std::is_same_v<S, T>) {
    if (c <= kRowMax) {
      alignas(64) T xf[kRowMax];
      for (std::int64_t j = 0; j < c; ++j) xf[j] = vec::widen(x[j]);
      const T mu = vec::sum(xf, c) / T(c);
      const T var = vec::sum_sq_dev(xf, mu, c) / T(c);
      const T rs = T(1) / std::sqrt(var + eps);
      for (std::int64_t j = 0; j < c; ++j)
        y[j] = vec::narrow<S>((xf[j] - mu) * rs * vec::widen(w[j]) + vec::widen(b[j]));
      *mean = vec::narrow<S>(mu);
      *rstd = vec::narrow<S>(rs);
      return;
    }
  }
  const T mu = vec::sum(x, c) / T(c);
  const T var = vec::sum_sq_dev(x, mu, c) / T(c);
  const T rs = T(1) / std::sqrt(var + eps);
  for (std::int64_t j = 0; j < c; ++j)
    y[j] = vec::narrow<S>((vec::widen(x[j]) - mu) * rs * vec::widen(w[j]) + vec::widen(b[j]));
  *mean = vec::narrow<S>(mu);
  *rstd = vec::narrow<S>(rs);
}

// sum_j dy[j] w[j] (x[j] - mu): one accumulator array per pass keeps the lanes in
// registers (two arrays in one loop spill to the stack under GCC 12).
template <class S, class T = compute_t<S>>
SHARDTRAIN_ALWAYS_INLINE T dot_centered(const S* __restrict dy, const S* __restrict w,
                                        const S* __restrict x, T mu, std::int64_t c) {
  T acc[vec::kLanes] = {};
  std::int64_t j = 0;
  for (; j + vec::kLanes <= c; j += vec::kLanes) {
    if constexpr (!vec::widen_first<S>) {
      for (int l = 0; l < vec::kLanes; ++l)
        acc[l] += vec::widen(dy[j + l]) * vec::widen(w[j + l]) * (vec::widen(x[j + l]) - mu);
    } else {
      T wdy[vec::kLanes], ww[vec::kLanes], wx[vec::kLanes];  // see vec::widen_lanes
      vec::widen_lanes(dy + j, wdy);
      vec::widen_lanes(w + j, ww);
      vec::widen_lanes(x + j, wx);
      for (int l = 0; l < vec::kLanes; ++l) acc[l] += wdy[l] * ww[l] * (wx[l] - mu);
    }
  }
  T tail = T(0);
  for (; j < c; ++j) tail += vec::widen(dy[j]) * vec::widen(w[j]) * (vec::widen(x[j]) - mu);
  return vec::combine_lanes(acc) + tail;
}

// dx += rs * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * w,  xhat = (x - mu) * rs
template <class S, class T = compute_t<S>>
SHARDTRAIN_TARGET_CLONES
void backward_input_row(const S* __restrict x, const S* __restrict w, const S* __restrict dy,
                        T mu, T rs, S* __restrict dx, std::int64_t c) {
  if constexpr (!std::is_same_v<S, T>) {
    if (c <= kRowMax) {  // as forward_row: g = dy w and x - mu formed once, the same operations after
      alignas(64) T g[kRowMax];
      alignas(64) T xc[kRowMax];
      for (std::int64_t k = 0; k < c; ++k) {
        g[k] = vec::widen(dy[k]) * vec::widen(w[k]);
        xc[k] = vec::widen(x[k]) - mu;
      }
      const T mean_g = vec::sum(g, c) / T(c);
      const T mean_gx = rs * vec::dot(g, xc, c) / T(c);  // dot_centered's products, lanes and tree
      for (std::int64_t k = 0; k < c; ++k)
        dx[k] = vec::narrow<S>(vec::widen(dx[k]) + rs * (g[k] - mean_g - xc[k] * rs * mean_gx));
      return;
    }
  }
  const T mean_g = vec::dot(dy, w, c) / T(c);
  const T mean_gx = rs * dot_centered(dy, w, x, mu, c) / T(c);
  for (std::int64_t k = 0; k < c; ++k)
    dx[k] = vec::narrow<S>(vec::widen(dx[k]) +
                           rs * (vec::widen(dy[k]) * vec::widen(w[k]) - mean_g -
                                 (vec::widen(x[k]) - mu) * rs * mean_gx));
}

// dw[j] += sum_i dy(i,j) xhat(i,j),  db[j] += sum_i dy(i,j),  for j in [j0, j0 + nj):
// the sums over all n rows in compute_t<S>, then one add to (and one rounding of)
// each of dw[j] and db[j].
template <class S>
SHARDTRAIN_TARGET_CLONES
void backward_params_block(const S* __restrict x, const S* __restrict dy,
                           const S* __restrict mean, const S* __restrict rstd, S* __restrict dw,
                           S* __restrict db, std::int64_t n, std::int64_t c, std::int64_t j0,
                           std::int64_t nj) {
  using T = compute_t<S>;
  T acc_w[kColBlock];
  T acc_b[kColBlock];
  for (std::int64_t j = 0; j < nj; ++j) acc_w[j] = acc_b[j] = T(0);
  for (std::int64_t i = 0; i < n; ++i) {
    const S* xr = x + i * c + j0;
    const S* dyr = dy + i * c + j0;
    const T mu = vec::widen(mean[i]), rs = vec::widen(rstd[i]);
    for (std::int64_t j = 0; j < nj; ++j) {
      const T g = vec::widen(dyr[j]);
      acc_w[j] += g * ((vec::widen(xr[j]) - mu) * rs);
      acc_b[j] += g;
    }
  }
  for (std::int64_t j = 0; j < nj; ++j) {
    dw[j0 + j] = vec::narrow<S>(vec::widen(dw[j0 + j]) + acc_w[j]);
    db[j0 + j] = vec::narrow<S>(vec::widen(db[j0 + j]) + acc_b[j]);
  }
}

}  // namespace

std::int64_t layernorm_half_scratch_elems(std::int64_t) { return 0; }

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
  if constexpr (is_half_v<T>) half_tiles::check_host("layernorm_forward");
  const compute_t<T> e = vec::widen(eps);
  const T* xp = x.data();
  const T* wp = w.data();
  const T* bp = b.data();
  T* yp = y.data();
  T* meanp = mean.data();
  T* rstdp = rstd.data();
  Kokkos::parallel_for(kLabelForward, range(n), KOKKOS_LAMBDA(const std::int64_t i) {
    forward_row(xp + i * c, wp, bp, yp + i * c, meanp + i, rstdp + i, e, c);
  });
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
  if constexpr (is_half_v<T>) half_tiles::check_host("layernorm_backward");
  const T* xp = x.data();
  const T* wp = w.data();
  const T* meanp = mean.data();
  const T* rstdp = rstd.data();
  const T* dyp = dy.data();
  T* dxp = dx.data();
  T* dwp = dw.data();
  T* dbp = db.data();
  Kokkos::parallel_for(kLabelBackwardInput, range(n), KOKKOS_LAMBDA(const std::int64_t i) {
    backward_input_row(xp + i * c, wp, dyp + i * c, vec::widen(meanp[i]), vec::widen(rstdp[i]),
                       dxp + i * c, c);
  });
  const std::int64_t blocks = (c + kColBlock - 1) / kColBlock;
  Kokkos::parallel_for(
      kLabelBackwardParams, range(blocks), KOKKOS_LAMBDA(const std::int64_t blk) {
        const std::int64_t j0 = blk * kColBlock;
        const std::int64_t nj = (c - j0) < kColBlock ? (c - j0) : kColBlock;
        backward_params_block(xp, dyp, meanp, rstdp, dwp, dbp, n, c, j0, nj);
      });
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
