// shardtrain/io/checkpoint_phase.hpp
// Owns how a checkpoint's I/O is split into phases that every rank agrees on,
// and the deadline that storage which stops answering runs into.
//  - A phase is work one rank (rank 0: the HDF5 layout, the commit) or every
//    rank (its shard's bytes, its fsync) does with no MPI inside it; it ends in
//    a status all-reduce (the lowest failing rank) and, when a rank failed, a
//    broadcast of that rank's errno and message. So one rank's failure is
//    known to every rank as soon as the others finish the phase, and every
//    rank throws the same CheckpointIoError naming the failing rank, the phase,
//    the file and the system error. No collective runs inside a phase, so a
//    failure on a subset of ranks can never leave another rank waiting in one.
//  - IoDeadline: a thread per process that watches the phase in progress.
//    When this rank's own part has not finished after checkpoint.io_timeout_s
//    (a system call that does not return), or this rank has failed and the
//    others have not reached the agreement by then, it prints what and where
//    and ends the process with exit code 1 (std::_Exit, as the collective
//    watchdog does: the launcher then ends the other ranks). A rank whose part
//    is done and that waits for the others waits a grace period longer, so the
//    rank that knows the cause speaks first.
//  - Reads of files someone else wrote (the checkpoint reader, model.init_from,
//    the data sets at start-up) run in the same phases (read_phase): a file
//    that is bad (an InputError on the lowest failing rank) is the same
//    InputError on every rank, message and all, so resume = "auto"'s fallback
//    and the data set readers' messages are as before; a system call that
//    fails is the CheckpointIoError; one that never returns trips the deadline.
// Invariants: at most one phase is in progress per IoDeadline (one checkpoint in
// flight; a reader at start-up uses the run's, or one of its own); begin/end
// take a mutex, never held across I/O or MPI; a deadline of 0 starts no thread.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <string>

#include "core/error.hpp"
#include "core/poll_thread.hpp"

namespace shardtrain {

// A checkpoint phase that failed on some rank; the same on every rank.
class CheckpointIoError : public Error {
 public:
  CheckpointIoError(int rank, std::string phase, std::string path, int err, const std::string& detail);
  int rank() const { return m_rank; }                 // the lowest failing rank
  const std::string& phase() const { return m_phase; }  // "prepare", "create", "write", "fsync", "commit", "open", "read", ...
  const std::string& path() const { return m_path; }
  int error_number() const { return m_err; }  // errno of the failing call (0: not a system error)
  const std::string& detail() const { return m_detail; }

 private:
  int m_rank;
  std::string m_phase, m_path;
  int m_err;
  std::string m_detail;
};

// "EIO (Input/output error)", "errno 1234", or "" for 0.
std::string errno_text(int err);

// A system call's failure inside a phase: its errno travels to every rank.
class SystemIoError : public Error {
 public:
  SystemIoError(const std::string& message, int err) : Error(message), m_err(err) {}
  int error_number() const { return m_err; }

 private:
  int m_err;
};

class IoDeadline {
 public:
  // `what` starts the deadline's message ("checkpoint I/O", "data set I/O", ...).
  IoDeadline(double timeout_s, int rank, std::string what = "checkpoint I/O");
  IoDeadline(const IoDeadline&) = delete;
  IoDeadline& operator=(const IoDeadline&) = delete;

  double timeout_s() const { return m_timeout_s; }

  // Watches one phase for its lifetime (a no-op when `deadline` is null or off).
  class Phase {
   public:
    Phase(IoDeadline* deadline, const char* phase, const std::string& path);
    ~Phase();
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;
    // This rank's part is done (failure: its message); it now waits for the others.
    void part_done(const std::string& failure);
    // Restarts the clock (after a test hook's pause).
    void restart();

   private:
    IoDeadline* m_d;
  };

 private:
  void check();  // on the poll thread, m_poll.mutex() held
  [[noreturn]] void fire(double waited_s);

  double m_timeout_s;
  int m_rank;
  std::string m_what;
  // The phase in progress (m_active), guarded by m_poll.mutex().
  bool m_active = false;
  bool m_part_done = false;
  std::string m_phase, m_path, m_failure;
  std::chrono::steady_clock::time_point m_since;
  PollThread m_poll;  // last: joined before the state above is destroyed
};

// Runs `fn` on every rank (root_only: on rank 0 alone) under `deadline`, then
// agrees on the outcome over `comm`: returns normally on every rank, or throws
// the lowest failing rank's CheckpointIoError on every rank. `fn` must make no
// MPI call. Collective.
void checkpoint_phase(MPI_Comm comm, IoDeadline* deadline, const char* phase, const std::string& path,
                      bool root_only, const std::function<void()>& fn);

// checkpoint_phase for reading a file someone else wrote: when the lowest
// failing rank's failure is an InputError (a damaged, truncated or foreign
// file), every rank throws InputError with that rank's message, unchanged;
// any other failure is the CheckpointIoError. Collective.
void read_phase(MPI_Comm comm, IoDeadline* deadline, const char* phase, const std::string& path,
                bool root_only, const std::function<void()>& fn);

}  // namespace shardtrain
