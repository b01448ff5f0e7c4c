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
//  - one row function per pass for every storage type S: logits are widened to
//    compute_t<S> in registers (vec_math.hpp) and each output is rounded once on
//    store, so T = f16 / bf16 reads and writes 16-bit memory directly and gives the
//    fp32 kernel's losses and dlogits on the same 16-bit logits rounded once, bit
//    for bit. The forward needs no scratch. The backward keeps exp(x - max) of a
//    row unrounded between its passes: the fp32 kernel in dlogits itself, the
//    16-bit one (dlogits cannot hold fp32 values) in ONE fp32 row of the scratch
//    arena (cross_entropy_half_scratch_elems = V), so its rows run one after
//    another on the host. (Recomputing the exps instead needs no scratch but cost
//    +50% at V = 50257.) The target's gradient is formed before the row is written,
//    so in-place dlogits == logits still works.
#include "kernels/cross_entropy.hpp"

#include <cmath>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/half_tiles.hpp"  // check_host
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

const std::string kLabelValidate = "CrossEntropy::validate_targets";
const std::string kLabelForward = "CrossEntropy::forward";
const std::string kLabelBackward = "CrossEntropy::backward";

std::int64_t count_bad_targets(const TokenIndex* tgt, std::int64_t n, std::int64_t vocab) {
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      kLabelValidate, range(n),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) { acc += tgt[i] >= vocab ? 1 : 0; },
      bad);
  return bad;
}

// sum_j exp(x[j] - m): the lanes and order of vec::sum over the exp values.
template <class S, class T = compute_t<S>>
SHARDTRAIN_ALWAYS_INLINE T sum_exp(const S* __restrict x, T m, std::int64_t v) {
  T acc[vec::kLanes] = {};
  std::int64_t j = 0;
  for (; j + vec::kLanes <= v; j += vec::kLanes) {
    if constexpr (!vec::widen_first<S>) {
      for (int l = 0; l < vec::kLanes; ++l) acc[l] += vec::exp_fast<T>(vec::widen(x[j + l]) - m);
    } else {
      T w[vec::kLanes];  // see vec::widen_lanes
      vec::widen_lanes(x + j, w);
      for (int l = 0; l < vec::kLanes; ++l) acc[l] += vec::exp_fast<T>(w[l] - m);
    }
  }
  T tail = T(0);
  for (; j < v; ++j) tail += vec::exp_fast<T>(vec::widen(x[j]) - m);
  return vec::combine_lanes(acc) + tail;
}

template <class S, class T = compute_t<S>>
SHARDTRAIN_TARGET_CLONES
T row_loss(const S* __restrict x, TokenIndex target, std::int64_t v) {
  if (target < 0) return T(0);
  const T m = vec::max(x, v);
  return std::log(sum_exp(x, m, v)) - (vec::widen(x[target]) - m);
}

// dl = scale * (softmax(x) - onehot(target)); dl may equal x. e: v values of the
// compute type that hold exp(x - m) unrounded between the passes: dl itself for
// float / double, a one-row fp32 buffer for a 16-bit dl (which cannot hold them).
// No restrict: e may be dl, and dl may be x (same-index read-then-write only).
template <class S, class T = compute_t<S>>
SHARDTRAIN_TARGET_CLONES
void row_grad(const S* x, TokenIndex target, T scale, S* dl, T* e, std::int64_t v) {
  if (target < 0) {
    for (std::int64_t j = 0; j < v; ++j) dl[j] = vec::narrow<S>(T(0));
    return;
  }
  const T m = vec::max(x, v);
  SHARDTRAIN_IVDEP
  for (std::int64_t j = 0; j < v; ++j) e[j] = vec::exp_fast<T>(vec::widen(x[j]) - m);
  const T factor = scale / vec::sum(e, v);
  const T g_target = e[target] * factor - scale;  // before dl (maybe e) is written
  SHARDTRAIN_IVDEP
  for (std::int64_t j = 0; j < v; ++j) dl[j] = vec::narrow<S>(e[j] * factor);
  dl[target] = vec::narrow<S>(g_target);
}

}  // namespace

std::int64_t cross_entropy_half_scratch_elems(std::int64_t v) { return v > 0 ? v : 0; }

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
  if constexpr (is_half_v<T>) half_tiles::check_host("cross_entropy_forward");
  const T* xp = logits.data();
  T* lp = losses.data();
  Kokkos::parallel_for(kLabelForward, range(n), KOKKOS_LAMBDA(const std::int64_t i) {
    lp[i] = vec::narrow<T>(row_loss(xp + i * v, tgt[i], v));
  });
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
  const T* xp = logits.data();
  T* dp = dlogits.data();
  if constexpr (is_half_v<T>) {
    if (n == 0) return;
    half_tiles::check_host("cross_entropy_backward");
    // One fp32 row of exp values, taken before anything is written; so the rows run
    // one after another on the host.
    float* e = half_tiles::Scratch(v, "cross_entropy_backward").take(v);
    const float s = to_float(scale);
    for (std::int64_t i = 0; i < n; ++i) row_grad(xp + i * v, tgt[i], s, dp + i * v, e, v);
  } else {
    Kokkos::parallel_for(kLabelBackward, range(n), KOKKOS_LAMBDA(const std::int64_t i) {
      row_grad(xp + i * v, tgt[i], scale, dp + i * v, dp + i * v, v);
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
