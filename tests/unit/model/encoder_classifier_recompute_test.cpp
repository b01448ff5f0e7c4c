// EncoderClassifier under the recompute scheduler (model/block_chain.hpp):
// every policy (full, sqrt, budget at several budgets) gives bitwise the loss
// and every gradient of "none", for each layout (pre_ln, bert, distilbert), in
// fp32 and bf16, with dropout on inside the blocks (a recomputed block must draw
// the masks of its first forward), over two micro-batches of different sizes and
// sample offsets with an evaluation forward (no backward) between them; the
// arena is the schedule's plan (encoder_activation_bytes) and the measured
// activation high-water equals it; encoder_costs' chain is the blocks'.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "model/block_chain.hpp"
#include "model/encoder_classifier.hpp"
#include "model/recompute.hpp"

namespace shardtrain {
namespace {

constexpr TokenIndex kPad = 10, kCls = 9;
constexpr std::int64_t kT = 6;

EncoderDims chain_dims(EncoderLayout layout) {
  EncoderDims d;
  d.layout = layout;
  d.vocab = 11; d.seq_len = kT; d.channels = 8; d.n_head = 2; d.classes = 3; d.max_batch = 4;
  // 7 blocks: sqrt (k = 3) has a short last segment and budget recomputes at
  // more than one level.
  d.n_layer = 7;
  d.pooling = layout == EncoderLayout::PreLn ? EncoderDims::Pooling::Mean : EncoderDims::Pooling::Cls;
  d.dropout = 0.2;
  d.dropout_seed = 77;
  return d;
}

const char* layout_name(EncoderLayout l) {
  switch (l) {
    case EncoderLayout::PreLn: return "pre_ln";
    case EncoderLayout::Bert: return "bert";
    case EncoderLayout::Distilbert: return "distilbert";
  }
  return "?";
}

struct Data {
  std::vector<TokenIndex> tokens;
  std::vector<std::int32_t> lengths{1, 6, 3, 5};
  std::vector<TokenIndex> labels{2, 0, 1, 2};
  Data() {
    std::mt19937 gen(3);
    std::uniform_int_distribution<int> tok(0, 8);
    for (int b = 0; b < 4; ++b)
      for (int t = 0; t < kT; ++t) tokens.push_back(t == 0 ? kCls : t < lengths[b] ? tok(gen) : kPad);
  }
  SampleBatch batch(std::int64_t n, bool training, std::uint64_t first_sample) const {
    SampleBatch b;
    b.batch = n;
    b.tokens = tokens.data();
    b.lengths = lengths.data();
    b.labels = labels.data();
    b.training = training;
    b.first_sample = first_sample;
    return b;
  }
};

std::vector<RecomputeSchedule> schedules_of(const ChainCosts& chain) {
  const std::int64_t none_peak = make_recompute_schedule(RecomputePolicy::None, chain)->peak_bytes;
  const std::int64_t least = min_recompute_peak(chain);
  std::vector<RecomputeSchedule> s = {*make_recompute_schedule(RecomputePolicy::None, chain),
                                      *make_recompute_schedule(RecomputePolicy::Full, chain),
                                      *make_recompute_schedule(RecomputePolicy::Sqrt, chain)};
  for (double frac : {0.0, 0.3, 0.7})
    s.push_back(*make_recompute_schedule(RecomputePolicy::Budget, chain,
                                         least + static_cast<std::int64_t>(frac * static_cast<double>(none_peak - least))));
  return s;
}

template <class T>
void check_policies(EncoderLayout kind) {
  const EncoderDims d = chain_dims(kind);
  ParamLayout layout = encoder_layout(d);
  layout.finalize(1);
  std::vector<T> params(layout.padded_size());
  encoder_init_params<T>(layout, d, 0.3, 5, params.data(), 0, layout.padded_size());
  const Data data;
  const ClassifierCosts costs = encoder_costs<T>(d);
  ASSERT_EQ(costs.chain.size(), d.n_layer);
  EXPECT_EQ(costs.kept_activation_bytes + make_recompute_schedule(RecomputePolicy::None, costs.chain)->peak_bytes,
            costs.activation_bytes);
  std::vector<T> reference;
  double reference_loss = 0;
  std::string label = std::string(layout_name(kind)) + (sizeof(T) == 4 ? " fp32" : " bf16");
  for (const RecomputeSchedule& schedule : schedules_of(costs.chain)) {
    MemoryTracker memory;
    std::vector<T> grads(layout.padded_size(), T(0.0f));
    EncoderClassifier<T> model(d, layout, 1e-5, memory, &schedule);
    const std::int64_t planned = encoder_activation_bytes<T>(d, schedule);
    EXPECT_EQ(planned, costs.kept_activation_bytes + schedule.peak_bytes) << label << " " << schedule.policy;
    EXPECT_EQ(static_cast<std::int64_t>(memory.current(MemCategory::Activations)), planned)
        << label << " " << schedule.policy;
    model.bind(params.data(), grads.data());
    double loss = model.forward(data.batch(4, true, 40));
    model.backward(T(0.5f));
    const double eval = model.forward(data.batch(4, false, 0));  // no backward: the next forward starts afresh
    loss += model.forward(data.batch(3, true, 44));
    model.backward(T(0.5f));
    // Measured against the plan: the stack rose as high as planned.
    EXPECT_EQ(model.activation_high_water_bytes(), planned) << label << " " << schedule.policy;
    int recomputed = 0;
    for (std::size_t k = static_cast<std::size_t>(schedule.forward_ops_in_pass); k < schedule.ops.size(); ++k)
      recomputed += schedule.ops[k].kind == RecomputeOp::Kind::Forward;
    std::printf("%s %s: %d block forwards recomputed, activations %lld bytes, loss %.17g\n", label.c_str(),
                schedule.policy.c_str(), recomputed, static_cast<long long>(planned), loss);
    if (reference.empty()) {
      reference = grads;
      reference_loss = loss;
      EXPECT_NE(eval, model.forward(data.batch(4, true, 0))) << "dropout must be on in training";
      continue;
    }
    EXPECT_GT(recomputed, 0) << label << " " << schedule.policy;
    EXPECT_EQ(loss, reference_loss) << label << " " << schedule.policy;
    ASSERT_EQ(std::memcmp(grads.data(), reference.data(), grads.size() * sizeof(T)), 0)
        << label << " " << schedule.policy << ": gradients differ from \"none\"";
  }
  double norm = 0;
  for (const T& g : reference) norm += static_cast<double>(static_cast<float>(g)) * static_cast<float>(g);
  EXPECT_GT(norm, 1e-8) << label;
}

TEST(EncoderRecompute, EveryPolicyGivesBitwiseTheGradientOfNonePreLn) {
  check_policies<float>(EncoderLayout::PreLn);
  check_policies<bf16>(EncoderLayout::PreLn);
}
TEST(EncoderRecompute, EveryPolicyGivesBitwiseTheGradientOfNoneBert) {
  check_policies<float>(EncoderLayout::Bert);
  check_policies<bf16>(EncoderLayout::Bert);
}
TEST(EncoderRecompute, EveryPolicyGivesBitwiseTheGradientOfNoneDistilbert) {
  check_policies<float>(EncoderLayout::Distilbert);
  check_policies<bf16>(EncoderLayout::Distilbert);
}

// The chain is the blocks' (transformer_chain_costs, bidirectional), its rest
// the head's FLOPs over the micro-batch; under "none" the arena is the old one.
TEST(EncoderRecompute, CostsAreTheBlocksChain) {
  const EncoderDims d = chain_dims(EncoderLayout::Distilbert);
  const ClassifierCosts c = encoder_costs<float>(d);
  TransformerBlockShape s{d.max_batch, d.seq_len, d.channels, d.n_head};
  s.post_ln = true;
  const ChainCosts want = transformer_chain_costs(s, d.n_layer, 4, /*causal=*/false);
  EXPECT_EQ(c.chain.saved_bytes, want.saved_bytes);
  EXPECT_EQ(c.chain.output_bytes, want.output_bytes);
  EXPECT_EQ(c.chain.forward_flops, want.forward_flops);
  EXPECT_EQ(c.chain.saved_bytes[0], transformer_block_saved_elems(s) * 4);
  EXPECT_EQ(c.chain.output_bytes[0], d.max_batch * d.seq_len * d.channels * 4);
  EXPECT_GT(c.chain.other_forward_flops, 0.0);
  EXPECT_EQ(encoder_activation_bytes<float>(d, *make_recompute_schedule(RecomputePolicy::None, c.chain)),
            c.activation_bytes);
}

}  // namespace
}  // namespace shardtrain
