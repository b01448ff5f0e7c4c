// CUDA inverted dropout (see dropout.cuh): one thread per element; each element
// is read before it is written, so in-place calls are safe.
#include "kernels/cuda/dropout.cuh"

#include <string>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;

template <class T>
__global__ void dropout_apply_kernel(const T* in, T* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                                     std::uint64_t offset, std::uint64_t threshold, float scale) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const bool keep = dropout_keeps_bits(seed, stream, offset + static_cast<std::uint64_t>(i), threshold);
  out[i] = keep ? store_as<T>(load_f32(in[i]) * scale) : store_as<T>(0.0f);
}

template <class T>
void apply(const char* what, const DropoutParams& p, const T* in, T* out, std::int64_t n, cudaStream_t stream) {
  SHARDTRAIN_CHECK(p.p >= 0.0 && p.p <= 1.0, std::string(what) + ": probability " + std::to_string(p.p) +
                                                 " is outside [0, 1]");
  if (n <= 0) return;
  const std::uint64_t threshold = dropout_threshold_bits(p.p);
  if (!p.training || threshold == 0) {  // identity, as the host's bitwise copy
    if (in != out)
      SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<std::size_t>(n) * sizeof(T),
                                            cudaMemcpyDeviceToDevice, stream));
    return;
  }
  // As the host: 1 / (1 - p) in double, then rounded to the fp32 compute type.
  const float scale = static_cast<float>(p.p < 1.0 ? 1.0 / (1.0 - p.p) : 0.0);
  dropout_apply_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(in, out, n, p.seed, p.stream, p.offset,
                                                                             threshold, scale);
  check_launch(what);
}

}  // namespace

template <class T>
void dropout_forward(const DropoutParams& p, const T* x, T* y, std::int64_t n, cudaStream_t stream) {
  apply("dropout_forward", p, x, y, n, stream);
}

template <class T>
void dropout_backward(const DropoutParams& p, const T* dy, T* dx, std::int64_t n, cudaStream_t stream) {
  apply("dropout_backward", p, dy, dx, n, stream);
}

#define SHARDTRAIN_CUDA_DROPOUT(T)                                                                      \
  template void dropout_forward<T>(const DropoutParams&, const T*, T*, std::int64_t, cudaStream_t); \
  template void dropout_backward<T>(const DropoutParams&, const T*, T*, std::int64_t, cudaStream_t);
SHARDTRAIN_CUDA_DROPOUT(float)
SHARDTRAIN_CUDA_DROPOUT(__half)
SHARDTRAIN_CUDA_DROPOUT(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_DROPOUT

}  // namespace shardtrain::cuda
