// shardtrain/rundir/run_directory.hpp
// Owns the run directory on rank 0: `config.toml` (the resolved config),
// `input.toml` (the input text as given), `metrics.csv` (one row per logged
// step) and `memory.csv` (peak bytes per category and rank, the measured
// activation high-water, and the plan).
// Only rank 0 constructs one. A metrics.csv left by an earlier job is renamed
// to metrics.csv.N rather than overwritten, so no result is lost; a resumed run
// (resume_step > 0) starts its metrics.csv with that file's rows up to the
// resumed step, so the file shows the whole run's curve.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "config/run_config.hpp"

namespace shardtrain {

struct MetricsRow {
  std::int64_t step = 0;              // 1-based: optimizer steps completed
  double loss = 0.0;                  // mean training loss of this step (nats/token)
  std::optional<double> val_loss;     // when a validation pass ran at this step
  double lr = 0.0;
  double grad_norm = 0.0;             // global norm before clipping
  double tokens_per_s = 0.0;          // global; empty in metrics.csv for image models
  double elapsed_s = 0.0;
  std::uint64_t comm_bytes = 0;       // rank 0's payload in the step: bytes handed to its collectives (CommTally)
  double loss_scale = 1.0;            // the loss scale the step's backward used (fp16; else 1)
  bool skipped = false;               // no update: inf/NaN gradient (fp16 loss scaling)
  std::uint32_t weights_crc = 0;      // CRC-32 of the fp32 (master) weights after the step
  double samples_per_s = 0.0;         // global samples (sequences, images, documents) per second
  std::optional<double> val_accuracy; // classifiers, when a validation pass ran at this step
  double step_ms = 0.0;               // rank 0's wall time of the training step itself: data, forward,
                                      // backward, collectives, norm, update (no evaluation, CRC or logging)
  double step_end_unix = 0.0;         // rank 0's wall clock (CLOCK_REALTIME, s since 1970) when the step
                                      // ended: lines the step up with outside observers (monitors, probes)
  std::string fault;                  // a numerical fault at this step (session/numeric_guard.hpp):
                                      // "<fault>/<action>", e.g. "non_finite/rollback"; empty: none
  std::string skipped_samples;        // a rollback: the global sample indices its data window skipped,
                                      // "LO-HI" for [LO, HI); empty otherwise
};

class RunDirectory {
 public:
  explicit RunDirectory(const RunConfig& config, std::int64_t resume_step = 0);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  void append(const MetricsRow& row);  // writes and flushes one CSV row
  // memory.csv: header `rank,<categories>,activations_measured,total`; one row
  // per rank, then the plan's row. `peaks` holds `categories + 1` values per
  // rank (the tracked allocator's peak per category, the last the total) and
  // `plan` the plan's; `activations_measured` holds the model's measured
  // activation high-water per rank, and then the plan's activations. It goes
  // before `total`, so every earlier column keeps its place and `total` stays last.
  void write_memory(const std::vector<std::int64_t>& peaks, const std::vector<std::int64_t>& plan,
                    const std::vector<std::int64_t>& activations_measured);
  // Writes `text` to the file `name` in the run directory (replacing it).
  void write_file(const std::string& name, const std::string& text);
  const std::string& path() const { return m_path; }
  std::string metrics_path() const { return m_path + "/metrics.csv"; }

 private:
  std::string m_path;
  std::FILE* m_metrics = nullptr;
};

}  // namespace shardtrain
