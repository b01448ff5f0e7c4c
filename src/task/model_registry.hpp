// shardtrain/task/model_registry.hpp
// What each model type is: one row per line of core/model_types.def, in this
// folder because a row reaches every layer a model spans (its dims from the
// config and the data, its parameter layout, init, costs and memory plan in
// model/ and plan/, its task here). Nothing else branches on model.type: the
// GPT's task and the classifiers' task take what differs from their row, and a
// classifier's layout, init, costs, model and description are picked by the type
// of its dims (ClassifierDims), so a model type without a row, or dims without an
// overload in model_registry.cpp, does not compile.
// Adding a model: share/doc/architecture.md#adding-a-model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "config/run_config.hpp"
#include "core/memory.hpp"
#include "core/model_type.hpp"
#include "core/param_layout.hpp"
#include "model/classifier.hpp"
#include "model/cnn.hpp"
#include "model/encoder_classifier.hpp"
#include "model/mlp.hpp"

namespace shardtrain {

class Backend;

// A classifier's dims: one alternative per classifier model type.
using ClassifierDims = std::variant<MlpDims, CnnDims, EncoderDims>;

// The data a model type trains on.
enum class ModelData {
  TokenStream,     // a token data set (trainer-data text/gpt2): windows of seq_len + 1 tokens (task/gpt_task.cpp)
  TokenSequences,  // a labelled-sample set of token sequences (trainer-data textdir, csv)
  Images,          // a labelled-sample set of images (trainer-data mnist)
};

// What a classifier's dims are read from: its labelled-sample set.
struct ClassifierSamples {
  std::string path;
  bool images = false;
  std::vector<std::int64_t> shape;  // one sample's, as stored
  std::int64_t row = 0;             // elements of one sample as stored
  std::int64_t classes = 0;
  std::int64_t vocab = 0;           // token sequences: the vocabulary
  bool has_cls = false;             // token sequences: a [CLS] token at position 0
};

struct ModelRow {
  ModelType type;
  ModelData data;
  // Classifiers: the dims from the config and the samples, checked (InputError
  // naming the input file or the data set otherwise). nullptr for the GPT, whose
  // task reads its dims from the config and the token set (plan/memory_plan.hpp
  // gpt_dims).
  ClassifierDims (*classifier_dims)(const RunConfig& config, const ClassifierSamples& samples,
                                    std::int64_t max_batch);
};

// The row of `type`.
const ModelRow& model_row(ModelType type);

// The classifier's parts, by the type of its dims.
ParamLayout classifier_layout(const ClassifierDims& dims);
template <class P>
void classifier_init_params(const ClassifierDims& dims, const RunConfig& config, const ParamLayout& layout,
                            P* params, std::int64_t lo, std::int64_t hi);
template <class P>
ClassifierCosts classifier_costs(const ClassifierDims& dims);
// recompute: the plan's schedule of the model's block chain (MemoryPlan::recompute,
// made for classifier_costs<P>(dims).chain); ignored by a model without a chain.
template <class P>
std::unique_ptr<Classifier<P>> make_classifier(const ClassifierDims& dims, const RunConfig& config,
                                               const ParamLayout& layout, MemoryTracker& memory, Backend& backend,
                                               const RecomputeSchedule& recompute);
// Tokens of one sample the model reads (token sequences), 0 for images.
std::int64_t classifier_tokens(const ClassifierDims& dims);
// The model's line of the start-up summary ("MLP 784-300-10", ...).
std::string describe_classifier(const ClassifierDims& dims, const RunConfig& config);
// Work that must run before the process is measured before the model (the CNN's
// oneDNN convolutions build their code on first execution: model/cnn.hpp).
template <class P>
void classifier_warm_up(const ClassifierDims& dims);

}  // namespace shardtrain
