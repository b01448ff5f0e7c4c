// shardtrain/session/numeric_guard.hpp
// Owns the policy side of the numeric guard ([guard] of the input file;
// share/doc/training.md#numerical-faults): which faults a run watches for,
// the loss-spike statistic, and what each fault does -- skip the step's
// update, roll back to the last checkpoint (CheckpointSession::rollback), or
// end the run -- within the bounds (guard.max_skips in a row,
// guard.max_rollbacks per job), and the one message a run that ends over a
// fault prints. Detection is the step loop's (train/trainer.cpp: the loss and
// the gradient norm it has on the host anyway, the replica CRCs of
// rundir/weights_crc.hpp); this class only decides.
// Invariants: no MPI and no I/O. Every input is the same on every rank (the
// all-reduced loss, the agreed fault), so every rank takes the same decision
// without a collective. With no fault, nothing here changes the run: the spike
// window only reads losses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/run_config.hpp"

namespace shardtrain {

enum class NumericFault : unsigned char { None, NonFinite, LossSpike, Replica };
// "non_finite", "loss_spike", "replica" (as the [guard] keys and metrics.csv's fault column say them).
std::string_view fault_name(NumericFault f);

enum class GuardAction : unsigned char { Skip, Rollback, Abort };
std::string_view action_name(GuardAction a);

class NumericGuard {
 public:
  explicit NumericGuard(const RunConfig& cfg);

  // Whether the step's finite `loss` (1-based `step`) is a spike: guard.loss_spike
  // is on, the step is past guard.spike_warmup, the window of the last
  // guard.spike_window accepted losses is full, and loss > spike_factor x its mean.
  bool is_spike(std::int64_t step, double loss) const;
  double window_mean() const;
  // A step whose update was applied: its loss enters the window, the skips in
  // a row end.
  void accepted(double loss);
  // fp16: an overflowing step (the loss scaler skipped it); at_min: the scale
  // was already precision.min_scale. True when that makes guard.min_scale_steps
  // in a row: a non-finite fault.
  bool min_scale_overflow(bool at_min);
  void clean_step() { m_at_min_in_row = 0; }

  // What to do about `fault`: its policy, turned into Abort when its bound is
  // reached (bound_reached() then says so). Counts the skip or the rollback.
  GuardAction decide(NumericFault fault);
  bool bound_reached() const { return m_bound_reached; }
  // After a rollback: the skips in a row end; the spike window keeps the
  // accepted losses that led to the fault.
  void rolled_back();

  std::int64_t rollbacks() const { return m_rollbacks; }
  std::int64_t skips() const { return m_skips_total; }

  // The message of a run that ends over `fault` at `step` (1-based): `what`
  // (the fault, the tensor, the ranks), the policy or the bound that ended it,
  // and what to change.
  std::string abort_message(NumericFault fault, std::int64_t step, const std::string& what) const;

 private:
  // The fault's policy as an action (a spike's "off" is never asked: no spike is found).
  GuardAction policy_of(NumericFault f) const;

  const RunConfig& m_cfg;
  std::vector<double> m_window;  // the last accepted losses, a ring of guard.spike_window
  std::size_t m_next = 0;        // the ring's next slot
  bool m_full = false;
  std::int64_t m_at_min_in_row = 0;
  std::int64_t m_skips_in_row = 0;
  std::int64_t m_skips_total = 0;
  std::int64_t m_rollbacks = 0;
  bool m_bound_reached = false;
};

}  // namespace shardtrain
