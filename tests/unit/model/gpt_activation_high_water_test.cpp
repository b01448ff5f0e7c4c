// The GPT's measured activation high-water against the plan (issue 21): the
// model measures how high its recompute stack rose (Gpt::stack_high_water_bytes)
// and what of its arena it used (Gpt::activation_high_water_bytes); the plan is
// gpt_activation_elems(dims, schedule). They must be equal for every policy
// (none, full, sqrt, budget at several budgets) at 12 and 24 blocks, after
// every micro-batch; a planted schedule that reserves more than its ops use
// must show measured != planned, and one that reserves less must still hit
// the arena's overflow checks.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "model/gpt.hpp"
#include "core/param_layout.hpp"
#include "model/recompute.hpp"

namespace shardtrain {
namespace {

using Kind = RecomputeOp::Kind;

GptDims small_dims(std::int64_t n_layer) {
  GptDims d;
  d.n_layer = n_layer; d.channels = 8; d.n_head = 2; d.seq_len = 4; d.vocab = 7; d.max_batch = 2;
  return d;
}

struct Measured {
  std::int64_t arena = 0;       // Activations the tracker counted (the arena: the plan as given)
  std::int64_t high_water = 0;  // Gpt::activation_high_water_bytes after every pass
  std::int64_t stack = 0;       // Gpt::stack_high_water_bytes
  std::vector<std::int64_t> pass_stack;  // Gpt::last_pass_stack_high_water_bytes after each micro-batch
};

// Builds the model on `s`, trains micro-batches of 2, 1 and 0 sequences (a
// rank without samples runs the same ops) and runs one evaluation forward.
// Throws what the model throws (an arena too small for the ops).
Measured run(const GptDims& d, const RecomputeSchedule& s) {
  ParamLayout layout = gpt_layout(d);
  layout.finalize(1);
  std::vector<float> params(layout.padded_size()), grads(layout.padded_size(), 0.0f);
  gpt_init_params<float>(layout, d, 0.5, 42, params.data(), 0, layout.padded_size());
  std::vector<TokenIndex> tokens, targets;
  for (std::int64_t i = 0; i < d.max_batch * d.seq_len; ++i) {
    tokens.push_back(static_cast<TokenIndex>((i * 5 + 3) % d.vocab));
    targets.push_back(static_cast<TokenIndex>((i * 3 + 1) % d.vocab));
  }
  MemoryTracker memory;
  Gpt<float> model(d, layout, 1e-5, memory, &s);
  model.bind(params.data(), grads.data());
  Measured m;
  m.arena = static_cast<std::int64_t>(memory.current(MemCategory::Activations));
  EXPECT_EQ(model.activation_high_water_bytes(), 0) << "measured before any forward";
  for (std::int64_t batch : {2, 1, 0}) {
    model.forward(tokens.data(), targets.data(), batch);
    model.backward(0.1f);
    m.pass_stack.push_back(model.last_pass_stack_high_water_bytes());
  }
  model.forward(tokens.data(), targets.data(), 2);  // evaluation: forward only, rises no higher
  m.high_water = model.activation_high_water_bytes();
  m.stack = model.stack_high_water_bytes();
  return m;
}

std::int64_t planned_bytes(const GptDims& d, const RecomputeSchedule& s) {
  return gpt_activation_elems(d, s) * static_cast<std::int64_t>(sizeof(float));
}

// The acceptance check: measured activation high-water == the plan, and the
// stack's high-water == the schedule's stack_bytes in every micro-batch.
::testing::AssertionResult high_water_matches_plan(const GptDims& d, const RecomputeSchedule& s, const Measured& m) {
  const std::int64_t planned = planned_bytes(d, s);
  if (m.high_water != planned)
    return ::testing::AssertionFailure()
           << s.policy << ", " << d.n_layer << " blocks: measured activation high-water " << m.high_water
           << " bytes != planned " << planned << " bytes (stack: measured " << m.stack << ", planned "
           << s.stack_bytes << "; arena " << m.arena << ")";
  for (std::size_t k = 0; k < m.pass_stack.size(); ++k)
    if (m.pass_stack[k] != s.stack_bytes)
      return ::testing::AssertionFailure() << s.policy << ", " << d.n_layer << " blocks: micro-batch " << k
                                           << ": stack high-water " << m.pass_stack[k] << " bytes != planned "
                                           << s.stack_bytes << " bytes";
  return ::testing::AssertionSuccess();
}

// The message of what run() throws, "" when it does not.
std::string error_of(const GptDims& d, const RecomputeSchedule& s) {
  try {
    run(d, s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every policy, the budget at five budgets from the least it accepts to none's
// peak, at 12 and 24 blocks: the measured high-water is the plan, to the byte.
TEST(GptActivationHighWater, MeasuredEqualsPlanForEveryPolicy) {
  std::printf("%-6s %-6s %12s %14s %14s %12s %12s\n", "blocks", "policy", "budget", "planned", "measured",
              "stack plan", "stack meas");
  for (std::int64_t n_layer : {12, 24}) {
    const GptDims d = small_dims(n_layer);
    const ChainCosts chain = gpt_chain_costs(d, sizeof(float));
    const std::int64_t none_peak = make_recompute_schedule(RecomputePolicy::None, chain)->peak_bytes;
    const std::int64_t least = min_recompute_peak(chain);
    std::vector<std::pair<RecomputeSchedule, std::int64_t>> cases;
    for (const RecomputePolicy policy : {RecomputePolicy::None, RecomputePolicy::Full, RecomputePolicy::Sqrt})
      cases.emplace_back(*make_recompute_schedule(policy, chain), 0);
    for (double frac : {0.0, 0.25, 0.5, 0.75, 1.0}) {
      const auto budget = least + static_cast<std::int64_t>(frac * static_cast<double>(none_peak - least));
      const auto s = make_recompute_schedule(RecomputePolicy::Budget, chain, budget);
      ASSERT_TRUE(s.has_value()) << "budget " << budget;
      cases.emplace_back(*s, budget);
    }
    for (const auto& [s, budget] : cases) {
      const Measured m = run(d, s);
      EXPECT_EQ(m.arena, planned_bytes(d, s)) << s.policy << ": the arena is the plan";
      EXPECT_TRUE(high_water_matches_plan(d, s, m));
      std::printf("%-6lld %-6s %12s %14lld %14lld %12lld %12lld\n", static_cast<long long>(n_layer),
                  s.policy.c_str(), budget ? std::to_string(budget).c_str() : "-",
                  static_cast<long long>(planned_bytes(d, s)), static_cast<long long>(m.high_water),
                  static_cast<long long>(s.stack_bytes), static_cast<long long>(m.stack));
    }
  }
}

// "none"'s claim (every block's internals on the stack at once) over ops that
// keep one block fewer: block 0 runs without its internals in the forward pass
// (its output checkpointed) and is recomputed just before its backward.
RecomputeSchedule keeps_one_block_fewer(const ChainCosts& chain, int n) {
  RecomputeSchedule s = *make_recompute_schedule(RecomputePolicy::None, chain);
  s.policy = "none edited";
  s.ops.clear();
  s.ops.push_back({Kind::Forward, 0, false});
  for (int i = 1; i < n; ++i) s.ops.push_back({Kind::Forward, i, true});
  for (int i = n - 1; i >= 1; --i) s.ops.push_back({Kind::Backward, i, true});
  s.ops.push_back({Kind::Forward, 0, true});
  s.ops.push_back({Kind::Backward, 0, true});
  s.ops.push_back({Kind::FreeInput, 1, true});
  return s;  // stack_bytes and uses_scratch: still none's
}

// Over-planning is detected: a schedule that reserves more than its ops use
// runs (the arena is large enough) and computes the same, but its measured
// high-water is below the plan, by exactly the surplus.
TEST(GptActivationHighWater, OverPlannedScheduleIsDetected) {
  for (std::int64_t n_layer : {12, 24}) {
    const GptDims d = small_dims(n_layer);
    const ChainCosts chain = gpt_chain_costs(d, sizeof(float));
    const auto per_block = gpt_activation_plan(d).per_block * static_cast<std::int64_t>(sizeof(float));

    // sqrt claiming room for one more block's internals than its ops ever hold.
    const RecomputeSchedule sqrt = *make_recompute_schedule(RecomputePolicy::Sqrt, chain);
    RecomputeSchedule padded = sqrt;
    padded.policy = "sqrt padded";
    padded.stack_bytes += per_block;
    padded.peak_bytes += per_block;
    const Measured m = run(d, padded);
    EXPECT_EQ(m.arena, planned_bytes(d, padded));
    const ::testing::AssertionResult r = high_water_matches_plan(d, padded, m);
    EXPECT_FALSE(r) << "over-planning by one block went unnoticed";
    EXPECT_EQ(m.high_water, planned_bytes(d, sqrt)) << "measured is what the ops need";
    EXPECT_EQ(planned_bytes(d, padded) - m.high_water, per_block);
    std::printf("detected: %s\n", r.message());

    // Ops that keep one block fewer than "none" claims (plus the scratch block they need).
    RecomputeSchedule edited = keeps_one_block_fewer(chain, static_cast<int>(n_layer));
    edited.uses_scratch = true;
    const Measured e = run(d, edited);
    const ::testing::AssertionResult re = high_water_matches_plan(d, edited, e);
    EXPECT_FALSE(re) << "a schedule keeping one block fewer than it claims went unnoticed";
    RecomputeSchedule replayed = edited;
    simulate(chain, replayed);  // what the edited ops really need
    EXPECT_LT(replayed.stack_bytes, edited.stack_bytes);
    EXPECT_EQ(e.stack, replayed.stack_bytes) << "the measured stack is the replayed ops' need";
    std::printf("detected: %s\n", re.message());
  }
}

// Under-planning still throws: the arena is the plan as given, so a schedule
// that reserves less than its ops need overflows the stack (or finds no
// scratch block) instead of writing past the arena.
TEST(GptActivationHighWater, UnderPlannedScheduleThrows) {
  const GptDims d = small_dims(12);
  const ChainCosts chain = gpt_chain_costs(d, sizeof(float));

  RecomputeSchedule short_one = *make_recompute_schedule(RecomputePolicy::Sqrt, chain);
  short_one.policy = "sqrt short";
  short_one.stack_bytes -= static_cast<std::int64_t>(sizeof(float));  // one element short
  const std::string a = error_of(d, short_one);
  EXPECT_NE(a.find("recompute: activation stack overflow (schedule and arena disagree)"), std::string::npos) << a;
  std::printf("sqrt, stack one element short: %s\n", a.c_str());

  RecomputeSchedule claims_full = *make_recompute_schedule(RecomputePolicy::None, chain);  // keeps every block...
  const RecomputeSchedule full = *make_recompute_schedule(RecomputePolicy::Full, chain);
  claims_full.stack_bytes = full.stack_bytes;  // ...but claims full's stack
  claims_full.uses_scratch = true;
  const std::string b = error_of(d, claims_full);
  EXPECT_NE(b.find("recompute: activation stack overflow (schedule and arena disagree)"), std::string::npos) << b;
  std::printf("none's ops with full's stack: %s\n", b.c_str());

  const RecomputeSchedule no_scratch = keeps_one_block_fewer(chain, 12);  // drops internals, plans no scratch
  const std::string c = error_of(d, no_scratch);
  EXPECT_NE(c.find("recompute: a forward drops its internals but the arena has no scratch block"),
            std::string::npos) << c;
  std::printf("a dropping forward without a planned scratch block: %s\n", c.c_str());
}

}  // namespace
}  // namespace shardtrain
