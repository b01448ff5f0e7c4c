// CUDA softmax cross-entropy (see cross_entropy.cuh).
// Invariants: one block of kThreads threads per row. Thread k visits columns
// k, k + kThreads, ... in order, then the block combines the kThreads partials by
// a fixed halving tree in shared memory: max and sum are deterministic. In the
// backward every column is read (max pass, sum pass) before any is written, and
// the write pass reads and writes each column in the same thread, so
// dlogits == logits (in place) is safe; no pointer is __restrict__ for that reason.
// The onehot term is folded into the one store of dlogits[target] (rounded once).
#include "kernels/cuda/cross_entropy.cuh"

#include <cstdint>

#include "core/error.hpp"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;  // power of two (the reduction tree halves it)

__device__ inline float nan_f32() { return __int_as_float(0x7fc00000); }

// Combines one value per thread; every thread gets the result. `buf` holds
// kThreads floats. Starts and ends with a barrier so buf can be reused.
template <bool kMax>
__device__ float block_reduce(float value, float* buf) {
  __syncthreads();
  buf[threadIdx.x] = value;
  __syncthreads();
  for (unsigned w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      const float a = buf[threadIdx.x], b = buf[threadIdx.x + w];
      buf[threadIdx.x] = kMax ? fmaxf(a, b) : a + b;
    }
    __syncthreads();
  }
  const float r = buf[0];
  __syncthreads();
  return r;
}

// Row max and sum_j exp(x_j - max), computed by the whole block.
template <class T>
__device__ void row_stats(const T* x, std::int64_t v, float* buf, float& m, float& s) {
  float local = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < v; j += kThreads) local = fmaxf(local, load_f32(x[j]));
  m = block_reduce<true>(local, buf);
  float acc = 0.0f;
  for (std::int64_t j = threadIdx.x; j < v; j += kThreads) acc += expf(load_f32(x[j]) - m);
  s = block_reduce<false>(acc, buf);
}

template <class T>
__global__ void cross_entropy_forward_kernel(const T* logits, const std::int32_t* targets,
                                             T* losses, std::int64_t v) {
  __shared__ float buf[kThreads];
  const std::int64_t row = blockIdx.x;
  const std::int32_t target = targets[row];
  if (target < 0 || target >= v) {  // uniform over the block: nobody reaches a barrier
    if (threadIdx.x == 0) losses[row] = store_as<T>(target < 0 ? 0.0f : nan_f32());
    return;
  }
  const T* x = logits + row * v;
  float m, s;
  row_stats(x, v, buf, m, s);
  if (threadIdx.x == 0) losses[row] = store_as<T>(logf(s) - (load_f32(x[target]) - m));
}

template <class T>
__global__ void cross_entropy_backward_kernel(const T* logits, const std::int32_t* targets,
                                              float scale, T* dlogits, std::int64_t v) {
  __shared__ float buf[kThreads];
  const std::int64_t row = blockIdx.x;
  const std::int32_t target = targets[row];
  T* dl = dlogits + row * v;
  if (target < 0 || target >= v) {  // uniform over the block
    const float fillv = target < 0 ? 0.0f : nan_f32();
    for (std::int64_t j = threadIdx.x; j < v; j += kThreads) dl[j] = store_as<T>(fillv);
    return;
  }
  const T* x = logits + row * v;
  float m, s;
  row_stats(x, v, buf, m, s);  // ends with a barrier: all reads of x done before writes
  const float factor = scale / s;
  for (std::int64_t j = threadIdx.x; j < v; j += kThreads) {
    float p = expf(load_f32(x[j]) - m) * factor;
    if (j == target) p -= scale;
    dl[j] = store_as<T>(p);
  }
}

}  // namespace

template <class T>
void cross_entropy_forward(const T* logits, const std::int32_t* targets, T* losses,
                           std::int64_t n, std::int64_t v, cudaStream_t stream) {
  if (n <= 0) return;
  SHARDTRAIN_CHECK(n <= INT32_MAX, "cuda::cross_entropy_forward: more than 2^31 - 1 rows");
  cross_entropy_forward_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      logits, targets, losses, v);
  check_launch("CrossEntropy::forward");
}

template <class T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, float scale,
                            T* dlogits, std::int64_t n, std::int64_t v, cudaStream_t stream) {
  if (n <= 0) return;
  SHARDTRAIN_CHECK(n <= INT32_MAX, "cuda::cross_entropy_backward: more than 2^31 - 1 rows");
  cross_entropy_backward_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      logits, targets, scale, dlogits, v);
  check_launch("CrossEntropy::backward");
}

#define SHARDTRAIN_CUDA_INSTANTIATE_CROSS_ENTROPY(T)                                          \
  template void cross_entropy_forward<T>(const T*, const std::int32_t*, T*, std::int64_t,     \
                                         std::int64_t, cudaStream_t);                         \
  template void cross_entropy_backward<T>(const T*, const std::int32_t*, float, T*,           \
                                          std::int64_t, std::int64_t, cudaStream_t);
SHARDTRAIN_CUDA_INSTANTIATE_CROSS_ENTROPY(float)
SHARDTRAIN_CUDA_INSTANTIATE_CROSS_ENTROPY(__half)
SHARDTRAIN_CUDA_INSTANTIATE_CROSS_ENTROPY(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_INSTANTIATE_CROSS_ENTROPY

}  // namespace shardtrain::cuda
