// The memory plan of a classifier with a chain of blocks (the encoder,
// plan_classifier_memory): the predicted activations and process peak fall as
// the recompute policy recomputes more (none > sqrt > full; a budget between
// them lands between them and within it), the extra FLOPs rise, --plan's text
// names the schedule; a budget below the least is refused with that least; a
// classifier without a chain (the MLP) refuses any policy but "none", naming
// the models that have one. Shapes: DistilBERT's (6 x 768, T = 512, 16 per
// rank) and a 12-block one; nothing is allocated.
#include <gtest/gtest.h>

#include <string>

#include "config/run_config.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "model/encoder_classifier.hpp"
#include "model/mlp.hpp"
#include "plan/memory_plan.hpp"

namespace shardtrain {
namespace {

EncoderDims distilbert(std::int64_t n_layer) {
  EncoderDims d;
  d.layout = EncoderLayout::Distilbert;
  d.vocab = 30522; d.seq_len = 512; d.positions = 512; d.n_layer = n_layer; d.channels = 768; d.n_head = 12;
  d.classes = 2; d.max_batch = 16;
  d.dropout = 0.1;
  return d;
}

RunConfig config(RecomputePolicy policy, double budget_mb = 0) {
  RunConfig c;
  c.source_name = "input.toml";
  c.model.type = ModelType::EncoderClassifier;
  c.train.batch_size = 32;
  c.train.micro_batch = 16;
  c.recompute.policy = policy;
  c.recompute.budget_mb = budget_mb;
  return c;
}

MemoryPlan plan(const EncoderDims& d, const RunConfig& c) {
  return plan_classifier_memory(c, encoder_layout(d), encoder_costs<float>(d), 0, d.max_batch, 2);
}

double activations_mib(const MemoryPlan& p) { return static_cast<double>(p.of(MemCategory::Activations)) / kMiB; }

TEST(ClassifierPlan, EncoderPeakFallsAsThePolicyRecomputesMore) {
  for (std::int64_t layers : {6, 12}) {
    const EncoderDims d = distilbert(layers);
    const MemoryPlan none = plan(d, config(RecomputePolicy::None));
    const MemoryPlan sqrt = plan(d, config(RecomputePolicy::Sqrt));
    const MemoryPlan full = plan(d, config(RecomputePolicy::Full));
    std::printf("L=%lld activations MiB: none %.1f sqrt %.1f full %.1f; extra FLOPs sqrt %.3f full %.3f\n",
                static_cast<long long>(layers), activations_mib(none), activations_mib(sqrt), activations_mib(full),
                sqrt.recompute.extra_flops, full.recompute.extra_flops);
    EXPECT_EQ(none.of(MemCategory::Activations), encoder_costs<float>(d).activation_bytes);
    EXPECT_EQ(none.activations_none, none.of(MemCategory::Activations));
    EXPECT_EQ(sqrt.activations_none, none.of(MemCategory::Activations));
    EXPECT_GT(none.of(MemCategory::Activations), sqrt.of(MemCategory::Activations));
    EXPECT_GT(sqrt.of(MemCategory::Activations), full.of(MemCategory::Activations));
    EXPECT_GT(none.total(), sqrt.total());
    EXPECT_GT(sqrt.total(), full.total());
    EXPECT_EQ(none.recompute.extra_flops, 0.0);
    EXPECT_LT(none.recompute.extra_flops, sqrt.recompute.extra_flops);
    EXPECT_LT(sqrt.recompute.extra_flops, full.recompute.extra_flops);
    EXPECT_GT(full.step_flops, none.step_flops);
    // Only the activations change.
    for (MemCategory cat : {MemCategory::Parameters, MemCategory::Gradients, MemCategory::OptimizerState,
                            MemCategory::Workspace})
      EXPECT_EQ(none.of(cat), full.of(cat));
    // A budget halfway between full and none: fits, at most none, at least full.
    const double mid = (activations_mib(full) + activations_mib(none)) / 2;
    const MemoryPlan budget = plan(d, config(RecomputePolicy::Budget, mid));
    EXPECT_LE(activations_mib(budget), mid);
    EXPECT_GE(budget.of(MemCategory::Activations), full.of(MemCategory::Activations));
    EXPECT_LT(budget.of(MemCategory::Activations), none.of(MemCategory::Activations));
    EXPECT_LE(budget.recompute.extra_flops, full.recompute.extra_flops);
    EXPECT_EQ(budget.recompute.policy, "budget");
    const std::string text = format_plan(sqrt);
    EXPECT_NE(text.find("recompute plan: policy sqrt, " + std::to_string(layers) + " blocks"), std::string::npos) << text;
    EXPECT_NE(text.find("policy \"none\" would need"), std::string::npos) << text;
    EXPECT_NE(text.find("global batch of 32 samples"), std::string::npos) << text;
  }
}

TEST(ClassifierPlan, EncoderBudgetBelowTheLeastIsRefusedWithIt) {
  try {
    plan(distilbert(6), config(RecomputePolicy::Budget, 1.0));
    FAIL() << "a 1 MiB budget was accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("input.toml: recompute.budget_mb = 1 MiB cannot be met"), std::string::npos) << what;
  }
}

TEST(ClassifierPlan, ModelWithoutBlocksRefusesRecomputeNamingWhatHasIt) {
  MlpDims d{784, {300}, 10, 8};
  RunConfig c = config(RecomputePolicy::Sqrt), cn = config(RecomputePolicy::None);
  c.model.type = cn.model.type = ModelType::Mlp;
  try {
    plan_classifier_memory(c, mlp_layout(d), mlp_costs<float>(d), 0, 8, 1);
    FAIL() << "sqrt accepted for the MLP";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("input.toml: recompute.policy = \"sqrt\": model.type = \"mlp\" has no chain of blocks"),
              std::string::npos) << what;
    EXPECT_NE(what.find("\"gpt\" and \"encoder_classifier\""), std::string::npos) << what;
  }
  const MemoryPlan none = plan_classifier_memory(cn, mlp_layout(d), mlp_costs<float>(d), 0, 8, 1);
  EXPECT_TRUE(none.recompute.ops.empty());
  EXPECT_NE(format_plan(none).find("mlp has no recompute schedule"), std::string::npos) << format_plan(none);
}

}  // namespace
}  // namespace shardtrain
