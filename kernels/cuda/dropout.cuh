// shardtrain/kernels/cuda/dropout.cuh
// CUDA inverted dropout with the host kernel's semantics (kernels/dropout.hpp):
// out_i = keep_i ? in_i * scale : 0, scale = 1 / (1 - p) computed once in double
// and applied in fp32, rounded once to T; keep_i = dropout_keeps_bits(seed,
// stream, offset + i, ceil(p * 2^53)) (kernels/cnn_shapes.hpp), the very
// expression the host kernel evaluates, so the masks are bitwise the same.
// Eval mode or p = 0: a copy (nothing when out == in). Backward is the same
// kernel (it regenerates the forward mask). out may alias in.
// float / __half / __nv_bfloat16. NOT RUN here (no GPU): tests/gpu/cnn_kernels_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cnn_shapes.hpp"  // DropoutParams, dropout_keeps_bits

namespace shardtrain::cuda {

// Throws shardtrain::Error unless 0 <= p <= 1.
template <class T>
void dropout_forward(const DropoutParams& p, const T* x, T* y, std::int64_t n, cudaStream_t stream);
template <class T>
void dropout_backward(const DropoutParams& p, const T* dy, T* dx, std::int64_t n, cudaStream_t stream);

}  // namespace shardtrain::cuda
