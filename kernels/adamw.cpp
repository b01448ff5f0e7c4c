// shardtrain/kernels/adamw.cpp
// Owns the host AdamW update and the gradient's sum of squares (see adamw.hpp).
#include "kernels/adamw.hpp"

#include <cmath>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

// fp32: the weights are the parameters. Every operand is its own array.
SHARDTRAIN_TARGET_CLONES
void update_weights(const AdamWCoeffs c, float* __restrict w, const float* __restrict grads,
                    float* __restrict m, float* __restrict v, std::int64_t n) {
  const float one_minus_b1 = 1.0f - c.beta1, one_minus_b2 = 1.0f - c.beta2;
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grads[i] * c.grad_scale;
    const float mi = c.beta1 * m[i] + one_minus_b1 * g;
    const float vi = c.beta2 * v[i] + one_minus_b2 * g * g;
    const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] * c.decay - c.step_size * mi / denom;
  }
}

// 16-bit parameters: the fp32 master weights are updated and rounded into params.
template <class P>
SHARDTRAIN_TARGET_CLONES
void update_master(const AdamWCoeffs c, P* __restrict params, const P* __restrict grads, float* __restrict w,
                   float* __restrict m, float* __restrict v, std::int64_t n) {
  const float one_minus_b1 = 1.0f - c.beta1, one_minus_b2 = 1.0f - c.beta2;
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = static_cast<float>(grads[i]) * c.grad_scale;
    const float mi = c.beta1 * m[i] + one_minus_b1 * g;
    const float vi = c.beta2 * v[i] + one_minus_b2 * g * g;
    const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
    const float wi = w[i] * c.decay - c.step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi;
    params[i] = P(wi);
  }
}

template <class P>
SHARDTRAIN_TARGET_CLONES
double squares(const P* __restrict g, std::int64_t n) {
  double acc[vec::kLanes] = {};
  std::int64_t j = 0;
  for (; j + vec::kLanes <= n; j += vec::kLanes)
    for (int l = 0; l < vec::kLanes; ++l) {
      const double x = static_cast<float>(g[j + l]);
      acc[l] += x * x;
    }
  double tail = 0.0;
  for (; j < n; ++j) {
    const double x = static_cast<float>(g[j]);
    tail += x * x;
  }
  return vec::combine_lanes(acc) + tail;
}

}  // namespace

template <class P>
void adamw_update(const AdamWCoeffs& c, View1<P> params, CView1<P> grads, View1<float> master,
                  View1<float> exp_avg, View1<float> exp_avg_sq) {
  const std::int64_t n = static_cast<std::int64_t>(params.extent(0));
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(grads.extent(0)) == n && static_cast<std::int64_t>(exp_avg.extent(0)) == n &&
                       static_cast<std::int64_t>(exp_avg_sq.extent(0)) == n,
                   "adamw_update: the parameter, gradient and moment ranges differ in length");
  if constexpr (std::is_same_v<P, float>) {
    SHARDTRAIN_CHECK(master.extent(0) == 0, "adamw_update: fp32 parameters are their own master weights");
    update_weights(c, params.data(), grads.data(), exp_avg.data(), exp_avg_sq.data(), n);
  } else {
    SHARDTRAIN_CHECK(static_cast<std::int64_t>(master.extent(0)) == n,
                     "adamw_update: 16-bit parameters need fp32 master weights of the same range");
    update_master<P>(c, params.data(), grads.data(), master.data(), exp_avg.data(), exp_avg_sq.data(), n);
  }
}

template <class P>
double sum_of_squares(CView1<P> g) {
  return squares<P>(g.data(), static_cast<std::int64_t>(g.extent(0)));
}

#define SHARDTRAIN_INSTANTIATE_ADAMW(T)                                                                   \
  template void adamw_update<T>(const AdamWCoeffs&, View1<T>, CView1<T>, View1<float>, View1<float>, \
                                View1<float>);                                                        \
  template double sum_of_squares<T>(CView1<T>);
SHARDTRAIN_INSTANTIATE_ADAMW(float)
SHARDTRAIN_INSTANTIATE_ADAMW(f16)
SHARDTRAIN_INSTANTIATE_ADAMW(bf16)
#undef SHARDTRAIN_INSTANTIATE_ADAMW
template double sum_of_squares<double>(CView1<double>);

}  // namespace shardtrain
