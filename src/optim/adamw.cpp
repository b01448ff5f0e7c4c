// AdamW update over a range of the flat vector, tensor by tensor.
#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/error.hpp"

namespace shardtrain {

AdamW::AdamW(const OptimConfig& config, const ParamLayout& layout, std::int64_t lo,
             std::int64_t hi, MemoryTracker& memory, bool master_weights)
    : m_config(config),
      m_layout(layout),
      m_lo(lo),
      m_hi(hi),
      m_m(memory, MemCategory::OptimizerState, static_cast<std::size_t>(hi - lo)),
      m_v(memory, MemCategory::OptimizerState, static_cast<std::size_t>(hi - lo)) {
  SHARDTRAIN_CHECK(0 <= lo && lo <= hi && hi <= layout.padded_size(), "AdamW range out of layout");
  if (master_weights)
    m_master = TrackedBuffer<float>(memory, MemCategory::OptimizerState, static_cast<std::size_t>(hi - lo));
}

template <class P>
void AdamW::init_master(const P* params) {
  SHARDTRAIN_CHECK(has_master(), "AdamW built without master weights");
  for (std::int64_t i = 0; i < m_hi - m_lo; ++i) m_master.data()[i] = static_cast<float>(params[i]);
}

template <class P>
void AdamW::step(P* params, const P* grads, double lr, float grad_scale, std::int64_t step) {
  constexpr bool kInPlace = std::is_same_v<P, float>;
  SHARDTRAIN_CHECK(kInPlace || has_master(), "a 16-bit model needs AdamW master weights");
  float* w = has_master() ? m_master.data() : reinterpret_cast<float*>(params);
  const double t = static_cast<double>(step + 1);
  const float b1 = static_cast<float>(m_config.beta1), b2 = static_cast<float>(m_config.beta2);
  const float bc1 = static_cast<float>(1.0 - std::pow(m_config.beta1, t));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(m_config.beta2, t)));
  const float step_size = static_cast<float>(lr) / bc1;
  const float eps = static_cast<float>(m_config.eps);
  float* m = m_m.data();
  float* v = m_v.data();
  for (const auto& e : m_layout.entries()) {
    const std::int64_t a = std::max(m_lo, e.offset), b = std::min(m_hi, e.offset + e.numel);
    if (a >= b) continue;
    const float decay = e.weight_decay ? static_cast<float>(1.0 - lr * m_config.weight_decay) : 1.0f;
    for (std::int64_t i = a - m_lo; i < b - m_lo; ++i) {
      const float g = static_cast<float>(grads[i]) * grad_scale;
      m[i] = b1 * m[i] + (1.0f - b1) * g;
      v[i] = b2 * v[i] + (1.0f - b2) * g * g;
      const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
      w[i] = w[i] * decay - step_size * m[i] / denom;
      if (has_master()) params[i] = P(w[i]);
    }
  }
}

template <class P>
double sum_of_squares(const ParamLayout& layout, const P* g, std::int64_t lo, std::int64_t hi) {
  double total = 0.0;
  for (const auto& e : layout.entries()) {
    const std::int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.numel);
    for (std::int64_t i = a; i < b; ++i) {
      const double x = static_cast<float>(g[i - lo]);
      total += x * x;
    }
  }
  return total;
}

#define SHARDTRAIN_ADAMW_INSTANTIATE(P)                                                        \
  template void AdamW::init_master<P>(const P*);                                                \
  template void AdamW::step<P>(P*, const P*, double, float, std::int64_t);                      \
  template double sum_of_squares<P>(const ParamLayout&, const P*, std::int64_t, std::int64_t);
SHARDTRAIN_ADAMW_INSTANTIATE(float)
SHARDTRAIN_ADAMW_INSTANTIATE(f16)
SHARDTRAIN_ADAMW_INSTANTIATE(bf16)
#undef SHARDTRAIN_ADAMW_INSTANTIATE

}  // namespace shardtrain
