// shardtrain/kernels/cross_entropy.hpp
// Softmax cross-entropy over rows of logits (N, V), fused (log-sum-exp with the
// row max subtracted). Rows whose target is negative are ignored: loss 0, grad 0.
// T = f16 / bf16: logits, losses and dlogits are stored in T; each row is computed in
// fp32 in registers on the 16-bit logits and every output rounded once (bit for bit
// the fp32 kernel's result on the same logits, rounded); the backward keeps one row
// of fp32 exp values in the scratch arena. `scale` is a T like the rest of the
// signature (same signature for every T), converted to float: a loss scale that is
// not representable in T (bf16 keeps 8 significant bits) is rounded by the caller.
#pragma once

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

// losses(n) = logsumexp(logits(n,:)) - logits(n, targets(n))
template <class T>
void cross_entropy_forward(CView2<T> logits, CView1<TokenIndex> targets, View1<T> losses);

// dlogits(n,:) = scale * (softmax(logits(n,:)) - onehot(targets(n)))   (OVERWRITES)
// dlogits may be the same memory as logits (in place).
template <class T>
void cross_entropy_backward(CView2<T> logits, CView1<TokenIndex> targets, T scale,
                            View2<T> dlogits);

#define SHARDTRAIN_DECLARE_CROSS_ENTROPY(T)                                                 \
  extern template void cross_entropy_forward<T>(CView2<T>, CView1<TokenIndex>, View1<T>); \
  extern template void cross_entropy_backward<T>(CView2<T>, CView1<TokenIndex>, T, View2<T>);
SHARDTRAIN_DECLARE_CROSS_ENTROPY(float)
SHARDTRAIN_DECLARE_CROSS_ENTROPY(double)
SHARDTRAIN_DECLARE_CROSS_ENTROPY(f16)
SHARDTRAIN_DECLARE_CROSS_ENTROPY(bf16)
#undef SHARDTRAIN_DECLARE_CROSS_ENTROPY

// Floats of 16-bit scratch (half_scratch.hpp) that cross_entropy_backward with T =
// f16 / bf16 needs for v classes, any number of rows: v (one fp32 row of exp
// values). cross_entropy_forward and float / double calls need none.
std::int64_t cross_entropy_half_scratch_elems(std::int64_t v);

}  // namespace shardtrain
