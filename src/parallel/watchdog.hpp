// shardtrain/parallel/watchdog.hpp
// Owns the collective watchdog: a thread per rank that watches every blocking
// collective this rank is in (the Communicator arms it around each one). When
// one has not completed after `timeout_s` seconds (parallel.collective_timeout_s)
// it prints, once, which collective and which step stalled on this rank:
//   error (rank 1): watchdog: all_reduce (1 x F64) at step 5 has not completed after 5.0 s
//   (parallel.collective_timeout_s = 5): another rank is stalled or has died; ending the job
// and ends the process with exit code 1 (std::_Exit: MPI forbids calls from a
// second thread here, and the launcher, mpirun or srun --kill-on-bad-exit,
// then ends every other rank).
// While a checkpoint is in flight (set_grace) it allows checkpoint.io_timeout_s
// more: a rank whose training thread waits on its checkpoint (the HDF5 lock, the
// writer) is watched by the checkpoint I/O deadline (io/checkpoint_phase.hpp),
// and slow storage must trip that deadline, with its message, not this one.
// Invariants: arming and disarming are lock-free stores on the training thread;
// only one collective is armed at a time (collectives do not nest); a timeout
// of 0 starts no thread and every Scope is a no-op.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/poll_thread.hpp"

namespace shardtrain {

class CollectiveWatchdog {
 public:
  CollectiveWatchdog(double timeout_s, int rank);
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  bool enabled() const { return m_timeout_s > 0; }
  double timeout_s() const { return m_timeout_s; }
  // The optimizer step being run (1-based), for the report.
  void set_step(std::int64_t step) { m_step.store(step, std::memory_order_relaxed); }
  // Seconds allowed beyond timeout_s from now on (0: none); any thread.
  void set_grace(double seconds) { m_grace_s.store(seconds, std::memory_order_relaxed); }

  // Arms the watchdog for the lifetime of the scope. `what` must outlive it
  // (a string literal); `count` and `type` describe the buffer ("1 x F64").
  class Scope {
   public:
    Scope(CollectiveWatchdog* w, const char* what, std::size_t count, const char* type);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CollectiveWatchdog* m_w;
  };

 private:
  void check();  // on the poll thread
  [[noreturn]] void fire(double waited_s);

  double m_timeout_s;
  int m_rank;
  std::atomic<std::int64_t> m_step{0};
  std::atomic<double> m_grace_s{0.0};
  // The armed collective: m_since_ns != 0 while one is running.
  std::atomic<std::int64_t> m_since_ns{0};
  std::atomic<const char*> m_what{nullptr};
  std::atomic<std::size_t> m_count{0};
  std::atomic<const char*> m_type{nullptr};
  PollThread m_poll;  // last: joined before the state above is destroyed
};

}  // namespace shardtrain
