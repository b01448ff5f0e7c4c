// shardtrain/kernels/conv2d_im2col.hpp
// INTERNAL to kernels/conv2d.cpp and its tests: 2-D convolution as im2col
// ("unfold") + one GEMM per sample (kernels/gemm.hpp), the path of conv2d<double>
// (oneDNN has no f64 convolution; double runs only in the gradient checks) and
// the fp32 core of the 16-bit tile path (f16; bf16 without native bf16), which
// runs it on one sample at a time converted to fp32. Semantics, layouts and the
// gradient convention are conv2d.hpp's; shapes are checked by the caller.
// Workspace: conv2d_im2col_elems(s) elements of T, one block of
// conv2d_samples_per_block(s) samples' im2col matrices: bounded for any batch.
#pragma once

#include <cstdint>

#include "kernels/cnn_shapes.hpp"

namespace shardtrain {

// Elements of one block of im2col matrices: samples_per_block * IC*KH*KW * OH*OW.
std::int64_t conv2d_im2col_elems(const Conv2dShape& s);

// y = conv(x, w) (+ b when b != nullptr), OVERWRITTEN; col: conv2d_im2col_elems(s)
// elements. T: float or double.
template <class T>
void conv2d_im2col_forward(const Conv2dShape& s, const T* x, const T* w, const T* b, T* col, T* y);

// dx = conv_transpose(dy, w) (OVERWRITTEN; skipped when dx == nullptr), dw += ...,
// db += ... (skipped when db == nullptr).
template <class T>
void conv2d_im2col_backward(const Conv2dShape& s, const T* x, const T* w, const T* dy, T* col, T* dx, T* dw,
                            T* db);

}  // namespace shardtrain
