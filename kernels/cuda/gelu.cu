// CUDA GELU (see gelu.cuh). Invariants: elementwise, each thread reads its
// element(s) before writing the same index, so in-place calls are safe; no
// pointer is __restrict__ for that reason. expf (not __expf): full precision.
#include "kernels/cuda/gelu.cuh"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr float kDerivClip = 12.0f;  // the host's float clamp

template <class T>
__global__ void gelu_forward_kernel(const T* x, T* y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float xi = load_f32(x[i]);
  const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
  y[i] = store_as<T>(xi / (1.0f + expf(-2.0f * u)));
}

template <class T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float xi = fminf(fmaxf(load_f32(x[i]), -kDerivClip), kDerivClip);
  const float x2 = xi * xi;
  const float u = kSqrt2OverPi * (xi + kCubic * x2 * xi);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x2);
  const float s = 1.0f / (1.0f + expf(-2.0f * u));
  dx[i] = store_as<T>(load_f32(dy[i]) * (s + 2.0f * xi * s * (1.0f - s) * du));
}

constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

template <class T>
__global__ void gelu_erf_forward_kernel(const T* x, T* y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float xi = load_f32(x[i]);
  y[i] = store_as<T>(0.5f * xi * (1.0f + erff(xi * kInvSqrt2)));
}

template <class T>
__global__ void gelu_erf_backward_kernel(const T* x, const T* dy, T* dx, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float xi = load_f32(x[i]);
  const float cdf = 0.5f * (1.0f + erff(xi * kInvSqrt2));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * xi * xi);
  dx[i] = store_as<T>(load_f32(dy[i]) * (cdf + xi * pdf));
}

}  // namespace

template <class T>
void gelu_erf_forward(const T* x, T* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_erf_forward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  check_launch("GeluErf::forward");
}

template <class T>
void gelu_erf_backward(const T* x, const T* dy, T* dx, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_erf_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, dy, dx, n);
  check_launch("GeluErf::backward");
}

template <class T>
void gelu_forward(const T* x, T* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_forward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  check_launch("Gelu::forward");
}

template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, dy, dx, n);
  check_launch("Gelu::backward");
}

#define SHARDTRAIN_CUDA_INSTANTIATE_GELU(T)                                    \
  template void gelu_forward<T>(const T*, T*, std::int64_t, cudaStream_t);     \
  template void gelu_backward<T>(const T*, const T*, T*, std::int64_t, cudaStream_t);     \
  template void gelu_erf_forward<T>(const T*, T*, std::int64_t, cudaStream_t); \
  template void gelu_erf_backward<T>(const T*, const T*, T*, std::int64_t, cudaStream_t);
SHARDTRAIN_CUDA_INSTANTIATE_GELU(float)
SHARDTRAIN_CUDA_INSTANTIATE_GELU(__half)
SHARDTRAIN_CUDA_INSTANTIATE_GELU(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_INSTANTIATE_GELU

}  // namespace shardtrain::cuda
