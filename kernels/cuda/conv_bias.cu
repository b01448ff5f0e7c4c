// CUDA bias add and bias gradient of the 2-D convolution (see conv_bias.cuh).
#include "kernels/cuda/conv_bias.cuh"

#include <string>

#include "core/error.hpp"
#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;  // power of two (the reduction tree halves it)

// One thread per element of y; no __restrict__ on y's reads and writes (same index).
template <class T>
__global__ void conv_bias_forward_kernel(const T* __restrict__ b, T* y, std::int64_t total, std::int64_t channels,
                                         std::int64_t plane) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const std::int64_t o = (i / plane) % channels;
  y[i] = store_as<T>(load_f32(y[i]) + load_f32(b[o]));
}

// Block o: the sum of channel o over the batch and the plane, in a fixed order.
template <class T>
__global__ void conv_bias_backward_kernel(const T* __restrict__ dy, T* __restrict__ db, std::int64_t batch,
                                          std::int64_t channels, std::int64_t plane) {
  __shared__ float buf[kThreads];
  const std::int64_t o = blockIdx.x;
  const std::int64_t per_channel = batch * plane;
  float acc = 0.0f;
  for (std::int64_t k = threadIdx.x; k < per_channel; k += kThreads) {
    const std::int64_t n = k / plane, p = k % plane;
    acc += load_f32(dy[(n * channels + o) * plane + p]);
  }
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) buf[threadIdx.x] += buf[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[o] = store_as<T>(load_f32(db[o]) + buf[0]);
}

void check_shape(const char* what, std::int64_t batch, std::int64_t channels, std::int64_t plane) {
  SHARDTRAIN_CHECK(batch >= 0 && channels >= 0 && plane >= 0,
                   std::string(what) + ": negative size batch " + std::to_string(batch) + " channels " +
                       std::to_string(channels) + " plane " + std::to_string(plane));
}

}  // namespace

template <class T>
void conv_bias_forward(const T* b, T* y, std::int64_t batch, std::int64_t channels, std::int64_t plane,
                       cudaStream_t stream) {
  check_shape("cuda::conv_bias_forward", batch, channels, plane);
  const std::int64_t total = batch * channels * plane;
  if (total == 0) return;
  conv_bias_forward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(b, y, total, channels, plane);
  check_launch("conv_bias_forward");
}

template <class T>
void conv_bias_backward(const T* dy, T* db, std::int64_t batch, std::int64_t channels, std::int64_t plane,
                        cudaStream_t stream) {
  check_shape("cuda::conv_bias_backward", batch, channels, plane);
  if (channels == 0) return;
  SHARDTRAIN_CHECK(channels <= INT32_MAX, "cuda::conv_bias_backward: more than 2^31 - 1 channels");
  // batch * plane == 0 still adds an empty sum (db unchanged, rounded once).
  conv_bias_backward_kernel<T><<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(dy, db, batch, channels,
                                                                                        plane);
  check_launch("conv_bias_backward");
}

#define SHARDTRAIN_CUDA_CONV_BIAS(T)                                                                          \
  template void conv_bias_forward<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t, cudaStream_t); \
  template void conv_bias_backward<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t, cudaStream_t);
SHARDTRAIN_CUDA_CONV_BIAS(float)
SHARDTRAIN_CUDA_CONV_BIAS(__half)
SHARDTRAIN_CUDA_CONV_BIAS(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_CONV_BIAS

}  // namespace shardtrain::cuda
