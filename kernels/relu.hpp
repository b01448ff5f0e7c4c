// shardtrain/kernels/relu.hpp
// ReLU, elementwise over flat views (PyTorch nn.ReLU):
//   forward  y  = x > 0 ? x : 0       (NaN stays NaN, so the loss scaler sees it)
//   backward dx = x > 0 ? dy : 0      (the derivative at 0 is taken as 0)
// backward takes either the saved input x or the saved output y as `saved`
// (x > 0 exactly when y > 0), so a layer can keep whichever it already holds.
// forward OVERWRITES y (y may alias x); backward OVERWRITES dx (dx may alias dy).
// T = f16 / bf16: exact (every result is an input value or 0); no scratch.
#pragma once

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

template <class T>
void relu_forward(CView1<T> x, View1<T> y);

template <class T>
void relu_backward(CView1<T> saved, CView1<T> dy, View1<T> dx);

#define SHARDTRAIN_DECLARE_RELU(T)                            \
  extern template void relu_forward<T>(CView1<T>, View1<T>); \
  extern template void relu_backward<T>(CView1<T>, CView1<T>, View1<T>);
SHARDTRAIN_DECLARE_RELU(float)
SHARDTRAIN_DECLARE_RELU(double)
SHARDTRAIN_DECLARE_RELU(f16)
SHARDTRAIN_DECLARE_RELU(bf16)
#undef SHARDTRAIN_DECLARE_RELU

}  // namespace shardtrain
