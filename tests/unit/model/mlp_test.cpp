// Mlp: layout, initialisation, the whole-model gradient against float64 central
// differences (every parameter), micro-batch accumulation, an empty micro-batch,
// ignored labels, and fp32 / 16-bit storage against fp64.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "gradcheck.hpp"
#include "model/mlp.hpp"

namespace shardtrain {
namespace {

struct Fixture {
  MlpDims dims{7, {5, 4}, 3, 4};
  ParamLayout layout = make_layout();
  MemoryTracker memory;
  std::vector<double> params = std::vector<double>(static_cast<std::size_t>(layout.padded_size()));
  std::vector<double> grads = std::vector<double>(params.size(), 0.0);
  std::vector<float> inputs;
  std::vector<TokenIndex> labels{2, 0, -1, 1};
  Fixture() {
    mlp_init_params<double>(layout, 5, params.data(), 0, layout.padded_size());
    std::mt19937 gen(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int i = 0; i < 4 * 7; ++i) inputs.push_back(u(gen));
    std::normal_distribution<double> jitter(0.0, 0.05);  // biases away from 0: no ReLU sits on its kink
    for (const auto& e : layout.entries())
      if (e.name.ends_with(".bias"))
        for (std::int64_t i = 0; i < e.numel; ++i) params[e.offset + i] = 0.1 + jitter(gen);
  }
  ParamLayout make_layout() {
    ParamLayout l = mlp_layout(dims);
    l.finalize(1);
    return l;
  }
};

TEST(MlpLayout, NamesShapesAndGroups) {
  Fixture f;
  const auto& e = f.layout.entries();
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e[0].name, "fc.0.weight");
  EXPECT_EQ(e[0].shape, (std::vector<std::int64_t>{5, 7}));
  EXPECT_TRUE(e[0].weight_decay);
  EXPECT_EQ(e[1].name, "fc.0.bias");
  EXPECT_FALSE(e[1].weight_decay);
  EXPECT_EQ(e[4].shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(e[5].group, 2);
  EXPECT_EQ(f.layout.num_parameters(), 5 * 7 + 5 + 4 * 5 + 4 + 3 * 4 + 3);
}

TEST(MlpInit, HeNormalWeightsZeroBiasesIndependentOfSplit) {
  MlpDims d{300, {100}, 10, 1};
  ParamLayout l = mlp_layout(d);
  l.finalize(1);
  std::vector<float> whole(l.padded_size()), part(l.padded_size());
  mlp_init_params<float>(l, 9, whole.data(), 0, l.padded_size());
  mlp_init_params<float>(l, 9, part.data(), 0, 1000);
  mlp_init_params<float>(l, 9, part.data() + 1000, 1000, l.padded_size());
  EXPECT_EQ(whole, part);
  double sum2 = 0;
  const auto& w = l.entries()[0];
  for (std::int64_t i = 0; i < w.numel; ++i) sum2 += double(whole[w.offset + i]) * whole[w.offset + i];
  EXPECT_NEAR(std::sqrt(sum2 / w.numel), std::sqrt(2.0 / 300), 0.01 * std::sqrt(2.0 / 300) * 3);
  const auto& b = l.entries()[1];
  for (std::int64_t i = 0; i < b.numel; ++i) EXPECT_EQ(whole[b.offset + i], 0.0f);
}

TEST(MlpGradient, MatchesCentralDifferencesFloat64) {
  Fixture f;
  Mlp<double> model(f.dims, f.layout, f.memory);
  model.bind(f.params.data(), f.grads.data());
  const double dloss = 1.0 / 3.0;  // three valid labels
  auto objective = [&] { return dloss * model.forward(f.inputs.data(), f.labels.data(), 4); };
  objective();
  model.backward(dloss);
  const std::vector<double> analytic = f.grads;
  const std::vector<double> numeric =
      test::numeric_gradient([&](std::span<const double>) { return objective(); }, f.params, 1e-6);
  for (const auto& e : f.layout.entries()) {
    const auto r = test::compare_gradients(std::span(analytic).subspan(e.offset, e.numel),
                                           std::span(numeric).subspan(e.offset, e.numel), 1e-3);
    EXPECT_LE(r.max_rel_error, 1e-6) << e.name << ": " << r.describe();
  }
  const auto all = test::compare_gradients(analytic, numeric, 1e-3);
  std::printf("mlp whole-model gradient: %s\n", all.describe().c_str());
  EXPECT_LE(all.norm_rel_error, 1e-7);
  double norm = 0;
  for (double g : analytic) norm += g * g;
  EXPECT_GT(norm, 1e-6);  // not trivially zero
}

TEST(MlpGradient, MicroBatchesAccumulateAndIgnoredLabelsAddNothing) {
  Fixture a, b;
  Mlp<double> whole(a.dims, a.layout, a.memory);
  whole.bind(a.params.data(), a.grads.data());
  const double la = whole.forward(a.inputs.data(), a.labels.data(), 4);
  whole.backward(1.0);
  Mlp<double> split(b.dims, b.layout, b.memory);
  split.bind(b.params.data(), b.grads.data());
  double lb = split.forward(b.inputs.data(), b.labels.data(), 2);
  split.backward(1.0);
  lb += split.forward(b.inputs.data() + 2 * 7, b.labels.data() + 2, 2);
  split.backward(1.0);
  EXPECT_NEAR(la, lb, 1e-12);
  for (std::size_t i = 0; i < a.grads.size(); ++i) EXPECT_NEAR(a.grads[i], b.grads[i], 1e-12) << i;
  // Sample 2 has label -1: dropping it changes nothing.
  Fixture c;
  Mlp<double> three(c.dims, c.layout, c.memory);
  three.bind(c.params.data(), c.grads.data());
  std::vector<float> in3(c.inputs.begin(), c.inputs.begin() + 2 * 7);
  in3.insert(in3.end(), c.inputs.begin() + 3 * 7, c.inputs.end());
  std::vector<TokenIndex> lab3{2, 0, 1};
  EXPECT_NEAR(three.forward(in3.data(), lab3.data(), 3), la, 1e-12);
  three.backward(1.0);
  for (std::size_t i = 0; i < a.grads.size(); ++i) EXPECT_NEAR(a.grads[i], c.grads[i], 1e-12) << i;
}

TEST(MlpForward, EmptyMicroBatchComputesNothing) {
  Fixture f;
  Mlp<double> model(f.dims, f.layout, f.memory);
  model.bind(f.params.data(), f.grads.data());
  EXPECT_EQ(model.forward(nullptr, nullptr, 0), 0.0);
  model.backward(1.0);
  for (double g : f.grads) EXPECT_EQ(g, 0.0);
  EXPECT_THROW(model.forward(f.inputs.data(), f.labels.data(), 5), Error);
}

template <class T>
void lower_precision_matches(double tol) {
  Fixture f;
  Mlp<double> ref(f.dims, f.layout, f.memory);
  ref.bind(f.params.data(), f.grads.data());
  const double want = ref.forward(f.inputs.data(), f.labels.data(), 4);
  ref.backward(1.0);
  std::vector<T> p(f.params.size()), g(f.params.size(), T(0.0f));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = T(static_cast<float>(f.params[i]));
  Mlp<T> model(f.dims, f.layout, f.memory);
  model.bind(p.data(), g.data());
  EXPECT_NEAR(model.forward(f.inputs.data(), f.labels.data(), 4), want, tol * std::abs(want));
  model.backward(T(1.0f));
  double num = 0, den = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double d = static_cast<double>(static_cast<float>(g[i])) - f.grads[i];
    num += d * d;
    den += f.grads[i] * f.grads[i];
  }
  EXPECT_LT(std::sqrt(num / den), tol);
  std::vector<float> logits;
  model.logits(logits);
  EXPECT_EQ(logits.size(), 12u);
}

// The arena is fixed (no recompute schedule): the measured activations
// (activations_measured of the memory report) are what mlp_costs plans, once a
// forward has written them, also after an empty micro-batch.
TEST(MlpMemory, MeasuredActivationsEqualCosts) {
  Fixture f;
  Mlp<double> model(f.dims, f.layout, f.memory);
  model.bind(f.params.data(), f.grads.data());
  const std::int64_t planned = mlp_costs<double>(f.dims).activation_bytes;
  EXPECT_EQ(static_cast<std::int64_t>(f.memory.current(MemCategory::Activations)), planned);
  EXPECT_EQ(model.activation_high_water_bytes(), 0);
  model.forward(nullptr, nullptr, 0);
  model.backward(1.0);
  EXPECT_EQ(model.activation_high_water_bytes(), planned);
  model.forward(f.inputs.data(), f.labels.data(), 4);
  model.backward(1.0);
  EXPECT_EQ(model.activation_high_water_bytes(), planned);
}

TEST(MlpPrecision, Fp32AndSixteenBitMatchFp64) {
  lower_precision_matches<float>(1e-5);
  lower_precision_matches<bf16>(3e-2);
  lower_precision_matches<f16>(1e-2);
}

}  // namespace
}  // namespace shardtrain
