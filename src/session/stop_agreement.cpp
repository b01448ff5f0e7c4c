// The agreement at each step boundary on stopping and saving (stop_agreement.hpp).
#include "session/stop_agreement.hpp"

#include <span>

#include <fmt/format.h>

namespace shardtrain {

namespace {

// Reason codes: (what << 20) | (2^20 - 1 - rank), so that the maximum over
// ranks names the wall-time guard before a signal, and the lowest rank.
constexpr std::int64_t kStopWallTime = 1000;

}  // namespace

StopAgreement::StopAgreement(MpiCommunicator& comm, double time_limit_minutes, double checkpoint_bytes)
    : m_comm(comm), m_guard(time_limit_minutes), m_checkpoint_bytes(checkpoint_bytes) {}

Boundary StopAgreement::agree(double step_s, const CheckpointManager& ckpt, const BackgroundCheckpoint* background,
                              bool* writes_done) {
  std::int64_t what = pending_stop_signal();
  if (m_comm.rank() == 0 && what == 0) {
    // Before the first checkpoint: its cost estimated at 100 MB/s plus half a second.
    const double ckpt_s = ckpt.last_commit_seconds() > 0 ? ckpt.last_commit_seconds() : m_checkpoint_bytes / 100e6 + 0.5;
    if (m_guard.must_stop(step_s, ckpt_s)) what = kStopWallTime;
  }
  // flags[2]: this rank's background write is still running (1), so the
  // maximum says whether every rank's is done.
  const bool in_flight = background && background->in_flight();
  // (Only with a background writer: without one the payload is unchanged.)
  std::int64_t flags[3] = {what == 0 ? 0 : (what << 20) | ((std::int64_t{1} << 20) - 1 - m_comm.rank()),
                           m_comm.rank() == 0 && ckpt.minutes_elapsed() ? 1 : 0,
                           in_flight && !background->written() ? 1 : 0};
  m_comm.all_reduce(std::span<std::int64_t>(flags, background ? 3 : 2), ReduceOp::Max);
  *writes_done = in_flight && flags[2] == 0;
  return {flags[0], flags[1] != 0};
}

std::string StopAgreement::describe(std::int64_t reason) const {
  const std::int64_t what = reason >> 20, rank = (std::int64_t{1} << 20) - 1 - (reason & ((1 << 20) - 1));
  if (what == kStopWallTime)
    return fmt::format("the wall-time guard (train.time_limit / SLURM_JOB_END_TIME: {:.0f} s left, less than two "
                       "steps and two checkpoints need)", m_guard.seconds_left());
  return fmt::format("{} received by rank {}", stop_signal_name(static_cast<int>(what)), rank);
}

}  // namespace shardtrain
