// CUDA vector kernels of the backend (see vector_reduce.cuh).
#include "kernels/cuda/vector_reduce.cuh"

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {
namespace {

template <class T>
__global__ void sum_of_squares_kernel(const T* __restrict__ x, std::int64_t n, double* __restrict__ partials) {
  __shared__ double sums[kReduceThreads];
  double s = 0.0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = load_f32(x[i]);
    s += v * v;
  }
  sums[threadIdx.x] = s;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

__device__ inline bool finite_f32(float v) { return isfinite(v); }

template <class T>
__global__ void first_non_finite_kernel(const T* __restrict__ x, std::int64_t n, unsigned long long* first) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n && !finite_f32(load_f32(x[i]))) atomicMin(first, static_cast<unsigned long long>(i));
}

template <class T>
__global__ void widen_kernel(const T* __restrict__ x, float* __restrict__ y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = load_f32(x[i]);
}

template <class T>
__global__ void narrow_kernel(const float* __restrict__ x, T* __restrict__ y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = store_as<T>(x[i]);
}

}  // namespace

template <class T>
void sum_of_squares_partials(const T* x, std::int64_t n, double* partials, cudaStream_t stream) {
  sum_of_squares_kernel<T><<<kReduceGrid, kReduceThreads, 0, stream>>>(x, n > 0 ? n : 0, partials);
  check_launch("sum_of_squares_kernel");
}

template <class T>
void first_non_finite(const T* x, std::int64_t n, unsigned long long* first, cudaStream_t stream) {
  if (n <= 0) return;
  first_non_finite_kernel<T><<<blocks_for(n, kReduceThreads), kReduceThreads, 0, stream>>>(x, n, first);
  check_launch("first_non_finite_kernel");
}

template <class T>
void widen(const T* x, float* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  widen_kernel<T><<<blocks_for(n, kReduceThreads), kReduceThreads, 0, stream>>>(x, y, n);
  check_launch("widen_kernel");
}

template <class T>
void narrow(const float* x, T* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  narrow_kernel<T><<<blocks_for(n, kReduceThreads), kReduceThreads, 0, stream>>>(x, y, n);
  check_launch("narrow_kernel");
}

#define SHARDTRAIN_CUDA_VECTOR(T)                                                              \
  template void sum_of_squares_partials<T>(const T*, std::int64_t, double*, cudaStream_t);     \
  template void first_non_finite<T>(const T*, std::int64_t, unsigned long long*, cudaStream_t); \
  template void widen<T>(const T*, float*, std::int64_t, cudaStream_t);                        \
  template void narrow<T>(const float*, T*, std::int64_t, cudaStream_t);
SHARDTRAIN_CUDA_VECTOR(float)
SHARDTRAIN_CUDA_VECTOR(__half)
SHARDTRAIN_CUDA_VECTOR(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_VECTOR

}  // namespace shardtrain::cuda
