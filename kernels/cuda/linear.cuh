// shardtrain/kernels/cuda/linear.cuh
// Owns nn.Linear forward/backward on the device, mirroring kernels/linear.hpp
// (weight w is (M out, K in), row-major; device pointers; T in float, __half,
// __nv_bfloat16; fp32 accumulation through cuda::gemm).
// Gradient convention exactly as the host kernel (and llm.c): parameter gradients
// dw, db are ACCUMULATED (+=); the input gradient dx is OVERWRITTEN.
// Each call sets `handle` to `stream`; its own kernels run on `stream`. No
// allocation, no synchronization. The default Linear of the CUDA backend
// (model.gemm = "cublas"); lt_linear.cuh is the cuBLASLt one, which falls back on
// this for the shapes cuBLASLt has no algorithm for.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardtrain::cuda {

// y(N,M) = x(N,K) w(M,K)^T + b(M)         when accumulate == false
// y(N,M) += x(N,K) w(M,K)^T + b(M)        when accumulate == true (fused residual add)
// b == nullptr: no bias.
template <class T>
void linear_forward(cublasHandle_t handle, cudaStream_t stream, const T* x, const T* w,
                    const T* b, T* y, std::int64_t n, std::int64_t k, std::int64_t m,
                    bool accumulate = false);

// dx(N,K)  = dy(N,M) w(M,K)       (skipped when dx == nullptr)
// dw(M,K) += dy(N,M)^T x(N,K)
// db(M)   += sum over rows of dy  (skipped when db == nullptr); one thread per
//            column adds the rows in order in fp32: deterministic, no atomics.
// accumulate == false overwrites dw and db instead (beta = 0; N == 0 writes zeros),
// as kernels/linear.hpp.
template <class T>
void linear_backward(cublasHandle_t handle, cudaStream_t stream, const T* x, const T* w,
                     const T* dy, T* dx, T* dw, T* db, std::int64_t n, std::int64_t k,
                     std::int64_t m, bool accumulate = true);

#define SHARDTRAIN_CUDA_DECLARE_LINEAR(T)                                                      \
  extern template void linear_forward<T>(cublasHandle_t, cudaStream_t, const T*, const T*,    \
                                         const T*, T*, std::int64_t, std::int64_t,            \
                                         std::int64_t, bool);                                 \
  extern template void linear_backward<T>(cublasHandle_t, cudaStream_t, const T*, const T*,   \
                                          const T*, T*, T*, T*, std::int64_t, std::int64_t,   \
                                          std::int64_t, bool);
SHARDTRAIN_CUDA_DECLARE_LINEAR(float)
SHARDTRAIN_CUDA_DECLARE_LINEAR(__half)
SHARDTRAIN_CUDA_DECLARE_LINEAR(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_DECLARE_LINEAR

}  // namespace shardtrain::cuda
