// The learning-rate schedule (optim/lr_schedule.hpp) against hand-computed values:
// linear warm-up, then cosine down to min_lr; the constant schedule; the linear decay.
#include <gtest/gtest.h>

#include <cstdint>

#include "optim/lr_schedule.hpp"

namespace shardtrain {
namespace {

TEST(LearningRate, WarmupThenCosineToMin) {
  OptimConfig o;
  o.lr = 1e-3; o.min_lr = 1e-4; o.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0, 110), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(o, 9, 110), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 110), 1e-3);
  EXPECT_NEAR(learning_rate(o, 60, 110), 0.5 * (1e-3 + 1e-4), 1e-15);
  EXPECT_NEAR(learning_rate(o, 110, 110), 1e-4, 1e-15);
  for (std::int64_t s = 11; s < 110; ++s)
    EXPECT_LT(learning_rate(o, s, 110), learning_rate(o, s - 1, 110));
  o.schedule = LrSchedule::Constant;
  EXPECT_DOUBLE_EQ(learning_rate(o, 50, 110), 1e-3);
  o.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0, 110), 1e-3);
}

TEST(LearningRate, WarmupThenLinearToMin) {
  OptimConfig o;
  o.lr = 1e-3; o.min_lr = 0.0; o.warmup_steps = 10; o.schedule = LrSchedule::Linear;
  EXPECT_DOUBLE_EQ(learning_rate(o, 9, 110), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 110), 1e-3);
  EXPECT_NEAR(learning_rate(o, 35, 110), 0.75e-3, 1e-15);
  EXPECT_NEAR(learning_rate(o, 60, 110), 0.5e-3, 1e-15);
  EXPECT_NEAR(learning_rate(o, 110, 110), 0.0, 1e-18);
  EXPECT_NEAR(learning_rate(o, 200, 110), 0.0, 1e-18);  // past the end: min_lr
}

}  // namespace
}  // namespace shardtrain
