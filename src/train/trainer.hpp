// shardtrain/train/trainer.hpp
// Owns one training run: builds the model on the flat ParamLayout, opens the
// data set, resumes from a checkpoint when there is one, runs the step loop
// (micro-batches, gradient all-reduce, clipping, AdamW), writes checkpoints,
// evaluates, logs progress and metrics, and reports memory.
// Invariants: the sample stream depends only on (seed, global sample index),
// never on the rank count, and resumes at the checkpoint's sample cursor;
// a resumed run continues bitwise as the uninterrupted run would (same rank
// count), or within float tolerance (another rank count or ZeRO stage); the
// loss of a step is the mean over every target token of the global batch;
// identical inputs and rank count give bitwise-identical losses.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "config/run_config.hpp"

namespace shardtrain {

struct TrainResult {
  std::int64_t first_step = 0;     // steps done before this job (0, or the resumed checkpoint's step)
  std::int64_t last_step = 0;      // steps done when this job ended
  std::int64_t steps_run = 0;      // steps this job trained, counted as they run (skipped ones included)
  double final_train_loss = 0.0;
  double final_val_loss = 0.0;
  std::optional<double> final_val_accuracy;  // classifiers
  double seconds = 0.0;
  std::int64_t skipped_steps = 0;  // fp16: steps skipped for an inf/NaN gradient
  // Stopped early by a signal or the wall-time guard, after a checkpoint: the
  // process should exit with kExitRequeue (train/lifecycle.hpp).
  bool requeue = false;
};

// Run options and test hooks, from the command line (never from the input file).
struct TrainerHooks {
  // --profile: time every op of the training steps (core/profiler.hpp) and print
  // the per-op breakdown at the end of the job (also RUN_DIR/profile.txt).
  bool profile = false;
  // --inject-overflow STEP[:RANK]: at optimizer step STEP (1-based) rank RANK
  // plants +inf in the gradient it contributes to the step's first reduction.
  std::int64_t overflow_step = 0;  // 0: none
  int overflow_rank = 0;
  // --stop-after-step N: this job ends after optimizer step N (counted from the
  // start of training), with a checkpoint when checkpointing is on, as a job
  // whose time is up would; the learning-rate schedule still spans train.steps.
  std::int64_t stop_after_step = 0;  // 0: run to train.steps
  // --pause-in-checkpoint STEP: every rank pauses mid-write of the checkpoint
  // of STEP (train/checkpointing.hpp), for crash tests.
  std::int64_t pause_checkpoint_step = 0;  // 0: none
  // --stall-in-collective STEP[:RANK]: at optimizer step STEP, rank RANK sleeps
  // (10 minutes) instead of entering the step's gradient reduction, so the
  // other ranks' collective watchdog fires.
  std::int64_t stall_step = 0;  // 0: none
  int stall_rank = 0;
  // --throw-at-step STEP[:RANK]: rank RANK throws an Error in step STEP (a rank-local failure).
  std::int64_t throw_step = 0;  // 0: none
  int throw_rank = 0;
  // --signal-at-step STEP[:RANK]: rank RANK acts as if SIGUSR1 arrived during step STEP.
  std::int64_t signal_step = 0;  // 0: none
  int signal_rank = 0;
  // --perturb-weights STEP[:RANK]: after the update of step STEP rank RANK moves
  // the first fp32 weight its optimizer owns by one ulp; at ZeRO stage 0 its
  // replica then differs from the other ranks' (the weights CRC check's test).
  std::int64_t perturb_step = 0;  // 0: none
  int perturb_rank = 0;
};

class RunBase;
struct DeviceContext;

// One training run. Construction and run() are collective over `world`: the
// trainer builds its Communicator on it and opens the data set on it with
// parallel HDF5.
class Trainer {
 public:
  // Opens the data, builds layout, model and optimizer. Throws InputError when
  // the input does not fit (e.g. a data set too short for the model), the same
  // way on every rank; Error for anything else. No collective runs after a
  // possible throw, so the caller may agree on the outcome with one all-reduce.
  Trainer(const RunConfig& config, MPI_Comm world, const TrainerHooks& hooks = {});
  ~Trainer();
  // Trains, evaluates, logs. An exception here may be rank-local: the caller
  // must abort the job rather than wait in a collective.
  TrainResult run();

 private:
  std::unique_ptr<DeviceContext> m_device;  // outlives the run
  std::unique_ptr<RunBase> m_run;
};

}  // namespace shardtrain
