// shardtrain/kernels/adamw.hpp
// Owns the host kernels of the optimizer's two passes over a contiguous range of
// the flat vectors (one tensor's part of a rank's shard; the backend calls them
// tensor by tensor): the AdamW update and the gradient's sum of squares (the
// clipping norm). Both loops are vectorised (SHARDTRAIN_TARGET_CLONES: AVX-512,
// AVX2 and baseline clones) and deterministic.
//  - adamw_update, per element, in this order (the order of the scalar loop it
//    replaced in backend/host_backend.cpp, so the bits did not change):
//      g = float(grad) * grad_scale
//      m = b1 m + (1 - b1) g
//      v = b2 v + ((1 - b2) g) g
//      w = w * decay - (step_size * m) / (sqrt(v) / bc2_sqrt + eps)
//      param = P(w)                              (16-bit P: w is the fp32 master)
//    The kernels are built without FMA contraction (-ffp-contract=off) and
//    SIMD sqrt and division round as the scalar ones do, so every clone gives
//    the scalar loop's bits. fp32: the weights are the parameters (master empty).
//  - sum_of_squares: the sum of double(float(g))^2 in vec::kLanes (16) partial
//    sums combined in a fixed tree, then the tail: the same bits on every call
//    and clone for a given range (not the bits of one serial sum).
#pragma once

#include <cstdint>

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

struct AdamWCoeffs {
  float beta1 = 0.9f, beta2 = 0.95f;
  float bc2_sqrt = 1.0f;   // sqrt(1 - beta2^t)
  float step_size = 0.0f;  // lr / (1 - beta1^t)
  float eps = 1e-8f;
  float decay = 1.0f;      // 1 - lr * weight_decay (1: the tensor has no decay)
  float grad_scale = 1.0f; // multiplies every gradient first (unscaling, clipping)
};

// params, exp_avg, exp_avg_sq (and master, for 16-bit P) updated in place from
// grads; all of one extent n. fp32: master must be empty (the parameters are the
// weights); 16-bit P: master is the fp32 copy, and params gets it rounded.
template <class P>
void adamw_update(const AdamWCoeffs& c, View1<P> params, CView1<P> grads, View1<float> master,
                  View1<float> exp_avg, View1<float> exp_avg_sq);

// sum over i of double(float(g(i)))^2.
template <class P>
double sum_of_squares(CView1<P> g);

#define SHARDTRAIN_DECLARE_ADAMW(T)                                                               \
  extern template void adamw_update<T>(const AdamWCoeffs&, View1<T>, CView1<T>, View1<float>, \
                                       View1<float>, View1<float>);                               \
  extern template double sum_of_squares<T>(CView1<T>);
SHARDTRAIN_DECLARE_ADAMW(float)
SHARDTRAIN_DECLARE_ADAMW(f16)
SHARDTRAIN_DECLARE_ADAMW(bf16)
#undef SHARDTRAIN_DECLARE_ADAMW
extern template double sum_of_squares<double>(CView1<double>);

}  // namespace shardtrain
