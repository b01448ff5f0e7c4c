// shardtrain/session/lifecycle.hpp
// Owns how a run learns that it must stop early: the stop signals (SIGUSR1,
// SIGTERM, SIGINT: what Slurm and mpirun send before a job's end) and the
// wall-time guard (train.time_limit, SLURM_JOB_END_TIME). The trainer asks at
// every step boundary, agrees across ranks, checkpoints and exits with
// kExitRequeue so that the job script requeues the job (share/doc/slurm.md).
// Invariants: the stop signals are blocked in the thread that installs them
// (main, before MPI_Init and before any other thread exists) and so in every
// thread started after it; one watcher thread takes them with sigwait, so no
// signal frame is ever pushed on a thread that computes (a oneDNN GEMM kernel
// may have its stack pointer on the heap: lifecycle.cpp); the handler, kept for
// the threads that do not block them (a library's pool started before main,
// such as OpenBLAS's idle workers), only stores to a lock-free atomic (async-
// signal-safe); the first signal received is the one reported; a signal at any
// moment after the process started is caught rather than killing it.
#pragma once

#include <chrono>
#include <cstdint>

#include "core/exit_codes.hpp"

namespace shardtrain {

// Takes SIGUSR1, SIGTERM and SIGINT over for the process (idempotent): blocks
// them in the calling thread, which must be the first (main's first line),
// starts the watcher thread and installs the handler. Threads the caller
// starts afterwards inherit the blocked mask.
void install_stop_signal_handlers();
// The first stop signal received (0: none).
int pending_stop_signal();
// "SIGUSR1", "SIGTERM", "SIGINT" or "signal N".
const char* stop_signal_name(int signal);
// Test hook: acts as if `signal` had been received.
void raise_stop_flag(int signal);

// Stops a run before its wall time ends: when what is left is less than two
// steps plus two checkpoints plus a second, at the step boundary. The end is
// the earlier of train.time_limit (minutes, counted from the process start) and
// SLURM_JOB_END_TIME (Unix seconds; set by newer Slurm versions, and exported
// by the jobs/ scripts on Slurm 22.05), when given.
class WallTimeGuard {
 public:
  // time_limit_minutes <= 0: none. Reads SLURM_JOB_END_TIME from the environment.
  explicit WallTimeGuard(double time_limit_minutes);
  bool enabled() const { return m_enabled; }
  double seconds_left() const;
  // step_s: the longest step so far; checkpoint_s: the last checkpoint's
  // write + commit time (or an estimate before the first).
  bool must_stop(double step_s, double checkpoint_s) const;
  static double needed_seconds(double step_s, double checkpoint_s) { return 2 * step_s + 2 * checkpoint_s + 1.0; }

 private:
  bool m_enabled = false;
  std::chrono::steady_clock::time_point m_end;
};

}  // namespace shardtrain
