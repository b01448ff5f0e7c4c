// CUDA GELU (see gelu.cuh). Invariants: elementwise, each thread reads its
// element(s) (one value, or one 16-byte pack where the pointers are aligned:
// common.cuh's Pack) before writing the same index, so in-place calls are safe; no
// pointer is __restrict__ for that reason. expf (not __expf): full precision. The
// pack and scalar paths share the per-element functors: the same result bits.
#include "kernels/cuda/gelu.cuh"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr float kDerivClip = 12.0f;  // the host's float clamp
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// The per-element math, in fp32, shared by the scalar and the pack kernels.
struct TanhForward {
  __device__ float operator()(float xi) const {
    const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
    return xi / (1.0f + expf(-2.0f * u));
  }
};
struct TanhBackward {
  __device__ float operator()(float x, float dy) const {
    const float xi = fminf(fmaxf(x, -kDerivClip), kDerivClip);
    const float x2 = xi * xi;
    const float u = kSqrt2OverPi * (xi + kCubic * x2 * xi);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x2);
    const float s = 1.0f / (1.0f + expf(-2.0f * u));
    return dy * (s + 2.0f * xi * s * (1.0f - s) * du);
  }
};
struct ErfForward {
  __device__ float operator()(float xi) const { return 0.5f * xi * (1.0f + erff(xi * kInvSqrt2)); }
};
struct ErfBackward {
  __device__ float operator()(float xi, float dy) const {
    const float cdf = 0.5f * (1.0f + erff(xi * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * xi * xi);
    return dy * (cdf + xi * pdf);
  }
};

template <class T, class F>
__global__ void unary_kernel(const T* x, T* y, std::int64_t n, F f) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = store_as<T>(f(load_f32(x[i])));
}

// One 16-byte pack per thread: read whole, then written whole (in place is safe).
template <class T, class F>
__global__ void unary_pack_kernel(const T* x, T* y, std::int64_t packs, F f) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= packs) return;
  const Pack<T> a = reinterpret_cast<const Pack<T>*>(x)[i];
  Pack<T> r;
#pragma unroll
  for (int k = 0; k < kPack<T>; ++k) r.v[k] = store_as<T>(f(load_f32(a.v[k])));
  reinterpret_cast<Pack<T>*>(y)[i] = r;
}

template <class T, class F>
__global__ void binary_kernel(const T* x, const T* dy, T* dx, std::int64_t n, F f) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  dx[i] = store_as<T>(f(load_f32(x[i]), load_f32(dy[i])));
}

template <class T, class F>
__global__ void binary_pack_kernel(const T* x, const T* dy, T* dx, std::int64_t packs, F f) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= packs) return;
  const Pack<T> a = reinterpret_cast<const Pack<T>*>(x)[i];
  const Pack<T> g = reinterpret_cast<const Pack<T>*>(dy)[i];
  Pack<T> r;
#pragma unroll
  for (int k = 0; k < kPack<T>; ++k) r.v[k] = store_as<T>(f(load_f32(a.v[k]), load_f32(g.v[k])));
  reinterpret_cast<Pack<T>*>(dx)[i] = r;
}

// The packs where every pointer is 16-byte aligned, the scalar kernel for the tail
// (or for everything when a pointer is not).
template <class T, class F>
void launch_unary(const T* x, T* y, std::int64_t n, F f, cudaStream_t stream, const char* what) {
  if (n <= 0) return;
  std::int64_t done = 0;
  if (aligned16(x) && aligned16(y) && n >= kPack<T>) {
    const std::int64_t packs = n / kPack<T>;
    unary_pack_kernel<T, F><<<blocks_for(packs, kThreads), kThreads, 0, stream>>>(x, y, packs, f);
    check_launch(what);
    done = packs * kPack<T>;
  }
  if (done < n) {
    unary_kernel<T, F><<<blocks_for(n - done, kThreads), kThreads, 0, stream>>>(x + done, y + done, n - done, f);
    check_launch(what);
  }
}

template <class T, class F>
void launch_binary(const T* x, const T* dy, T* dx, std::int64_t n, F f, cudaStream_t stream, const char* what) {
  if (n <= 0) return;
  std::int64_t done = 0;
  if (aligned16(x) && aligned16(dy) && aligned16(dx) && n >= kPack<T>) {
    const std::int64_t packs = n / kPack<T>;
    binary_pack_kernel<T, F><<<blocks_for(packs, kThreads), kThreads, 0, stream>>>(x, dy, dx, packs, f);
    check_launch(what);
    done = packs * kPack<T>;
  }
  if (done < n) {
    binary_kernel<T, F><<<blocks_for(n - done, kThreads), kThreads, 0, stream>>>(x + done, dy + done, dx + done,
                                                                                 n - done, f);
    check_launch(what);
  }
}

}  // namespace

template <class T>
void gelu_erf_forward(const T* x, T* y, std::int64_t n, cudaStream_t stream) {
  launch_unary(x, y, n, ErfForward{}, stream, "GeluErf::forward");
}

template <class T>
void gelu_erf_backward(const T* x, const T* dy, T* dx, std::int64_t n, cudaStream_t stream) {
  launch_binary(x, dy, dx, n, ErfBackward{}, stream, "GeluErf::backward");
}

template <class T>
void gelu_forward(const T* x, T* y, std::int64_t n, cudaStream_t stream) {
  launch_unary(x, y, n, TanhForward{}, stream, "Gelu::forward");
}

template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n, cudaStream_t stream) {
  launch_binary(x, dy, dx, n, TanhBackward{}, stream, "Gelu::backward");
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
