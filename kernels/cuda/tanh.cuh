// shardtrain/kernels/cuda/tanh.cuh
// CUDA tanh, mirroring kernels/tanh.hpp: y = tanh(x); backward dx = dy (1 - y^2)
// from the saved output y. forward OVERWRITES y (y may alias x); backward
// OVERWRITES dx (dx may alias dy). One thread per element, fp32 math (tanhf),
// rounded once.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {

template <class T>
void tanh_forward(const T* x, T* y, std::int64_t n, cudaStream_t stream);

template <class T>
void tanh_backward(const T* y, const T* dy, T* dx, std::int64_t n, cudaStream_t stream);

}  // namespace shardtrain::cuda
