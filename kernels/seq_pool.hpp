// shardtrain/kernels/seq_pool.hpp
// Mean pooling over the valid positions of each sequence (the encoder
// classifier's "mean" pooling; with every length 1 it is "take position 0",
// its [CLS] pooling):
//   forward  y(b, c)    = (1 / len_b) * sum_{t < len_b} x(b, t, c)
//   backward dx(b, t, c) = t < len_b ? dy(b, c) / len_b : 0
// len_b = lengths(b) (B entries, each in [1, T]); empty lengths = all T valid.
// Outputs are OVERWRITTEN (backward writes every element of dx, zeros included).
// Sums run over t in increasing order in compute_t<T> and are multiplied by
// 1 / len_b once (len_b = 1: y is a bitwise copy of x(b, 0, :)).
// T = f16 / bf16: fp32 sums, one rounding per output; no scratch.
#pragma once

#include <cstdint>

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

template <class T>
void seq_mean_pool_forward(CView3<T> x, CView1<std::int32_t> lengths, View2<T> y);

template <class T>
void seq_mean_pool_backward(CView2<T> dy, CView1<std::int32_t> lengths, View3<T> dx);

#define SHARDTRAIN_DECLARE_SEQ_POOL(T)                                                        \
  extern template void seq_mean_pool_forward<T>(CView3<T>, CView1<std::int32_t>, View2<T>); \
  extern template void seq_mean_pool_backward<T>(CView2<T>, CView1<std::int32_t>, View3<T>);
SHARDTRAIN_DECLARE_SEQ_POOL(float)
SHARDTRAIN_DECLARE_SEQ_POOL(double)
SHARDTRAIN_DECLARE_SEQ_POOL(f16)
SHARDTRAIN_DECLARE_SEQ_POOL(bf16)
#undef SHARDTRAIN_DECLARE_SEQ_POOL

}  // namespace shardtrain
