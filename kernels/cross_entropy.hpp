// shardtrain/kernels/cross_entropy.hpp
// Softmax cross-entropy over rows of logits (N, V), fused (log-sum-exp with the
// row max subtracted). Rows whose target is negative are ignored: loss 0, grad 0.
#pragma once

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

}  // namespace shardtrain
