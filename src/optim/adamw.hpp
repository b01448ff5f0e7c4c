// shardtrain/optim/adamw.hpp
// Owns AdamW (Loshchilov & Hutter 2019: decoupled weight decay) over one
// contiguous range [lo, hi) of the flat fp32 parameter vector -- the whole
// vector at ZeRO stage 0, the rank's shard at stages 1-3. Owns the first and
// second moments for that range (category OptimizerState).
// Invariants: weight decay only on tensors whose ParamEntry says so (Linear
// matrices; never biases, LayerNorm or embeddings); padding is never touched.
#pragma once

#include <cstdint>
#include <span>

#include "config/run_config.hpp"
#include "core/memory.hpp"
#include "model/param_layout.hpp"

namespace shardtrain {

class AdamW {
 public:
  AdamW(const OptimConfig& config, const ParamLayout& layout, std::int64_t lo, std::int64_t hi,
        MemoryTracker& memory);

  // One update of params[lo, hi) from grads[lo, hi); both point at element lo.
  // grad_scale multiplies every gradient first (clipping, unscaling).
  // `step` is the 0-based count of updates taken before this one.
  void step(float* params, const float* grads, double lr, float grad_scale, std::int64_t step);

  std::int64_t lo() const { return m_lo; }
  std::int64_t hi() const { return m_hi; }
  std::span<float> exp_avg() { return m_m.span(); }
  std::span<float> exp_avg_sq() { return m_v.span(); }

 private:
  OptimConfig m_config;
  const ParamLayout& m_layout;
  std::int64_t m_lo, m_hi;
  TrackedBuffer<float> m_m, m_v;
};

// Sum of squares of g[lo, hi) restricted to parameter tensors (padding excluded),
// accumulated in double in a fixed order.
double sum_of_squares(const ParamLayout& layout, const float* g, std::int64_t lo, std::int64_t hi);

}  // namespace shardtrain
