// shardtrain/kernels/cuda/elementwise.cuh
// CUDA flat elementwise helpers of the residual stream, mirroring
// kernels/elementwise.hpp:  copy (y = x), accumulate (y += x), fill (y = value).
// copy and fill move T values unchanged; accumulate computes round(float(y) +
// float(x)) per element. y may be the same memory as x (copy then does nothing);
// partial overlap is not supported. The host has no separate residual add:
// residual = copy + accumulate.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {

template <class T>
void copy(const T* x, T* y, std::int64_t n, cudaStream_t stream);

template <class T>
void accumulate(const T* x, T* y, std::int64_t n, cudaStream_t stream);

template <class T>
void fill(T* y, T value, std::int64_t n, cudaStream_t stream);

}  // namespace shardtrain::cuda
