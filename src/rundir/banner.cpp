// The start-up banner and the end of a job (banner.hpp).
#include "rundir/banner.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "core/exit_codes.hpp"

namespace shardtrain {

void print_start_banner(const RunConfig& cfg, int ranks, const MemoryPlan& plan, const Backend& backend,
                        const StartBanner& b, const RunDirectory& dir) {
  fmt::print("shardtrain: {} ranks, ZeRO stage {}, {} | {} | {} parameters | {} | {}\n", ranks,
             cfg.parallel.zero_stage, name_of(cfg.precision.mode), b.model, b.parameters, b.batch, b.data);
  fmt::print("{}", format_plan(plan));
  fmt::print("compute: {}\n", backend.describe());
  // Linked into every trainer, whichever backend computes (issue 50: the benchmarks quote it).
  fmt::print("host libraries: {}\n", host_libraries_describe());
  if (cfg.precision.mode == PrecisionMode::Bf16 && backend.kind() == BackendKind::Host && !host_bf16_native())
    fmt::print("warning: precision.mode = \"bf16\" on a CPU without AVX512-BF16: every GEMM converts its bf16 "
               "operands to fp32 tiles, so this run is slower than fp32 (precision.mode = \"fp32\"); bf16 "
               "still halves the memory of parameters, gradients and activations\n");
  fmt::print("run directory: {}\n", dir.path());
  if (!b.resume_note.empty()) fmt::print("{}\n", b.resume_note);
  if (b.checkpoints)
    fmt::print("checkpoints: {} every {}{}{}, keeping the last {}\n", b.checkpoint_dir,
               cfg.checkpoint.every_steps > 0 ? fmt::format("{} steps", cfg.checkpoint.every_steps) : std::string(),
               cfg.checkpoint.every_steps > 0 && cfg.checkpoint.every_minutes > 0 ? " and every " : "",
               cfg.checkpoint.every_minutes > 0 ? fmt::format("{:g} minutes", cfg.checkpoint.every_minutes)
                                                : std::string(),
               cfg.checkpoint.keep_last);
  if (b.start_step >= cfg.train.steps)
    fmt::print("nothing to train: the checkpoint is at step {} and train.steps = {}; evaluating only\n",
               b.start_step, cfg.train.steps);
  std::fflush(stdout);
}

std::string checkpoints_line(std::int64_t committed, bool background, double blocked_s) {
  return fmt::format("checkpoints: {} written in this job{}; training was blocked {:.3f} s by them\n", committed,
                     background ? " in the background" : "", blocked_s);
}

void print_job_summary(const RunConfig& cfg, const JobSummary& s, RunDirectory& dir, std::string& full) {
  const auto& tc = cfg.train;
  std::string last;  // the run's last line (done, stopped or stopping)
  if (!s.stop_reason.empty())
    last = fmt::format("stopping after step {} of {}: {}; the checkpoint of step {} is complete; exit code {} asks "
                       "the job script to requeue the job, and the run continues from this checkpoint with "
                       "checkpoint.resume = \"auto\"\n",
                       s.end, tc.steps, s.stop_reason, s.end, kExitRequeue);
  else if (s.end < tc.steps)
    last = fmt::format("stopped after step {} of {} (--stop-after-step) in {:.1f} s | last train loss {:.4f}{}\n",
                       s.end, tc.steps, s.seconds, s.final_train_loss,
                       s.checkpoints ? " | the run continues from its checkpoint with checkpoint.resume = \"auto\""
                                     : " | checkpointing is off: this progress is not saved");
  else
    last = fmt::format("done: {} steps{} in {:.1f} s | final train loss {:.4f} | final val loss {:.4f}{} "
                       "(whole validation split)\n",
                       tc.steps, s.first > 0 ? fmt::format(" ({} in this job, from step {})", s.steps_run, s.first + 1) : "",
                       s.seconds, s.final_train_loss, s.final_val_loss,
                       s.final_val_accuracy ? fmt::format(" | val accuracy {:.4f} (error {:.2f}%)", *s.final_val_accuracy,
                                                          100.0 * (1.0 - *s.final_val_accuracy))
                                            : std::string());
  fmt::print("{}", last);
  full += last;
  // The short summary (the whole report is in RUN_DIR/report.txt).
  const double tokens = static_cast<double>(s.steps_run * tc.batch_size * s.tokens_per_sample);
  const double samples = static_cast<double>(s.steps_run * tc.batch_size);
  std::string summary =
      s.tokens_per_sample > 0
          ? fmt::format("  throughput: {:.0f} tokens/s ({} steps of {} x {} tokens in {:.1f} s)\n",
                        s.seconds > 0 ? tokens / s.seconds : 0.0, s.steps_run, tc.batch_size, s.tokens_per_sample,
                        s.seconds)
          : fmt::format("  throughput: {:.0f} samples/s ({} steps of {} samples in {:.1f} s)\n",
                        s.seconds > 0 ? samples / s.seconds : 0.0, s.steps_run, tc.batch_size, s.seconds);
  summary += fmt::format("  memory: {}\n", s.memory_line);
  summary += !s.last_checkpoint
                 ? std::string("  last checkpoint: none") + (s.checkpoints ? "\n" : " (checkpointing is off)\n")
                 : fmt::format("  last checkpoint: {} (step {})\n", *s.last_checkpoint, s.last_checkpoint_step);
  summary += fmt::format("  full report: {}/report.txt (memory by category and rank, process memory, "
                         "communication per rank{})\n",
                         dir.path(), s.profiled ? ", the profile" : "");
  fmt::print("{}", summary);
  dir.write_file("report.txt", full);
  if (s.confusion) {
    fmt::print("confusion matrix of the validation split ({} samples; rows: true class, columns: predicted; "
               "also {}/confusion.txt):\n{}",
               s.confusion_samples, dir.path(), *s.confusion);
    dir.write_file("confusion.txt", *s.confusion);
  }
  fmt::print("metrics: {}\n", dir.metrics_path());
  std::fflush(stdout);
}

}  // namespace shardtrain
