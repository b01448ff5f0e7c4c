// shardtrain/core/profiler.hpp
// Owns the per-op timers behind `trainer --profile`: wall time and call count
// per op (layer kernels, gradient communication, the optimizer), summed between
// begin_step() and end_step() only (the trainer brackets training steps, not
// evaluation or checkpoints), and the wall time and count of those steps. One per run; the backend hands it to the model's
// ops (backend/profiled_model_ops.hpp) and the ZeRO engine.
// Device backends set a sync hook: each timed op then waits for the device
// before and after, so the times are the op's own (and the run is slower).
// Not thread-safe (one compute thread per rank).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>

namespace shardtrain {

enum class ProfileOp : int {
  Linear,        // linear layers: the GEMMs and their bias
  Attention,     // attention: QK^T and PV GEMMs, softmax, mask
  Conv2d,        // oneDNN convolutions (im2col + GEMM for double / f16; cuDNN on a device)
  Embedding,
  LayerNorm,
  Gelu,
  CrossEntropy,
  Relu,
  Pool,
  Dropout,
  SeqPool,
  Staging,       // token/target/value staging, copies, fills, accumulations, loss sums
  GradZero,      // zeroing the gradient vector at the start of a step
  GradReduce,    // gradient all-reduce / reduce-scatter, including time blocked waiting for it
  GradNorm,      // the squared norm of the shard and its scalar all-reduce
  Optimizer,     // AdamW over the shard
  ParamGather,   // parameter all-gather (stages 1-3), including waits
  Count
};

enum class ProfileClass : int { Gemm, Elementwise, Communication, Optimizer, Count };

std::string_view profile_op_name(ProfileOp op);
ProfileClass profile_op_class(ProfileOp op);
std::string_view profile_class_name(ProfileClass c);

class Profiler {
 public:
  static constexpr int kOps = static_cast<int>(ProfileOp::Count);
  struct Totals {
    std::array<double, kOps> seconds{};
    std::array<std::int64_t, kOps> calls{};
    double step_seconds = 0.0;  // wall time of the timed steps
    std::int64_t steps = 0;
  };

  // Times one op from construction to destruction (nothing if profiler is null
  // or outside a step).
  class Scope {
   public:
    Scope(Profiler* p, ProfileOp op) : m_p(p && p->m_recording ? p : nullptr), m_op(op) {
      if (m_p) m_t0 = m_p->now();
    }
    ~Scope() {
      if (m_p) m_p->add(m_op, m_p->now() - m_t0);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Profiler* m_p;
    ProfileOp m_op;
    double m_t0 = 0.0;
  };

  void set_sync(std::function<void()> sync) { m_sync = std::move(sync); }
  // Brackets one training step: ops are timed in between.
  void begin_step() {
    m_recording = true;
    m_step_t0 = now();
  }
  void end_step() {
    m_totals.step_seconds += now() - m_step_t0;
    ++m_totals.steps;
    m_recording = false;
  }
  const Totals& totals() const { return m_totals; }

 private:
  void add(ProfileOp op, double seconds) {
    m_totals.seconds[static_cast<int>(op)] += seconds;
    ++m_totals.calls[static_cast<int>(op)];
  }
  double now() {
    if (m_sync) m_sync();
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  Totals m_totals;
  std::function<void()> m_sync;
  bool m_recording = false;
  double m_step_t0 = 0.0;
};

}  // namespace shardtrain
