// shardtrain/session/stop_agreement.hpp
// Owns the agreement at each step boundary: one small all-reduce agrees on
// what the ranks and rank 0's clock know -- whether any rank received a stop
// signal (session/lifecycle.hpp), whether the wall-time guard says the next
// step and a checkpoint would not fit, whether checkpoint.every_minutes have
// passed, and, with a background writer, whether every rank's write is done.
// Invariants: agree() is collective over the run's communicator and gives
// every rank the same answer; its payload is two int64 values, three with a
// background writer (the same on every rank, as every rank has one or none);
// a stop reason names the wall-time guard before a signal, and the lowest rank.
#pragma once

#include <cstdint>
#include <string>

#include "parallel/mpi/mpi_communicator.hpp"
#include "session/background_checkpoint.hpp"
#include "session/checkpointing.hpp"
#include "session/lifecycle.hpp"

namespace shardtrain {

// What the ranks agreed at a step boundary: `stop` is 0 or a reason for
// StopAgreement::describe; `checkpoint_time`: checkpoint.every_minutes have passed.
struct Boundary {
  std::int64_t stop = 0;
  bool checkpoint_time = false;
};

class StopAgreement {
 public:
  // `checkpoint_bytes`: the state a checkpoint saves, for the wall-time guard's
  // estimate of a checkpoint before the first (100 MB/s plus half a second).
  StopAgreement(MpiCommunicator& comm, double time_limit_minutes, double checkpoint_bytes);

  // `step_s`: the longest step so far; `ckpt`: the last commit's time and rank
  // 0's every_minutes clock; `background`: the background writer, or nullptr
  // without one. Sets *writes_done when a background write is in flight on
  // this rank and every rank's is done (the caller then completes it).
  // Collective.
  Boundary agree(double step_s, const CheckpointManager& ckpt, const BackgroundCheckpoint* background,
                 bool* writes_done);
  // What stopped the run: the wall-time guard, or the signal and the rank that received it.
  std::string describe(std::int64_t reason) const;

 private:
  MpiCommunicator& m_comm;
  WallTimeGuard m_guard;
  double m_checkpoint_bytes;
};

}  // namespace shardtrain
