// LossScaler: growth, back-off with hysteresis, min-scale clamp, abort on
// consecutive skips, the disabled scaler, checkpoint state and log lines.
// Every expectation is an exact value: scales are powers of two (or clamped
// constants), so double comparisons are exact.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "core/error.hpp"
#include "optim/loss_scaler.hpp"

namespace shardtrain {
namespace {

// Runs n steps with the same found-inf flag; returns the last decision.
LossScaler::Decision run(LossScaler& s, bool found_inf, std::int64_t n) {
  LossScaler::Decision d{};
  for (std::int64_t i = 0; i < n; ++i) d = s.update(found_inf);
  return d;
}

void expect_same_state(const LossScalerState& x, const LossScalerState& y) {
  EXPECT_EQ(x.scale, y.scale);
  EXPECT_EQ(x.good_steps, y.good_steps);
  EXPECT_EQ(x.hysteresis_left, y.hysteresis_left);
  EXPECT_EQ(x.consecutive_skips, y.consecutive_skips);
}

LossScalerConfig small_config() {
  LossScalerConfig c;
  c.growth_interval = 3;
  return c;
}

TEST(LossScaler, DefaultsMatchDesign) {
  LossScaler s{LossScalerConfig{}};
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.inv_scale(), 1.0f / 65536.0f);
  const LossScalerState st = s.state();
  EXPECT_EQ(st.scale, 65536.0);
  EXPECT_EQ(st.good_steps, 0);
  EXPECT_EQ(st.hysteresis_left, 2);
  EXPECT_EQ(st.consecutive_skips, 0);
}

TEST(LossScaler, GrowsExactlyAfterGrowthIntervalCleanSteps) {
  LossScaler s{LossScalerConfig{}};  // growth_interval 2000
  LossScaler::Decision d = run(s, false, 1999);
  EXPECT_FALSE(d.skip);
  EXPECT_FALSE(d.scale_changed);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.state().good_steps, 1999);

  d = s.update(false);  // the 2000th clean step
  EXPECT_FALSE(d.skip);
  EXPECT_TRUE(d.scale_changed);
  EXPECT_EQ(d.old_scale, 65536.0);
  EXPECT_EQ(d.new_scale, 131072.0);
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.state().good_steps, 0);

  // The counter restarted: the next growth is again 2000 steps away.
  d = run(s, false, 1999);
  EXPECT_FALSE(d.scale_changed);
  EXPECT_EQ(s.scale(), 131072.0);
  d = s.update(false);
  EXPECT_TRUE(d.scale_changed);
  EXPECT_EQ(s.scale(), 262144.0);
}

TEST(LossScaler, HysteresisTwoKeepsScaleOnFirstOverflowThenBacksOff) {
  LossScaler s{LossScalerConfig{}};
  LossScaler::Decision d = s.update(true);
  EXPECT_TRUE(d.skip);
  EXPECT_FALSE(d.scale_changed);
  EXPECT_EQ(d.new_scale, 65536.0);
  EXPECT_EQ(s.state().hysteresis_left, 1);

  d = s.update(true);
  EXPECT_TRUE(d.skip);
  EXPECT_TRUE(d.scale_changed);
  EXPECT_EQ(d.old_scale, 65536.0);
  EXPECT_EQ(d.new_scale, 32768.0);
  EXPECT_EQ(s.inv_scale(), 1.0f / 32768.0f);
  EXPECT_EQ(s.state().hysteresis_left, 0);

  // Megatron rule: the tracker is not reset by a back-off, so every further
  // overflow before the next growth backs off again.
  d = s.update(true);
  EXPECT_TRUE(d.scale_changed);
  EXPECT_EQ(d.new_scale, 16384.0);
  EXPECT_EQ(s.state().hysteresis_left, 0);
}

TEST(LossScaler, HysteresisOneBacksOffOnEveryOverflow) {
  LossScalerConfig c;
  c.hysteresis = 1;
  LossScaler s{c};
  LossScaler::Decision d = s.update(true);
  EXPECT_TRUE(d.skip);
  EXPECT_TRUE(d.scale_changed);
  EXPECT_EQ(d.new_scale, 32768.0);
  d = s.update(true);
  EXPECT_EQ(d.new_scale, 16384.0);
}

TEST(LossScaler, HysteresisResetOnlyByGrowth) {
  LossScaler s{small_config()};  // growth_interval 3, hysteresis 2
  run(s, true, 2);               // 65536 -> 32768, tracker at 0
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.state().hysteresis_left, 0);

  // Clean steps short of a growth leave the tracker at 0.
  run(s, false, 2);
  EXPECT_EQ(s.state().hysteresis_left, 0);
  LossScaler::Decision d = s.update(true);
  EXPECT_TRUE(d.scale_changed);
  EXPECT_EQ(s.scale(), 16384.0);

  // A growth resets it: the next overflow keeps the scale, the one after backs off.
  d = run(s, false, 3);
  EXPECT_TRUE(d.scale_changed);
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.state().hysteresis_left, 2);
  d = s.update(true);
  EXPECT_FALSE(d.scale_changed);
  EXPECT_EQ(s.scale(), 32768.0);
  d = s.update(true);
  EXPECT_TRUE(d.scale_changed);
  EXPECT_EQ(s.scale(), 16384.0);
}

TEST(LossScaler, OverflowResetsGoodStepCounter) {
  LossScaler s{small_config()};  // growth_interval 3
  run(s, false, 2);
  EXPECT_EQ(s.state().good_steps, 2);
  LossScaler::Decision d = s.update(true);  // hysteresis keeps the scale...
  EXPECT_FALSE(d.scale_changed);
  EXPECT_EQ(s.state().good_steps, 0);       // ...but the counter restarts
  d = run(s, false, 2);
  EXPECT_FALSE(d.scale_changed);
  EXPECT_EQ(s.scale(), 65536.0);
  d = s.update(false);
  EXPECT_TRUE(d.scale_changed);
  EXPECT_EQ(s.scale(), 131072.0);
}

TEST(LossScaler, ClampsAtMinScaleAndFlagsIt) {
  LossScalerConfig c;
  c.init_scale = 4.0;
  c.min_scale = 3.0;
  c.hysteresis = 1;
  LossScaler s{c};
  LossScaler::Decision d = s.update(true);  // 4 * 0.5 = 2, clamped to 3
  EXPECT_TRUE(d.scale_changed);
  EXPECT_EQ(d.new_scale, 3.0);
  EXPECT_FALSE(d.at_min_scale);
  d = s.update(true);                       // already at the minimum
  EXPECT_TRUE(d.skip);
  EXPECT_FALSE(d.scale_changed);
  EXPECT_EQ(d.new_scale, 3.0);
  EXPECT_TRUE(d.at_min_scale);
  EXPECT_FALSE(d.abort);

  // Starting at the minimum: the first overflow is flagged, hysteresis or not.
  c.init_scale = 3.0;
  c.hysteresis = 2;
  LossScaler at_min{c};
  d = at_min.update(true);
  EXPECT_TRUE(d.at_min_scale);
  EXPECT_EQ(at_min.scale(), 3.0);
  // A clean step never sets the flag.
  EXPECT_FALSE(at_min.update(false).at_min_scale);
}

TEST(LossScaler, AbortsExactlyAtMaxConsecutiveSkips) {
  LossScalerConfig c;
  c.max_consecutive_skips = 3;
  LossScaler s{c};
  LossScaler::Decision d = run(s, true, 2);
  EXPECT_EQ(d.consecutive_skips, 2);
  EXPECT_FALSE(d.abort);

  d = s.update(false);  // a clean step resets the run of skips
  EXPECT_EQ(d.consecutive_skips, 0);
  EXPECT_FALSE(d.abort);
  EXPECT_EQ(s.state().consecutive_skips, 0);

  d = run(s, true, 2);
  EXPECT_EQ(d.consecutive_skips, 2);
  EXPECT_FALSE(d.abort);
  d = s.update(true);
  EXPECT_EQ(d.consecutive_skips, 3);
  EXPECT_TRUE(d.abort);
}

TEST(LossScaler, DoesNotGrowPastFloatMax) {
  LossScalerConfig c;
  c.init_scale = 0x1p127;  // * 2 would not fit in a float
  c.growth_interval = 1;
  LossScaler s{c};
  LossScaler::Decision d = s.update(false);
  EXPECT_FALSE(d.scale_changed);
  EXPECT_EQ(s.scale(), 0x1p127);
  EXPECT_EQ(s.state().good_steps, 0);
}

TEST(LossScaler, DisabledScalerNeverChanges) {
  LossScalerConfig c;
  c.enabled = false;
  c.init_scale = 1024.0;
  c.max_consecutive_skips = 1;
  LossScaler s{c};
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.inv_scale(), 1.0f);
  const LossScalerState before = s.state();
  for (int i = 0; i < 5; ++i) {
    const LossScaler::Decision d = s.update(true);
    EXPECT_FALSE(d.skip);
    EXPECT_FALSE(d.scale_changed);
    EXPECT_FALSE(d.at_min_scale);
    EXPECT_FALSE(d.abort);
    EXPECT_EQ(d.consecutive_skips, 0);
    EXPECT_EQ(d.new_scale, 1.0);
  }
  run(s, false, 5000);
  EXPECT_EQ(s.scale(), 1.0);
  const LossScalerState after = s.state();
  expect_same_state(after, before);
  // Its own state loads; an fp16 run's state does not.
  EXPECT_NO_THROW(s.load_state(after));
  EXPECT_THROW(s.load_state({65536.0, 0, 2, 0}), Error);
}

TEST(LossScaler, StateRoundTripContinuesIdentically) {
  LossScalerConfig c;
  c.growth_interval = 4;
  c.max_consecutive_skips = 2;  // abort is only a flag here; it makes the skip count matter
  // A fixed overflow pattern with growths, hysteresis and back-offs on both sides of the checkpoint.
  auto found_inf = [](int step) { return step % 11 == 3 || step % 11 == 4 || step % 17 == 9; };

  // Checkpoint after 48 steps (inside a run of skips) and after 51 (inside a run of clean steps).
  for (const int checkpoint : {48, 51}) {
    SCOPED_TRACE(testing::Message() << "checkpoint after " << checkpoint << " steps");
    LossScaler uninterrupted{c};
    for (int step = 0; step < checkpoint; ++step) (void)uninterrupted.update(found_inf(step));
    const LossScalerState saved = uninterrupted.state();
    ASSERT_NE(saved.scale, c.init_scale);  // the checkpoint is not the initial state
    ASSERT_NE(saved.good_steps + saved.consecutive_skips, 0);

    LossScaler resumed{c};
    resumed.load_state(saved);
    expect_same_state(resumed.state(), saved);
    int changes = 0;
    for (int step = checkpoint; step < 200; ++step) {
      const LossScaler::Decision a = uninterrupted.update(found_inf(step));
      const LossScaler::Decision b = resumed.update(found_inf(step));
      ASSERT_EQ(a.skip, b.skip) << "step " << step;
      ASSERT_EQ(a.scale_changed, b.scale_changed) << "step " << step;
      ASSERT_EQ(a.old_scale, b.old_scale) << "step " << step;
      ASSERT_EQ(a.new_scale, b.new_scale) << "step " << step;
      ASSERT_EQ(a.at_min_scale, b.at_min_scale) << "step " << step;
      ASSERT_EQ(a.abort, b.abort) << "step " << step;
      ASSERT_EQ(a.consecutive_skips, b.consecutive_skips) << "step " << step;
      changes += a.scale_changed ? 1 : 0;
    }
    EXPECT_GT(changes, 0);  // the continuation exercised the update rule
    expect_same_state(uninterrupted.state(), resumed.state());
  }
}

TEST(LossScaler, LoadStateRejectsBadValues) {
  LossScaler s{small_config()};  // growth_interval 3, hysteresis 2, min_scale 1
  EXPECT_NO_THROW(s.load_state({1.0, 2, 0, 7}));
  EXPECT_THROW(s.load_state({0.5, 0, 2, 0}), Error);  // below min_scale
  EXPECT_THROW(s.load_state({std::numeric_limits<double>::infinity(), 0, 2, 0}), Error);
  EXPECT_THROW(s.load_state({std::numeric_limits<double>::quiet_NaN(), 0, 2, 0}), Error);
  EXPECT_THROW(s.load_state({1024.0, 3, 2, 0}), Error);  // good_steps == growth_interval
  EXPECT_THROW(s.load_state({1024.0, -1, 2, 0}), Error);
  EXPECT_THROW(s.load_state({1024.0, 0, 3, 0}), Error);  // hysteresis_left > hysteresis
  EXPECT_THROW(s.load_state({1024.0, 0, -1, 0}), Error);
  EXPECT_THROW(s.load_state({1024.0, 0, 2, -1}), Error);
  // A rejected state leaves the scaler as it was.
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.state().good_steps, 2);
}

TEST(LossScaler, ConstructorRejectsBadConfigs) {
  auto rejects = [](auto change) {
    LossScalerConfig c;
    change(c);
    EXPECT_THROW(LossScaler{c}, Error);
  };
  rejects([](LossScalerConfig& c) { c.init_scale = 0; });
  rejects([](LossScalerConfig& c) { c.init_scale = -2; });
  rejects([](LossScalerConfig& c) { c.init_scale = 0x1p128; });
  rejects([](LossScalerConfig& c) { c.init_scale = std::numeric_limits<double>::quiet_NaN(); });
  rejects([](LossScalerConfig& c) { c.min_scale = 0; });
  rejects([](LossScalerConfig& c) { c.min_scale = 131072.0; });  // > init_scale
  rejects([](LossScalerConfig& c) { c.growth_factor = 1.0; });
  rejects([](LossScalerConfig& c) { c.backoff_factor = 0.0; });
  rejects([](LossScalerConfig& c) { c.backoff_factor = 1.0; });
  rejects([](LossScalerConfig& c) { c.growth_interval = 0; });
  rejects([](LossScalerConfig& c) { c.hysteresis = 0; });
  rejects([](LossScalerConfig& c) { c.max_consecutive_skips = 0; });
  // Edge values that are fine.
  LossScalerConfig ok;
  ok.min_scale = ok.init_scale;
  ok.growth_interval = 1;
  ok.hysteresis = 1;
  ok.max_consecutive_skips = 1;
  EXPECT_NO_THROW(LossScaler{ok});
}

TEST(LossScaler, DescribeLines) {
  LossScalerConfig c;
  c.growth_interval = 3;
  c.init_scale = 4.0;
  c.max_consecutive_skips = 4;
  LossScaler s{c};
  EXPECT_EQ(s.describe(s.update(true), 117),
            "step 117: gradient overflow (inf/NaN), step skipped; loss scale stays 4 (hysteresis)");
  EXPECT_EQ(s.describe(s.update(true), 118),
            "step 118: gradient overflow (inf/NaN), step skipped; loss scale 4 -> 2 "
            "(2 consecutive skipped steps, abort after 4)");
  EXPECT_EQ(s.describe(s.update(false), 119), "step 119: loss scale stays 2");
  (void)s.update(false);  // step 120
  EXPECT_EQ(s.describe(s.update(false), 121), "step 121: loss scale 2 -> 4 after 3 clean steps");
  run(s, true, 2);  // steps 122-123: 4 -> 2 on the second
  EXPECT_EQ(s.describe(s.update(true), 124),
            "step 124: gradient overflow (inf/NaN), step skipped; loss scale 2 -> 1 "
            "(3 consecutive skipped steps, abort after 4)");
  EXPECT_EQ(s.describe(s.update(true), 125),
            "step 125: gradient overflow (inf/NaN), step skipped; loss scale stays 1 "
            "(the minimum; 4 consecutive skipped steps, the limit is 4: aborting)");
  (void)s.update(false);  // step 126
  EXPECT_EQ(s.describe(s.update(true), 127),
            "step 127: gradient overflow (inf/NaN), step skipped; loss scale stays 1 "
            "(the minimum; 1 consecutive skipped step, abort after 4)");

  LossScaler big{LossScalerConfig{}};
  (void)big.update(true);
  EXPECT_EQ(big.describe(big.update(true), 120),
            "step 120: gradient overflow (inf/NaN), step skipped; loss scale 65536 -> 32768 "
            "(2 consecutive skipped steps, abort after 100)");
}

}  // namespace
}  // namespace shardtrain
