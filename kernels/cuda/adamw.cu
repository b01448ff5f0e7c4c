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

// One element's update (the host's arithmetic, line for line).
template <class T>
__device__ inline void adamw_element(std::int64_t i, T* __restrict__ params, const T* __restrict__ grads,
                                     float* __restrict__ master, float* __restrict__ m, float* __restrict__ v,
                                     const AdamWScalars& s, float grad_scale) {
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

template <class T>
__global__ void adamw_kernel(T* __restrict__ params, const T* __restrict__ grads,
                             float* __restrict__ master, float* __restrict__ m,
                             float* __restrict__ v, std::int64_t begin, std::int64_t end,
                             AdamWScalars s, float grad_scale) {
  const std::int64_t i = begin + static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= end) return;
  adamw_element(i, params, grads, master, m, v, s, grad_scale);
}

// Every segment in one launch over [0, end of the last segment): a thread finds
// its element's segment by binary search over the (sorted, disjoint) segments and
// leaves the padding between them untouched. s.decay is the decay factor of the
// weight-decayed segments; the others use 1.
template <class T>
__global__ void adamw_segments_kernel(T* __restrict__ params, const T* __restrict__ grads,
                                      float* __restrict__ master, float* __restrict__ m, float* __restrict__ v,
                                      const AdamWSegment* __restrict__ segments, int num_segments, std::int64_t end,
                                      AdamWScalars s, float grad_scale) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= end) return;
  int lo = 0, hi = num_segments - 1;  // the last segment whose begin <= i
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (segments[mid].begin <= i) lo = mid;
    else hi = mid - 1;
  }
  const AdamWSegment seg = segments[lo];
  if (i < seg.begin || i >= seg.end) return;  // padding
  if (!seg.weight_decay) s.decay = 1.0f;
  adamw_element(i, params, grads, master, m, v, s, grad_scale);
}

}  // namespace

// The scalars, computed on the host as adamw.cpp computes them; decay is the
// weight-decayed segments' factor.
static AdamWScalars scalars_of(const AdamWHyper& hyper, float& decay) {
  const double t = static_cast<double>(hyper.step + 1);
  AdamWScalars s{};
  s.b1 = static_cast<float>(hyper.beta1);
  s.b2 = static_cast<float>(hyper.beta2);
  const float bc1 = static_cast<float>(1.0 - std::pow(hyper.beta1, t));
  s.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(hyper.beta2, t)));
  s.step_size = static_cast<float>(hyper.lr) / bc1;
  s.eps = static_cast<float>(hyper.eps);
  decay = static_cast<float>(1.0 - hyper.lr * hyper.weight_decay);
  return s;
}

template <class T>
void adamw_step(T* params, const T* grads, float* master, float* exp_avg, float* exp_avg_sq,
                const AdamWSegment* segments, std::size_t num_segments, const AdamWHyper& hyper,
                cudaStream_t stream) {
  SHARDTRAIN_CHECK((std::is_same_v<T, float> || master != nullptr),
                   "cuda::adamw_step: a 16-bit model needs master weights");
  float decay = 1.0f;
  AdamWScalars s = scalars_of(hyper, decay);
  for (std::size_t k = 0; k < num_segments; ++k) {
    const AdamWSegment& seg = segments[k];
    if (seg.begin >= seg.end) continue;
    s.decay = seg.weight_decay ? decay : 1.0f;
    adamw_kernel<T><<<blocks_for(seg.end - seg.begin, kThreads), kThreads, 0, stream>>>(
        params, grads, master, exp_avg, exp_avg_sq, seg.begin, seg.end, s, hyper.grad_scale);
    check_launch("AdamW::step");
  }
}

template <class T>
void adamw_step_one_launch(T* params, const T* grads, float* master, float* exp_avg, float* exp_avg_sq,
                           const AdamWSegment* device_segments, const AdamWSegment* host_segments,
                           std::size_t num_segments, const AdamWHyper& hyper, cudaStream_t stream) {
  SHARDTRAIN_CHECK((std::is_same_v<T, float> || master != nullptr),
                   "cuda::adamw_step_one_launch: a 16-bit model needs master weights");
  if (num_segments == 0) return;
  SHARDTRAIN_CHECK(num_segments <= static_cast<std::size_t>(INT32_MAX), "cuda::adamw_step_one_launch: too many segments");
  for (std::size_t k = 0; k < num_segments; ++k)
    SHARDTRAIN_CHECK(host_segments[k].begin <= host_segments[k].end &&
                         (k == 0 || host_segments[k - 1].end <= host_segments[k].begin),
                     "cuda::adamw_step_one_launch: segments must be sorted and disjoint (segment " +
                         std::to_string(k) + ")");
  const std::int64_t end = host_segments[num_segments - 1].end;
  if (end <= 0) return;
  float decay = 1.0f;
  AdamWScalars s = scalars_of(hyper, decay);
  s.decay = decay;
  adamw_segments_kernel<T><<<blocks_for(end, kThreads), kThreads, 0, stream>>>(
      params, grads, master, exp_avg, exp_avg_sq, device_segments, static_cast<int>(num_segments), end, s,
      hyper.grad_scale);
  check_launch("AdamW::step (one launch)");
}

#define SHARDTRAIN_CUDA_ADAMW_ONE_LAUNCH(T)                                                                 \
  template void adamw_step_one_launch<T>(T*, const T*, float*, float*, float*, const AdamWSegment*,         \
                                         const AdamWSegment*, std::size_t, const AdamWHyper&, cudaStream_t);
SHARDTRAIN_CUDA_ADAMW_ONE_LAUNCH(float)
SHARDTRAIN_CUDA_ADAMW_ONE_LAUNCH(__half)
SHARDTRAIN_CUDA_ADAMW_ONE_LAUNCH(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_ADAMW_ONE_LAUNCH

template void adamw_step<float>(float*, const float*, float*, float*, float*,
                                const AdamWSegment*, std::size_t, const AdamWHyper&, cudaStream_t);
template void adamw_step<__half>(__half*, const __half*, float*, float*, float*,
                                 const AdamWSegment*, std::size_t, const AdamWHyper&, cudaStream_t);
template void adamw_step<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, float*, float*,
                                        float*, const AdamWSegment*, std::size_t, const AdamWHyper&,
                                        cudaStream_t);

}  // namespace shardtrain::cuda
