// ZeroEngine at any rank count, every stage, on a layout whose groups straddle
// shard boundaries (odd sizes, alignment 1 in the padded vector): acquired
// parameters equal the global vector, gradients reduced from every rank give
// the expected global norm, twice (accumulation over two micro-batches), and an
// optimizer step keeps every rank's view of the parameters identical.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
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

class ZeroEngineStages : public ::testing::TestWithParam<int> {};

TEST_P(ZeroEngineStages, ServesGlobalParametersAndReducesGradients) {
  const int stage = GetParam();
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int n = comm.size();
  const ParamLayout layout = odd_layout(n);
  MemoryTracker memory;
  ZeroEngine engine(layout, stage, comm, memory);

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

  // Two micro-batches: every rank adds (rank + 1) * grad_of(i) each time.
  engine.begin_step();
  for (int micro = 0; micro < 2; ++micro)
    for (int g = layout.num_groups() - 1; g >= 0; --g) {
      const auto [a, b] = layout.group_range(g);
      float* d = engine.acquire_grads(g);
      for (std::int64_t i = a; i < b; ++i) d[i - a] += static_cast<float>(comm.rank() + 1) * grad_of(i);
      engine.grads_ready(g);
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

INSTANTIATE_TEST_SUITE_P(AllStages, ZeroEngineStages, ::testing::Values(0, 1, 2, 3));

}  // namespace
}  // namespace shardtrain
