// shardtrain/kernels/cross_entropy.cpp
// Owns fused softmax cross-entropy over rows of logits (N, V).
// Invariants (see cross_entropy.hpp):
//  - log-sum-exp subtracts the row max first, so no exp overflows;
//  - a row whose target is negative is ignored: loss 0, gradient row 0; a target
//    >= V throws (checked with one cheap pass before anything is written);
//  - backward OVERWRITES dlogits and may run in place (dlogits == logits): each row
//    reads its max first, then every element is read before the same index is
//    written (exp), and later passes only touch dlogits;
//  - rows are independent (rows in parallel); sums use vec_math's fixed lanes, so
//    results are deterministic.
//  - T = f16 / bf16 (half_tiles.hpp): tiles of tile_rows(V) rows (one row per tile
//    for a 50k vocabulary) are converted to fp32 and run through
//    cross_entropy_forward<float> / cross_entropy_backward<float> (in place on the
//    tile), then rounded back: bit for bit the fp32 result on the 16-bit logits,
//    rounded once. A tile is read completely before it is written, so in-place
//    dlogits == logits still works. Targets are validated for the whole call before
//    any tile is written. Scratch: cross_entropy_half_scratch_elems.
#include "kernels/cross_entropy.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/half_tiles.hpp"
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

const std::string kLabelValidate = "CrossEntropy::validate_targets";
const std::string kLabelForward = "CrossEntropy::forward";
const std::string kLabelBackward = "CrossEntropy::backward";

template <class... V>
bool contiguous(const V&... v) {
  return (v.span_is_contiguous() && ...);
}

std::int64_t count_bad_targets(const TokenIndex* tgt, std::int64_t n, std::int64_t vocab) {
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      kLabelValidate, range(n),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) { acc += tgt[i] >= vocab ? 1 : 0; },
      bad);
  return bad;
}

// sum_j exp(x[j] - m)
template <class T>
SHARDTRAIN_ALWAYS_INLINE T sum_exp(const T* __restrict x, T m, std::int64_t v) {
  T acc[vec::kLanes] = {};
  std::int64_t j = 0;
  for (; j + vec::kLanes <= v; j += vec::kLanes)
    for (int l = 0; l < vec::kLanes; ++l) acc[l] += vec::exp_fast<T>(x[j + l] - m);
  T tail = T(0);
  for (; j < v; ++j) tail += vec::exp_fast<T>(x[j] - m);
  return vec::combine_lanes(acc) + tail;
}

template <class T>
SHARDTRAIN_TARGET_CLONES
T row_loss(const T* __restrict x, TokenIndex target, std::int64_t v) {
  if (target < 0) return T(0);
  const T m = vec::max(x, v);
  return std::log(sum_exp(x, m, v)) - (x[target] - m);
}

// dl = scale * (softmax(x) - onehot(target)); dl may equal x.
template <class T>
SHARDTRAIN_TARGET_CLONES
void row_grad(const T* x, TokenIndex target, T scale, T* dl, std::int64_t v) {
  if (target < 0) {
    for (std::int64_t j = 0; j < v; ++j) dl[j] = T(0);
    return;
  }
  const T m = vec::max(x, v);
  SHARDTRAIN_IVDEP
  for (std::int64_t j = 0; j < v; ++j) dl[j] = vec::exp_fast<T>(x[j] - m);
  const T factor = scale / vec::sum(dl, v);
  for (std::int64_t j = 0; j < v; ++j) dl[j] *= factor;
  dl[target] -= scale;
}

// Rows per tile and floats of scratch of the 16-bit path: one logits tile and one
// losses tile.
struct HalfCrossEntropyTiles {
  std::int64_t rows, v;
  std::int64_t elems() const { return rows * v + rows; }
};

HalfCrossEntropyTiles half_cross_entropy_tiles(std::int64_t n, std::int64_t v) {
  return {half_tiles::min(n, half_tiles::tile_rows(v)), v};
}

// Shapes and targets checked by cross_entropy_forward; n > 0.
template <class H>
void cross_entropy_forward_half(CView2<H> logits, CView1<TokenIndex> targets, View1<H> losses) {
  using namespace half_tiles;
  const std::int64_t n = static_cast<std::int64_t>(logits.extent(0));
  const std::int64_t v = static_cast<std::int64_t>(logits.extent(1));
  check_host("cross_entropy_forward");
  const HalfCrossEntropyTiles tiles = half_cross_entropy_tiles(n, v);
  Scratch scratch(tiles.elems(), "cross_entropy_forward");
  float* lt = scratch.take(tiles.rows * v);
  float* st = scratch.take(tiles.rows);
  for (std::int64_t i0 = 0; i0 < n; i0 += tiles.rows) {
    const std::int64_t nr = min(tiles.rows, n - i0);
    to_f32(logits.data() + i0 * v, lt, nr * v);
    cross_entropy_forward<float>(CView2<float>(lt, nr, v),
                                 CView1<TokenIndex>(targets.data() + i0, nr), View1<float>(st, nr));
    from_f32(st, losses.data() + i0, nr);
  }
}

// Shapes and targets checked by cross_entropy_backward; n > 0.
template <class H>
void cross_entropy_backward_half(CView2<H> logits, CView1<TokenIndex> targets, float scale,
                                 View2<H> dlogits) {
  using namespace half_tiles;
  const std::int64_t n = static_cast<std::int64_t>(logits.extent(0));
  const std::int64_t v = static_cast<std::int64_t>(logits.extent(1));
  check_host("cross_entropy_backward");
  const HalfCrossEntropyTiles tiles = half_cross_entropy_tiles(n, v);
  float* lt = Scratch(tiles.elems(), "cross_entropy_backward").take(tiles.rows * v);
  for (std::int64_t i0 = 0; i0 < n; i0 += tiles.rows) {
    const std::int64_t nr = min(tiles.rows, n - i0);
    to_f32(logits.data() + i0 * v, lt, nr * v);
    cross_entropy_backward<float>(CView2<float>(lt, nr, v),
                                  CView1<TokenIndex>(targets.data() + i0, nr), scale,
                                  View2<float>(lt, nr, v));
    from_f32(lt, dlogits.data() + i0 * v, nr * v);
  }
}

}  // namespace

std::int64_t cross_entropy_half_scratch_elems(std::int64_t v) {
  if (v <= 0) return 0;
  return half_cross_entropy_tiles(half_tiles::tile_rows(v), v).elems();
}

template <class T>
void cross_entropy_forward(CView2<T> logits, CView1<TokenIndex> targets, View1<T> losses) {
  const std::int64_t n = static_cast<std::int64_t>(logits.extent(0));
  const std::int64_t v = static_cast<std::int64_t>(logits.extent(1));
  SHARDTRAIN_CHECK(targets.extent(0) == logits.extent(0) && losses.extent(0) == logits.extent(0),
                   "cross_entropy_forward: logits(" + std::to_string(n) + "," +
                       std::to_string(v) + ") targets(" + std::to_string(targets.extent(0)) +
                       ") losses(" + std::to_string(losses.extent(0)) + ")");
  SHARDTRAIN_CHECK(contiguous(logits, targets, losses),
                   "cross_entropy_forward: views must be contiguous");
  SHARDTRAIN_CHECK(v > 0 || n == 0, "cross_entropy_forward: zero classes");
  const TokenIndex* tgt = targets.data();
  const std::int64_t bad = count_bad_targets(tgt, n, v);
  SHARDTRAIN_CHECK(bad == 0, std::to_string(bad) + " targets >= number of classes " +
                                 std::to_string(v));
  if constexpr (is_half_v<T>) {
    if (n > 0) cross_entropy_forward_half(logits, targets, losses);
  } else {
    const T* xp = logits.data();
    T* lp = losses.data();
    Kokkos::parallel_for(kLabelForward, range(n), KOKKOS_LAMBDA(const std::int64_t i) {
      lp[i] = row_loss(xp + i * v, tgt[i], v);
    });
  }
}

template <class T>
void cross_entropy_backward(CView2<T> logits, CView1<TokenIndex> targets, T scale,
                            View2<T> dlogits) {
  const std::int64_t n = static_cast<std::int64_t>(logits.extent(0));
  const std::int64_t v = static_cast<std::int64_t>(logits.extent(1));
  SHARDTRAIN_CHECK(targets.extent(0) == logits.extent(0) &&
                       dlogits.extent(0) == logits.extent(0) &&
                       dlogits.extent(1) == logits.extent(1),
                   "cross_entropy_backward: logits(" + std::to_string(n) + "," +
                       std::to_string(v) + ") targets(" + std::to_string(targets.extent(0)) +
                       ") dlogits(" + std::to_string(dlogits.extent(0)) + "," +
                       std::to_string(dlogits.extent(1)) + ")");
  SHARDTRAIN_CHECK(contiguous(logits, targets, dlogits),
                   "cross_entropy_backward: views must be contiguous");
  SHARDTRAIN_CHECK(v > 0 || n == 0, "cross_entropy_backward: zero classes");
  const TokenIndex* tgt = targets.data();
  const std::int64_t bad = count_bad_targets(tgt, n, v);
  SHARDTRAIN_CHECK(bad == 0, std::to_string(bad) + " targets >= number of classes " +
                                 std::to_string(v));
  if constexpr (is_half_v<T>) {
    if (n > 0) cross_entropy_backward_half(logits, targets, to_float(scale), dlogits);
  } else {
    const T* xp = logits.data();
    T* dp = dlogits.data();
    Kokkos::parallel_for(kLabelBackward, range(n), KOKKOS_LAMBDA(const std::int64_t i) {
      row_grad(xp + i * v, tgt[i], scale, dp + i * v, v);
    });
  }
}

#define SHARDTRAIN_INSTANTIATE_CROSS_ENTROPY(T)                                        \
  template void cross_entropy_forward<T>(CView2<T>, CView1<TokenIndex>, View1<T>);    \
  template void cross_entropy_backward<T>(CView2<T>, CView1<TokenIndex>, T, View2<T>);
SHARDTRAIN_INSTANTIATE_CROSS_ENTROPY(float)
SHARDTRAIN_INSTANTIATE_CROSS_ENTROPY(double)
SHARDTRAIN_INSTANTIATE_CROSS_ENTROPY(f16)
SHARDTRAIN_INSTANTIATE_CROSS_ENTROPY(bf16)
#undef SHARDTRAIN_INSTANTIATE_CROSS_ENTROPY

}  // namespace shardtrain
