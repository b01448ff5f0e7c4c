// AdamW update over a range of the flat vector, tensor by tensor.
#include "optim/adamw.hpp"

#include <type_traits>

#include "core/error.hpp"

namespace shardtrain {

template <class P>
void AdamW::step(VectorOps<P>& ops, const ShardView<P>& state, double lr, float grad_scale,
                 std::int64_t step) const {
  SHARDTRAIN_CHECK(0 <= state.lo && state.lo <= state.hi && state.hi <= m_layout.padded_size(),
                   "AdamW range out of layout");
  const auto n = static_cast<std::size_t>(state.size());
  SHARDTRAIN_CHECK(state.params.size() == n && state.grads.size() == n && state.master.size() == n &&
                       state.exp_avg.size() == n && state.exp_avg_sq.size() == n,
                   "AdamW state spans do not cover [lo, hi)");
  // fp32: the parameters are the weights (master aliases them); 16-bit: master weights.
  constexpr bool kMaster = !std::is_same_v<P, float>;
  SHARDTRAIN_CHECK(kMaster || static_cast<void*>(state.master.data()) == static_cast<void*>(state.params.data()),
                   "fp32 AdamW: the master weights must be the parameters");
  AdamWUpdate u;
  u.lo = state.lo;
  u.hi = state.hi;
  u.lr = lr;
  u.beta1 = m_config.beta1;
  u.beta2 = m_config.beta2;
  u.eps = m_config.eps;
  u.weight_decay = m_config.weight_decay;
  u.grad_scale = grad_scale;
  u.step = step;
  ops.adamw(m_layout, u, state.params.data(), state.grads.data(), kMaster ? state.master.data() : nullptr,
            state.exp_avg.data(), state.exp_avg_sq.data());
}

template void AdamW::step<float>(VectorOps<float>&, const ShardView<float>&, double, float, std::int64_t) const;
template void AdamW::step<f16>(VectorOps<f16>&, const ShardView<f16>&, double, float, std::int64_t) const;
template void AdamW::step<bf16>(VectorOps<bf16>&, const ShardView<bf16>&, double, float, std::int64_t) const;

}  // namespace shardtrain
