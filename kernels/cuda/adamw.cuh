// shardtrain/kernels/cuda/adamw.cuh
// CUDA AdamW step over one contiguous range [lo, hi) of the flat parameter
// vector, mirroring AdamW::step in src/optim/adamw.cpp: decoupled weight decay,
// bias-corrected moments, fp32 m and v, and for 16-bit models fp32 master
// weights with the model's copy = master rounded to T (round to nearest even).
// Weight decay is decided by the host per tensor (ParamEntry::weight_decay): the
// caller passes the range as segments [begin, end) relative to lo, each with its
// flag (a HOST array of num_segments): the pieces of the parameter tensors that
// intersect [lo, hi), as AdamW::step visits them. Elements not in any
// segment (padding) are never touched. One launch per segment.
// The scalars (bias corrections, step size, decay factor) are computed on the
// host exactly as adamw.cpp computes them (double, then rounded to float).
#pragma once

#include <cstdint>
#include <cstddef>

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {

struct AdamWSegment {
  std::int64_t begin = 0, end = 0;  // element range relative to lo
  bool weight_decay = false;
};

struct AdamWHyper {
  double lr = 0.0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  float grad_scale = 1.0f;  // multiplies every gradient first
  std::int64_t step = 0;    // 0-based count of updates taken before this one
};

// All pointers are device pointers at element lo, for the range's hi - lo elements.
// T = float without master weights: master == nullptr, params are updated in place.
// Otherwise master is updated and params := master rounded to T.
template <class T>
void adamw_step(T* params, const T* grads, float* master, float* exp_avg, float* exp_avg_sq,
                const AdamWSegment* segments, std::size_t num_segments, const AdamWHyper& hyper,
                cudaStream_t stream);

// The same update in ONE launch over [0, the last segment's end): bitwise what
// adamw_step writes (the same per-element arithmetic), for segments that are
// sorted and disjoint (checked on the host copy). device_segments is a DEVICE
// copy of host_segments (the caller keeps it; layouts do not change per step).
template <class T>
void adamw_step_one_launch(T* params, const T* grads, float* master, float* exp_avg, float* exp_avg_sq,
                           const AdamWSegment* device_segments, const AdamWSegment* host_segments,
                           std::size_t num_segments, const AdamWHyper& hyper, cudaStream_t stream);

}  // namespace shardtrain::cuda
