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

}  // namespace

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
