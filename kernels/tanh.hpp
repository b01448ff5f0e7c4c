// shardtrain/kernels/tanh.hpp
// tanh, elementwise over flat views (PyTorch torch.tanh; BERT's pooler):
//   forward  y  = tanh(x)
//   backward dx = dy (1 - y^2)   from the SAVED OUTPUT y (what the pooler keeps)
// forward OVERWRITES y (y may alias x); backward OVERWRITES dx (dx may alias dy).
// T = f16 / bf16: evaluated in fp32 in registers on the 16-bit values and rounded
// once (bit for bit the fp32 result on the same inputs, rounded); no scratch.
#pragma once

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

template <class T>
void tanh_forward(CView1<T> x, View1<T> y);

template <class T>
void tanh_backward(CView1<T> y, CView1<T> dy, View1<T> dx);

#define SHARDTRAIN_DECLARE_TANH(T)                            \
  extern template void tanh_forward<T>(CView1<T>, View1<T>); \
  extern template void tanh_backward<T>(CView1<T>, CView1<T>, View1<T>);
SHARDTRAIN_DECLARE_TANH(float)
SHARDTRAIN_DECLARE_TANH(double)
SHARDTRAIN_DECLARE_TANH(f16)
SHARDTRAIN_DECLARE_TANH(bf16)
#undef SHARDTRAIN_DECLARE_TANH

}  // namespace shardtrain
