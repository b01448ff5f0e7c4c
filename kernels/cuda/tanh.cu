// CUDA tanh (see tanh.cuh). Invariants: elementwise, each thread reads its
// element before writing the same index, so in-place calls are safe; no pointer
// is __restrict__ for that reason. tanhf (not an approximation): full precision.
#include "kernels/cuda/tanh.cuh"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;

template <class T>
__global__ void tanh_forward_kernel(const T* x, T* y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = store_as<T>(tanhf(load_f32(x[i])));
}

template <class T>
__global__ void tanh_backward_kernel(const T* y, const T* dy, T* dx, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float yi = load_f32(y[i]);
  dx[i] = store_as<T>(load_f32(dy[i]) * (1.0f - yi * yi));
}

}  // namespace

template <class T>
void tanh_forward(const T* x, T* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  tanh_forward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  check_launch("Tanh::forward");
}

template <class T>
void tanh_backward(const T* y, const T* dy, T* dx, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  tanh_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(y, dy, dx, n);
  check_launch("Tanh::backward");
}

#define SHARDTRAIN_CUDA_INSTANTIATE_TANH(T)                                \
  template void tanh_forward<T>(const T*, T*, std::int64_t, cudaStream_t); \
  template void tanh_backward<T>(const T*, const T*, T*, std::int64_t, cudaStream_t);
SHARDTRAIN_CUDA_INSTANTIATE_TANH(float)
SHARDTRAIN_CUDA_INSTANTIATE_TANH(__half)
SHARDTRAIN_CUDA_INSTANTIATE_TANH(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_INSTANTIATE_TANH

}  // namespace shardtrain::cuda
