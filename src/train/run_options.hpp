// shardtrain/train/run_options.hpp
// Owns the run options and test hooks of the command line (RunOptions, never
// from the input file) and, in StepHooks, the one place the step loop asks
// them what to do at three points of a training step. The hooks only act on
// the step and rank they name; a step without one does nothing more than the
// comparisons. The numerical faults (--inject-overflow, --inject-nan,
// --multiply-loss, --flip-bit) fire once per job: when a rollback trains
// their step again, it runs clean, as a transient fault would.
#pragma once

#include <cstdint>

#include "parallel/model_state.hpp"
#include "parallel/zero_engine.hpp"

namespace shardtrain {

struct RunOptions {
  // --profile: time every op of the training steps (core/profiler.hpp) and print
  // the per-op breakdown at the end of the job (also RUN_DIR/profile.txt).
  bool profile = false;
  // --inject-overflow STEP[:RANK]: at optimizer step STEP (1-based) rank RANK
  // plants +inf in the gradient it contributes to the step's first reduction.
  std::int64_t overflow_step = 0;  // 0: none
  int overflow_rank = 0;
  // --stop-after-step N: this job ends after optimizer step N (counted from the
  // start of training), with a checkpoint when checkpointing is on, as a job
  // whose time is up would; the learning-rate schedule still spans train.steps.
  std::int64_t stop_after_step = 0;  // 0: run to train.steps
  // --pause-in-checkpoint STEP: every rank pauses mid-write of the checkpoint
  // of STEP (session/checkpointing.hpp), for crash tests.
  std::int64_t pause_checkpoint_step = 0;  // 0: none
  // --stall-in-collective STEP[:RANK]: at optimizer step STEP, rank RANK sleeps
  // (10 minutes) instead of entering the step's gradient reduction, so the
  // other ranks' collective watchdog fires.
  std::int64_t stall_step = 0;  // 0: none
  int stall_rank = 0;
  // --throw-at-step STEP[:RANK]: rank RANK throws an Error in step STEP (a rank-local failure).
  std::int64_t throw_step = 0;  // 0: none
  int throw_rank = 0;
  // --signal-at-step STEP[:RANK]: rank RANK acts as if SIGUSR1 arrived during step STEP.
  std::int64_t signal_step = 0;  // 0: none
  int signal_rank = 0;
  // --perturb-weights STEP[:RANK]: after the update of step STEP rank RANK moves
  // the first fp32 weight its optimizer owns by one ulp; at ZeRO stage 0 its
  // replica then differs from the other ranks' (the weights CRC check's test).
  std::int64_t perturb_step = 0;  // 0: none
  int perturb_rank = 0;
  // The numeric guard's faults (session/numeric_guard.hpp), for tests and for
  // users who want to see what their [guard] does:
  // --inject-nan STEP[:RANK]: as --inject-overflow, with a NaN.
  std::int64_t nan_step = 0;  // 0: none
  int nan_rank = 0;
  // --multiply-loss STEP[:RANK][xFACTOR]: in step STEP rank RANK multiplies its
  // loss and its backward seed by FACTOR (default 1000): the loss spike a bad
  // batch gives, in the loss and in the gradients.
  std::int64_t loss_factor_step = 0;  // 0: none
  int loss_factor_rank = 0;
  double loss_factor = 1000.0;
  // --flip-bit STEP[:RANK]: after step STEP rank RANK flips the highest
  // mantissa bit of one element of its replica: the fp32 weight 0 at ZeRO
  // stage 0; at stages 1-2 a parameter outside its own shard (element 0, or
  // the first past its shard on rank 0), which the next all-gather would
  // overwrite; at stage 3 its own fp32 weight (nothing to compare with).
  std::int64_t flip_step = 0;  // 0: none
  int flip_rank = 0;
};

// The hooks that act inside a training step, for this rank. `step` is the
// optimizer step, 1-based.
template <class P>
class StepHooks {
 public:
  StepHooks(const RunOptions& hooks, int rank, ZeroEngine<P>& zero, ModelState<P>& state)
      : m_hooks(hooks), m_rank(rank), m_zero(zero), m_state(state) {}

  // Before the micro-batches: --inject-overflow arms the engine's planted
  // overflow, --signal-at-step raises the stop flag, --throw-at-step throws.
  void at_step_start(std::int64_t step);
  // The numeric guard's replay of a faulty step: --inject-overflow and
  // --inject-nan arm the engine's planted value again when they fired in this
  // step (the replay must see what the step saw).
  void rearm_gradient_faults(std::int64_t step);
  // --multiply-loss: this rank's loss factor in `step` (1 without one, or once it fired).
  double take_loss_factor(std::int64_t step) {
    if (!once(m_hooks.loss_factor_step, m_hooks.loss_factor_rank, step, m_loss_factor_fired)) return 1.0;
    return m_hooks.loss_factor;
  }
  // Before the step's gradient reduction: --stall-in-collective sleeps.
  void before_reduction(std::int64_t step);
  // After the optimizer update: --perturb-weights moves this rank's first fp32
  // weight (of ModelState::optimizer_view()) by one ulp.
  void after_update(std::int64_t step);
  // At the end of the step, updated or not: --flip-bit.
  void at_step_end(std::int64_t step);

 private:
  bool mine(std::int64_t hook_step, int hook_rank, std::int64_t step) const {
    return hook_step == step && hook_rank == m_rank;
  }
  // mine(), the first time only (`fired` remembers).
  bool once(std::int64_t hook_step, int hook_rank, std::int64_t step, bool& fired) const {
    if (fired || !mine(hook_step, hook_rank, step)) return false;
    fired = true;
    return true;
  }

  RunOptions m_hooks;
  int m_rank;
  ZeroEngine<P>& m_zero;
  ModelState<P>& m_state;
  bool m_overflow_fired = false, m_nan_fired = false, m_loss_factor_fired = false, m_flip_fired = false;
  std::int64_t m_planted_step = 0;  // the step whose gradient got a planted value (0: none yet)
};

extern template class StepHooks<float>;
extern template class StepHooks<f16>;
extern template class StepHooks<bf16>;

}  // namespace shardtrain
