// EncoderClassifier: layout and groups, initialisation independent of the
// range split, the whole-model gradient against float64 central differences
// (every parameter; Cls and Mean pooling; dropout off and on), padding
// invariance (bitwise), micro-batch split equivalence with dropout, ignored
// labels, an empty micro-batch, fp32 / 16-bit against fp64, dims errors, and
// the tracker's Activations / Workspace peaks equal to encoder_costs<T>; the same
// gradient checks, precision and memory checks for the BERT family's layouts
// (Bert, Distilbert: post-LayerNorm, embedding LayerNorm, token types, pooler /
// pre-classifier; a position table longer than the sequence), and their tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "gradcheck.hpp"
#include "model/encoder_classifier.hpp"

namespace shardtrain {
namespace {

constexpr TokenIndex kPad = 10, kCls = 9;

EncoderDims tiny_dims(EncoderDims::Pooling pooling, double dropout, EncoderLayout layout = EncoderLayout::PreLn) {
  EncoderDims d;
  d.layout = layout;
  if (layout != EncoderLayout::PreLn) d.positions = 9;  // more rows than T = 6 (max_position_embeddings)
  d.vocab = 11; d.seq_len = 6; d.n_layer = 2; d.channels = 8; d.n_head = 2; d.classes = 3; d.max_batch = 4;
  d.pooling = pooling;
  d.dropout = dropout;
  d.dropout_seed = 77;
  return d;
}

struct Fixture {
  EncoderDims dims;
  ParamLayout layout;
  MemoryTracker memory;
  std::vector<double> params, grads;
  std::vector<TokenIndex> tokens;
  std::vector<std::int32_t> lengths{1, 6, 3, 5};
  std::vector<TokenIndex> labels{2, 0, 1, 2};
  explicit Fixture(EncoderDims d) : dims(d), layout(encoder_layout(d)) {
    layout.finalize(1);
    params.assign(static_cast<std::size_t>(layout.padded_size()), 0.0);
    grads.assign(params.size(), 0.0);
    encoder_init_params<double>(layout, dims, 0.3, 5, params.data(), 0, layout.padded_size());
    std::mt19937 gen(3);
    std::normal_distribution<double> jitter(0.0, 0.1);  // LayerNorm weights and biases away from 1 / 0
    for (const auto& e : layout.entries())
      if (e.name.find("ln_") != std::string::npos || e.name.ends_with(".bias"))
        for (std::int64_t i = 0; i < e.numel; ++i) params[e.offset + i] += jitter(gen);
    std::uniform_int_distribution<int> tok(0, 8);
    for (int b = 0; b < 4; ++b)
      for (int t = 0; t < 6; ++t) tokens.push_back(t == 0 ? kCls : t < lengths[b] ? tok(gen) : kPad);
  }
  SampleBatch batch(std::int64_t first, std::int64_t n, bool training, std::uint64_t first_sample) const {
    SampleBatch b;
    b.batch = n;
    b.tokens = tokens.data() + first * 6;
    b.lengths = lengths.data() + first;
    b.labels = labels.data() + first;
    b.training = training;
    b.first_sample = first_sample;
    return b;
  }
};

TEST(EncoderLayout, NamesShapesGroupsAndDecay) {
  Fixture f(tiny_dims(EncoderDims::Pooling::Cls, 0.0));
  const auto& e = f.layout.entries();
  ASSERT_EQ(e.size(), 2u + 12u * 2u + 4u);
  EXPECT_EQ(e[0].name, "wte.weight");
  EXPECT_EQ(e[1].name, "wpe.weight");
  EXPECT_EQ(e[2].name, "h.0.ln_1.weight");
  EXPECT_EQ(e[2].group, 1);
  EXPECT_EQ(e[4].name, "h.0.attn.c_attn.weight");
  EXPECT_TRUE(e[4].weight_decay);
  EXPECT_EQ(e[26].name, "ln_f.weight");
  EXPECT_EQ(e[28].name, "head.weight");
  EXPECT_EQ(e[28].shape, (std::vector<std::int64_t>{3, 8}));
  EXPECT_TRUE(e[28].weight_decay);
  EXPECT_EQ(e[29].name, "head.bias");
  EXPECT_FALSE(e[29].weight_decay);
  EXPECT_EQ(e[29].group, 3);
}

TEST(EncoderDims, ErrorsAreInputErrors) {
  auto d = tiny_dims(EncoderDims::Pooling::Cls, 0.0);
  d.n_head = 3;
  EXPECT_THROW(encoder_check_dims(d), InputError);
  d = tiny_dims(EncoderDims::Pooling::Cls, 1.0);
  EXPECT_THROW(encoder_check_dims(d), InputError);
  d = tiny_dims(EncoderDims::Pooling::Cls, 0.0);
  d.classes = 1;
  EXPECT_THROW(encoder_layout(d), InputError);
}

TEST(EncoderInit, IndependentOfSplit) {
  Fixture f(tiny_dims(EncoderDims::Pooling::Mean, 0.0));
  const std::int64_t n = f.layout.padded_size();
  std::vector<float> whole(n), part(n);
  encoder_init_params<float>(f.layout, f.dims, 0.02, 9, whole.data(), 0, n);
  encoder_init_params<float>(f.layout, f.dims, 0.02, 9, part.data(), 0, 333);
  encoder_init_params<float>(f.layout, f.dims, 0.02, 9, part.data() + 333, 333, n);
  EXPECT_EQ(whole, part);
  EXPECT_EQ(whole[f.layout.entries()[2].offset], 1.0f);   // ln_1.weight
  EXPECT_EQ(whole[f.layout.entries()[29].offset], 0.0f);  // head.bias
}

void gradient_check(EncoderDims::Pooling pooling, double dropout, const char* label,
                    EncoderLayout layout = EncoderLayout::PreLn) {
  Fixture f(tiny_dims(pooling, dropout, layout));
  EncoderClassifier<double> model(f.dims, f.layout, 1e-5, f.memory);
  model.bind(f.params.data(), f.grads.data());
  const double dloss = 0.25;
  auto objective = [&] { return dloss * model.forward(f.batch(0, 4, true, 40)); };
  objective();
  model.backward(dloss);
  const std::vector<double> analytic = f.grads;
  const std::vector<double> numeric =
      test::numeric_gradient([&](std::span<const double>) { return objective(); }, f.params, 1e-6);
  const auto all = test::compare_gradients(analytic, numeric, 1e-3);
  std::printf("encoder whole-model gradient (%s): %s\n", label, all.describe().c_str());
  EXPECT_LE(all.max_rel_error, 1e-5) << label;
  EXPECT_LE(all.norm_rel_error, 1e-7) << label;
  double norm = 0;
  for (double g : analytic) norm += g * g;
  EXPECT_GT(norm, 1e-6);
}

TEST(EncoderGradient, ClsNoDropout) { gradient_check(EncoderDims::Pooling::Cls, 0.0, "cls, p=0"); }
TEST(EncoderGradient, MeanNoDropout) { gradient_check(EncoderDims::Pooling::Mean, 0.0, "mean, p=0"); }
TEST(EncoderGradient, ClsDropout) { gradient_check(EncoderDims::Pooling::Cls, 0.2, "cls, p=0.2"); }
TEST(EncoderGradient, MeanDropout) { gradient_check(EncoderDims::Pooling::Mean, 0.2, "mean, p=0.2"); }
TEST(EncoderGradient, BertNoDropout) {
  gradient_check(EncoderDims::Pooling::Cls, 0.0, "bert, p=0", EncoderLayout::Bert);
}
TEST(EncoderGradient, BertDropout) {
  gradient_check(EncoderDims::Pooling::Cls, 0.2, "bert, p=0.2", EncoderLayout::Bert);
}
TEST(EncoderGradient, DistilbertNoDropout) {
  gradient_check(EncoderDims::Pooling::Cls, 0.0, "distilbert, p=0", EncoderLayout::Distilbert);
}
TEST(EncoderGradient, DistilbertDropout) {
  gradient_check(EncoderDims::Pooling::Cls, 0.2, "distilbert, p=0.2", EncoderLayout::Distilbert);
}

TEST(EncoderLayout, BertFamilyTensors) {
  Fixture bert(tiny_dims(EncoderDims::Pooling::Cls, 0.0, EncoderLayout::Bert));
  const auto& e = bert.layout.entries();
  ASSERT_EQ(e.size(), 5u + 12u * 2u + 4u);
  EXPECT_EQ(e[1].shape, (std::vector<std::int64_t>{9, 8}));  // wpe: max_positions rows
  EXPECT_EQ(e[2].name, "wtt.weight");
  EXPECT_EQ(e[2].shape, (std::vector<std::int64_t>{kBertTypeVocab, 8}));
  EXPECT_EQ(e[3].name, "ln_emb.weight");
  EXPECT_EQ(e[4].group, 0);
  EXPECT_EQ(e[5].name, "h.0.ln_1.weight");
  EXPECT_EQ(e[29].name, "pooler.weight");
  EXPECT_EQ(e[29].shape, (std::vector<std::int64_t>{8, 8}));
  EXPECT_EQ(e[29].group, 3);
  EXPECT_EQ(e[31].name, "head.weight");
  Fixture distil(tiny_dims(EncoderDims::Pooling::Cls, 0.0, EncoderLayout::Distilbert));
  const auto& d = distil.layout.entries();
  ASSERT_EQ(d.size(), 4u + 12u * 2u + 4u);
  EXPECT_EQ(d[2].name, "ln_emb.weight");
  EXPECT_EQ(d[28].name, "pre_classifier.weight");
  EXPECT_EQ(encoder_embedding_tensors(distil.dims), 4);
  // Mean pooling and a short position table are refused by name.
  auto bad = tiny_dims(EncoderDims::Pooling::Mean, 0.0, EncoderLayout::Bert);
  EXPECT_THROW(encoder_check_dims(bad), InputError);
  bad = tiny_dims(EncoderDims::Pooling::Cls, 0.0, EncoderLayout::Distilbert);
  bad.positions = 5;
  EXPECT_THROW(encoder_check_dims(bad), InputError);
}

// Post-LayerNorm is not pre-LayerNorm: the same parameters (the BERT family's
// extra tensors aside) give other logits, so the layout choice reaches the blocks.
TEST(EncoderForward, PostLayerNormDiffersFromPreLayerNorm) {
  Fixture bert(tiny_dims(EncoderDims::Pooling::Cls, 0.0, EncoderLayout::Distilbert));
  auto dims_pre = bert.dims;
  dims_pre.layout = EncoderLayout::PreLn;
  dims_pre.positions = 0;
  Fixture pre(dims_pre);
  EncoderClassifier<double> a(bert.dims, bert.layout, 1e-5, bert.memory);
  EncoderClassifier<double> b(pre.dims, pre.layout, 1e-5, pre.memory);
  a.bind(bert.params.data(), bert.grads.data());
  b.bind(pre.params.data(), pre.grads.data());
  EXPECT_NE(a.forward(bert.batch(0, 4, false, 0)), b.forward(pre.batch(0, 4, false, 0)));
}

TEST(EncoderForward, PaddingDoesNotMatterBitwise) {
  for (auto pooling : {EncoderDims::Pooling::Cls, EncoderDims::Pooling::Mean}) {
    Fixture a(tiny_dims(pooling, 0.1)), b(tiny_dims(pooling, 0.1));
    for (int r = 0; r < 4; ++r)
      for (int t = b.lengths[r]; t < 6; ++t) b.tokens[r * 6 + t] = static_cast<TokenIndex>((r + t) % 9);
    EncoderClassifier<double> ma(a.dims, a.layout, 1e-5, a.memory), mb(b.dims, b.layout, 1e-5, b.memory);
    ma.bind(a.params.data(), a.grads.data());
    mb.bind(b.params.data(), b.grads.data());
    EXPECT_EQ(ma.forward(a.batch(0, 4, true, 8)), mb.forward(b.batch(0, 4, true, 8)));
    ma.backward(1.0);
    mb.backward(1.0);
    EXPECT_EQ(a.grads, b.grads);
  }
}

TEST(EncoderForward, MicroBatchSplitAndDropoutMasksAgree) {
  Fixture a(tiny_dims(EncoderDims::Pooling::Mean, 0.3)), b(tiny_dims(EncoderDims::Pooling::Mean, 0.3));
  EncoderClassifier<double> whole(a.dims, a.layout, 1e-5, a.memory), split(b.dims, b.layout, 1e-5, b.memory);
  whole.bind(a.params.data(), a.grads.data());
  split.bind(b.params.data(), b.grads.data());
  const double la = whole.forward(a.batch(0, 4, true, 100));
  whole.backward(1.0);
  double lb = split.forward(b.batch(0, 2, true, 100));
  split.backward(1.0);
  lb += split.forward(b.batch(2, 2, true, 102));
  split.backward(1.0);
  EXPECT_NEAR(la, lb, 1e-12);
  for (std::size_t i = 0; i < a.grads.size(); ++i) ASSERT_NEAR(a.grads[i], b.grads[i], 1e-12) << i;
  // Dropout is on: another first_sample gives another loss; eval mode is deterministic.
  EXPECT_NE(whole.forward(a.batch(0, 4, true, 200)), la);
  EXPECT_EQ(whole.forward(a.batch(0, 4, false, 1)), whole.forward(a.batch(0, 4, false, 2)));
}

TEST(EncoderForward, IgnoredLabelsAddNothing) {
  Fixture a(tiny_dims(EncoderDims::Pooling::Cls, 0.0)), c(tiny_dims(EncoderDims::Pooling::Cls, 0.0));
  a.labels[2] = -1;
  EncoderClassifier<double> m4(a.dims, a.layout, 1e-5, a.memory);
  m4.bind(a.params.data(), a.grads.data());
  const double l4 = m4.forward(a.batch(0, 4, false, 0));
  m4.backward(1.0);
  // Rows 0, 1, 3 alone.
  for (auto* v : {&c.tokens}) v->erase(v->begin() + 12, v->begin() + 18);
  c.lengths.erase(c.lengths.begin() + 2);
  c.labels = {2, 0, 2};
  EncoderClassifier<double> m3(c.dims, c.layout, 1e-5, c.memory);
  m3.bind(c.params.data(), c.grads.data());
  EXPECT_NEAR(m3.forward(c.batch(0, 3, false, 0)), l4, 1e-12);
  m3.backward(1.0);
  for (std::size_t i = 0; i < a.grads.size(); ++i) ASSERT_NEAR(a.grads[i], c.grads[i], 1e-12) << i;
}

TEST(EncoderForward, EmptyMicroBatchComputesNothing) {
  Fixture f(tiny_dims(EncoderDims::Pooling::Mean, 0.1));
  EncoderClassifier<double> model(f.dims, f.layout, 1e-5, f.memory);
  model.bind(f.params.data(), f.grads.data());
  SampleBatch empty;
  EXPECT_EQ(model.forward(empty), 0.0);
  model.backward(1.0);
  for (double g : f.grads) EXPECT_EQ(g, 0.0);
  auto big = f.batch(0, 4, false, 0);
  big.batch = 5;
  EXPECT_THROW(model.forward(big), Error);
  auto bad = f.batch(0, 4, false, 0);
  std::vector<std::int32_t> lens{1, 7, 2, 2};
  bad.lengths = lens.data();
  EXPECT_THROW(model.forward(bad), Error);
}

template <class T>
void lower_precision_matches(EncoderDims::Pooling pooling, double tol, EncoderLayout layout = EncoderLayout::PreLn) {
  Fixture f(tiny_dims(pooling, 0.1, layout));
  EncoderClassifier<double> ref(f.dims, f.layout, 1e-5, f.memory);
  ref.bind(f.params.data(), f.grads.data());
  const double want = ref.forward(f.batch(0, 4, true, 3));
  ref.backward(1.0);
  std::vector<T> p(f.params.size()), g(f.params.size(), T(0.0f));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = T(static_cast<float>(f.params[i]));
  MemoryTracker memory;
  EncoderClassifier<T> model(f.dims, f.layout, 1e-5, memory);
  model.bind(p.data(), g.data());
  EXPECT_NEAR(model.forward(f.batch(0, 4, true, 3)), want, tol * std::abs(want));
  model.backward(T(1.0f));
  double num = 0, den = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double d = static_cast<double>(static_cast<float>(g[i])) - f.grads[i];
    num += d * d;
    den += f.grads[i] * f.grads[i];
  }
  std::printf("encoder %zu-byte vs fp64: gradient rel. L2 error %.3g\n", sizeof(T), std::sqrt(num / den));
  EXPECT_LT(std::sqrt(num / den), tol);
  std::vector<float> logits;
  model.logits(logits);
  EXPECT_EQ(logits.size(), 12u);
}

TEST(EncoderPrecision, Fp32AndSixteenBitMatchFp64) {
  for (auto pooling : {EncoderDims::Pooling::Cls, EncoderDims::Pooling::Mean}) {
    lower_precision_matches<float>(pooling, 1e-5);
    lower_precision_matches<bf16>(pooling, 5e-2);
    lower_precision_matches<f16>(pooling, 1e-2);
  }
  for (auto layout : {EncoderLayout::Bert, EncoderLayout::Distilbert}) {
    lower_precision_matches<float>(EncoderDims::Pooling::Cls, 1e-5, layout);
    lower_precision_matches<bf16>(EncoderDims::Pooling::Cls, 5e-2, layout);
    lower_precision_matches<f16>(EncoderDims::Pooling::Cls, 1e-2, layout);
  }
}

template <class T>
void memory_matches_costs(EncoderLayout kind = EncoderLayout::PreLn) {
  EncoderDims d = tiny_dims(kind == EncoderLayout::PreLn ? EncoderDims::Pooling::Mean : EncoderDims::Pooling::Cls,
                            0.1, kind);
  d.max_batch = 3;
  ParamLayout layout = encoder_layout(d);
  layout.finalize(1);
  std::vector<T> p(layout.padded_size(), T(0.01f)), g(layout.padded_size(), T(0.0f));
  MemoryTracker memory;
  const ClassifierCosts c = encoder_costs<T>(d);
  {
    EncoderClassifier<T> model(d, layout, 1e-5, memory);
    model.bind(p.data(), g.data());
    std::vector<TokenIndex> tokens(3 * 6, 1), labels{0, 1, 2};
    std::vector<std::int32_t> lengths{2, 6, 1};
    SampleBatch b;
    b.batch = 3; b.tokens = tokens.data(); b.lengths = lengths.data(); b.labels = labels.data(); b.training = true;
    EXPECT_EQ(model.activation_high_water_bytes(), 0);  // nothing written yet
    model.forward(b);
    model.backward(T(1.0f));
    // No recompute schedule: the measured activations are the fixed arena, the plan.
    EXPECT_EQ(model.activation_high_water_bytes(), c.activation_bytes);
  }
  EXPECT_EQ(static_cast<std::int64_t>(memory.peak(MemCategory::Activations)), c.activation_bytes);
  EXPECT_EQ(static_cast<std::int64_t>(memory.peak(MemCategory::Workspace)), c.workspace_bytes);
  EXPECT_GT(c.forward_flops, 0.0);
}

TEST(EncoderMemory, TrackerPeaksEqualCosts) {
  memory_matches_costs<float>();
  memory_matches_costs<bf16>();
  for (auto layout : {EncoderLayout::Bert, EncoderLayout::Distilbert}) {
    memory_matches_costs<float>(layout);
    memory_matches_costs<bf16>(layout);
  }
}

// Timing only (not run by ctest): L=2 C=128 H=4 T=512, batch 16, fp32,
// forward + backward, median of 5. Run with --gtest_also_run_disabled_tests.
TEST(EncoderBench, DISABLED_ForwardBackwardFp32) {
  EncoderDims d;
  d.vocab = 258; d.seq_len = 512; d.n_layer = 2; d.channels = 128; d.n_head = 4; d.classes = 2; d.max_batch = 16;
  d.pooling = EncoderDims::Pooling::Cls;
  ParamLayout layout = encoder_layout(d);
  layout.finalize(1);
  std::vector<float> p(layout.padded_size()), g(layout.padded_size(), 0.0f);
  encoder_init_params<float>(layout, d, 0.02, 1, p.data(), 0, layout.padded_size());
  MemoryTracker memory;
  EncoderClassifier<float> model(d, layout, 1e-5, memory);
  model.bind(p.data(), g.data());
  std::vector<TokenIndex> tokens(16 * 512, 65), labels(16, 1);
  std::vector<std::int32_t> lengths(16, 512);
  SampleBatch b;
  b.batch = 16; b.tokens = tokens.data(); b.lengths = lengths.data(); b.labels = labels.data();
  std::vector<double> ms;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    model.forward(b);
    model.backward(1.0f);
    const auto t1 = std::chrono::steady_clock::now();
    if (i > 0) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("encoder L2 C128 H4 T512 B16 fp32 forward+backward: median %.1f ms (min %.1f, max %.1f)\n", ms[2],
              ms.front(), ms.back());
}

}  // namespace
}  // namespace shardtrain
