// shardtrain/kernels/pool.hpp
// 2-D max pooling, NCHW row-major (PyTorch nn.MaxPool2d with padding 0, dilation 1,
// ceil_mode False):
//   x (N, C, H, W) -> y (N, C, OH, OW),  OH = (H - kernel) / stride + 1 (floor), same for OW
//   y[n][c][i][j] = max over the window rows i*stride .. +kernel, cols j*stride .. +kernel.
// forward also writes argmax (N, C, OH, OW), int32: the index ih * W + iw of the
// chosen element WITHIN its (n, c) input plane. Ties: the FIRST maximum in
// row-major window order (lowest ih, then lowest iw) wins. NaN: the first NaN in
// the window wins (it propagates to y, as in PyTorch, so the loss scaler sees it).
// backward routes dy to dx[argmax] and OVERWRITES dx (zero where nothing routes).
// With overlapping windows (stride < kernel) an input can receive several
// gradients; they are summed in row-major output order (deterministic).
// T = f16 / bf16: forward copies the chosen 16-bit value (exact); backward sums in
// 16 bits (exact unless windows overlap: then each addition rounds once). No scratch.
#pragma once

#include "cnn_shapes.hpp"
#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

// Pool2dShape (N, C, H, W, kernel, stride; out_h/out_w): kernels/cnn_shapes.hpp.

// Throws shardtrain::Error unless batch >= 0, channels, kernel, stride >= 1,
// kernel <= H, W and H * W fits an int32 index.
void max_pool2d_check_shape(const Pool2dShape& s);

template <class T>
void max_pool2d_forward(const Pool2dShape& s, CView4<T> x, View4<T> y,
                        View4<std::int32_t> argmax);

// argmax must be what max_pool2d_forward wrote for the same shape; an index outside
// [0, H*W) throws shardtrain::Error before dx is written.
template <class T>
void max_pool2d_backward(const Pool2dShape& s, CView4<T> dy, CView4<std::int32_t> argmax,
                         View4<T> dx);

#define SHARDTRAIN_DECLARE_POOL(T)                                                            \
  extern template void max_pool2d_forward<T>(const Pool2dShape&, CView4<T>, View4<T>,        \
                                             View4<std::int32_t>);                           \
  extern template void max_pool2d_backward<T>(const Pool2dShape&, CView4<T>,                 \
                                              CView4<std::int32_t>, View4<T>);
SHARDTRAIN_DECLARE_POOL(float)
SHARDTRAIN_DECLARE_POOL(double)
SHARDTRAIN_DECLARE_POOL(f16)
SHARDTRAIN_DECLARE_POOL(bf16)
#undef SHARDTRAIN_DECLARE_POOL

}  // namespace shardtrain
