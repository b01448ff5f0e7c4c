// Test-only device kernels (compiled by nvcc): fill a device buffer with a
// rank-dependent pattern on a given stream, so the gpu tests exercise stream
// ordering against real kernel work, not only host-to-device copies; and keep a
// stream busy for a given time, so a missing stream dependency shows up as a
// deterministic wrong result instead of a rare one.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace shardtrain::gpu_test {

// out[i] = offset + scale * (i % 97), queued on `stream`. Returns the launch error.
cudaError_t fill_pattern(float* out, std::size_t n, float scale, float offset, cudaStream_t stream);

// out[i] = lo + (hi - lo) * u(seed, i), u in [0, 1) from a counter-based hash of
// (seed, i), rounded once to the storage type, for i in [0, n) (64-bit): the
// large inputs of the GPT-2-sized tests, made on the device in milliseconds.
// Returns the launch error.
cudaError_t fill_uniform(float* out, std::size_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream);
cudaError_t fill_uniform(__half* out, std::size_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream);
cudaError_t fill_uniform(__nv_bfloat16* out, std::size_t n, std::uint64_t seed, float lo, float hi,
                         cudaStream_t stream);

// One thread on `stream` polling the device's global timer (with __nanosleep)
// until about `ns` nanoseconds have passed. Returns the launch error.
cudaError_t spin(std::uint64_t ns, cudaStream_t stream);

// Host mirror of fill_pattern, for expected values.
inline float pattern_value(std::size_t i, float scale, float offset) {
  return offset + scale * static_cast<float>(i % 97);
}

}  // namespace shardtrain::gpu_test
