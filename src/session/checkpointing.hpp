// shardtrain/session/checkpointing.hpp
// Owns the checkpoint DIRECTORY and the checkpoint schedule: when a checkpoint
// is due, which file a run resumes from, and the atomic commit of a new one.
// The file format is io/checkpoint.hpp's; what goes into a checkpoint (which
// state vectors, which counters) is the checkpoint session's (session/checkpoint_session.cpp).
//
// A checkpoint directory holds (share/doc/checkpoint-format.md):
//   step_NNNNNNNN.h5          complete checkpoints (8 or more digits: the step)
//   step_NNNNNNNN.h5.partial  a write in progress, or one a crash interrupted;
//                             never loaded, removed by the next commit
//   latest                    one line: the file name of the checkpoint the run continues
//                             from (the head of its lineage)
//   lineage                   one line per checkpoint: "NAME<TAB>PARENT" (PARENT empty
//                             for a run started from scratch)
// Commit order (each step durable before the next starts):
//   1. every rank writes its shard into step_N.h5.partial and fsyncs it;
//   2. rank 0 renames it to step_N.h5 and fsyncs the directory;
//   3. rank 0 rewrites `lineage` (tmp, fsync, rename) with the new file's parent, then
//      writes latest.tmp, fsyncs it, renames it to latest, fsyncs the directory;
//   4. only then rank 0 removes the oldest checkpoints of the lineage beyond keep_last.
// Lineage: each checkpoint's parent is the checkpoint its training continued
// from (the file it resumed from, or the previous commit of the same job); the
// file records it too (root attribute `parent`). A run rolled back to an older
// checkpoint starts a new branch, and `latest` names its head; resume = "auto"
// loads what `latest` names and falls back only along the parents, never to a
// newer file of an abandoned branch. Pruning removes only the lineage's own
// older checkpoints; files of abandoned branches are left for the user.
// One job per directory (rundir/run_lock.hpp): a `.partial` a commit removes is
// only its own step's; prepare() removes the leftovers of dead jobs, which is
// safe because the job holds the directory's lock by then.
// A crash at any moment leaves the previous complete checkpoint loadable.
// A commit that fails on any rank (CheckpointIoError, io/checkpoint_phase.hpp)
// is abandoned on every rank: rank 0 removes the .partial (and a renamed file
// that `latest` does not yet name), `latest` is left as it was, and every rank
// throws the same CheckpointIoError; what that costs the run is the trainer's
// decision (session/checkpoint_session.hpp). Every phase of a commit runs under the
// checkpoint I/O deadline (checkpoint.io_timeout_s) this object owns.
// Invariants: every public call is collective over the communicator; rank 0
// does the file-system work and broadcasts its outcome (on_root,
// checkpoint_phase, parallel/mpi/agreement.hpp), so every rank returns the same
// result or throws the same error; the lineage (below) is the same on every
// rank. A fresh run (resume = "never") refuses a directory that already holds
// checkpoints.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
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

// The resume candidates of resume = "auto" in `dir`, in the order to try them,
// and why (one line for the log). With `latest`: the file it names, then its
// ancestors by the `lineage` file (files that file does not know -- written
// before lineages were recorded -- count as one line of ancestors below the
// last known one); newer files of other branches are named in `why` and never
// tried. Without `latest`: every complete checkpoint, newest first. Local.
struct AutoResume {
  std::vector<std::string> paths;
  std::string why;
};
AutoResume auto_resume_candidates(const std::string& dir);
// The lineage of `name` (a file name in `dir`) by the `lineage` file: name,
// its parent, ..., newest first (the same fallback as above for unknown files).
// Local.
std::vector<std::string> lineage_of(const std::string& dir, const std::string& name);

class CheckpointManager {
 public:
  // `source_name`: the input file, for error messages. Collective.
  CheckpointManager(const CheckpointConfig& config, std::string source_name, const MpiCommunicator& comm);

  // Checkpoints are written (every_steps > 0 or every_minutes > 0).
  bool enabled() const { return m_enabled; }
  const std::string& dir() const { return m_config.dir; }
  bool resume_auto() const { return m_config.resume == "auto"; }

  // Creates dir (rank 0) when checkpointing is on, so that a directory that
  // cannot be made or written is refused before training, and removes the
  // `.partial` files of dead jobs there (the caller holds the directory's lock:
  // rundir/run_lock.hpp). Collective; InputError on every rank.
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
  // Collective. resume = "auto" follows the lineage (auto_resume_candidates);
  // resume_reason() then says which file `latest` named and what was skipped.
  std::vector<std::string> resume_candidates();
  const std::string& resume_reason() const { return m_resume_reason; }
  // The run continues from `path` (loaded): the lineage becomes path and its
  // ancestors, so the next commit's parent is path. Collective.
  void resumed_from(const std::string& path);
  // The file name of the checkpoint the current state continues from (the
  // next commit's parent; "" for a run from scratch); same on every rank.
  std::string lineage_head() const { return m_lineage.empty() ? std::string() : m_lineage.front(); }

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
  // writer's thread (session/background_checkpoint.hpp), on its own duplicate
  // of the communicator. The caller records the outcome (record) on the
  // training thread. Collective over `comm`.
  Committed commit_on(MPI_Comm comm, std::int64_t step, const WriteFn& write) const;
  // Records a background commit's outcome (last_stats, last_commit_seconds,
  // the lineage's new head).
  void record(const Committed& c);
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
  // The deadline itself: it also watches the resume's reads (train_state.cpp),
  // which never overlap a commit.
  IoDeadline* io_deadline() const { return m_deadline.get(); }

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
  // The lineage, newest first: file names in dir (a path for a file elsewhere
  // that the run resumed from). Changed only on the training thread, between
  // commits; commit_on reads it (a background write runs while nothing changes it).
  std::vector<std::string> m_lineage;
  std::string m_resume_reason;  // rank 0's
};

}  // namespace shardtrain
