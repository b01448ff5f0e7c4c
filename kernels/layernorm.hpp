// shardtrain/kernels/layernorm.hpp
// LayerNorm over the last dimension (C) of a (N, C) view, with affine w, b.
// forward saves per-row mean and rstd = 1/sqrt(var + eps) (biased variance, as
// PyTorch). backward ACCUMULATES into dx, dw and db (+=): dx += lets the caller
// fold the residual branch's gradient in without an extra pass.
// Deterministic: no atomics; dw/db are reduced over rows in a fixed order.
// T = f16 / bf16: eps, mean and rstd are stored in T too; the math runs in fp32 in
// registers on the 16-bit values, each output rounded once (y, mean, rstd, dx, dw,
// db are the fp32 kernel's results on the same 16-bit inputs, rounded); no scratch.
#pragma once

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

template <class T>
void layernorm_forward(CView2<T> x, CView1<T> w, CView1<T> b, View2<T> y, View1<T> mean,
                       View1<T> rstd, T eps);

template <class T>
void layernorm_backward(CView2<T> x, CView1<T> w, CView1<T> mean, CView1<T> rstd, CView2<T> dy,
                        View2<T> dx, View1<T> dw, View1<T> db);

#define SHARDTRAIN_DECLARE_LAYERNORM(T)                                                        \
  extern template void layernorm_forward<T>(CView2<T>, CView1<T>, CView1<T>, View2<T>,         \
                                            View1<T>, View1<T>, T);                            \
  extern template void layernorm_backward<T>(CView2<T>, CView1<T>, CView1<T>, CView1<T>,       \
                                             CView2<T>, View2<T>, View1<T>, View1<T>);
SHARDTRAIN_DECLARE_LAYERNORM(float)
SHARDTRAIN_DECLARE_LAYERNORM(double)
SHARDTRAIN_DECLARE_LAYERNORM(f16)
SHARDTRAIN_DECLARE_LAYERNORM(bf16)
#undef SHARDTRAIN_DECLARE_LAYERNORM

// Floats of 16-bit scratch (half_scratch.hpp) that layernorm_forward and
// layernorm_backward need for rows of c channels: 0 for every T (the 16-bit path
// runs directly on 16-bit memory). Declared so a model sizes the arena uniformly.
std::int64_t layernorm_half_scratch_elems(std::int64_t c);

}  // namespace shardtrain
