// Test-only kernel; see device_fill.hpp.
#include "device_fill.hpp"

namespace shardtrain::gpu_test {
namespace {

__global__ void fill_pattern_kernel(float* out, std::size_t n, float scale, float offset) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = offset + scale * static_cast<float>(i % 97);
}

__device__ inline std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(std::uint64_t ns) {
  const std::uint64_t start = global_ns();
  while (global_ns() - start < ns) __nanosleep(10000);
}

__device__ inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__device__ inline float to_storage(float v, float*) { return v; }
__device__ inline __half to_storage(float v, __half*) { return __float2half_rn(v); }
__device__ inline __nv_bfloat16 to_storage(float v, __nv_bfloat16*) { return __float2bfloat16_rn(v); }

template <class T>
__global__ void fill_uniform_kernel(T* out, std::size_t n, std::uint64_t seed, float lo, float hi) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float u = static_cast<float>(splitmix64(seed * 0x632BE59BD9B4E019ull + i) >> 40) * (1.0f / 16777216.0f);
    out[i] = to_storage(lo + (hi - lo) * u, out);
  }
}

template <class T>
cudaError_t fill_uniform_impl(T* out, std::size_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr unsigned threads = 256;
  const std::size_t want = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 65536 ? want : 65536);  // grid-stride beyond
  fill_uniform_kernel<T><<<blocks, threads, 0, stream>>>(out, n, seed, lo, hi);
  return cudaGetLastError();
}

}  // namespace

cudaError_t fill_uniform(float* out, std::size_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream) {
  return fill_uniform_impl(out, n, seed, lo, hi, stream);
}
cudaError_t fill_uniform(__half* out, std::size_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream) {
  return fill_uniform_impl(out, n, seed, lo, hi, stream);
}
cudaError_t fill_uniform(__nv_bfloat16* out, std::size_t n, std::uint64_t seed, float lo, float hi,
                         cudaStream_t stream) {
  return fill_uniform_impl(out, n, seed, lo, hi, stream);
}

cudaError_t spin(std::uint64_t ns, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(ns);
  return cudaGetLastError();
}

cudaError_t fill_pattern(float* out, std::size_t n, float scale, float offset, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  fill_pattern_kernel<<<blocks, threads, 0, stream>>>(out, n, scale, offset);
  return cudaGetLastError();
}

}  // namespace shardtrain::gpu_test
