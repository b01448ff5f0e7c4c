// shardtrain/optim/adamw.hpp
// Owns AdamW (Loshchilov & Hutter 2019: decoupled weight decay) over one
// contiguous range [lo, hi) of the flat fp32 parameter vector -- the whole
// vector at ZeRO stage 0, the rank's shard at stages 1-3. Owns the first and
// second moments for that range (category OptimizerState), and, for a model
// stored in 16 bits (f16/bf16), the fp32 master weights of that range (also
// OptimizerState): the update runs on the master weights and the model's copy
// is the master rounded to 16 bits (round to nearest even).
// Invariants: weight decay only on tensors whose ParamEntry says so (Linear
// matrices; never biases, LayerNorm or embeddings); padding is never touched.
#pragma once

#include <cstdint>
#include <span>

#include "backend/backend.hpp"
#include "config/run_config.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/half.hpp"
#include "core/param_layout.hpp"

namespace shardtrain {

class AdamW {
 public:
  // master_weights: keep an fp32 copy of the range (16-bit models).
  // space: where the moments and master weights live (nullptr: host memory); the
  // update then runs through that backend's VectorOps.
  AdamW(const OptimConfig& config, const ParamLayout& layout, std::int64_t lo, std::int64_t hi,
        MemoryTracker& memory, bool master_weights = false, MemorySpace* space = nullptr);

  // Master weights := params[lo, hi) (pointing at element lo), widened to fp32.
  template <class P>
  void init_master(VectorOps<P>& ops, const P* params) {
    SHARDTRAIN_CHECK(has_master(), "AdamW built without master weights");
    ops.widen(params, m_master.data(), m_hi - m_lo);
  }
  template <class P>
  void init_master(const P* params) { init_master(host_backend().vector_ops<P>(), params); }

  // One update of params[lo, hi) from grads[lo, hi); both point at element lo.
  // grad_scale multiplies every gradient first (clipping, unscaling by the loss
  // scale). `step` is the 0-based count of updates taken before this one.
  // P = float without master weights updates params in place; otherwise the
  // master weights are updated and params := master rounded to P.
  // The host overload runs on host memory; the other on `ops`' backend memory.
  template <class P>
  void step(VectorOps<P>& ops, P* params, const P* grads, double lr, float grad_scale, std::int64_t step);
  template <class P>
  void step(P* params, const P* grads, double lr, float grad_scale, std::int64_t step) {
    this->step(host_backend().vector_ops<P>(), params, grads, lr, grad_scale, step);
  }

  bool has_master() const { return m_master.size() > 0; }
  std::span<float> master() { return m_master.span(); }

  std::int64_t lo() const { return m_lo; }
  std::int64_t hi() const { return m_hi; }
  std::span<float> exp_avg() { return m_m.span(); }
  std::span<float> exp_avg_sq() { return m_v.span(); }

 private:
  OptimConfig m_config;
  const ParamLayout& m_layout;
  std::int64_t m_lo, m_hi;
  TrackedBuffer<float> m_m, m_v, m_master;
};

// Sum of squares of g[lo, hi) restricted to parameter tensors (padding excluded),
// accumulated in double in a fixed order (host memory; VectorOps::sum_of_squares).
template <class P>
double sum_of_squares(const ParamLayout& layout, const P* g, std::int64_t lo, std::int64_t hi) {
  return host_backend().vector_ops<P>().sum_of_squares(layout, g, lo, hi);
}

}  // namespace shardtrain
