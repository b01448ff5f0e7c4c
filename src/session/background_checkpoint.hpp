// shardtrain/session/background_checkpoint.hpp
// Owns checkpoint.async's background write: the staging buffer a checkpoint's
// state shard is copied into at a step boundary, the thread that then writes
// and commits the file while training goes on, and the agreement that it is
// done. What goes into the file is the checkpoint session's (session/checkpoint_session.cpp);
// the file is io/checkpoint.hpp's write_checkpoint; the commit (rename,
// `latest`, pruning) is CheckpointManager::commit_on.
//
// Why a thread and not non-blocking MPI-IO (MPI_File_iwrite_at_all): a thread
// makes progress while the training thread computes, whatever MPI
// implementation and I/O component runs underneath, and whether or not the
// training loop calls MPI between boundaries (on GPUs its collectives are
// NCCL's); Open MPI's non-blocking collective writes progress only inside MPI
// calls. The thread uses its own duplicate of the run's communicator (MPI
// must provide MPI_THREAD_MULTIPLE: src/main.cpp asks for it), and HDF5, which
// is not thread-safe here, only under the HDF5 lock (io/h5_lock.hpp), for
// the file's layout and its CRC attributes (rank 0 alone); the bulk data
// goes out with pwrite outside the lock.
//
// Nothing waits unwatched: every phase of the write ends in an agreement of
// every rank's writer (io/checkpoint_phase.hpp), so one rank's failure ends
// every rank's writer with the same CheckpointIoError within that phase, and
// finish() (the join) waits only for writers that are done or still in I/O,
// which the checkpoint I/O deadline watches (as it watches the HDF5 lock the
// training thread may wait on meanwhile). While a write is in flight the
// collective watchdog allows checkpoint.io_timeout_s more (parallel/watchdog.hpp).
//
// Invariants: at most one write is in flight. The staging buffer is
// allocated once (tracked, MemCategory::CheckpointStaging, as the plan sizes
// it) and reused; it is not touched by the training thread while a write is in
// flight. start() and finish() are collective over the run's communicator and
// every rank calls them at the same step boundaries; finish() gives every rank
// the same outcome or the same error. A rank killed mid-write leaves only a
// .partial file: the previous checkpoint stays the latest.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <thread>

#include "core/memory.hpp"
#include "session/checkpointing.hpp"

namespace shardtrain {

class BackgroundCheckpoint {
 public:
  // Duplicates `comm` for the writer thread (collective) and allocates the
  // staging buffer of `staging_bytes` in `memory`.
  BackgroundCheckpoint(MPI_Comm comm, MemoryTracker& memory, std::size_t staging_bytes);
  // Waits for a write still in flight (its outcome is lost: call finish()).
  ~BackgroundCheckpoint();
  BackgroundCheckpoint(const BackgroundCheckpoint&) = delete;
  BackgroundCheckpoint& operator=(const BackgroundCheckpoint&) = delete;

  // Where the training thread copies the state shard before start().
  std::span<unsigned char> staging() { return m_staging.span(); }

  // A write is in flight on this rank (started, not finished).
  bool in_flight() const { return m_thread.joinable(); }
  // This rank's writer has returned (finish() will not wait). Local.
  bool written() const { return m_written.load(std::memory_order_acquire); }
  // The step of the write in flight (0 when none).
  std::int64_t step() const { return m_step; }

  // Starts the thread: job(comm) writes and commits the checkpoint of `step`
  // collectively over the writer's own communicator. Requires !in_flight().
  using Job = std::function<CheckpointManager::Committed(MPI_Comm)>;
  void start(std::int64_t step, Job job);

  // Waits for this rank's writer and agrees with every rank on the outcome
  // over `comm` (the run's communicator): returns the commit, or throws the
  // lowest failing rank's error on every rank (a failed checkpoint phase: its
  // CheckpointIoError). Collective; requires in_flight().
  CheckpointManager::Committed finish(MPI_Comm comm);

 private:
  MPI_Comm m_writer_comm = MPI_COMM_NULL;
  TrackedBuffer<unsigned char> m_staging;
  std::thread m_thread;
  std::atomic<bool> m_written{false};
  std::int64_t m_step = 0;
  CheckpointManager::Committed m_result;
  std::exception_ptr m_error;
};

}  // namespace shardtrain
