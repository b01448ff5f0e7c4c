// CUDA ReLU (see relu.cuh). Elementwise; each thread reads before it writes its
// own index, so in-place calls are safe.
#include "kernels/cuda/relu.cuh"

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;

template <class T>
__global__ void relu_forward_kernel(const T* x, T* y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = load_f32(x[i]);
  y[i] = v > 0.0f || v != v ? x[i] : store_as<T>(0.0f);  // NaN passes through
}

template <class T>
__global__ void relu_backward_kernel(const T* saved, const T* dy, T* dx, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  dx[i] = load_f32(saved[i]) > 0.0f ? dy[i] : store_as<T>(0.0f);
}

}  // namespace

template <class T>
void relu_forward(const T* x, T* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  relu_forward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  check_launch("relu_forward_kernel");
}

template <class T>
void relu_backward(const T* saved, const T* dy, T* dx, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  relu_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(saved, dy, dx, n);
  check_launch("relu_backward_kernel");
}

#define SHARDTRAIN_CUDA_RELU(T)                                                       \
  template void relu_forward<T>(const T*, T*, std::int64_t, cudaStream_t);           \
  template void relu_backward<T>(const T*, const T*, T*, std::int64_t, cudaStream_t);
SHARDTRAIN_CUDA_RELU(float)
SHARDTRAIN_CUDA_RELU(__half)
SHARDTRAIN_CUDA_RELU(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_RELU

}  // namespace shardtrain::cuda
