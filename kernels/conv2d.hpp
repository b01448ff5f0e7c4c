// shardtrain/kernels/conv2d.hpp
// 2-D convolution (cross-correlation, as PyTorch nn.Conv2d with groups = 1 and
// dilation = 1), NCHW row-major:
//   x (N, IC, H, W), w (OC, IC, KH, KW), b (OC), y (N, OC, OH, OW)
//   y[n][o][i][j] = b[o] + sum_{c, p, q} w[o][c][p][q] x[n][c][i*stride - pad + p][j*stride - pad + q]
// (x is 0 outside the image), OH = (H + 2 pad - KH) / stride + 1 (floor), same for OW.
// Implementation: im2col ("unfold") + one GEMM per sample through kernels/gemm.hpp
// on contiguous LayoutRight views (OpenBLAS), for a block of samples at a time so
// the caller's `workspace` is bounded by the shape, not by the batch.
// Gradient convention (as linear.hpp): dw, db are ACCUMULATED (+=); dx is
// OVERWRITTEN. Empty b / dx / db (extent 0) mean "no bias" / "skip".
// Deterministic: no atomics, fixed summation orders, bitwise equal between calls.
// T = f16 / bf16: one sample at a time, converted to fp32 (16-bit scratch arena,
// half_scratch.hpp), conv2d_*<float> on it, outputs rounded once per call; dw and db
// keep fp32 accumulators across the whole batch. `workspace` is then unused (its
// size is still checked).
#pragma once

#include "cnn_shapes.hpp"
#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

// Conv2dShape (N, IC, H, W, OC, KH, KW, stride, padding; out_h/out_w/col_rows):
// kernels/cnn_shapes.hpp.

// Throws shardtrain::Error unless every extent is >= 1 (batch >= 0), padding >= 0,
// stride >= 1 and the padded image holds at least one kernel window.
void conv2d_check_shape(const Conv2dShape& s);

// Samples per im2col block: as many as fit kConvColBudget elements (at least 1, at
// most the batch). Depends on the batch only through that upper bound.
std::int64_t conv2d_samples_per_block(const Conv2dShape& s);

// Elements of T the workspace of conv2d_forward / conv2d_backward needs:
// samples_per_block * IC*KH*KW * OH*OW. Bounded for any batch.
std::int64_t conv2d_workspace_elems(const Conv2dShape& s);

// y = conv(x, w) + b      (OVERWRITES y; b empty: no bias)
template <class T>
void conv2d_forward(const Conv2dShape& s, CView4<T> x, CView4<T> w, CView1<T> b,
                    View1<T> workspace, View4<T> y);

// dx  = conv_transpose(dy, w)              (OVERWRITES; skipped when dx is empty)
// dw += sum_n dy_n(OC, P) im2col(x_n)^T    (ACCUMULATES)
// db += sum over n, OH, OW of dy           (ACCUMULATES; skipped when db is empty)
template <class T>
void conv2d_backward(const Conv2dShape& s, CView4<T> x, CView4<T> w, CView4<T> dy,
                     View1<T> workspace, View4<T> dx, View4<T> dw, View1<T> db);

#define SHARDTRAIN_DECLARE_CONV2D(T)                                                          \
  extern template void conv2d_forward<T>(const Conv2dShape&, CView4<T>, CView4<T>, CView1<T>, \
                                         View1<T>, View4<T>);                                 \
  extern template void conv2d_backward<T>(const Conv2dShape&, CView4<T>, CView4<T>,          \
                                          CView4<T>, View1<T>, View4<T>, View4<T>, View1<T>);
SHARDTRAIN_DECLARE_CONV2D(float)
SHARDTRAIN_DECLARE_CONV2D(double)
SHARDTRAIN_DECLARE_CONV2D(f16)
SHARDTRAIN_DECLARE_CONV2D(bf16)
#undef SHARDTRAIN_DECLARE_CONV2D

// Floats of 16-bit scratch (half_scratch.hpp) conv2d_forward / conv2d_backward with
// T = f16 / bf16 need: one sample's x, dx, y/dy and im2col matrix plus w, dw, db in
// fp32. Independent of the batch. float and double calls need none.
std::int64_t conv2d_half_scratch_elems(const Conv2dShape& s);

}  // namespace shardtrain
