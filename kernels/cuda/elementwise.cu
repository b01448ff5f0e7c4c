// CUDA copy / accumulate / fill (see elementwise.cuh). One thread per element;
// copy is an asynchronous device-to-device cudaMemcpyAsync on the stream.
#include "kernels/cuda/elementwise.cuh"

#include "core/cuda_check.hpp"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;

// No __restrict__: y may be x.
template <class T>
__global__ void accumulate_kernel(const T* x, T* y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = store_as<T>(load_f32(y[i]) + load_f32(x[i]));
}

template <class T>
__global__ void fill_kernel(T* __restrict__ y, T value, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = value;
}

}  // namespace

template <class T>
void copy(const T* x, T* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0 || x == y) return;
  SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(y, x, static_cast<std::size_t>(n) * sizeof(T),
                                        cudaMemcpyDeviceToDevice, stream));
}

template <class T>
void accumulate(const T* x, T* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  accumulate_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  check_launch("Elementwise::accumulate");
}

template <class T>
void fill(T* y, T value, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  fill_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(y, value, n);
  check_launch("Elementwise::fill");
}

#define SHARDTRAIN_CUDA_INSTANTIATE_ELEMENTWISE(T)                            \
  template void copy<T>(const T*, T*, std::int64_t, cudaStream_t);           \
  template void accumulate<T>(const T*, T*, std::int64_t, cudaStream_t);     \
  template void fill<T>(T*, T, std::int64_t, cudaStream_t);
SHARDTRAIN_CUDA_INSTANTIATE_ELEMENTWISE(float)
SHARDTRAIN_CUDA_INSTANTIATE_ELEMENTWISE(__half)
SHARDTRAIN_CUDA_INSTANTIATE_ELEMENTWISE(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_INSTANTIATE_ELEMENTWISE

}  // namespace shardtrain::cuda
