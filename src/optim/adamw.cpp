// AdamW update over a range of the flat vector, tensor by tensor.
#include "optim/adamw.hpp"

#include <type_traits>

#include "core/error.hpp"

namespace shardtrain {

AdamW::AdamW(const OptimConfig& config, const ParamLayout& layout, std::int64_t lo,
             std::int64_t hi, MemoryTracker& memory, bool master_weights, MemorySpace* space)
    : m_config(config),
      m_layout(layout),
      m_lo(lo),
      m_hi(hi),
      m_m(memory, MemCategory::OptimizerState, static_cast<std::size_t>(hi - lo), space),
      m_v(memory, MemCategory::OptimizerState, static_cast<std::size_t>(hi - lo), space) {
  SHARDTRAIN_CHECK(0 <= lo && lo <= hi && hi <= layout.padded_size(), "AdamW range out of layout");
  if (master_weights)
    m_master = TrackedBuffer<float>(memory, MemCategory::OptimizerState, static_cast<std::size_t>(hi - lo), space);
}

template <class P>
void AdamW::step(VectorOps<P>& ops, P* params, const P* grads, double lr, float grad_scale, std::int64_t step) {
  SHARDTRAIN_CHECK((std::is_same_v<P, float>) || has_master(), "a 16-bit model needs AdamW master weights");
  AdamWUpdate u;
  u.lo = m_lo;
  u.hi = m_hi;
  u.lr = lr;
  u.beta1 = m_config.beta1;
  u.beta2 = m_config.beta2;
  u.eps = m_config.eps;
  u.weight_decay = m_config.weight_decay;
  u.grad_scale = grad_scale;
  u.step = step;
  ops.adamw(m_layout, u, params, grads, has_master() ? m_master.data() : nullptr, m_m.data(), m_v.data());
}

template void AdamW::step<float>(VectorOps<float>&, float*, const float*, double, float, std::int64_t);
template void AdamW::step<f16>(VectorOps<f16>&, f16*, const f16*, double, float, std::int64_t);
template void AdamW::step<bf16>(VectorOps<bf16>&, bf16*, const bf16*, double, float, std::int64_t);

}  // namespace shardtrain
