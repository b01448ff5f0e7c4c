// shardtrain/optim/adamw.hpp
// Owns the AdamW update (Loshchilov & Hutter 2019: decoupled weight decay) of
// one contiguous range [lo, hi) of the flat vector: the whole vector at ZeRO
// stage 0, the rank's shard at stages 1-3 (ModelState::optimizer_view()).
// Stateless: the fp32 weights and both moments are ModelState's
// (parallel/model_state.hpp); AdamW holds only its hyper-parameters and the layout.
// For a model stored in 16 bits (f16/bf16) the update runs on the fp32 master
// weights and the model's copy is the master rounded to 16 bits (round to
// nearest even); an fp32 model's parameters are its weights, updated in place.
// Invariants: weight decay only on tensors whose ParamEntry says so (Linear
// matrices; never biases, LayerNorm or embeddings); padding is never touched.
#pragma once

#include <cstdint>

#include "backend/backend.hpp"
#include "config/run_config.hpp"
#include "parallel/model_state.hpp"
#include "core/param_layout.hpp"

namespace shardtrain {

class AdamW {
 public:
  // `layout` outlives the optimizer.
  AdamW(const OptimConfig& config, const ParamLayout& layout) : m_config(config), m_layout(layout) {}

  // One update of `state` (every span of it, over [lo, hi)) from its gradients,
  // run by `ops` on the memory the spans point into. grad_scale multiplies every
  // gradient first (clipping, unscaling by the loss scale). `step` is the
  // 0-based count of updates taken before this one.
  template <class P>
  void step(VectorOps<P>& ops, const ShardView<P>& state, double lr, float grad_scale, std::int64_t step) const;
  // The same on host memory.
  template <class P>
  void step(const ShardView<P>& state, double lr, float grad_scale, std::int64_t step) const {
    this->step(host_backend().vector_ops<P>(), state, lr, grad_scale, step);
  }

 private:
  OptimConfig m_config;
  const ParamLayout& m_layout;
};

// Sum of squares of g[lo, hi) restricted to parameter tensors (padding excluded),
// accumulated in double in a fixed order (host memory; VectorOps::sum_of_squares).
template <class P>
double sum_of_squares(const ParamLayout& layout, const P* g, std::int64_t lo, std::int64_t hi) {
  return host_backend().vector_ops<P>().sum_of_squares(layout, g, lo, hi);
}

}  // namespace shardtrain
