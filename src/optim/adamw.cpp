// AdamW update over a range of the flat vector, tensor by tensor.
#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace shardtrain {

AdamW::AdamW(const OptimConfig& config, const ParamLayout& layout, std::int64_t lo,
             std::int64_t hi, MemoryTracker& memory)
    : m_config(config),
      m_layout(layout),
      m_lo(lo),
      m_hi(hi),
      m_m(memory, MemCategory::OptimizerState, static_cast<std::size_t>(hi - lo)),
      m_v(memory, MemCategory::OptimizerState, static_cast<std::size_t>(hi - lo)) {
  SHARDTRAIN_CHECK(0 <= lo && lo <= hi && hi <= layout.padded_size(), "AdamW range out of layout");
}

void AdamW::step(float* params, const float* grads, double lr, float grad_scale,
                 std::int64_t step) {
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
      const float g = grads[i] * grad_scale;
      m[i] = b1 * m[i] + (1.0f - b1) * g;
      v[i] = b2 * v[i] + (1.0f - b2) * g * g;
      const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
      params[i] = params[i] * decay - step_size * m[i] / denom;
    }
  }
}

double sum_of_squares(const ParamLayout& layout, const float* g, std::int64_t lo, std::int64_t hi) {
  double total = 0.0;
  for (const auto& e : layout.entries()) {
    const std::int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.numel);
    for (std::int64_t i = a; i < b; ++i) total += static_cast<double>(g[i - lo]) * g[i - lo];
  }
  return total;
}

}  // namespace shardtrain
