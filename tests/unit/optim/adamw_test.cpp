// AdamW (optim/adamw.hpp) against a hand-computed reference: the update of every
// element, weight decay on matrices only, padding untouched, and a shard's update
// equal to the slice of the whole vector's.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "parallel/model_state.hpp"
#include "core/param_layout.hpp"
#include "optim/adamw.hpp"

namespace shardtrain {
namespace {

TEST(AdamW, MatchesReferenceAndDecaysOnlyMatrices) {
  ParamLayout layout(4);
  layout.add("w", {2, 3}, /*weight_decay=*/true, 0);
  layout.add("b", {3}, false, 0);
  layout.finalize(2);
  const std::int64_t n = layout.padded_size();
  OptimConfig o;
  o.beta1 = 0.9; o.beta2 = 0.95; o.eps = 1e-8; o.weight_decay = 0.1;
  MemoryTracker memory;
  ModelState<float> state(layout, /*zero_stage=*/0, /*rank=*/0, memory);  // the whole vector
  EXPECT_EQ(memory.current(MemCategory::OptimizerState), 2 * n * sizeof(float));
  const AdamW adam(o, layout);

  const ShardView<float> s = state.optimizer_view();
  ASSERT_EQ(s.size(), n);
  std::span<float> p = s.params, g = s.grads;
  for (std::int64_t i = 0; i < n; ++i) { p[i] = 0.5f + 0.1f * i; g[i] = 0.3f - 0.07f * i; }
  std::vector<double> rp(p.begin(), p.end()), m(n, 0.0), v(n, 0.0);
  const std::vector<float> p0(p.begin(), p.end());
  const double lr = 1e-2;
  const float scale = 0.5f;
  for (int step = 0; step < 3; ++step) {
    adam.step(s, lr, scale, step);
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
  const AdamW adam(o, layout);
  MemoryTracker memory;
  auto fill = [n](ModelState<float>& state) {  // whole parameters and gradients (stages 0-1)
    for (std::int64_t i = 0; i < n; ++i) {
      *state.params_at(i) = std::sin(i * 1.0f);
      *state.grads_at(i) = std::cos(i * 0.7f);
    }
  };
  ModelState<float> all(layout, 0, 0, memory);
  fill(all);
  adam.step(all.optimizer_view(), 1e-3, 1.0f, 0);
  for (int r = 0; r < 3; ++r) {
    ModelState<float> shard(layout, 1, r, memory);  // stage 1: AdamW updates the rank's shard
    fill(shard);
    const ShardView<float> s = shard.optimizer_view();
    EXPECT_EQ(std::make_pair(s.lo, s.hi), layout.shard_range(r));
    adam.step(s, 1e-3, 1.0f, 0);
    for (std::int64_t i = s.lo; i < s.hi; ++i) EXPECT_EQ(*shard.params_at(i), *all.params_at(i)) << i;
  }
}

}  // namespace
}  // namespace shardtrain
