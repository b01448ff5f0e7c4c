// shardtrain/kernels/conv2d.hpp
// 2-D convolution (cross-correlation, as PyTorch nn.Conv2d with groups = 1 and
// dilation = 1), NCHW row-major:
//   x (N, IC, H, W), w (OC, IC, KH, KW), b (OC), y (N, OC, OH, OW)
//   y[n][o][i][j] = b[o] + sum_{c, p, q} w[o][c][p][q] x[n][c][i*stride - pad + p][j*stride - pad + q]
// (x is 0 outside the image), OH = (H + 2 pad - KH) / stride + 1 (floor), same for OW.
// Implementation by storage type (conv2d.cpp says how each works):
//  - float, and bf16 on a CPU with native bf16 (cpu_compute.hpp): oneDNN's
//    convolution primitives (kernels/dnnl_conv.hpp) on channels-last copies of
//    blocks of samples made in the workspace; bf16 accumulates in fp32 inside
//    oneDNN;
//  - double (the gradient checks), f16, and bf16 without native bf16: im2col +
//    GEMM; the 16-bit ones one sample at a time converted to fp32 (16-bit scratch
//    arena, half_scratch.hpp), outputs rounded once per call, dw and db kept in
//    fp32 accumulators across the whole batch.
// Gradient convention (as linear.hpp): dw, db are ACCUMULATED (+=); dx is
// OVERWRITTEN. Empty b / dx / db (extent 0) mean "no bias" / "skip". With bf16
// storage dw and db are accumulated in fp32 and rounded once per call.
// Deterministic: no atomics, fixed summation orders, bitwise equal between calls
// with the same thread count.
// `workspace`: conv2d_workspace_elems<T>(s) elements of T; bounded by the shape
// for any batch.
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

// Samples per im2col block of the double path: as many as fit kConvColBudget
// elements (at least 1, at most the batch). Depends on the batch only through
// that upper bound.
std::int64_t conv2d_samples_per_block(const Conv2dShape& s);

// Elements of T the workspace of conv2d_forward / conv2d_backward needs for
// every batch from 1 to s.batch (a model sizes it once at its max micro-batch):
//  - double: one im2col block, samples_per_block * IC*KH*KW * OH*OW;
//  - float, bf16 with native bf16: the fp32 dw and db that backward weights
//    writes before they are added, the channels-last copies of x, y / dy and dx of
//    one block of samples (dnnl_conv.hpp; about 4 MiB of fp32 at most), oneDNN's
//    scratchpad (largest over the batches it can take), plus alignment;
//  - f16, bf16 without native bf16: 0 (they use the 16-bit scratch arena).
// Bounded for any batch. Not constexpr: the oneDNN part asks oneDNN (and caches
// its primitive descriptors).
template <class T>
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

// Runs forward, backward data and backward weights of shape s once, on the
// block of samples calls at s.batch run in (the whole batch unless it is large),
// on zero-filled buffers of its own (freed on return), when T takes the oneDNN
// path (otherwise it does nothing). oneDNN generates a primitive's code when the
// primitive is made and some more on its first execution (several MiB resident
// the first time in a process, measured with oneDNN 2.6), so a caller that
// measures the process's memory before its model allocates
// (rundir/process_memory.cpp) calls this first and counts that memory there. A
// smaller ragged block (the last micro-batch of an epoch, an evaluation) still
// makes its primitives when it first runs.
template <class T>
void conv2d_warm_up(const Conv2dShape& s);

#define SHARDTRAIN_DECLARE_CONV2D(T)                                                          \
  extern template std::int64_t conv2d_workspace_elems<T>(const Conv2dShape&);                 \
  extern template void conv2d_warm_up<T>(const Conv2dShape&);                                 \
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
// T = f16 / bf16 on the im2col path need: one sample's x, dx, y/dy and im2col
// matrix plus w, dw, db in fp32. Independent of the batch. float and double calls
// need none, nor do bf16 calls on a CPU with native bf16 (the value stays the
// same, so one model size fits both bf16 paths).
std::int64_t conv2d_half_scratch_elems(const Conv2dShape& s);

}  // namespace shardtrain
