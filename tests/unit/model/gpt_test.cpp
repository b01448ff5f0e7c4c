// Whole-model tests of Gpt: float64 central-difference gradient check of every
// parameter, gradient accumulation over micro-batches, layout invariants.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gradcheck.hpp"

#include "core/error.hpp"
#include "core/memory.hpp"
#include "kernels/attention.hpp"
#include "model/gpt.hpp"
#include "core/param_layout.hpp"
#include "core/param_provider.hpp"

namespace shardtrain {
namespace {

GptDims tiny_dims() {
  GptDims d;
  d.n_layer = 2; d.channels = 8; d.n_head = 2; d.seq_len = 5; d.vocab = 7; d.max_batch = 3;
  return d;
}

struct Fixture {
  GptDims dims = tiny_dims();
  ParamLayout layout = gpt_layout(dims);
  MemoryTracker memory;
  std::vector<double> params, grads;
  std::vector<TokenIndex> tokens, targets;
  Fixture(int world = 1) {
    layout.finalize(world);
    params.assign(layout.padded_size(), 0.0);
    grads.assign(layout.padded_size(), 0.0);
    // A large init std makes the check exercise the non-linear regime.
    gpt_init_params<double>(layout, dims, 0.5, 42, params.data(), 0, layout.padded_size());
    const std::int64_t n = dims.max_batch * dims.seq_len;
    for (std::int64_t i = 0; i < n; ++i) {
      tokens.push_back(static_cast<TokenIndex>((i * 5 + 3) % dims.vocab));
      targets.push_back(static_cast<TokenIndex>((i * 3 + 1) % dims.vocab));
    }
    targets[4] = -1;  // an ignored target
  }
};

TEST(GptLayout, OffsetsAlignedContiguousAndPadded) {
  for (int world : {1, 2, 3, 4, 7}) {
    GptDims d = tiny_dims();
    ParamLayout layout = gpt_layout(d);
    layout.finalize(world);
    std::int64_t prev_end = 0;
    for (const auto& e : layout.entries()) {
      EXPECT_EQ(e.offset % layout.alignment(), 0) << e.name;
      EXPECT_GE(e.offset, prev_end) << e.name;
      EXPECT_LT(e.offset - prev_end, layout.alignment()) << e.name;
      prev_end = e.offset + e.numel;
    }
    EXPECT_EQ(layout.padded_size() % (world * layout.alignment()), 0);
    EXPECT_GE(layout.padded_size(), prev_end);
    EXPECT_EQ(layout.shard_range(world - 1).second, layout.padded_size());
  }
  GptDims d = tiny_dims();
  ParamLayout layout = gpt_layout(d);
  const std::int64_t c = d.channels, l = d.n_layer;
  EXPECT_EQ(layout.num_parameters(),
            d.vocab * c + d.seq_len * c + l * (12 * c * c + 13 * c) + 2 * c);
  EXPECT_TRUE(layout.find("h.1.mlp.c_fc.weight").weight_decay);
  EXPECT_FALSE(layout.find("h.1.mlp.c_fc.bias").weight_decay);
  EXPECT_FALSE(layout.find("wte.weight").weight_decay);
  EXPECT_FALSE(layout.find("ln_f.weight").weight_decay);
  EXPECT_THROW(layout.find("nope"), Error);
  EXPECT_THROW(layout.add("x", {1}, false, 7), Error);  // groups must not skip numbers
  layout.finalize(2);
  ASSERT_EQ(layout.num_groups(), d.n_layer + 2);
  EXPECT_EQ(layout.group_range(0).first, 0);
  EXPECT_EQ(layout.group_range(1).first, layout.find("h.0.ln_1.weight").offset);
  EXPECT_EQ(layout.group_range(1).second,
            layout.find("h.0.mlp.c_proj.bias").offset + layout.find("h.0.mlp.c_proj.bias").numel);
  EXPECT_EQ(layout.group_range(d.n_layer + 1).second,
            layout.find("ln_f.bias").offset + layout.find("ln_f.bias").numel);
}

TEST(GptInit, IndependentOfRangeSplit) {
  // Any rank initialising any slice gets the values a single rank would.
  Fixture f;
  std::vector<double> part(f.layout.padded_size());
  const std::int64_t n = f.layout.padded_size(), cut = n / 3 + 5;
  gpt_init_params<double>(f.layout, f.dims, 0.5, 42, part.data(), 0, cut);
  gpt_init_params<double>(f.layout, f.dims, 0.5, 42, part.data() + cut, cut, n);
  EXPECT_EQ(part, f.params);
  EXPECT_EQ(f.params[f.layout.find("h.0.ln_1.weight").offset], 1.0);
  EXPECT_EQ(f.params[f.layout.find("h.0.ln_1.bias").offset], 0.0);
}

// d(objective)/d(theta) from backward() against float64 central differences
// over EVERY parameter, objective = dloss * sum of token losses.
TEST(GptGradient, MatchesCentralDifferencesFloat64) {
  Fixture f;
  Gpt<double> model(f.dims, f.layout, 1e-5, f.memory);
  model.bind(f.params.data(), f.grads.data());
  const std::int64_t batch = 2;
  const double dloss = 1.0 / static_cast<double>(batch * f.dims.seq_len);
  auto objective = [&] { return dloss * model.forward(f.tokens.data(), f.targets.data(), batch); };

  objective();
  model.backward(dloss);
  const std::vector<double> analytic = f.grads;
  // The model reads f.params, which numeric_gradient perturbs in place.
  const std::vector<double> numeric =
      test::numeric_gradient([&](std::span<const double>) { return objective(); }, f.params, 1e-5);

  double worst = 0.0;
  for (const auto& e : f.layout.entries()) {
    const auto r = test::compare_gradients(std::span(analytic).subspan(e.offset, e.numel),
                                           std::span(numeric).subspan(e.offset, e.numel), 1e-3);
    EXPECT_LE(r.max_rel_error, 1e-6) << e.name << ": " << r.describe();
    worst = std::max(worst, r.max_rel_error);
  }
  const auto all = test::compare_gradients(analytic, numeric, 1e-3);
  std::printf("whole-model gradient: %s (worst tensor max_rel_error %.3g)\n", all.describe().c_str(), worst);
  EXPECT_LE(all.max_rel_error, 1e-6);
  EXPECT_LE(all.norm_rel_error, 1e-6);
  // Padding carries no gradient.
  for (std::int64_t i = f.layout.entries().back().offset + f.layout.entries().back().numel;
       i < f.layout.padded_size(); ++i)
    EXPECT_EQ(analytic[i], 0.0);
}

// Splitting a batch into micro-batches and accumulating gives the full-batch gradient.
TEST(GptGradient, MicroBatchesAccumulate) {
  Fixture f;
  Gpt<double> model(f.dims, f.layout, 1e-5, f.memory);
  model.bind(f.params.data(), f.grads.data());
  const std::int64_t t = f.dims.seq_len;
  const double dloss = 1.0 / static_cast<double>(3 * t);
  const double full = model.forward(f.tokens.data(), f.targets.data(), 3);
  model.backward(dloss);
  const std::vector<double> g_full = f.grads;

  std::fill(f.grads.begin(), f.grads.end(), 0.0);
  double split = model.forward(f.tokens.data(), f.targets.data(), 2);
  model.backward(dloss);
  split += model.forward(f.tokens.data() + 2 * t, f.targets.data() + 2 * t, 1);
  model.backward(dloss);
  EXPECT_NEAR(full, split, 1e-12 * std::abs(full));
  for (std::size_t i = 0; i < g_full.size(); ++i)
    ASSERT_NEAR(g_full[i], f.grads[i], 1e-12 + 1e-10 * std::abs(g_full[i])) << i;
}

// A provider that hands out every group in its own buffer (as a sharded ZeRO
// engine would), records the call order and snapshots gradients at grads_ready.
class SeparateGroups final : public ParamProvider<double> {
 public:
  SeparateGroups(const ParamLayout& layout, const std::vector<double>& params) : m_layout(layout) {
    for (int g = 0; g < layout.num_groups(); ++g) {
      const auto [a, b] = layout.group_range(g);
      m_params.emplace_back(params.begin() + a, params.begin() + b);
      m_grads.emplace_back(b - a, 0.0);
    }
    m_ready = m_grads;
  }
  double* acquire_params(int g) override { log("P+", g); ++m_held[g]; return m_params[g].data(); }
  void release_params(int g) override { log("P-", g); --m_held[g]; }
  double* acquire_grads(int g) override { log("G+", g); return m_grads[g].data(); }
  void grads_ready(int g) override { log("G!", g); m_ready[g] = m_grads[g]; }

  std::vector<std::vector<double>> m_params, m_grads, m_ready;
  std::map<int, int> m_held;
  std::string m_log;

 private:
  void log(const char* what, int g) { m_log += std::string(what) + std::to_string(g) + " "; }
  const ParamLayout& m_layout;
};

// The model acquires each group just before use, releases it after, and reports
// gradients ready only when they are final; results equal the flat vector's.
TEST(GptProvider, GroupsAcquiredJustInTimeAndGradientsFinalWhenReady) {
  Fixture f;
  const std::int64_t t = f.dims.seq_len;
  const double dloss = 1.0 / static_cast<double>(3 * t);
  Gpt<double> flat(f.dims, f.layout, 1e-5, f.memory);
  flat.bind(f.params.data(), f.grads.data());
  const double loss_flat = flat.forward(f.tokens.data(), f.targets.data(), 3);
  flat.backward(dloss);

  SeparateGroups groups(f.layout, f.params);
  Gpt<double> model(f.dims, f.layout, 1e-5, f.memory);
  model.bind(groups);
  EXPECT_EQ(model.forward(f.tokens.data(), f.targets.data(), 3), loss_flat);
  EXPECT_EQ(groups.m_log, "P+0 P+1 P-1 P+2 P-2 P+3 P-3 P-0 ");
  groups.m_log.clear();
  model.backward(dloss);
  EXPECT_EQ(groups.m_log, "P+0 G+0 P-0 P+3 G+3 G!3 P-3 P+2 G+2 G!2 P-2 P+1 G+1 G!1 P-1 G!0 ");
  for (const auto& [g, held] : groups.m_held) EXPECT_EQ(held, 0) << "group " << g << " not released";
  for (int g = 0; g < f.layout.num_groups(); ++g) {
    const auto [a, b] = f.layout.group_range(g);
    const std::vector<double> expected(f.grads.begin() + a, f.grads.begin() + b);
    EXPECT_EQ(groups.m_grads[g], expected) << "group " << g;
    EXPECT_EQ(groups.m_ready[g], expected) << "group " << g << " changed after grads_ready";
  }
}

// An empty micro-batch (a rank without samples) makes exactly the provider calls
// of a real one, so it takes part in every collective, and adds no gradient.
TEST(GptProvider, EmptyMicroBatchMakesTheSameCallsAndAddsNothing) {
  Fixture f;
  SeparateGroups real(f.layout, f.params), empty(f.layout, f.params);
  Gpt<double> a(f.dims, f.layout, 1e-5, f.memory), b(f.dims, f.layout, 1e-5, f.memory);
  a.bind(real);
  b.bind(empty);
  a.forward(f.tokens.data(), f.targets.data(), 2);
  a.backward(0.1);
  EXPECT_EQ(b.forward(nullptr, nullptr, 0), 0.0);
  b.backward(0.1);
  EXPECT_EQ(real.m_log, empty.m_log);
  for (const auto& g : empty.m_grads)
    for (double x : g) ASSERT_EQ(x, 0.0);
}

// Every recompute policy gives bitwise the loss and the gradient of "none", over
// two micro-batches (the second one smaller), with 7 blocks so that sqrt (k = 3)
// has a short last segment and budget recomputes at more than one level; the
// arena is exactly the schedule's size. Float (BLAS) and double.
template <class T>
void check_recompute_policies() {
  GptDims d = tiny_dims();
  d.n_layer = 7;
  ParamLayout layout = gpt_layout(d);
  layout.finalize(1);
  std::vector<T> params(layout.padded_size());
  gpt_init_params<T>(layout, d, 0.5, 42, params.data(), 0, layout.padded_size());
  std::vector<TokenIndex> tokens, targets;
  for (std::int64_t i = 0; i < d.max_batch * d.seq_len; ++i) {
    tokens.push_back(static_cast<TokenIndex>((i * 5 + 3) % d.vocab));
    targets.push_back(static_cast<TokenIndex>((i * 3 + 1) % d.vocab));
  }
  const ChainCosts chain = gpt_chain_costs(d, sizeof(T));
  const std::int64_t none_peak = make_recompute_schedule(RecomputePolicy::None, chain)->peak_bytes;
  const std::int64_t least = min_recompute_peak(chain);
  std::vector<RecomputeSchedule> schedules = {*make_recompute_schedule(RecomputePolicy::None, chain),
                                              *make_recompute_schedule(RecomputePolicy::Full, chain),
                                              *make_recompute_schedule(RecomputePolicy::Sqrt, chain)};
  for (double frac : {0.0, 0.2, 0.5, 0.8})
    schedules.push_back(*make_recompute_schedule(
        RecomputePolicy::Budget, chain, least + static_cast<std::int64_t>(frac * static_cast<double>(none_peak - least))));
  std::vector<T> reference;
  double reference_loss = 0;
  for (const auto& schedule : schedules) {
    MemoryTracker memory;
    std::vector<T> grads(layout.padded_size(), T(0));
    Gpt<T> model(d, layout, 1e-5, memory, &schedule);
    EXPECT_EQ(memory.current(MemCategory::Activations),
              static_cast<std::size_t>(gpt_activation_elems(d, schedule)) * sizeof(T));
    model.bind(params.data(), grads.data());
    double loss = 0;
    for (std::int64_t batch : {3, 2}) {
      loss += model.forward(tokens.data(), targets.data(), batch);
      model.backward(T(0.1));
    }
    int recomputed = 0;
    for (std::size_t k = static_cast<std::size_t>(schedule.forward_ops_in_pass); k < schedule.ops.size(); ++k)
      recomputed += schedule.ops[k].kind == RecomputeOp::Kind::Forward;
    std::printf("%s %s: %d block forwards recomputed, activations %lld bytes\n", schedule.policy.c_str(),
                sizeof(T) == 8 ? "double" : "float", recomputed,
                static_cast<long long>(gpt_activation_elems(d, schedule) * static_cast<std::int64_t>(sizeof(T))));
    if (reference.empty()) {
      reference = grads;
      reference_loss = loss;
      continue;
    }
    EXPECT_EQ(loss, reference_loss) << schedule.policy;
    for (std::size_t i = 0; i < grads.size(); ++i)
      ASSERT_EQ(grads[i], reference[i]) << schedule.policy << " element " << i;
  }
}

TEST(GptRecompute, EveryPolicyGivesBitwiseTheGradientOfNone) {
  check_recompute_policies<float>();
  check_recompute_policies<double>();
}

// model.gelu = "epilogue" (GptDims::gelu_epilogue): the blocks call ModelOps'
// linear_gelu_forward / linear_dgelu_backward, whose host default is exactly the
// separate ops, so on the host the loss and every gradient are bitwise those of
// the separate GELU pass, with and without recompute (fc_pre rewritten by the
// recomputed forward), over two micro-batches.
template <class T>
std::pair<double, std::vector<T>> gelu_run(bool epilogue, RecomputePolicy policy) {
  GptDims d = tiny_dims();
  d.n_layer = 3;
  d.gelu_epilogue = epilogue;
  ParamLayout layout = gpt_layout(d);
  layout.finalize(1);
  std::vector<T> params(layout.padded_size()), grads(layout.padded_size(), T(0));
  gpt_init_params<T>(layout, d, 0.5, 42, params.data(), 0, layout.padded_size());
  std::vector<TokenIndex> tokens, targets;
  for (std::int64_t i = 0; i < d.max_batch * d.seq_len; ++i) {
    tokens.push_back(static_cast<TokenIndex>((i * 5 + 3) % d.vocab));
    targets.push_back(static_cast<TokenIndex>((i * 3 + 1) % d.vocab));
  }
  const auto schedule = make_recompute_schedule(policy, gpt_chain_costs(d, sizeof(T)));
  MemoryTracker memory;
  Gpt<T> model(d, layout, 1e-5, memory, &*schedule);
  model.bind(params.data(), grads.data());
  double loss = 0;
  for (std::int64_t batch : {3, 2}) {
    loss += model.forward(tokens.data(), targets.data(), batch);
    model.backward(T(0.1f));
  }
  return {loss, grads};
}

template <class T>
void check_gelu_epilogue_on_host() {
  const auto [loss, grads] = gelu_run<T>(false, RecomputePolicy::None);
  for (const RecomputePolicy policy : {RecomputePolicy::None, RecomputePolicy::Full}) {
    const auto [fused_loss, fused_grads] = gelu_run<T>(true, policy);
    EXPECT_EQ(fused_loss, loss) << name_of(policy);
    ASSERT_EQ(fused_grads.size(), grads.size());
    EXPECT_EQ(std::memcmp(fused_grads.data(), grads.data(), grads.size() * sizeof(T)), 0)
        << "the GELU-epilogue entries changed the host gradients, recompute " << name_of(policy);
  }
}

TEST(GptGeluEpilogue, HostEntriesAreBitwiseTheSeparatePass) {
  check_gelu_epilogue_on_host<float>();
  check_gelu_epilogue_on_host<double>();
}

// The activation arena is sized from the plan and counted by the tracker.
TEST(GptMemory, ArenaMatchesPlan) {
  Fixture f;
  Gpt<float> model(f.dims, f.layout, 1e-5, f.memory);
  const auto plan = gpt_activation_plan(f.dims);
  EXPECT_EQ(f.memory.current(MemCategory::Activations),
            static_cast<std::size_t>(plan.activations()) * sizeof(float));  // policy none
  EXPECT_EQ(f.memory.current(MemCategory::Workspace),
            static_cast<std::size_t>(plan.workspace) * sizeof(float));
}

// model.attention = "fused" in the plan: a block keeps qkv and the rows' fp32 statistics
// (2 elements each, 16-bit storage) plus 32 alignment elements instead of the
// unfused kernels' (B, H, T, T) probabilities, and the blocks' workspace has no
// attention scratch (cuDNN's lives in the device ops). Written out from the shapes.
TEST(GptMemory, FusedAttentionPlansNoScoresPerBlock) {
  GptDims d;
  d.n_layer = 3;
  d.channels = 64;
  d.n_head = 4;
  d.seq_len = 48;
  d.vocab = 83;
  d.max_batch = 5;
  const auto unfused = gpt_activation_plan(d);
  d.fused_attention = true;
  const auto fused = gpt_activation_plan(d);
  const std::int64_t b = 5, t = 48, c = 64, h = 4;
  EXPECT_EQ(unfused.per_block - fused.per_block, (3 * b * t * c + b * h * t * t) - (3 * b * t * c + 2 * b * h * t + 32));
  EXPECT_EQ(unfused.workspace - fused.workspace,
            attention_workspace_elems(AttentionShape{b, t, c, h}));
  EXPECT_EQ(fused.head, unfused.head);
  EXPECT_LT(fused.activations(), unfused.activations());
}

// model.attention = "flash" (our tiled kernels) plans the same as "fused": qkv and the
// rows' log-sum-exp per block, no scores anywhere; so the plan counts what it keeps.
TEST(GptMemory, FlashAttentionPlansAsFused) {
  GptDims d;
  d.n_layer = 3;
  d.channels = 64;
  d.n_head = 4;
  d.seq_len = 47;  // flash takes any T
  d.vocab = 83;
  d.max_batch = 5;
  const auto unfused = gpt_activation_plan(d);
  d.flash_attention = true;
  const auto flash = gpt_activation_plan(d);
  const std::int64_t b = 5, t = 47, c = 64, h = 4;
  EXPECT_EQ(unfused.per_block - flash.per_block, (3 * b * t * c + b * h * t * t) - (3 * b * t * c + 2 * b * h * t + 32));
  EXPECT_EQ(unfused.workspace - flash.workspace, attention_workspace_elems(AttentionShape{b, t, c, h}));
  EXPECT_EQ(flash.head, unfused.head);
}

}  // namespace
}  // namespace shardtrain
