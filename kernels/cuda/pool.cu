// CUDA max pooling (see pool.cuh). Forward: one thread per output element.
// Backward: one thread per INPUT element gathering from the outputs whose window
// holds it, in row-major output order -- the host's scatter order restricted to
// that element, so the same sequence of rounded additions, without atomics.
#include "kernels/cuda/pool.cuh"

#include <climits>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;

struct PoolGeometry {
  std::int64_t planes, h, w, oh, ow, k, stride;
};

PoolGeometry geometry(const Pool2dShape& s) {
  SHARDTRAIN_CHECK(s.batch >= 0 && s.channels >= 1 && s.kernel >= 1 && s.stride >= 1 && s.height >= s.kernel &&
                       s.width >= s.kernel && s.height * s.width <= static_cast<std::int64_t>(INT32_MAX),
                   "cuda max_pool2d: invalid shape N=" + std::to_string(s.batch) + " C=" + std::to_string(s.channels) +
                       " H=" + std::to_string(s.height) + " W=" + std::to_string(s.width) +
                       " kernel=" + std::to_string(s.kernel) + " stride=" + std::to_string(s.stride));
  return {s.batch * s.channels, s.height, s.width, s.out_h(), s.out_w(), s.kernel, s.stride};
}

template <class T>
__global__ void max_pool2d_forward_kernel(const T* x, T* y, std::int32_t* argmax, PoolGeometry g) {
  const std::int64_t o = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= g.planes * g.oh * g.ow) return;
  const std::int64_t plane = o / (g.oh * g.ow), r = o % (g.oh * g.ow), i = r / g.ow, j = r % g.ow;
  const T* src = x + plane * g.h * g.w;
  std::int64_t best = (i * g.stride) * g.w + j * g.stride;
  float best_v = load_f32(src[best]);
  for (std::int64_t p = 0; p < g.k; ++p)
    for (std::int64_t q = 0; q < g.k; ++q) {
      const std::int64_t idx = (i * g.stride + p) * g.w + j * g.stride + q;
      const float v = load_f32(src[idx]);
      if (v > best_v || (v != v && best_v == best_v)) {
        best_v = v;
        best = idx;
      }
    }
  y[o] = src[best];
  argmax[o] = static_cast<std::int32_t>(best);
}

template <class T>
__global__ void max_pool2d_backward_kernel(const T* dy, const std::int32_t* argmax, T* dx, PoolGeometry g) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= g.planes * g.h * g.w) return;
  const std::int64_t plane = e / (g.h * g.w), idx = e % (g.h * g.w), ih = idx / g.w, iw = idx % g.w;
  // Outputs i with i * stride <= ih < i * stride + k (likewise j), ascending.
  const std::int64_t i0 = ih >= g.k ? (ih - g.k) / g.stride + 1 : 0, i1 = ih / g.stride < g.oh ? ih / g.stride : g.oh - 1;
  const std::int64_t j0 = iw >= g.k ? (iw - g.k) / g.stride + 1 : 0, j1 = iw / g.stride < g.ow ? iw / g.stride : g.ow - 1;
  const T* grad = dy + plane * g.oh * g.ow;
  const std::int32_t* a = argmax + plane * g.oh * g.ow;
  T acc = store_as<T>(0.0f);
  for (std::int64_t i = i0; i <= i1; ++i)
    for (std::int64_t j = j0; j <= j1; ++j)
      if (a[i * g.ow + j] == idx) acc = store_as<T>(load_f32(acc) + load_f32(grad[i * g.ow + j]));
  dx[e] = acc;
}

}  // namespace

template <class T>
void max_pool2d_forward(const Pool2dShape& s, const T* x, T* y, std::int32_t* argmax, cudaStream_t stream) {
  const PoolGeometry g = geometry(s);
  const std::int64_t n = g.planes * g.oh * g.ow;
  if (n <= 0) return;
  max_pool2d_forward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x, y, argmax, g);
  check_launch("max_pool2d_forward_kernel");
}

template <class T>
void max_pool2d_backward(const Pool2dShape& s, const T* dy, const std::int32_t* argmax, T* dx, cudaStream_t stream) {
  const PoolGeometry g = geometry(s);
  const std::int64_t n = g.planes * g.h * g.w;
  if (n <= 0) return;
  max_pool2d_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dy, argmax, dx, g);
  check_launch("max_pool2d_backward_kernel");
}

#define SHARDTRAIN_CUDA_POOL(T)                                                                               \
  template void max_pool2d_forward<T>(const Pool2dShape&, const T*, T*, std::int32_t*, cudaStream_t);         \
  template void max_pool2d_backward<T>(const Pool2dShape&, const T*, const std::int32_t*, T*, cudaStream_t);
SHARDTRAIN_CUDA_POOL(float)
SHARDTRAIN_CUDA_POOL(__half)
SHARDTRAIN_CUDA_POOL(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_POOL

}  // namespace shardtrain::cuda
