// Progress line formatting and throughput/ETA bookkeeping.
#include "rundir/progress.hpp"

#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace shardtrain {

namespace {

std::string format_duration(double s) {
  if (s < 0) s = 0;
  const auto total = static_cast<std::int64_t>(s + 0.5);
  if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, (total / 60) % 60);
  return fmt::format("{}m{:02}s", total / 60, total % 60);
}

}  // namespace

void Progress::step_done(double elapsed_s) {
  ++m_done;
  m_elapsed = elapsed_s;
}

double Progress::samples_per_second() const {
  const double dt = m_elapsed - m_mark_time;
  return dt > 0 ? static_cast<double>((m_done - m_mark_step) * m_samples_per_step) / dt : 0.0;
}

double Progress::tokens_per_second() const {
  return samples_per_second() * static_cast<double>(m_tokens_per_sample);
}

void Progress::print(const MetricsRow& row) {
  const double per_step = m_done > 0 ? m_elapsed / static_cast<double>(m_done) : 0.0;
  const double eta = per_step * static_cast<double>(m_total - m_first - m_done);
  const std::string speed = m_tokens_per_sample > 0 ? fmt::format("{:.0f} tok/s", tokens_per_second())
                                                     : fmt::format("{:.0f} samples/s", samples_per_second());
  std::string line = fmt::format("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | gnorm {:.3f} | {} | eta {}", row.step,
                                 std::to_string(m_total).size(), m_total, row.loss, row.lr, row.grad_norm, speed,
                                 format_duration(eta));
  if (row.loss_scale != 1.0) line += fmt::format(" | scale {:g}", row.loss_scale);
  if (row.skipped) line += " | skipped";
  if (row.val_loss) line += fmt::format(" | val {:.4f}", *row.val_loss);
  if (row.val_accuracy) line += fmt::format(" | acc {:.4f}", *row.val_accuracy);
  std::puts(line.c_str());
  std::fflush(stdout);
  m_mark_step = m_done;
  m_mark_time = m_elapsed;
}

}  // namespace shardtrain
