// Test-only kernel; see device_fill.hpp.
#include "device_fill.hpp"

namespace shardtrain::gpu_test {
namespace {

__global__ void fill_pattern_kernel(float* out, std::size_t n, float scale, float offset) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = offset + scale * static_cast<float>(i % 97);
}

}  // namespace

cudaError_t fill_pattern(float* out, std::size_t n, float scale, float offset, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  fill_pattern_kernel<<<blocks, threads, 0, stream>>>(out, n, scale, offset);
  return cudaGetLastError();
}

}  // namespace shardtrain::gpu_test
