// shardtrain/kernels/cuda/conv_bias.cuh
// The bias of the CNN's 2-D convolution (kernels/cuda/cudnn_conv.cuh) on NCHW
// tensors: our own kernels for every storage type (float, __half,
// __nv_bfloat16), instead of cuDNN's legacy cudnnAddTensor /
// cudnnConvolutionBackwardBias, whose 16-bit (bf16 in particular) support is
// not something the cuDNN 9 documentation promises.
//   conv_bias_forward:  y[n, o, p] += b[o]                      (fp32 add, rounded once)
//   conv_bias_backward: db[o] += sum over n, p of dy[n, o, p]   (ACCUMULATES)
// p runs over the `plane` = H * W positions of a channel. The bias gradient is a
// deterministic per-channel reduction with fp32 accumulation: one block per
// channel, thread k sums elements k, k + kThreads, ... in order, then a fixed
// shared-memory tree; db is loaded once and rounded once. No atomics: bitwise
// the same every run. All indexing is 64-bit. Device pointers; runs on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardtrain::cuda {

template <class T>
void conv_bias_forward(const T* b, T* y, std::int64_t batch, std::int64_t channels, std::int64_t plane,
                       cudaStream_t stream);

template <class T>
void conv_bias_backward(const T* dy, T* db, std::int64_t batch, std::int64_t channels, std::int64_t plane,
                        cudaStream_t stream);

}  // namespace shardtrain::cuda
