// The numeric guard's policy: the loss-spike window, the bounds and the
// messages (numeric_guard.hpp).
#include "session/numeric_guard.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardtrain {

std::string_view fault_name(NumericFault f) {
  switch (f) {
    case NumericFault::None: return "none";
    case NumericFault::NonFinite: return "non_finite";
    case NumericFault::LossSpike: return "loss_spike";
    case NumericFault::Replica: return "replica";
  }
  return "?";
}

std::string_view action_name(GuardAction a) {
  switch (a) {
    case GuardAction::Skip: return "skip";
    case GuardAction::Rollback: return "rollback";
    case GuardAction::Abort: return "abort";
  }
  return "?";
}

NumericGuard::NumericGuard(const RunConfig& cfg) : m_cfg(cfg) {
  if (cfg.guard.loss_spike != LossSpikePolicy::Off) m_window.assign(static_cast<std::size_t>(cfg.guard.spike_window), 0.0);
}

GuardAction NumericGuard::policy_of(NumericFault f) const {
  switch (f) {
    case NumericFault::NonFinite:
      switch (m_cfg.guard.non_finite) {
        case NonFinitePolicy::Skip: return GuardAction::Skip;
        case NonFinitePolicy::Rollback: return GuardAction::Rollback;
        case NonFinitePolicy::Abort: return GuardAction::Abort;
      }
      break;
    case NumericFault::LossSpike:
      switch (m_cfg.guard.loss_spike) {
        case LossSpikePolicy::Skip: return GuardAction::Skip;
        case LossSpikePolicy::Rollback: return GuardAction::Rollback;
        case LossSpikePolicy::Off:  // no spike is found when off
        case LossSpikePolicy::Abort: return GuardAction::Abort;
      }
      break;
    case NumericFault::Replica:
      switch (m_cfg.guard.replica) {
        case ReplicaPolicy::Rollback: return GuardAction::Rollback;
        case ReplicaPolicy::Abort: return GuardAction::Abort;
      }
      break;
    case NumericFault::None: break;
  }
  SHARDTRAIN_FAIL("no policy for the fault 'none'");
}

double NumericGuard::window_mean() const {
  if (!m_full) return 0.0;
  double sum = 0.0;  // a fixed order: the same on every rank
  for (double l : m_window) sum += l;
  return sum / static_cast<double>(m_window.size());
}

bool NumericGuard::is_spike(std::int64_t step, double loss) const {
  if (m_cfg.guard.loss_spike == LossSpikePolicy::Off || !m_full || step <= m_cfg.guard.spike_warmup) return false;
  return loss > m_cfg.guard.spike_factor * window_mean();
}

void NumericGuard::accepted(double loss) {
  m_skips_in_row = 0;
  if (m_window.empty()) return;
  m_window[m_next] = loss;
  m_next = (m_next + 1) % m_window.size();
  if (m_next == 0) m_full = true;
}

bool NumericGuard::min_scale_overflow(bool at_min) {
  if (!at_min) {
    m_at_min_in_row = 0;
    return false;
  }
  ++m_at_min_in_row;
  return m_cfg.guard.min_scale_steps > 0 && m_at_min_in_row >= m_cfg.guard.min_scale_steps;
}

GuardAction NumericGuard::decide(NumericFault fault) {
  m_bound_reached = false;
  switch (policy_of(fault)) {
    case GuardAction::Skip:
      if (m_skips_in_row >= m_cfg.guard.max_skips) {
        m_bound_reached = true;
        return GuardAction::Abort;
      }
      ++m_skips_in_row;
      ++m_skips_total;
      return GuardAction::Skip;
    case GuardAction::Rollback:
      if (m_rollbacks >= m_cfg.guard.max_rollbacks) {
        m_bound_reached = true;
        return GuardAction::Abort;
      }
      ++m_rollbacks;
      return GuardAction::Rollback;
    case GuardAction::Abort:
      return GuardAction::Abort;
  }
  return GuardAction::Abort;
}

void NumericGuard::rolled_back() {
  // The window keeps its losses: they are the accepted steps that led here
  // (a faulty step's loss never enters it), so a run whose loss stays far above
  // them faults again after the rollback, until guard.max_rollbacks.
  m_skips_in_row = 0;
  m_at_min_in_row = 0;
}

std::string NumericGuard::abort_message(NumericFault fault, std::int64_t step, const std::string& what) const {
  const auto& g = m_cfg.guard;
  const auto& o = m_cfg.optim;
  const std::string key = fmt::format("guard.{}", fault_name(fault));
  std::string why;
  if (!m_bound_reached)
    why = fmt::format("{} = \"{}\"", key, action_name(policy_of(fault)));
  else if (policy_of(fault) == GuardAction::Rollback)
    why = fmt::format("the fault came back after {} rollback(s) (guard.max_rollbacks = {})", m_rollbacks,
                      g.max_rollbacks);
  else
    why = fmt::format("{} steps in a row were skipped already (guard.max_skips = {})", m_skips_in_row, g.max_skips);
  std::string change;
  switch (fault) {
    case NumericFault::Replica:
      change = "a rank's memory or arithmetic changed its copy of the parameters (silent data corruption): check "
               "that node's hardware; guard.replica = \"rollback\" reloads the last checkpoint and goes on";
      break;
    default:
      change = fmt::format(
          "the model diverges: lower optim.lr (now {}), raise optim.warmup_steps (now {}) or lower "
          "optim.grad_clip (now {}){}",
          o.lr, o.warmup_steps, o.grad_clip,
          m_bound_reached ? fmt::format("; or allow more with {}",
                                        policy_of(fault) == GuardAction::Rollback ? "guard.max_rollbacks"
                                                                                  : "guard.max_skips")
                          : fmt::format("; {} = \"rollback\" reloads the last checkpoint and skips the data window",
                                        key));
  }
  return fmt::format("step {}: {}; {}: ending the run; {}", step, what, why, change);
}

}  // namespace shardtrain
