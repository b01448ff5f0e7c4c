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

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "config/run_config.hpp"
#include "core/memory.hpp"
#include "parallel/model_state.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/zero_engine.hpp"
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
  EXPECT_EQ(zero_plan_buckets(layout, 0, 4), (Spans{{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
  EXPECT_EQ(zero_plan_buckets(layout, mib_of(31), 4), (Spans{{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
  EXPECT_EQ(zero_plan_buckets(layout, mib_of(63), 4), (Spans{{0, 1}, {2, 3}}));
  EXPECT_EQ(zero_plan_buckets(layout, mib_of(62), 4), (Spans{{0, 0}, {1, 3}}));
  EXPECT_EQ(zero_plan_buckets(layout, 1.0, 4), (Spans{{0, 3}}));
  // Pools: [largest, second, second] per kind; stage 3 holds gather buffers too.
  EXPECT_EQ(zero_bucket_elems(layout, 1, 0, 4), 0);
  EXPECT_EQ(zero_bucket_elems(layout, 2, 0, 4), 37 + 29 + 29);
  EXPECT_EQ(zero_bucket_elems(layout, 3, 0, 4), 2 * (37 + 29 + 29));
  EXPECT_EQ(zero_bucket_elems(layout, 2, mib_of(63), 4), 63 + 32);
  EXPECT_EQ(zero_bucket_elems(layout, 3, 1.0, 4), 2 * 95);
}

// A GPT-like layout: group 0 (the embedding, 10 elements) then 12 blocks of 7;
// 94 elements, which 3 and 4 do not divide; at 1-4 ranks group 0 lies wholly in
// rank 0's shard.
ParamLayout embedding_layout(int world) {
  ParamLayout layout(1);
  layout.add("wte", {10}, true, 0);
  for (int g = 1; g <= 12; ++g) layout.add("block" + std::to_string(g), {7}, true, g);
  layout.finalize(world);
  return layout;
}

// The counts of bucket [first, last] by brute force: the owner of every element.
std::vector<std::size_t> owners_count(const ParamLayout& layout, int first, int last) {
  std::vector<std::size_t> counts(static_cast<std::size_t>(layout.world_size()), 0);
  for (std::int64_t i = layout.group_range(first).first; i < layout.group_range(last).second; ++i)
    for (int r = 0; r < layout.world_size(); ++r)
      if (layout.shard_range(r).first <= i && i < layout.shard_range(r).second) ++counts[static_cast<std::size_t>(r)];
  return counts;
}

// Passes every call to an MpiCommunicator and records the counts of each
// variable-block collective ZeroEngine starts.
class CountsComm final : public Communicator {
 public:
  explicit CountsComm(Communicator& inner) : m_in(inner) {}
  std::vector<std::vector<std::size_t>> reduce_scatters, all_gathers;
  int rank() const override { return m_in.rank(); }
  int size() const override { return m_in.size(); }
  void all_reduce(void* b, std::size_t n, DType t, ReduceOp op) override { m_in.all_reduce(b, n, t, op); }
  void broadcast(void* b, std::size_t n, DType t, int root) override { m_in.broadcast(b, n, t, root); }
  void barrier() override { m_in.barrier(); }
  void reduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op) override {
    m_in.reduce_scatter(s, r, n, t, op);
  }
  void all_gather(const void* s, void* r, std::size_t n, DType t) override { m_in.all_gather(s, r, n, t); }
  RequestPtr iall_reduce(void* b, std::size_t n, DType t, ReduceOp op) override { return m_in.iall_reduce(b, n, t, op); }
  RequestPtr ireduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op) override {
    return m_in.ireduce_scatter(s, r, n, t, op);
  }
  RequestPtr iall_gather(const void* s, void* r, std::size_t n, DType t) override { return m_in.iall_gather(s, r, n, t); }
  RequestPtr ireduce_scatter_v(const void* s, void* r, std::span<const std::size_t> counts, DType t,
                               ReduceOp op) override {
    reduce_scatters.emplace_back(counts.begin(), counts.end());
    return m_in.ireduce_scatter_v(s, r, counts, t, op);
  }
  RequestPtr iall_gather_v(const void* s, void* r, std::span<const std::size_t> counts, DType t) override {
    all_gathers.emplace_back(counts.begin(), counts.end());
    return m_in.iall_gather_v(s, r, counts, t);
  }

 private:
  Communicator& m_in;
};

// zero_bucket_counts against the owners of every element and against the
// counts ZeroEngine hands its collectives (one backward pass, last bucket
// first; stage 3 also gathers each bucket once), at every bucket size.
TEST(ZeroEngineBuckets, CountsAreTheEnginesPerRankCounts) {
  MpiCommunicator mpi(MPI_COMM_WORLD);
  const int n = mpi.size();
  for (const bool embedding : {false, true}) {
    const ParamLayout layout = embedding ? embedding_layout(n) : odd_layout(n);
    if (embedding) {  // the embedding bucket is rank 0's alone
      std::vector<std::size_t> want(static_cast<std::size_t>(n), 0);
      want[0] = 10;
      EXPECT_EQ(zero_bucket_counts(layout, 0, 0, n), want);
    }
    for (const double bucket_mb : {0.0, mib_of(20), 1.0})
      for (const int stage : {2, 3}) {
        SCOPED_TRACE(std::string(embedding ? "embedding" : "odd") + " layout, stage " + std::to_string(stage) +
                     ", bucket_mb " + std::to_string(bucket_mb));
        const auto spans = zero_plan_buckets(layout, bucket_mb, sizeof(float));
        std::vector<std::vector<std::size_t>> want;  // in the engine's order: last bucket first
        for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
          const auto counts = zero_bucket_counts(layout, it->first, it->second, n);
          EXPECT_EQ(counts, owners_count(layout, it->first, it->second));
          want.push_back(counts);
        }
        CountsComm comm(mpi);
        MemoryTracker memory;
        ModelState<float> state(layout, stage, comm.rank(), memory);
        {
          ZeroEngine<float> engine(state, ZeroEngine<float>::Options{true, bucket_mb}, comm, memory);
          engine.begin_step();
          for (int g = layout.num_groups() - 1; g >= 0; --g) {
            if (stage == 3) {
              engine.acquire_params(g);
              engine.release_params(g);
            }
            engine.acquire_grads(g);
            engine.grads_ready(g);
          }
          engine.finish_gradients();
        }
        EXPECT_EQ(comm.reduce_scatters, want);
        if (stage == 3) {
          auto gathered = comm.all_gathers;
          std::sort(gathered.begin(), gathered.end());
          auto all = want;
          std::sort(all.begin(), all.end());
          EXPECT_EQ(gathered, all) << "each bucket gathered once";
        }
      }
  }
}

// Stored values as P holds them (exact for float; rounded for f16/bf16).
template <class P> float stored(float x) { return static_cast<float>(P(x)); }

template <class P>
void serve_and_reduce(int stage, double bucket_mb) {
  // 16-bit gradients accumulate (micro-batches, ranks) with a rounding per add.
  const double norm_tol = std::is_same_v<P, float> ? 1e-5 : 2e-2;
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int n = comm.size();
  const ParamLayout layout = odd_layout(n);
  MemoryTracker memory;
  ModelState<P> state(layout, stage, comm.rank(), memory);
  ZeroEngine<P> engine(state, typename ZeroEngine<P>::Options{true, bucket_mb}, comm, memory);
  EXPECT_EQ(memory.current(MemCategory::Communication),
            sizeof(P) * static_cast<std::size_t>(zero_bucket_elems(layout, stage, bucket_mb, sizeof(P))));

  const auto [plo, phi] = state.param_range();
  for (std::int64_t i = plo; i < phi; ++i) *state.params_at(i) = P(value(i));

  // Every group, acquired in forward order then backward order, holds the global values.
  std::vector<int> order;
  for (int g = 0; g < layout.num_groups(); ++g) order.push_back(g);
  for (int g = layout.num_groups() - 1; g >= 0; --g) order.push_back(g);
  for (int g : order) {
    const auto [a, b] = layout.group_range(g);
    engine.prefetch(g + 1 < layout.num_groups() ? g + 1 : g - 1);
    const P* p = engine.acquire_params(g);
    for (std::int64_t i = a; i < b; ++i)
      ASSERT_EQ(static_cast<float>(p[i - a]), stored<P>(value(i))) << "group " << g << " elem " << i;
    engine.release_params(g);
  }

  // Two micro-batches: every rank adds (rank + 1) * grad_of(i) each time; group
  // 0 gets half of it first (the tied LM head) and half at the end of backward.
  // grads_zero(g), asked before a group's first write of the pass, is true exactly
  // when its storage is zeroed for it (the first micro-batch; every micro-batch at
  // stages 2-3, whose buckets are staged afresh), and then the storage is zeros.
  EXPECT_FALSE(engine.grads_zero(0)) << "before any begin_step";
  // Two steps of the same gradients: the second must not see the first's.
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    engine.begin_step();
    const float w = static_cast<float>(comm.rank() + 1);
    auto add = [](P& x, float y) { x = P(static_cast<float>(x) + y); };
    auto check_zero = [&](int g, const P* d, int micro) {
      const bool want = micro == 0 || stage >= 2;
      EXPECT_EQ(engine.grads_zero(g), want) << "stage " << stage << " micro-batch " << micro << " group " << g;
      if (!engine.grads_zero(g)) return;
      const auto [a, b] = layout.group_range(g);
      for (std::int64_t i = a; i < b; ++i)
        ASSERT_EQ(static_cast<float>(d[i - a]), 0.0f) << "grads_zero(" << g << ") but element " << i << " is not";
    };
    for (int micro = 0; micro < 2; ++micro) {
      const auto [a0, b0] = layout.group_range(0);
      P* d0 = engine.acquire_grads(0);
      check_zero(0, d0, micro);
      for (std::int64_t i = a0; i < b0; ++i) add(d0[i - a0], 0.5f * w * grad_of(i));
      for (int g = layout.num_groups() - 1; g >= 1; --g) {
        const auto [a, b] = layout.group_range(g);
        P* d = engine.acquire_grads(g);
        check_zero(g, d, micro);
        for (std::int64_t i = a; i < b; ++i) add(d[i - a], w * grad_of(i));
        engine.grads_ready(g);
        EXPECT_FALSE(engine.grads_zero(g)) << "after grads_ready(" << g << ")";
      }
      d0 = engine.acquire_grads(0);
      for (std::int64_t i = a0; i < b0; ++i) add(d0[i - a0], 0.5f * w * grad_of(i));
      engine.grads_ready(0);
    }
    const double norm2 = engine.finish_gradients();
    const double ranks_sum = 2.0 * n * (n + 1) / 2.0;  // two micro-batches of sum(r + 1)
    double expected = 0.0;
    for (const auto& e : layout.entries())
      for (std::int64_t i = e.offset; i < e.offset + e.numel; ++i)
        expected += ranks_sum * ranks_sum * static_cast<double>(grad_of(i)) * grad_of(i);
    EXPECT_NEAR(norm2, expected, norm_tol * expected);
    EXPECT_EQ(engine.first_non_finite_gradient(), -1);
  }

  // One AdamW step (fp32 master weights for 16-bit P); afterwards every rank
  // sees the same parameters for every group.
  OptimConfig config;
  const AdamW adam(config, layout);
  state.init_master();
  adam.step(state.optimizer_view(), 1e-2, 1.0f, 0);
  engine.params_updated();
  for (int g = 0; g < layout.num_groups(); ++g) {
    const auto [a, b] = layout.group_range(g);
    const P* p = engine.acquire_params(g);
    std::vector<float> mine, first;
    for (std::int64_t i = a; i < b; ++i) mine.push_back(static_cast<float>(p[i - a]));
    first = mine;
    comm.broadcast(std::span<float>(first), 0);
    EXPECT_EQ(mine, first) << "group " << g;
    // (Where the gradient is 0 only weight decay moves the master weight, by
    // less than a 16-bit ulp.)
    for (std::int64_t i = a; i < b; ++i)
      if (std::is_same_v<P, float> || grad_of(i) != 0.0f)
        EXPECT_NE(mine[i - a], stored<P>(value(i))) << "not updated: " << i;
    engine.release_params(g);
  }

  // An overflow planted by the last rank only is seen by every rank: the norm
  // is not finite everywhere and the first non-finite index is agreed on.
  engine.begin_step();
  if (comm.rank() == n - 1) engine.plant_overflow();
  for (int g = layout.num_groups() - 1; g >= 0; --g) {
    engine.acquire_grads(g);
    engine.grads_ready(g);
  }
  EXPECT_FALSE(std::isfinite(engine.finish_gradients()));
  const std::int64_t first_bad = engine.first_non_finite_gradient();
  // Stages 0-1 plant in element 0; stages 2-3 in the first element of the first
  // bucket reduced (the last one in layout order).
  const std::int64_t planted =
      stage < 2 ? 0 : layout.group_range(zero_plan_buckets(layout, bucket_mb, sizeof(P)).back().first).first;
  EXPECT_EQ(first_bad, planted);
}

class ZeroEngineStages : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(ZeroEngineStages, ServesGlobalParametersAndReducesGradients) {
  const int stage = std::get<0>(GetParam());
  const double bucket_mb = std::array<double, 3>{0.0, mib_of(63), 1.0}[std::get<1>(GetParam())];
  switch (std::get<2>(GetParam())) {
    case 0: serve_and_reduce<float>(stage, bucket_mb); break;
    case 1: serve_and_reduce<f16>(stage, bucket_mb); break;
    default: serve_and_reduce<bf16>(stage, bucket_mb); break;
  }
}

// Stages x buckets (per group, two groups, whole model) x precision (fp32, fp16, bf16).
INSTANTIATE_TEST_SUITE_P(AllStagesAndBuckets, ZeroEngineStages,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(0, 1, 2),
                                            ::testing::Values(0, 1, 2)));

}  // namespace
}  // namespace shardtrain
