// shardtrain/rundir/banner.hpp
// Owns what rank 0 prints about a job around its steps: the start-up banner
// (ranks, ZeRO stage, precision, the model, the plan, where it computes, the
// host libraries' kernels (OpenBLAS's core, oneDNN's ISA), the run directory, the resume note, the checkpoint schedule) and the end of the
// job (its checkpoints, the last line -- done, stopped or stopping --, the
// short summary, the confusion matrix), with what goes into RUN_DIR/report.txt
// and confusion.txt. The loop (train/trainer.cpp) hands the values in; nothing
// here is collective, and nothing here names the task or the checkpoint
// session (they sit above this folder).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "backend/backend.hpp"
#include "config/run_config.hpp"
#include "plan/memory_plan.hpp"
#include "rundir/run_directory.hpp"

namespace shardtrain {

// What the start-up banner says besides the config, the plan and the backend.
struct StartBanner {
  std::string model, batch, data;  // the task's description (task/task.hpp TaskText)
  std::int64_t parameters = 0;
  std::string resume_note;          // the checkpoint session's, or empty
  bool checkpoints = false;         // checkpointing is on
  std::string checkpoint_dir;
  std::int64_t start_step = 0;      // steps done before this job
};
void print_start_banner(const RunConfig& cfg, int ranks, const MemoryPlan& plan, const Backend& backend,
                        const StartBanner& b, const RunDirectory& dir);

// "checkpoints: N written in this job ...; training was blocked S s by them".
std::string checkpoints_line(std::int64_t committed, bool background, double blocked_s);

// What the end of a job reports.
struct JobSummary {
  std::int64_t first = 0;       // steps done before this job
  std::int64_t end = 0;         // steps done when it ended
  std::int64_t steps_run = 0;
  double seconds = 0.0;
  double final_train_loss = 0.0, final_val_loss = 0.0;
  std::optional<double> final_val_accuracy;
  std::string stop_reason;      // non-empty: stopped by a signal or the wall-time guard (a requeue)
  bool checkpoints = false;     // checkpointing is on
  std::optional<std::string> last_checkpoint;  // the newest complete checkpoint, if any
  std::int64_t last_checkpoint_step = 0;
  std::int64_t tokens_per_sample = 0;          // 0: samples, not tokens
  std::string memory_line;      // report_memory's summary line
  bool profiled = false;        // --profile: the report holds the profile
  std::optional<std::string> confusion;  // the validation split's confusion matrix (classifiers)
  std::int64_t confusion_samples = 0;
};
// Prints the last line and the short summary, appends the last line to
// `full`, writes `full` as report.txt (and confusion.txt) in `dir`.
void print_job_summary(const RunConfig& cfg, const JobSummary& s, RunDirectory& dir, std::string& full);

}  // namespace shardtrain
