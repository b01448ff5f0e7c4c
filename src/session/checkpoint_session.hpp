// shardtrain/session/checkpoint_session.hpp
// Owns what of a run outlives a job beside the model state: the counters a
// checkpoint holds (steps done, the data cursor, optimizer updates; the loss
// scaler's state is saved and restored from the LossScaler), resume at
// start-up (or, when there is nothing to resume, the start from
// model.init_from: task/init_from.hpp), and save at a step boundary with its
// failure policy and the background writer (what goes into a checkpoint: the
// counters and ModelState's shard; the directory and schedule are
// CheckpointManager's, session/checkpointing.hpp). The agreement at each step
// boundary is StopAgreement's (session/stop_agreement.hpp); this session
// completes a background write when that agreement says every rank's is done.
// Invariants: every public call is collective over the run's ranks and gives
// every rank the same answer or the same error; a checkpoint is loaded only
// when its layout matches the model's (check_compatible), and is spread to the
// stage's replicated copies (ModelState::replicate_shard) only after every CRC
// of the read was checked.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "config/run_config.hpp"
#include "parallel/model_state.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "io/checkpoint.hpp"
#include "optim/loss_scaler.hpp"
#include "session/background_checkpoint.hpp"
#include "session/checkpointing.hpp"
#include "session/stop_agreement.hpp"
#include "task/task.hpp"

namespace shardtrain {

template <class P>
class CheckpointSession {
 public:
  // Prepares checkpoint.dir and resumes from checkpoint.resume (the first
  // candidate that loads wins; with "auto" a damaged file is reported and the
  // previous one tried): loads `state`, the counters and `scaler`; with nothing
  // to resume from and model.init_from set, starts from those weights. `comm`:
  // the run's host communicator (its MPI_Comm is the one the files are opened
  // on); `state_comm` moves the model state's memory. Collective; every rank
  // throws the same InputError.
  // With checkpoint.async and a schedule, the background writer's staging
  // buffer is allocated in `memory`.
  CheckpointSession(const RunConfig& cfg, MpiCommunicator& comm, Communicator& state_comm, ModelState<P>& state,
                    LossScaler& scaler, const Task<P>& task, std::int64_t pause_checkpoint_step,
                    MemoryTracker& memory);

  std::int64_t start_step() const { return m_start_step; }  // steps done before this job
  std::int64_t samples() const { return m_samples; }        // global index of the next training sample
  void advance_samples(std::int64_t n) { m_samples += n; }
  // The 0-based count of updates applied before the one about to be applied; counts it.
  std::int64_t take_update() { return m_updates++; }
  // Rank 0's "resumed from ..." (or "init_from: ...") lines; empty on a fresh start.
  const std::string& resume_note() const { return m_resume_note; }
  const CheckpointManager& checkpoints() const { return m_ckpt; }
  // The bytes a checkpoint saves of the whole state (every rank's shards).
  double checkpoint_bytes() const;

  // The agreement at a step boundary (StopAgreement::agree) over this
  // session's checkpoints; completes the background write when every rank's
  // is done (the commit is reported then). Collective.
  Boundary agree_at_boundary(StopAgreement& stop, double step_s);

  // Writes and commits the checkpoint of step `done` (1-based). Collective.
  // With checkpoint.async and a schedule: waits for a write still in flight,
  // stages the state shard and returns while a background thread writes and
  // commits the file; finish_checkpoints() waits for it.
  // `required_by`: empty for a scheduled checkpoint, else what the job cannot
  // do without it for ("the end of the run", a stop signal ...).
  // A failed checkpoint (CheckpointIoError on every rank; it is abandoned):
  // scheduled, rank 0 warns and training goes on, until
  // checkpoint.max_failures fail in a row; then, or when it was required,
  // every rank throws the same AgreedError (exit code 1, never a requeue),
  // naming the last good checkpoint.
  void save(std::int64_t done, const std::string& required_by);
  // Waits for a background write in flight and completes it. Collective; a
  // no-op without one (the same on every rank).
  void finish_checkpoints();
  // The numeric guard's rollback (session/numeric_guard.hpp): every rank
  // reloads the newest checkpoint this run committed or resumed from, through
  // the resume's reader (every CRC checked before anything is spread), and
  // takes its counters, except the data cursor, which stays where the faulty
  // step left it: the samples from the checkpoint's cursor up to it are
  // skipped. Collective; AgreedError on every rank when there is no checkpoint
  // to go back to or it cannot be read.
  struct Rollback {
    std::int64_t step = 0;                    // the checkpoint's step: training continues after it
    std::string path;
    std::int64_t skip_lo = 0, skip_hi = 0;    // the global sample indices skipped, [skip_lo, skip_hi)
  };
  Rollback rollback(std::int64_t fault_step);
  // Seconds the training thread spent in checkpoints in this job: staging and
  // waiting (async), or the whole write (sync); and how many it committed.
  double checkpoint_blocked_seconds() const { return m_ckpt_blocked_s; }
  std::int64_t checkpoints_committed() const { return m_ckpt_count; }
  bool writes_in_background() const { return m_background != nullptr; }

 private:
  void resume();
  // The counters and the loss scaler's state of a loaded checkpoint (resume, rollback).
  void adopt(const CheckpointMeta& meta);
  void check_compatible(const CheckpointReader& reader) const;
  void load(CheckpointReader& reader);
  CheckpointMeta checkpoint_meta(std::int64_t done) const;
  void save_background(std::int64_t done, const std::string& required_by);
  void complete_background();
  // A failed checkpoint of `step`: warns, or throws AgreedError (see save).
  void checkpoint_failed(const CheckpointIoError& e, std::int64_t step, const std::string& required_by);
  void checkpoint_committed(std::int64_t step);

  const RunConfig& m_cfg;
  MpiCommunicator& m_comm;
  Communicator& m_state_comm;
  ModelState<P>& m_state;
  LossScaler& m_scaler;
  const Task<P>& m_task;
  CheckpointManager m_ckpt;
  std::int64_t m_start_step = 0;  // steps done before this job (the resumed checkpoint's)
  std::int64_t m_samples = 0;     // data cursor: global index of the next training sample
  std::int64_t m_updates = 0;     // optimizer updates applied (skipped steps excluded)
  std::string m_resume_note;
  std::unique_ptr<BackgroundCheckpoint> m_background;  // checkpoint.async with a schedule
  double m_staged_s = 0.0;        // the in-flight write's staging time (for its report line)
  std::string m_background_required_by;  // the in-flight write's save(required_by)
  double m_ckpt_blocked_s = 0.0;
  std::int64_t m_ckpt_count = 0;
  std::int64_t m_failures_in_row = 0;     // scheduled checkpoints that failed since the last commit
  std::int64_t m_last_good_step = -1;     // the newest checkpoint this run committed or resumed from
};

extern template class CheckpointSession<float>;
extern template class CheckpointSession<f16>;
extern template class CheckpointSession<bf16>;

}  // namespace shardtrain
