// shardtrain/kernels/cuda/seq_pool.cuh
// CUDA mean pooling over the valid positions of each sequence with the host
// kernel's semantics (kernels/seq_pool.hpp): y(b, c) = (1/len_b) sum_{t < len_b}
// x(b, t, c); dx(b, t, c) = t < len_b ? dy(b, c) / len_b : 0 (OVERWRITES dx).
// lengths: DEVICE array of B entries in [1, T] (nullptr: all T valid).
// fp32 sums in increasing t, one rounding per output: the same operations in the
// same order as the host kernel, so results match it bitwise.
// float / __half / __nv_bfloat16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardtrain::cuda {

template <class T>
void seq_mean_pool_forward(const T* x, const std::int32_t* lengths, T* y, std::int64_t b, std::int64_t t,
                           std::int64_t c, cudaStream_t stream);
template <class T>
void seq_mean_pool_backward(const T* dy, const std::int32_t* lengths, T* dx, std::int64_t b, std::int64_t t,
                            std::int64_t c, cudaStream_t stream);

}  // namespace shardtrain::cuda
