// shardtrain/kernels/cuda/seq_pool.cu
// Owns the device mean pooling over valid positions (seq_pool.cuh): one thread
// per output (b, c) in forward, per element (b, t, c) in backward.
#include "kernels/cuda/seq_pool.cuh"

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;

template <class T>
__global__ void seq_mean_pool_forward_kernel(const T* x, const std::int32_t* lengths, T* y, std::int64_t nb,
                                             std::int64_t nt, std::int64_t nc) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= nb * nc) return;
  const std::int64_t b = i / nc, c = i % nc;
  const std::int64_t len = lengths ? lengths[b] : nt;
  float sum = 0.0f;
  for (std::int64_t t = 0; t < len; ++t) sum += load_f32(x[(b * nt + t) * nc + c]);
  y[i] = store_as<T>(sum * (1.0f / static_cast<float>(len)));
}

template <class T>
__global__ void seq_mean_pool_backward_kernel(const T* dy, const std::int32_t* lengths, T* dx, std::int64_t nb,
                                              std::int64_t nt, std::int64_t nc) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= nb * nt * nc) return;
  const std::int64_t b = i / (nt * nc), t = (i / nc) % nt, c = i % nc;
  const std::int64_t len = lengths ? lengths[b] : nt;
  dx[i] = store_as<T>(t < len ? load_f32(dy[b * nc + c]) * (1.0f / static_cast<float>(len)) : 0.0f);
}

}  // namespace

template <class T>
void seq_mean_pool_forward(const T* x, const std::int32_t* lengths, T* y, std::int64_t b, std::int64_t t,
                           std::int64_t c, cudaStream_t stream) {
  if (b * c <= 0) return;
  seq_mean_pool_forward_kernel<T><<<blocks_for(b * c, kThreads), kThreads, 0, stream>>>(x, lengths, y, b, t, c);
  check_launch("seq_mean_pool_forward_kernel");
}

template <class T>
void seq_mean_pool_backward(const T* dy, const std::int32_t* lengths, T* dx, std::int64_t b, std::int64_t t,
                            std::int64_t c, cudaStream_t stream) {
  if (b * t * c <= 0) return;
  seq_mean_pool_backward_kernel<T><<<blocks_for(b * t * c, kThreads), kThreads, 0, stream>>>(dy, lengths, dx, b, t, c);
  check_launch("seq_mean_pool_backward_kernel");
}

#define SHARDTRAIN_CUDA_SEQ_POOL(T)                                                                             \
  template void seq_mean_pool_forward<T>(const T*, const std::int32_t*, T*, std::int64_t, std::int64_t,        \
                                         std::int64_t, cudaStream_t);                                          \
  template void seq_mean_pool_backward<T>(const T*, const std::int32_t*, T*, std::int64_t, std::int64_t,       \
                                          std::int64_t, cudaStream_t);
SHARDTRAIN_CUDA_SEQ_POOL(float)
SHARDTRAIN_CUDA_SEQ_POOL(__half)
SHARDTRAIN_CUDA_SEQ_POOL(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_SEQ_POOL

}  // namespace shardtrain::cuda
