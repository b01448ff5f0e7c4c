// shardtrain/train/trainer.hpp
// Owns one training run: builds the model on the flat ParamLayout, opens the
// data set, resumes from a checkpoint when there is one, runs the step loop
// (micro-batches, gradient all-reduce, clipping, AdamW), writes checkpoints,
// evaluates, logs progress and metrics, and reports memory. The work is split
// by responsibility: the step loop (trainer.cpp), resume and save
// (session/checkpoint_session), the agreement at each step boundary
// (session/stop_agreement), the banner, the end summary and the reports
// (rundir/banner, rundir/run_reports), the weights CRC (rundir/weights_crc),
// the command line's run options and fault injections (run_options), device
// bring-up (parallel/device_context), the numeric guard's policy and rollback
// (session/numeric_guard, session/checkpoint_session).
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
#include "train/run_options.hpp"

namespace shardtrain {

struct TrainResult {
  std::int64_t first_step = 0;     // steps done before this job (0, or the resumed checkpoint's step)
  std::int64_t last_step = 0;      // steps done when this job ended
  std::int64_t steps_run = 0;      // steps this job trained, counted as they run (skipped ones and those a
                                   // rollback trains again included)
  double final_train_loss = 0.0;
  double final_val_loss = 0.0;
  std::optional<double> final_val_accuracy;  // classifiers
  double seconds = 0.0;
  std::int64_t skipped_steps = 0;  // steps without an update: fp16 overflows, the numeric guard's faults
  // Stopped early by a signal or the wall-time guard, after a checkpoint: the
  // process should exit with kExitRequeue (session/lifecycle.hpp).
  bool requeue = false;
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
  Trainer(const RunConfig& config, MPI_Comm world, const RunOptions& hooks = {});
  ~Trainer();
  // Trains, evaluates, logs. An exception here may be rank-local: the caller
  // must abort the job rather than wait in a collective.
  TrainResult run();

 private:
  std::unique_ptr<DeviceContext> m_device;  // outlives the run
  std::unique_ptr<RunBase> m_run;
};

}  // namespace shardtrain
