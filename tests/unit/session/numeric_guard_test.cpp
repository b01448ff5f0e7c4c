// NumericGuard (session/numeric_guard.hpp): the loss-spike window (off until it
// is full and past guard.spike_warmup, the mean of the last spike_window accepted
// losses, kept over a rollback), the bounds that turn a skip or a rollback into
// an abort, fp16's minimum-scale streak, and the messages' advice.
#include <gtest/gtest.h>

#include <string>

#include "config/run_config.hpp"
#include "session/numeric_guard.hpp"

namespace shardtrain {
namespace {

RunConfig spike_config() {
  RunConfig c;
  c.guard.loss_spike = LossSpikePolicy::Skip;
  c.guard.spike_factor = 2.0;
  c.guard.spike_window = 3;
  c.guard.spike_warmup = 4;
  return c;
}

TEST(NumericGuard, SpikeNeedsAFullWindowAndTheWarmup) {
  const RunConfig c = spike_config();
  NumericGuard g(c);
  EXPECT_FALSE(g.is_spike(10, 1e9));  // the window is empty
  g.accepted(1.0);
  g.accepted(2.0);
  EXPECT_FALSE(g.is_spike(10, 1e9));  // two of three
  g.accepted(3.0);
  EXPECT_EQ(g.window_mean(), 2.0);
  EXPECT_FALSE(g.is_spike(4, 1e9));   // step 4 <= spike_warmup
  EXPECT_FALSE(g.is_spike(5, 4.0));   // not above 2 x 2
  EXPECT_TRUE(g.is_spike(5, 4.0000001));
  g.accepted(7.0);                    // the ring drops the oldest (1.0): mean (2 + 3 + 7) / 3 = 4
  EXPECT_EQ(g.window_mean(), 4.0);
  EXPECT_FALSE(g.is_spike(6, 8.0));
  g.rolled_back();                    // the window keeps the accepted losses
  EXPECT_TRUE(g.is_spike(6, 8.0000001));
}

TEST(NumericGuard, SpikeOffNeverFires) {
  RunConfig c = spike_config();
  c.guard.loss_spike = LossSpikePolicy::Off;
  NumericGuard g(c);
  for (int i = 0; i < 10; ++i) g.accepted(1.0);
  EXPECT_FALSE(g.is_spike(100, 1e30));
}

TEST(NumericGuard, SkipsInARowAreBounded) {
  RunConfig c;
  c.guard.non_finite = NonFinitePolicy::Skip;
  c.guard.max_skips = 2;
  NumericGuard g(c);
  EXPECT_EQ(g.decide(NumericFault::NonFinite), GuardAction::Skip);
  EXPECT_EQ(g.decide(NumericFault::NonFinite), GuardAction::Skip);
  EXPECT_EQ(g.decide(NumericFault::NonFinite), GuardAction::Abort);
  EXPECT_TRUE(g.bound_reached());
  EXPECT_NE(g.abort_message(NumericFault::NonFinite, 7, "x").find("guard.max_skips = 2"), std::string::npos);
  g.accepted(1.0);  // an update ends the streak
  EXPECT_EQ(g.decide(NumericFault::NonFinite), GuardAction::Skip);
  EXPECT_EQ(g.skips(), 3);
}

TEST(NumericGuard, RollbacksPerJobAreBoundedAndTheMessageSaysWhatToChange) {
  RunConfig c;
  c.guard.non_finite = NonFinitePolicy::Rollback;
  c.guard.loss_spike = LossSpikePolicy::Rollback;
  c.guard.max_rollbacks = 2;
  c.optim.lr = 30;
  NumericGuard g(c);
  EXPECT_EQ(g.decide(NumericFault::NonFinite), GuardAction::Rollback);
  g.rolled_back();
  EXPECT_EQ(g.decide(NumericFault::LossSpike), GuardAction::Rollback);  // one budget for every fault
  g.rolled_back();
  EXPECT_EQ(g.decide(NumericFault::NonFinite), GuardAction::Abort);
  EXPECT_EQ(g.rollbacks(), 2);
  const std::string m = g.abort_message(NumericFault::NonFinite, 12, "gradient overflow (inf/NaN)");
  EXPECT_EQ(m.rfind("step 12: gradient overflow (inf/NaN); the fault came back after 2 rollback(s) "
                    "(guard.max_rollbacks = 2): ending the run; the model diverges: lower optim.lr (now 30)",
                    0),
            0u)
      << m;
  EXPECT_NE(m.find("guard.max_rollbacks"), std::string::npos);
}

TEST(NumericGuard, AbortNamesThePolicy) {
  RunConfig c;
  NumericGuard g(c);  // the defaults: abort
  EXPECT_EQ(g.decide(NumericFault::NonFinite), GuardAction::Abort);
  EXPECT_FALSE(g.bound_reached());
  const std::string m = g.abort_message(NumericFault::NonFinite, 12, "what");
  EXPECT_NE(m.find("guard.non_finite = \"abort\""), std::string::npos) << m;
  EXPECT_EQ(g.decide(NumericFault::Replica), GuardAction::Abort);
  EXPECT_NE(g.abort_message(NumericFault::Replica, 3, "w").find("silent data corruption"), std::string::npos);
}

TEST(NumericGuard, MinScaleStreak) {
  RunConfig c;
  c.guard.min_scale_steps = 3;
  NumericGuard g(c);
  EXPECT_FALSE(g.min_scale_overflow(true));
  EXPECT_FALSE(g.min_scale_overflow(true));
  EXPECT_FALSE(g.min_scale_overflow(false));  // above the minimum: the streak ends
  EXPECT_FALSE(g.min_scale_overflow(true));
  EXPECT_FALSE(g.min_scale_overflow(true));
  EXPECT_TRUE(g.min_scale_overflow(true));
  c.guard.min_scale_steps = 0;  // off
  NumericGuard off(c);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(off.min_scale_overflow(true));
}

}  // namespace
}  // namespace shardtrain
