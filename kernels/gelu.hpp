// shardtrain/kernels/gelu.hpp
// GELU, tanh approximation (GPT-2; PyTorch nn.GELU(approximate="tanh")):
//   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// Elementwise over flat views. backward OVERWRITES dx. y may alias x in forward.
#pragma once

#include "types.hpp"

namespace shardtrain {

template <class T>
void gelu_forward(CView1<T> x, View1<T> y);

template <class T>
void gelu_backward(CView1<T> x, CView1<T> dy, View1<T> dx);

}  // namespace shardtrain
