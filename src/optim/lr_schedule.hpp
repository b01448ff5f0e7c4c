// shardtrain/optim/lr_schedule.hpp
// Learning rate as a pure function of the step: linear warmup, then cosine
// (or linear) decay to min_lr at the last step, or constant. Stateless, so a resumed run
// gets the same rate for the same step.
#pragma once

#include <cstdint>

#include "config/run_config.hpp"

namespace shardtrain {

// Learning rate of optimizer step `step` (0-based) of a run of `total_steps`.
double learning_rate(const OptimConfig& o, std::int64_t step, std::int64_t total_steps);

}  // namespace shardtrain
