// shardtrain/kernels/cuda/relu.cuh
// CUDA ReLU with the host kernel's semantics (kernels/relu.hpp): y = x > 0 ? x : 0
// (NaN stays NaN), dx = saved > 0 ? dy : 0 with saved the input or the output;
// y may alias x, dx may alias dy. float / __half / __nv_bfloat16, exact.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardtrain::cuda {

template <class T>
void relu_forward(const T* x, T* y, std::int64_t n, cudaStream_t stream);
template <class T>
void relu_backward(const T* saved, const T* dy, T* dx, std::int64_t n, cudaStream_t stream);

}  // namespace shardtrain::cuda
