// CUDA AdamW step (see adamw.cuh). Invariants: one thread per element, each
// element's update is independent (no reductions, deterministic). The per-element
// arithmetic is the host's, line for line; __fmul_rn / __fadd_rn keep nvcc from
// contracting a*b+c into an FMA so the fp32 results equal the host's bit for
// bit where the host does not contract either (the host build may).
#include "kernels/cuda/adamw.cuh"

#include <cmath>
#include <string>
#include <type_traits>

#include "core/error.hpp"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;

struct AdamWScalars {
  float b1, b2, bc2_sqrt, step_size, eps, decay;
};

template <class T>
__global__ void adamw_kernel(T* __restrict__ params, const T* __restrict__ grads,
                             float* __restrict__ master, float* __restrict__ m,
                             float* __restrict__ v, std::int64_t begin, std::int64_t end,
                             AdamWScalars s, float grad_scale) {
  const std::int64_t i = begin + static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= end) return;
  float* w = master != nullptr ? master : reinterpret_cast<float*>(params);
  const float g = __fmul_rn(load_f32(grads[i]), grad_scale);
  const float mi = __fadd_rn(__fmul_rn(s.b1, m[i]), __fmul_rn(1.0f - s.b1, g));
  const float vi = __fadd_rn(__fmul_rn(s.b2, v[i]), __fmul_rn(__fmul_rn(1.0f - s.b2, g), g));
  m[i] = mi;
  v[i] = vi;
  const float denom = __fadd_rn(__fdiv_rn(sqrtf(vi), s.bc2_sqrt), s.eps);
  const float wi = __fsub_rn(__fmul_rn(w[i], s.decay), __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
  w[i] = wi;
  if (master != nullptr) params[i] = store_as<T>(wi);
}

}  // namespace

template <class T>
void adamw_step(T* params, const T* grads, float* master, float* exp_avg, float* exp_avg_sq,
                const AdamWSegment* segments, std::size_t num_segments, const AdamWHyper& hyper,
                cudaStream_t stream) {
  SHARDTRAIN_CHECK((std::is_same_v<T, float> || master != nullptr),
                   "cuda::adamw_step: a 16-bit model needs master weights");
  const double t = static_cast<double>(hyper.step + 1);
  AdamWScalars s{};
  s.b1 = static_cast<float>(hyper.beta1);
  s.b2 = static_cast<float>(hyper.beta2);
  const float bc1 = static_cast<float>(1.0 - std::pow(hyper.beta1, t));
  s.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(hyper.beta2, t)));
  s.step_size = static_cast<float>(hyper.lr) / bc1;
  s.eps = static_cast<float>(hyper.eps);
  const float decay = static_cast<float>(1.0 - hyper.lr * hyper.weight_decay);
  for (std::size_t k = 0; k < num_segments; ++k) {
    const AdamWSegment& seg = segments[k];
    if (seg.begin >= seg.end) continue;
    s.decay = seg.weight_decay ? decay : 1.0f;
    adamw_kernel<T><<<blocks_for(seg.end - seg.begin, kThreads), kThreads, 0, stream>>>(
        params, grads, master, exp_avg, exp_avg_sq, seg.begin, seg.end, s, hyper.grad_scale);
    check_launch("AdamW::step");
  }
}

template void adamw_step<float>(float*, const float*, float*, float*, float*,
                                const AdamWSegment*, std::size_t, const AdamWHyper&, cudaStream_t);
template void adamw_step<__half>(__half*, const __half*, float*, float*, float*,
                                 const AdamWSegment*, std::size_t, const AdamWHyper&, cudaStream_t);
template void adamw_step<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, float*, float*,
                                        float*, const AdamWSegment*, std::size_t, const AdamWHyper&,
                                        cudaStream_t);

}  // namespace shardtrain::cuda
