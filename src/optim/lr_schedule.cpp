// Warmup + cosine (or linear, or no) decay learning-rate schedule.
#include "optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace shardtrain {

double learning_rate(const OptimConfig& o, std::int64_t step, std::int64_t total_steps) {
  if (step < o.warmup_steps)
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  switch (o.schedule) {
    case LrSchedule::Constant:
      return o.lr;
    case LrSchedule::Cosine:
    case LrSchedule::Linear:
      break;
  }
  const std::int64_t decay_steps = std::max<std::int64_t>(1, total_steps - o.warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps));
  if (o.schedule == LrSchedule::Linear) return o.lr + (o.min_lr - o.lr) * progress;
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(3.141592653589793 * progress));
}

}  // namespace shardtrain
