// shardtrain/kernels/layernorm.hpp
// LayerNorm over the last dimension (C) of a (N, C) view, with affine w, b.
// forward saves per-row mean and rstd = 1/sqrt(var + eps) (biased variance, as
// PyTorch). backward ACCUMULATES into dx, dw and db (+=): dx += lets the caller
// fold the residual branch's gradient in without an extra pass.
// Deterministic: no atomics; dw/db are reduced over rows in a fixed order.
#pragma once

#include "types.hpp"

namespace shardtrain {

template <class T>
void layernorm_forward(CView2<T> x, CView1<T> w, CView1<T> b, View2<T> y, View1<T> mean,
                       View1<T> rstd, T eps);

template <class T>
void layernorm_backward(CView2<T> x, CView1<T> w, CView1<T> mean, CView1<T> rstd, CView2<T> dy,
                        View2<T> dx, View1<T> dw, View1<T> db);

}  // namespace shardtrain
