// ZeroEngine at any rank count, every stage, on a layout whose groups straddle
// shard boundaries (odd sizes, alignment 1 in the padded vector): acquired
// parameters equal the global vector, gradients reduced from every rank give
// the expected global norm, twice (accumulation over two micro-batches), and an
// optimizer step keeps every rank's view of the parameters identical. Buckets:
// one per group, two groups each, and the whole model in one; the backward
// order mimics the GPT (the tied embedding group is acquired first and reported
// ready last).
#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "config/run_config.hpp"
#include "core/memory.hpp"
#include "dist/mpi/mpi_communicator.hpp"
#include "dist/zero_engine.hpp"
#include "optim/adamw.hpp"

namespace shardtrain {
namespace {

ParamLayout odd_layout(int world) {
  ParamLayout layout(1);
  layout.add("a", {37}, true, 0);
  layout.add("b", {5, 3}, true, 1);
  layout.add("c", {11}, false, 1);
  layout.add("d", {29}, true, 2);
  layout.add("e", {3}, false, 3);
  layout.finalize(world);
  return layout;
}

float value(std::int64_t i) { return 0.01f * static_cast<float>(i) - 0.3f; }
float grad_of(std::int64_t i) { return std::sin(0.37f * static_cast<float>(i)); }

// bucket_mb giving `elems` float elements.
double mib_of(std::int64_t elems) { return static_cast<double>(elems) * sizeof(float) / (1024.0 * 1024.0); }

TEST(ZeroEngineBuckets, CoalescesConsecutiveGroupsUpToBucketSize) {
  const ParamLayout layout = odd_layout(1);  // groups of 37, 26, 29, 3 elements
  using Spans = std::vector<std::pair<int, int>>;
  EXPECT_EQ(ZeroEngine::plan_buckets(layout, 0), (Spans{{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
  EXPECT_EQ(ZeroEngine::plan_buckets(layout, mib_of(31)), (Spans{{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
  EXPECT_EQ(ZeroEngine::plan_buckets(layout, mib_of(63)), (Spans{{0, 1}, {2, 3}}));
  EXPECT_EQ(ZeroEngine::plan_buckets(layout, mib_of(62)), (Spans{{0, 0}, {1, 3}}));
  EXPECT_EQ(ZeroEngine::plan_buckets(layout, 1.0), (Spans{{0, 3}}));
  // Pools: [largest, second, second] per kind; stage 3 holds gather buffers too.
  EXPECT_EQ(ZeroEngine::bucket_elems(layout, 1, 0), 0);
  EXPECT_EQ(ZeroEngine::bucket_elems(layout, 2, 0), 37 + 29 + 29);
  EXPECT_EQ(ZeroEngine::bucket_elems(layout, 3, 0), 2 * (37 + 29 + 29));
  EXPECT_EQ(ZeroEngine::bucket_elems(layout, 2, mib_of(63)), 63 + 32);
  EXPECT_EQ(ZeroEngine::bucket_elems(layout, 3, 1.0), 2 * 95);
}

class ZeroEngineStages : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ZeroEngineStages, ServesGlobalParametersAndReducesGradients) {
  const int stage = std::get<0>(GetParam());
  const double bucket_mb = std::array<double, 3>{0.0, mib_of(63), 1.0}[std::get<1>(GetParam())];
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int n = comm.size();
  const ParamLayout layout = odd_layout(n);
  MemoryTracker memory;
  ZeroEngine engine(layout, ZeroEngine::Options{stage, true, bucket_mb}, comm, memory);
  EXPECT_EQ(memory.current(MemCategory::Communication),
            sizeof(float) * static_cast<std::size_t>(ZeroEngine::bucket_elems(layout, stage, bucket_mb)));

  const auto [plo, phi] = engine.stored_param_range();
  for (std::int64_t i = plo; i < phi; ++i) engine.stored_params()[i - plo] = value(i);

  // Every group, acquired in forward order then backward order, holds the global values.
  std::vector<int> order;
  for (int g = 0; g < layout.num_groups(); ++g) order.push_back(g);
  for (int g = layout.num_groups() - 1; g >= 0; --g) order.push_back(g);
  for (int g : order) {
    const auto [a, b] = layout.group_range(g);
    engine.prefetch(g + 1 < layout.num_groups() ? g + 1 : g - 1);
    const float* p = engine.acquire_params(g);
    for (std::int64_t i = a; i < b; ++i) ASSERT_EQ(p[i - a], value(i)) << "group " << g << " elem " << i;
    engine.release_params(g);
  }

  // Two micro-batches: every rank adds (rank + 1) * grad_of(i) each time; group
  // 0 gets half of it first (the tied LM head) and half at the end of backward.
  engine.begin_step();
  const float w = static_cast<float>(comm.rank() + 1);
  for (int micro = 0; micro < 2; ++micro) {
    const auto [a0, b0] = layout.group_range(0);
    float* d0 = engine.acquire_grads(0);
    for (std::int64_t i = a0; i < b0; ++i) d0[i - a0] += 0.5f * w * grad_of(i);
    for (int g = layout.num_groups() - 1; g >= 1; --g) {
      const auto [a, b] = layout.group_range(g);
      float* d = engine.acquire_grads(g);
      for (std::int64_t i = a; i < b; ++i) d[i - a] += w * grad_of(i);
      engine.grads_ready(g);
    }
    d0 = engine.acquire_grads(0);
    for (std::int64_t i = a0; i < b0; ++i) d0[i - a0] += 0.5f * w * grad_of(i);
    engine.grads_ready(0);
  }
  const double norm2 = engine.finish_gradients();
  const double ranks_sum = 2.0 * n * (n + 1) / 2.0;  // two micro-batches of sum(r + 1)
  double expected = 0.0;
  for (const auto& e : layout.entries())
    for (std::int64_t i = e.offset; i < e.offset + e.numel; ++i)
      expected += ranks_sum * ranks_sum * static_cast<double>(grad_of(i)) * grad_of(i);
  EXPECT_NEAR(norm2, expected, 1e-5 * expected);

  // One AdamW step; afterwards every rank sees the same parameters for every group.
  const auto [olo, ohi] = engine.optimizer_range();
  OptimConfig config;
  AdamW adam(config, layout, olo, ohi, memory);
  engine.apply_optimizer(adam, 1e-2, 1.0f, 0);
  for (int g = 0; g < layout.num_groups(); ++g) {
    const auto [a, b] = layout.group_range(g);
    const float* p = engine.acquire_params(g);
    std::vector<float> mine(p, p + (b - a)), first = mine;
    comm.broadcast(std::span<float>(first), 0);
    EXPECT_EQ(mine, first) << "group " << g;
    for (std::int64_t i = a; i < b; ++i) EXPECT_NE(mine[i - a], value(i)) << "not updated: " << i;
    engine.release_params(g);
  }
}

INSTANTIATE_TEST_SUITE_P(AllStagesAndBuckets, ZeroEngineStages,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(0, 1, 2)));

}  // namespace
}  // namespace shardtrain
