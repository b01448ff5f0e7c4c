// shardtrain/kernels/linear.hpp
// Fully connected layer in PyTorch nn.Linear layout: weight w is (out M, in K).
// Gradient convention (as in llm.c): parameter gradients dw, db are ACCUMULATED
// (+=, so micro-batches add up); the input gradient dx is OVERWRITTEN.
#pragma once

#include "types.hpp"

namespace shardtrain {

// y(N,M) = x(N,K) · w(M,K)^T + b(M)            when accumulate == false
// y(N,M) += x(N,K) · w(M,K)^T + b(M)           when accumulate == true (fused residual add)
// b may be an empty view (size 0): no bias.
template <class T>
void linear_forward(CView2<T> x, CView2<T> w, CView1<T> b, View2<T> y, bool accumulate = false);

// dx(N,K)  = dy(N,M) · w(M,K)       (skipped when dx is empty)
// dw(M,K) += dy(N,M)^T · x(N,K)
// db(M)   += sum over rows of dy    (skipped when db is empty)
template <class T>
void linear_backward(CView2<T> x, CView2<T> w, CView2<T> dy, View2<T> dx, View2<T> dw, View1<T> db);

}  // namespace shardtrain
