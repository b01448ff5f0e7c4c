// shardtrain/kernels/cuda/linear.cu
// nn.Linear on the device (see linear.cuh). Invariants, as kernels/linear.cpp:
//  - forward OVERWRITES y, or ADDS to it when accumulate; the bias is written (or
//    added) by a row pass first, then one GEMM with beta = 1 adds x w^T. For f16 /
//    bf16 this rounds twice (y + b, then + x w^T) where the host rounds once; the
//    difference is within one 16-bit ulp per rounding.
//  - backward OVERWRITES dx (beta = 0) and ACCUMULATES into dw (beta = 1) and db,
//    or overwrites them too when !accumulate (beta = 0, db written without reading).
//  - db: a block of 32 x 32 threads per 32 columns sums dy over rows in a fixed
//    order in fp32 (bias_grad_kernel), adds the old db and rounds once:
//    deterministic, the same order on every run.
//  - shapes are checked before anything is launched.
#include "kernels/cuda/linear.cuh"

#include <string>

#include "core/error.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.cuh"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;

void check_shape(const char* op, std::int64_t n, std::int64_t k, std::int64_t m) {
  SHARDTRAIN_CHECK(n >= 0 && k >= 0 && m >= 0, std::string(op) + ": negative size n " +
                                                   std::to_string(n) + " k " + std::to_string(k) +
                                                   " m " + std::to_string(m));
}

// y(i, j) = b(j), or y(i, j) += b(j) when accumulate.
template <class T>
__global__ void bias_rows_kernel(const T* b, T* y, std::int64_t n, std::int64_t m,
                                 bool accumulate) {
  const std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= n * m) return;
  const std::int64_t j = idx % m;
  y[idx] = accumulate ? store_as<T>(load_f32(y[idx]) + load_f32(b[j])) : b[j];
}

// db(j) += sum over i of dy(i, j) (db(j) = it when !accumulate), in fp32, in a fixed
// order: block (kBiasCols, kBiasRows) owns kBiasCols columns; thread (x, y) keeps
// kBiasAcc running sums of its column over the rows y + kBiasRows * (kBiasAcc * s + a),
// adds them in order of a and then the rows left over, and the block adds the kBiasRows partial sums in a fixed
// tree. (One thread per column summing every row in turn took milliseconds per call
// at n = 16384 rows: a few dozen warps on a 132-SM device, one dependent load each.)
constexpr unsigned kBiasCols = 32, kBiasRows = 32, kBiasAcc = 8;

template <class T>
__global__ void bias_grad_kernel(const T* __restrict__ dy, T* __restrict__ db, std::int64_t n, std::int64_t m,
                                 bool accumulate) {
  __shared__ float part[kBiasRows][kBiasCols + 1];
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(kBiasCols) + threadIdx.x;
  float acc[kBiasAcc], tail = 0.0f;
#pragma unroll
  for (unsigned a = 0; a < kBiasAcc; ++a) acc[a] = 0.0f;
  if (j < m) {
    constexpr std::int64_t stride = kBiasRows * kBiasAcc;
    std::int64_t i = threadIdx.y;
    for (; i + (kBiasAcc - 1) * kBiasRows < n; i += stride) {
#pragma unroll
      for (unsigned a = 0; a < kBiasAcc; ++a) acc[a] += load_f32(dy[(i + a * kBiasRows) * m + j]);
    }
    for (; i < n; i += kBiasRows) tail += load_f32(dy[i * m + j]);
  }
  float sum = 0.0f;
#pragma unroll
  for (unsigned a = 0; a < kBiasAcc; ++a) sum += acc[a];
  sum += tail;
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  for (unsigned w = kBiasRows / 2; w > 0; w /= 2) {
    if (threadIdx.y < w) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + w][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && j < m) db[j] = accumulate ? store_as<T>(load_f32(db[j]) + part[0][threadIdx.x])
                                                    : store_as<T>(part[0][threadIdx.x]);
}

}  // namespace

template <class T>
void linear_forward(cublasHandle_t handle, cudaStream_t stream, const T* x, const T* w,
                    const T* b, T* y, std::int64_t n, std::int64_t k, std::int64_t m,
                    bool accumulate) {
  check_shape("cuda::linear_forward", n, k, m);
  if (n == 0 || m == 0) return;
  float beta = accumulate ? 1.0f : 0.0f;
  if (b != nullptr) {
    bias_rows_kernel<T><<<blocks_for(n * m, kThreads), kThreads, 0, stream>>>(b, y, n, m,
                                                                              accumulate);
    check_launch("cuda::linear_forward bias");
    beta = 1.0f;
  }
  // y(n, m) = x(n, k) w(m, k)^T + beta y
  gemm<T>(handle, stream, Trans::N, Trans::T, n, m, k, 1.0f, x, k, w, k, beta, y, m);
}

template <class T>
void linear_backward(cublasHandle_t handle, cudaStream_t stream, const T* x, const T* w,
                     const T* dy, T* dx, T* dw, T* db, std::int64_t n, std::int64_t k,
                     std::int64_t m, bool accumulate) {
  check_shape("cuda::linear_backward", n, k, m);
  // dx(n, k) = dy(n, m) w(m, k)   (m == 0: an empty sum, dx = 0)
  if (dx != nullptr) gemm<T>(handle, stream, Trans::N, Trans::N, n, k, m, 1.0f, dy, m, w, k, 0.0f, dx, k);
  // dw(m, k) += dy(n, m)^T x(n, k)   (n == 0: dw unchanged, or zeroed when !accumulate)
  gemm<T>(handle, stream, Trans::T, Trans::N, m, k, n, 1.0f, dy, m, x, k, accumulate ? 1.0f : 0.0f, dw, k);
  if (db != nullptr && m > 0) {
    bias_grad_kernel<T><<<blocks_for(m, kBiasCols), dim3(kBiasCols, kBiasRows), 0, stream>>>(dy, db, n, m,
                                                                                           accumulate);
    check_launch("cuda::linear_backward bias");
  }
}

#define SHARDTRAIN_CUDA_INSTANTIATE_LINEAR(T)                                                   \
  template void linear_forward<T>(cublasHandle_t, cudaStream_t, const T*, const T*, const T*,  \
                                  T*, std::int64_t, std::int64_t, std::int64_t, bool);          \
  template void linear_backward<T>(cublasHandle_t, cudaStream_t, const T*, const T*, const T*, \
                                   T*, T*, T*, std::int64_t, std::int64_t, std::int64_t, bool);
SHARDTRAIN_CUDA_INSTANTIATE_LINEAR(float)
SHARDTRAIN_CUDA_INSTANTIATE_LINEAR(__half)
SHARDTRAIN_CUDA_INSTANTIATE_LINEAR(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_INSTANTIATE_LINEAR

}  // namespace shardtrain::cuda
