// shardtrain/kernels/cuda/gelu.cuh
// CUDA GELU, tanh approximation, mirroring kernels/gelu.hpp:
//   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// evaluated as the host does, y = x s with s = 1 / (1 + exp(-2u)); backward
// dx = dy (s + 2 x s (1 - s) u') with x clamped to [-12, 12] first (where s is
// exactly 0 or 1 in fp32). forward OVERWRITES y (y may alias x); backward
// OVERWRITES dx (dx may alias dy). One thread per element, or per 16-byte pack where
// the pointers are aligned (the same math), fp32 math, rounded once.
// gelu_erf_*: the exact erf form (kernels/gelu.hpp's gelu_erf_*, BERT's "gelu"),
// erff / expf in fp32, the same aliasing rules.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {

template <class T>
void gelu_forward(const T* x, T* y, std::int64_t n, cudaStream_t stream);

template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n, cudaStream_t stream);

template <class T>
void gelu_erf_forward(const T* x, T* y, std::int64_t n, cudaStream_t stream);

template <class T>
void gelu_erf_backward(const T* x, const T* dy, T* dx, std::int64_t n, cudaStream_t stream);

}  // namespace shardtrain::cuda
