// shardtrain/train/checkpointing.hpp
// Owns the checkpoint DIRECTORY and the checkpoint schedule: when a checkpoint
// is due, which file a run resumes from, and the atomic commit of a new one.
// The file format is io/checkpoint.hpp's; what goes into a checkpoint (which
// state vectors, which counters) is the train state's (train/train_state.cpp).
//
// A checkpoint directory holds (share/doc/checkpoint-format.md):
//   step_NNNNNNNN.h5          complete checkpoints (8 or more digits: the step)
//   step_NNNNNNNN.h5.partial  a write in progress, or one a crash interrupted;
//                             never loaded, removed by the next commit
//   latest                    one line: the file name of the newest complete checkpoint
// Commit order (each step durable before the next starts):
//   1. every rank writes its shard into step_N.h5.partial and fsyncs it;
//   2. rank 0 renames it to step_N.h5 and fsyncs the directory;
//   3. rank 0 writes latest.tmp, fsyncs it, renames it to latest, fsyncs the directory;
//   4. only then rank 0 removes the oldest complete checkpoints beyond keep_last.
// A crash at any moment leaves the previous complete checkpoint loadable.
// A commit that fails on any rank (CheckpointIoError, io/checkpoint_phase.hpp)
// is abandoned on every rank: rank 0 removes the .partial (and a renamed file
// that `latest` does not yet name), `latest` is left as it was, and every rank
// throws the same CheckpointIoError; what that costs the run is the trainer's
// decision (train/train_state.hpp). Every phase of a commit runs under the
// checkpoint I/O deadline (checkpoint.io_timeout_s) this object owns.
// Invariants: every public call is collective over the communicator; rank 0
// does the file-system work and broadcasts its outcome (on_root and
// checkpoint_phase), so every rank returns the same result or throws the
// same error. One run lineage per directory: a
// fresh run (resume = "never") refuses a directory that already holds checkpoints.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "dist/mpi/mpi_communicator.hpp"
#include "io/checkpoint.hpp"
#include "io/checkpoint_phase.hpp"

namespace shardtrain {

// A complete checkpoint file in a directory.
struct CheckpointFile {
  std::int64_t step = 0;
  std::string path;
};

// "step_00000042.h5" for step 42.
std::string checkpoint_file_name(std::int64_t step);
// The complete checkpoints in `dir` (not .partial), newest (highest step) first.
// Local: no MPI. A missing directory has none.
std::vector<CheckpointFile> list_checkpoints(const std::string& dir);

class CheckpointManager {
 public:
  // `source_name`: the input file, for error messages. Collective.
  CheckpointManager(const CheckpointConfig& config, std::string source_name, const MpiCommunicator& comm);

  // Checkpoints are written (every_steps > 0 or every_minutes > 0).
  bool enabled() const { return m_enabled; }
  const std::string& dir() const { return m_config.dir; }
  bool resume_auto() const { return m_config.resume == "auto"; }

  // Creates dir (rank 0) when checkpointing is on, so that a directory that
  // cannot be made is refused before training. Collective; InputError on every rank.
  void prepare() const;

  // Whether every_minutes have passed since the last checkpoint (or the start),
  // by this rank's clock: the trainer asks rank 0 and agrees on the answer in
  // its per-step all-reduce.
  bool minutes_elapsed() const;
  // Whether a checkpoint is due after optimizer step `done` (1-based, counted
  // from the start of training). `job_end`: this job stops after this step (the
  // end of training, or --stop-after-step): a checkpoint is then always due when
  // enabled. `time_due`: the agreed minutes_elapsed(). Local, no communication.
  bool due(std::int64_t done, bool job_end, bool time_due) const;

  // The files to try, in order, to resume from: resume = "never" gives none;
  // "auto" the complete checkpoints of dir, newest first (none: a fresh start);
  // a file gives that file; a directory its complete checkpoints, newest first
  // (InputError when it has none). With resume = "never" and checkpointing on,
  // throws InputError if dir already holds checkpoints (two runs would mix).
  // Collective.
  std::vector<std::string> resume_candidates() const;

  // Writes the checkpoint of `step` and commits it atomically, then prunes.
  // `write(partial_path, pause, deadline)` must write the whole file
  // collectively (every rank calls it), call `pause` mid-write when it is set
  // (the test hook), and run its I/O under `deadline`. Returns the final path
  // (same on every rank). Collective; a failure on any rank throws the same
  // CheckpointIoError on every rank after the attempt is abandoned.
  using WriteFn = std::function<CheckpointWriteStats(const std::string& partial_path,
                                                     const std::function<void()>& pause, IoDeadline* deadline)>;
  std::string commit(std::int64_t step, const WriteFn& write);

  // What one commit did.
  struct Committed {
    std::string path;  // the final path (same on every rank)
    CheckpointWriteStats stats;
    double seconds = 0.0;  // write + fsync + rename + latest + pruning
  };
  // commit() over `comm` without touching this object: for the background
  // writer's thread (train/background_checkpoint.hpp), on its own duplicate
  // of the communicator. The caller records the outcome (record) on the
  // training thread. Collective over `comm`.
  Committed commit_on(MPI_Comm comm, std::int64_t step, const WriteFn& write) const;
  // Records a background commit's outcome (last_stats, last_commit_seconds).
  void record(const Committed& c) {
    m_last_stats = c.stats;
    m_last_commit_s = c.seconds;
  }
  // Restarts the every_minutes clock: a checkpoint starts now.
  void checkpoint_started() { restart_clock(); }

  // Test hook (--pause-in-checkpoint STEP): while writing the checkpoint of
  // `step`, after the data is written and before the file is closed, every
  // rank writes "<partial>.paused.<rank>" holding its PID and sleeps (up to 10
  // minutes, or until a file "<partial>.resume" appears), so a test can SIGKILL
  // a rank mid-write, or signal the ranks while a background write is held.
  void set_pause_step(std::int64_t step) { m_pause_step = step; }

  // The checkpoint I/O deadline (checkpoint.io_timeout_s).
  double io_timeout_s() const { return m_config.io_timeout_s; }

  // Seconds of the last commit (write + fsync + rename), and its bandwidth.
  const CheckpointWriteStats& last_stats() const { return m_last_stats; }
  double last_commit_seconds() const { return m_last_commit_s; }

 private:
  void restart_clock() { m_last_time = std::chrono::steady_clock::now(); }
  void ensure_dir() const;  // rank 0's part of prepare() and commit()

  CheckpointConfig m_config;
  std::string m_source;
  std::unique_ptr<IoDeadline> m_deadline;  // checkpoint.io_timeout_s, over every commit's phases
  MPI_Comm m_comm;  // the communicator's, for the agreements (on_root)
  int m_rank = 0;
  bool m_enabled = false;
  std::int64_t m_pause_step = 0;
  std::chrono::steady_clock::time_point m_last_time;
  CheckpointWriteStats m_last_stats;
  double m_last_commit_s = 0.0;
};

}  // namespace shardtrain
