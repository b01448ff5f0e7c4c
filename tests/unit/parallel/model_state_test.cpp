// ModelState (parallel/model_state.hpp), the vectors AdamW updates, by ZeRO stage.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/memory.hpp"
#include "core/param_layout.hpp"
#include "parallel/model_state.hpp"

namespace shardtrain {
namespace {

// Which vectors a stage keeps whole and which as the rank's shard, and that
// every view of a range points at element lo of each vector.
TEST(ModelState, KeepsEachVectorByStageAndViewsOneRange) {
  ParamLayout layout(4);
  layout.add("w", {5, 3}, true, 0);
  layout.add("b", {5}, false, 0);
  layout.finalize(3);
  const std::int64_t n = layout.padded_size();
  const auto [lo, hi] = layout.shard_range(1);
  using R = std::pair<std::int64_t, std::int64_t>;
  const R whole{0, n}, shard{lo, hi};
  const auto elems = [](R r) { return static_cast<std::size_t>(r.second - r.first); };
  for (int stage = 0; stage <= 3; ++stage) {
    MemoryTracker memory;
    ModelState<bf16> state(layout, stage, 1, memory);
    EXPECT_EQ(state.param_range(), stage == 3 ? shard : whole) << stage;
    EXPECT_EQ(state.grad_range(), stage >= 2 ? shard : whole) << stage;
    EXPECT_EQ(state.optimizer_range(), stage == 0 ? whole : shard) << stage;
    EXPECT_EQ(memory.current(MemCategory::Parameters), 2 * elems(state.param_range()));
    EXPECT_EQ(memory.current(MemCategory::Gradients), 2 * elems(state.grad_range()));
    EXPECT_EQ(memory.current(MemCategory::OptimizerState), 3 * 4 * elems(state.optimizer_range()));
    const ShardView<bf16> s = state.shard_view();
    EXPECT_EQ(s.params.data(), state.params_at(lo));
    EXPECT_EQ(s.grads.data(), state.grads_at(lo));
    EXPECT_EQ(s.params.size(), elems(shard));
    const ShardView<bf16> o = state.optimizer_view();
    EXPECT_EQ(s.master.data(), o.master.data() + (lo - o.lo));
    EXPECT_EQ(s.exp_avg_sq.data(), o.exp_avg_sq.data() + (lo - o.lo));
    if (stage > 0) EXPECT_THROW(state.view(whole), Error) << stage;
  }
  MemoryTracker memory;
  ModelState<float> fp32(layout, 2, 1, memory);
  EXPECT_EQ(fp32.shard_view().master.data(), fp32.shard_view().params.data());  // the weights are the parameters
  EXPECT_EQ(memory.current(MemCategory::OptimizerState), 2 * 4 * elems(shard));
}

}  // namespace
}  // namespace shardtrain
