// Cnn: dims checks, layout, initialisation, the whole-model gradient against
// float64 central differences (every parameter, dropout off and on), micro-batch
// split equivalence (incl. dropout), ignored labels, an empty micro-batch, eval
// mode, fp32 / 16-bit storage against fp64, memory against cnn_costs, and a
// LeNet-sized forward + backward.
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
#include "model/cnn.hpp"

namespace shardtrain {
namespace {

constexpr std::int64_t kBatch = 4, kPixels = 1 * 8 * 8;

CnnDims small_dims(double dropout = 0.0) {
  CnnDims d;
  d.in_channels = 1;
  d.height = d.width = 8;
  d.convs = {{3, 3, 1}, {4, 3, 0}};  // 8x8 -> 8x8 -> pool 4x4 -> 2x2 -> pool 1x1
  d.pool = 2;
  d.hidden = {6};
  d.classes = 3;
  d.dropout = dropout;
  d.max_batch = kBatch;
  d.dropout_seed = 77;
  return d;
}

ParamLayout finalized(const CnnDims& d) {
  ParamLayout l = cnn_layout(d);
  l.finalize(1);
  return l;
}

struct Fixture {
  CnnDims dims;
  ParamLayout layout;
  MemoryTracker memory;
  std::vector<double> params, grads;
  std::vector<float> inputs;
  std::vector<TokenIndex> labels{2, 0, -1, 1};
  explicit Fixture(double dropout = 0.0) : dims(small_dims(dropout)), layout(finalized(dims)) {
    params.assign(static_cast<std::size_t>(layout.padded_size()), 0.0);
    grads.assign(params.size(), 0.0);
    cnn_init_params<double>(layout, 5, params.data(), 0, layout.padded_size());
    std::mt19937 gen(3);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (std::int64_t i = 0; i < kBatch * kPixels; ++i) inputs.push_back(u(gen));
    std::normal_distribution<double> jitter(0.0, 0.05);  // biases away from 0: no ReLU sits on its kink
    for (const auto& e : layout.entries())
      if (e.name.ends_with(".bias"))
        for (std::int64_t i = 0; i < e.numel; ++i) params[e.offset + i] = 0.1 + jitter(gen);
  }
  SampleBatch batch(std::int64_t first, std::int64_t n, bool training) const {
    SampleBatch b;
    b.batch = n;
    b.values = inputs.data() + first * kPixels;
    b.labels = labels.data() + first;
    b.training = training;
    b.first_sample = 1000 + static_cast<std::uint64_t>(first);
    return b;
  }
};

// Max relative error of the whole-model gradient against central differences.
double gradient_check(double dropout, bool training) {
  Fixture f(dropout);
  Cnn<double> model(f.dims, f.layout, f.memory);
  model.bind(f.params.data(), f.grads.data());
  const double dloss = 1.0 / 3.0;  // three valid labels
  const SampleBatch b = f.batch(0, kBatch, training);
  auto objective = [&] { return dloss * model.forward(b); };
  objective();
  model.backward(dloss);
  const std::vector<double> analytic = f.grads;
  const std::vector<double> numeric =
      test::numeric_gradient([&](std::span<const double>) { return objective(); }, f.params, 1e-6);
  double worst = 0;
  for (const auto& e : f.layout.entries()) {
    const auto r = test::compare_gradients(std::span(analytic).subspan(e.offset, e.numel),
                                           std::span(numeric).subspan(e.offset, e.numel), 1e-3);
    EXPECT_LE(r.max_rel_error, 1e-6) << e.name << ": " << r.describe();
    worst = std::max(worst, r.max_rel_error);
  }
  const auto all = test::compare_gradients(analytic, numeric, 1e-3);
  std::printf("cnn whole-model gradient (dropout %.2f, training %d): %s; worst per-tensor max_rel %.3g\n", dropout,
              int(training), all.describe().c_str(), worst);
  EXPECT_LE(all.norm_rel_error, 1e-7);
  double norm = 0;
  for (double g : analytic) norm += g * g;
  EXPECT_GT(norm, 1e-6);  // not trivially zero
  return worst;
}

TEST(CnnDimsCheck, NamesTheLayerThatDoesNotFit) {
  CnnDims d = small_dims();
  d.convs = {{3, 5, 0}, {4, 5, 0}};  // 8 -> 4 -> pool 2 -> conv 5 does not fit
  try {
    cnn_check_dims(d);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("conv.1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2x2 input"), std::string::npos) << e.what();
  }
  d.convs = {{3, 3, 1}, {4, 3, 0}, {2, 1, 0}};  // ... 1x1 -> conv ok -> pool 2 does not fit
  try {
    cnn_check_dims(d);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("max-pool after conv.2"), std::string::npos) << e.what();
  }
  d = small_dims();
  d.pool = 1;  // no pooling: fits
  EXPECT_NO_THROW(cnn_check_dims(d));
  d.classes = 1;
  EXPECT_THROW(cnn_check_dims(d), InputError);
  d = small_dims(1.0);
  EXPECT_THROW(cnn_check_dims(d), InputError);
  d = small_dims();
  d.convs[0].padding = -1;
  EXPECT_THROW(cnn_layout(d), InputError);
}

TEST(CnnLayout, NamesShapesGroupsAndDecay) {
  const ParamLayout l = finalized(small_dims());
  const auto& e = l.entries();
  ASSERT_EQ(e.size(), 8u);
  EXPECT_EQ(e[0].name, "conv.0.weight");
  EXPECT_EQ(e[0].shape, (std::vector<std::int64_t>{3, 1, 3, 3}));
  EXPECT_TRUE(e[0].weight_decay);
  EXPECT_EQ(e[1].name, "conv.0.bias");
  EXPECT_FALSE(e[1].weight_decay);
  EXPECT_EQ(e[2].shape, (std::vector<std::int64_t>{4, 3, 3, 3}));
  EXPECT_EQ(e[4].name, "fc.0.weight");
  EXPECT_EQ(e[4].shape, (std::vector<std::int64_t>{6, 4}));  // 4 channels x 1x1 after two pools
  EXPECT_EQ(e[6].shape, (std::vector<std::int64_t>{3, 6}));
  for (std::size_t i = 0; i < e.size(); ++i) EXPECT_EQ(e[i].group, static_cast<int>(i / 2)) << e[i].name;
  EXPECT_EQ(l.num_parameters(), 3 * 9 + 3 + 4 * 27 + 4 + 6 * 4 + 6 + 3 * 6 + 3);
}

TEST(CnnInit, HeNormalWithConvFanInIndependentOfSplit) {
  CnnDims d = small_dims();
  d.convs = {{32, 5, 2}};
  d.height = d.width = 16;
  const ParamLayout l = finalized(d);
  std::vector<float> whole(l.padded_size()), part(l.padded_size());
  cnn_init_params<float>(l, 9, whole.data(), 0, l.padded_size());
  for (std::int64_t lo = 0; lo < l.padded_size(); lo += 333)  // an odd split, unaligned to tensors
    cnn_init_params<float>(l, 9, part.data() + lo, lo, std::min(lo + 333, l.padded_size()));
  EXPECT_EQ(whole, part);
  const auto& w = l.entries()[0];  // (32, 1, 5, 5): fan_in 25
  double sum2 = 0;
  for (std::int64_t i = 0; i < w.numel; ++i) sum2 += double(whole[w.offset + i]) * whole[w.offset + i];
  EXPECT_NEAR(std::sqrt(sum2 / w.numel), std::sqrt(2.0 / 25), 0.1 * std::sqrt(2.0 / 25));
  const auto& b = l.entries()[1];
  for (std::int64_t i = 0; i < b.numel; ++i) EXPECT_EQ(whole[b.offset + i], 0.0f);
}

TEST(CnnGradient, MatchesCentralDifferencesFloat64) { EXPECT_LE(gradient_check(0.0, true), 1e-6); }

// Training-mode dropout: the masks are a pure function of (seed, layer, global
// sample), so every perturbed forward uses the same masks and FD is valid.
TEST(CnnGradient, MatchesCentralDifferencesWithDropout) { EXPECT_LE(gradient_check(0.4, true), 1e-6); }

TEST(CnnGradient, MicroBatchSplitEqualsWholeBatchIncludingDropout) {
  for (double p : {0.0, 0.5}) {
    Fixture a(p), b(p);
    Cnn<double> whole(a.dims, a.layout, a.memory);
    whole.bind(a.params.data(), a.grads.data());
    const double la = whole.forward(a.batch(0, 4, true));
    whole.backward(1.0);
    Cnn<double> split(b.dims, b.layout, b.memory);
    split.bind(b.params.data(), b.grads.data());
    double lb = split.forward(b.batch(0, 2, true));
    split.backward(1.0);
    lb += split.forward(b.batch(2, 2, true));
    split.backward(1.0);
    EXPECT_NEAR(la, lb, 1e-12) << "p " << p;
    double max_diff = 0;
    for (std::size_t i = 0; i < a.grads.size(); ++i) max_diff = std::max(max_diff, std::abs(a.grads[i] - b.grads[i]));
    EXPECT_LE(max_diff, 1e-12) << "p " << p;
  }
  // Dropout is on: a different first_sample gives other masks, so another loss.
  Fixture c(0.5);
  Cnn<double> m(c.dims, c.layout, c.memory);
  m.bind(c.params.data(), c.grads.data());
  SampleBatch b0 = c.batch(0, 4, true), b1 = b0;
  b1.first_sample += 4;
  const double l0 = m.forward(b0);
  EXPECT_NE(l0, m.forward(b1));
  EXPECT_EQ(l0, m.forward(b0));
}

TEST(CnnGradient, IgnoredLabelsAddNothing) {
  Fixture a, c;
  Cnn<double> whole(a.dims, a.layout, a.memory);
  whole.bind(a.params.data(), a.grads.data());
  const double la = whole.forward(a.batch(0, 4, false));
  whole.backward(1.0);
  // Sample 2 has label -1: dropping it changes nothing.
  Cnn<double> three(c.dims, c.layout, c.memory);
  three.bind(c.params.data(), c.grads.data());
  std::vector<float> in3(c.inputs.begin(), c.inputs.begin() + 2 * kPixels);
  in3.insert(in3.end(), c.inputs.begin() + 3 * kPixels, c.inputs.end());
  std::vector<TokenIndex> lab3{2, 0, 1};
  SampleBatch b;
  b.batch = 3;
  b.values = in3.data();
  b.labels = lab3.data();
  EXPECT_NEAR(three.forward(b), la, 1e-12);
  three.backward(1.0);
  for (std::size_t i = 0; i < a.grads.size(); ++i) EXPECT_NEAR(a.grads[i], c.grads[i], 1e-12) << i;
}

TEST(CnnForward, EmptyMicroBatchComputesNothing) {
  Fixture f(0.5);
  Cnn<double> model(f.dims, f.layout, f.memory);
  model.bind(f.params.data(), f.grads.data());
  SampleBatch b;
  b.training = true;
  EXPECT_EQ(model.forward(b), 0.0);
  model.backward(1.0);
  for (double g : f.grads) EXPECT_EQ(g, 0.0);
  b = f.batch(0, 4, true);
  b.batch = 5;
  EXPECT_THROW(model.forward(b), Error);
}

TEST(CnnForward, EvalIsDeterministicAndDropoutFree) {
  Fixture with(0.5), without(0.0);
  Cnn<double> a(with.dims, with.layout, with.memory), b(without.dims, without.layout, without.memory);
  a.bind(with.params.data(), with.grads.data());
  b.bind(without.params.data(), without.grads.data());
  SampleBatch eval = with.batch(0, 4, false);
  const double l1 = a.forward(eval);
  std::vector<float> g1, g2, g3;
  a.logits(g1);
  eval.first_sample += 123;  // the sample index does not matter in eval mode
  EXPECT_EQ(a.forward(eval), l1);
  a.logits(g2);
  EXPECT_EQ(g1, g2);
  EXPECT_EQ(b.forward(without.batch(0, 4, false)), l1);  // no dropout at all
  b.logits(g3);
  EXPECT_EQ(g1, g3);
  EXPECT_NE(a.forward(with.batch(0, 4, true)), l1);  // training does drop
}

template <class T>
void lower_precision_matches(const char* type, double tol, bool training) {
  Fixture f(training ? 0.3 : 0.0);
  Cnn<double> ref(f.dims, f.layout, f.memory);
  ref.bind(f.params.data(), f.grads.data());
  const double want = ref.forward(f.batch(0, 4, training));
  ref.backward(1.0);
  std::vector<T> p(f.params.size()), g(f.params.size(), T(0.0f));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = T(static_cast<float>(f.params[i]));
  Cnn<T> model(f.dims, f.layout, f.memory);
  model.bind(p.data(), g.data());
  const double got = model.forward(f.batch(0, 4, training));
  EXPECT_NEAR(got, want, tol * std::abs(want));
  model.backward(T(1.0f));
  double num = 0, den = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double d = static_cast<double>(static_cast<float>(g[i])) - f.grads[i];
    num += d * d;
    den += f.grads[i] * f.grads[i];
  }
  std::printf("cnn %s storage (dropout %d): loss rel err %.3g, gradient rel L2 err %.3g\n", type, int(training),
              std::abs(got - want) / std::abs(want), std::sqrt(num / den));
  EXPECT_LT(std::sqrt(num / den), tol);
  std::vector<float> logits;
  model.logits(logits);
  EXPECT_EQ(logits.size(), 12u);
}

TEST(CnnPrecision, Fp32AndSixteenBitMatchFp64) {
  for (bool training : {false, true}) {
    lower_precision_matches<float>("fp32", 1e-5, training);
    lower_precision_matches<bf16>("bf16", 3e-2, training);
    lower_precision_matches<f16>("fp16", 1e-2, training);
  }
}

template <class T>
void memory_matches_costs(const CnnDims& d) {
  const ParamLayout l = finalized(d);
  MemoryTracker memory;
  std::vector<T> p(l.padded_size()), g(l.padded_size());
  std::vector<float> in(d.max_batch * d.in_channels * d.height * d.width, 0.5f);
  std::vector<TokenIndex> lab(d.max_batch, 1);
  {
    Cnn<T> model(d, l, memory);
    model.bind(p.data(), g.data());
    SampleBatch b;
    b.batch = d.max_batch;
    b.values = in.data();
    b.labels = lab.data();
    b.training = true;
    EXPECT_EQ(model.activation_high_water_bytes(), 0);  // nothing written yet
    model.forward(b);
    model.backward(T(1.0f));
    // No recompute schedule: the measured activations are the fixed arena, the plan.
    EXPECT_EQ(model.activation_high_water_bytes(), cnn_costs<T>(d).activation_bytes);
  }
  const ClassifierCosts c = cnn_costs<T>(d);
  EXPECT_EQ(static_cast<std::int64_t>(memory.peak(MemCategory::Activations)), c.activation_bytes);
  EXPECT_EQ(static_cast<std::int64_t>(memory.peak(MemCategory::Workspace)), c.workspace_bytes);
  EXPECT_EQ(memory.current_total(), 0u);
}

TEST(CnnMemory, TrackerPeaksEqualCosts) {
  memory_matches_costs<float>(small_dims(0.5));
  memory_matches_costs<bf16>(small_dims(0.5));
  CnnDims no_pool = small_dims();
  no_pool.pool = 1;
  memory_matches_costs<float>(no_pool);
  memory_matches_costs<f16>(no_pool);
}

CnnDims lenet(std::int64_t batch) {
  CnnDims d;
  d.in_channels = 1;
  d.height = d.width = 28;
  d.convs = {{20, 5, 0}, {50, 5, 0}};
  d.pool = 2;
  d.hidden = {500};
  d.classes = 10;
  d.dropout = 0.5;
  d.max_batch = batch;
  return d;
}

TEST(CnnLeNet, LayoutForwardBackwardAndTiming) {
  const CnnDims d = lenet(64);
  const ParamLayout l = finalized(d);
  EXPECT_EQ(l.num_parameters(), 431080);
  const ClassifierCosts c = cnn_costs<float>(d);
  // conv1 2*20*24*24*25, conv2 2*50*8*8*500, fc 2*800*500, 2*500*10
  EXPECT_EQ(c.forward_flops, 2.0 * (20 * 576 * 25 + 50 * 64 * 500 + 800 * 500 + 500 * 10));
  MemoryTracker memory;
  std::vector<float> p(l.padded_size()), g(l.padded_size(), 0.0f);
  cnn_init_params<float>(l, 1, p.data(), 0, l.padded_size());
  std::vector<float> in(64 * 784);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& v : in) v = u(gen);
  std::vector<TokenIndex> lab(64);
  for (int i = 0; i < 64; ++i) lab[i] = i % 10;
  Cnn<float> model(d, l, memory);
  model.bind(p.data(), g.data());
  SampleBatch b;
  b.batch = 64;
  b.values = in.data();
  b.labels = lab.data();
  b.training = true;
  std::vector<double> ms;
  double loss = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    loss = model.forward(b);
    model.backward(1.0f / 64);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    b.first_sample += 64;
  }
  std::sort(ms.begin(), ms.end());
  std::printf("LeNet fp32 forward+backward, batch 64: median %.1f ms (min %.1f, max %.1f), loss/64 %.4f\n", ms[2],
              ms[0], ms[4], loss / 64);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss / 64, std::log(10.0), 1.5);  // He init: logits of order 1
  double norm = 0;
  for (float x : g) norm += double(x) * x;
  EXPECT_GT(norm, 0.0);
  EXPECT_TRUE(std::isfinite(norm));
}

}  // namespace
}  // namespace shardtrain
