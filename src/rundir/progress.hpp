// shardtrain/rundir/progress.hpp
// Owns the rank-0 progress line: step/total, loss, learning rate, grad norm,
// tokens/s over the last logging interval and the estimated time to finish.
#pragma once

#include <cstdint>

#include "rundir/run_directory.hpp"

namespace shardtrain {

class Progress {
 public:
  // first_step: steps already done before this job (a resumed run); the ETA
  // counts only what is left.
  // samples_per_step: the global batch; tokens_per_sample: 0 for image models
  // (the line then shows samples/s).
  Progress(std::int64_t total_steps, std::int64_t samples_per_step, std::int64_t tokens_per_sample,
           std::int64_t first_step = 0)
      : m_total(total_steps), m_samples_per_step(samples_per_step), m_tokens_per_sample(tokens_per_sample),
        m_first(first_step) {}

  // Call after every step with the seconds elapsed since training started.
  void step_done(double elapsed_s);
  // Throughput since the previous print (or the start), global tokens per second.
  double tokens_per_second() const;
  double samples_per_second() const;
  // Prints the line and starts a new throughput interval.
  void print(const MetricsRow& row);

 private:
  std::int64_t m_total, m_samples_per_step, m_tokens_per_sample, m_first;
  std::int64_t m_done = 0, m_mark_step = 0;
  double m_elapsed = 0.0, m_mark_time = 0.0;
};

}  // namespace shardtrain
