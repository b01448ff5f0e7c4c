// AdamW and learning-rate schedule against hand-computed references.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/memory.hpp"
#include "core/param_layout.hpp"
#include "optim/adamw.hpp"
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
  o.schedule = "constant";
  EXPECT_DOUBLE_EQ(learning_rate(o, 50, 110), 1e-3);
  o.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0, 110), 1e-3);
}

TEST(AdamW, MatchesReferenceAndDecaysOnlyMatrices) {
  ParamLayout layout(4);
  layout.add("w", {2, 3}, /*weight_decay=*/true, 0);
  layout.add("b", {3}, false, 0);
  layout.finalize(2);
  const std::int64_t n = layout.padded_size();
  OptimConfig o;
  o.beta1 = 0.9; o.beta2 = 0.95; o.eps = 1e-8; o.weight_decay = 0.1;
  MemoryTracker memory;
  AdamW adam(o, layout, 0, n, memory);
  EXPECT_EQ(memory.current(MemCategory::OptimizerState), 2 * n * sizeof(float));

  std::vector<float> p(n, 0.0f), g(n, 0.0f);
  for (std::int64_t i = 0; i < n; ++i) { p[i] = 0.5f + 0.1f * i; g[i] = 0.3f - 0.07f * i; }
  std::vector<double> rp(p.begin(), p.end()), m(n, 0.0), v(n, 0.0);
  const std::vector<float> p0 = p;
  const double lr = 1e-2;
  const float scale = 0.5f;
  for (int step = 0; step < 3; ++step) {
    adam.step(p.data(), g.data(), lr, scale, step);
    for (const auto& e : layout.entries())
      for (std::int64_t i = e.offset; i < e.offset + e.numel; ++i) {
        const double gi = g[i] * scale;
        m[i] = 0.9 * m[i] + 0.1 * gi;
        v[i] = 0.95 * v[i] + 0.05 * gi * gi;
        const double mh = m[i] / (1 - std::pow(0.9, step + 1));
        const double vh = v[i] / (1 - std::pow(0.95, step + 1));
        if (e.weight_decay) rp[i] *= 1 - lr * 0.1;
        rp[i] -= lr * mh / (std::sqrt(vh) + 1e-8);
      }
  }
  for (std::int64_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], rp[i], 2e-6) << i;
  // Padding (between and after tensors) is never touched.
  for (std::int64_t i = 6; i < 8; ++i) EXPECT_EQ(p[i], p0[i]);
  for (std::int64_t i = 11; i < n; ++i) EXPECT_EQ(p[i], p0[i]);
  // Sum of squares ignores padding.
  double ss = 0.0;
  for (const auto& e : layout.entries())
    for (std::int64_t i = e.offset; i < e.offset + e.numel; ++i) ss += double(g[i]) * g[i];
  EXPECT_DOUBLE_EQ(sum_of_squares(layout, g.data(), 0, n), ss);
}

TEST(AdamW, ShardRangeEqualsSliceOfFullUpdate) {
  ParamLayout layout(4);
  layout.add("w", {5, 3}, true, 0);
  layout.add("b", {5}, false, 0);
  layout.finalize(3);
  const std::int64_t n = layout.padded_size();
  OptimConfig o;
  MemoryTracker memory;
  std::vector<float> p(n), g(n);
  for (std::int64_t i = 0; i < n; ++i) { p[i] = std::sin(i * 1.0f); g[i] = std::cos(i * 0.7f); }
  std::vector<float> full = p;
  AdamW all(o, layout, 0, n, memory);
  all.step(full.data(), g.data(), 1e-3, 1.0f, 0);
  for (int r = 0; r < 3; ++r) {
    const auto [lo, hi] = layout.shard_range(r);
    AdamW shard(o, layout, lo, hi, memory);
    std::vector<float> ps(p.begin() + lo, p.begin() + hi);
    shard.step(ps.data(), g.data() + lo, 1e-3, 1.0f, 0);
    for (std::int64_t i = lo; i < hi; ++i) EXPECT_EQ(ps[i - lo], full[i]) << i;
  }
}

}  // namespace
}  // namespace shardtrain
