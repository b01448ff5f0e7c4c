// shardtrain/task/model_registry.cpp
// The rows of task/model_registry.hpp: each model type's dims, and the
// classifiers' parts picked by the type of their dims.
#include "task/model_registry.hpp"

#include <fmt/format.h>

#include <array>
#include <string>
#include <type_traits>

#include "core/error.hpp"

namespace shardtrain {
namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

ClassifierDims mlp_dims(const RunConfig& cfg, const ClassifierSamples& s, std::int64_t max_batch) {
  return MlpDims{s.row, cfg.model.hidden, s.classes, max_batch};
}

ClassifierDims cnn_dims(const RunConfig& cfg, const ClassifierSamples& s, std::int64_t max_batch) {
  if (s.shape.size() != 3)
    throw InputError(fmt::format("{}: model.type = \"cnn\" needs images of shape (C, H, W); the samples have "
                                 "shape ({})", s.path, fmt::join(s.shape, ", ")));
  CnnDims d;
  d.in_channels = s.shape[0];
  d.height = s.shape[1];
  d.width = s.shape[2];
  for (std::int64_t oc : cfg.model.conv_channels) d.convs.push_back({oc, cfg.model.conv_kernel, cfg.model.conv_padding});
  d.pool = cfg.model.pool;
  d.hidden = cfg.model.hidden;
  d.classes = s.classes;
  d.dropout = cfg.model.dropout;
  d.max_batch = max_batch;
  d.dropout_seed = cfg.train.seed;
  try {
    cnn_check_dims(d);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: the model.* keys do not fit the images of {}: {}", cfg.source_name, s.path,
                                 e.what()));
  }
  return d;
}

ClassifierDims encoder_dims(const RunConfig& cfg, const ClassifierSamples& s, std::int64_t max_batch) {
  const std::int64_t t = cfg.model.seq_len > 0 ? cfg.model.seq_len : s.row;
  if (t > s.row)
    throw InputError(fmt::format("{}: model.seq_len = {}, but the documents of {} are {} tokens long; use at "
                                 "most {} (or import with a larger trainer-data --seq-len)",
                                 cfg.source_name, t, s.path, s.row, s.row));
  if (cfg.model.pooling == Pooling::Cls && !s.has_cls)
    throw InputError(fmt::format("{}: model.pooling = \"cls\" needs a [CLS] token at position 0, but {} has "
                                 "none; use pooling = \"mean\"", cfg.source_name, s.path));
  EncoderDims d;
  d.vocab = s.vocab;
  d.seq_len = t;
  d.n_layer = cfg.model.n_layer;
  d.channels = cfg.model.d_model;
  d.n_head = cfg.model.n_head;
  d.classes = s.classes;
  d.max_batch = max_batch;
  d.pooling = cfg.model.pooling;
  d.layout = cfg.model.layout;
  d.positions = cfg.model.max_positions;
  d.dropout = cfg.model.dropout;
  d.dropout_seed = cfg.train.seed;
  encoder_check_dims(d);
  return d;
}

// Indexed by ModelType: one row per line of core/model_types.def.
constexpr ModelRow k_rows[] = {
    {ModelType::Gpt, ModelData::TokenStream, nullptr},
    {ModelType::EncoderClassifier, ModelData::TokenSequences, encoder_dims},
    {ModelType::Mlp, ModelData::Images, mlp_dims},
    {ModelType::Cnn, ModelData::Images, cnn_dims},
};

constexpr bool rows_match_the_types() {
  if (std::size(k_rows) != k_model_type_count) return false;
  for (std::size_t i = 0; i < std::size(k_rows); ++i)
    if (k_rows[i].type != static_cast<ModelType>(i) ||
        (k_rows[i].data == ModelData::TokenStream) != (k_rows[i].classifier_dims == nullptr))
      return false;
  return true;
}
static_assert(rows_match_the_types(),
              "k_rows: one row per line of core/model_types.def, in its order; a classifier's dims for every "
              "type that reads labelled samples, and only for those");

}  // namespace

const ModelRow& model_row(ModelType type) { return k_rows[static_cast<std::size_t>(type)]; }

ParamLayout classifier_layout(const ClassifierDims& dims) {
  return std::visit(Overloaded{[](const MlpDims& d) { return mlp_layout(d); },
                               [](const CnnDims& d) { return cnn_layout(d); },
                               [](const EncoderDims& d) { return encoder_layout(d); }},
                    dims);
}

template <class P>
void classifier_init_params(const ClassifierDims& dims, const RunConfig& config, const ParamLayout& layout,
                            P* params, std::int64_t lo, std::int64_t hi) {
  const std::uint64_t seed = config.train.seed;
  std::visit(Overloaded{[&](const MlpDims&) { mlp_init_params<P>(layout, seed, params, lo, hi); },
                        [&](const CnnDims&) { cnn_init_params<P>(layout, seed, params, lo, hi); },
                        [&](const EncoderDims& d) {
                          encoder_init_params<P>(layout, d, config.model.init_std, seed, params, lo, hi);
                        }},
             dims);
}

template <class P>
ClassifierCosts classifier_costs(const ClassifierDims& dims) {
  return std::visit(Overloaded{[](const MlpDims& d) { return mlp_costs<P>(d); },
                               [](const CnnDims& d) { return cnn_costs<P>(d); },
                               [](const EncoderDims& d) { return encoder_costs<P>(d); }},
                    dims);
}

template <class P>
std::unique_ptr<Classifier<P>> make_classifier(const ClassifierDims& dims, const RunConfig& config,
                                               const ParamLayout& layout, MemoryTracker& memory, Backend& backend,
                                               const RecomputeSchedule& recompute) {
  return std::visit(
      Overloaded{[&](const MlpDims& d) -> std::unique_ptr<Classifier<P>> {
                   return std::make_unique<Mlp<P>>(d, layout, memory, &backend);
                 },
                 [&](const CnnDims& d) -> std::unique_ptr<Classifier<P>> {
                   return std::make_unique<Cnn<P>>(d, layout, memory, &backend);
                 },
                 [&](const EncoderDims& d) -> std::unique_ptr<Classifier<P>> {
                   return std::make_unique<EncoderClassifier<P>>(d, layout, config.model.layernorm_eps, memory,
                                                                 &recompute, &backend);
                 }},
      dims);
}

std::int64_t classifier_tokens(const ClassifierDims& dims) {
  return std::visit(Overloaded{[](const MlpDims&) -> std::int64_t { return 0; },
                               [](const CnnDims&) -> std::int64_t { return 0; },
                               [](const EncoderDims& d) { return d.seq_len; }},
                    dims);
}

std::string describe_classifier(const ClassifierDims& dims, const RunConfig& config) {
  return std::visit(
      Overloaded{[](const MlpDims& d) {
                   std::vector<std::int64_t> widths{d.inputs};
                   widths.insert(widths.end(), d.hidden.begin(), d.hidden.end());
                   widths.push_back(d.classes);
                   return fmt::format("MLP {}", fmt::join(widths, "-"));
                 },
                 [&](const CnnDims& d) {
                   return fmt::format("CNN conv {} k{} pad {} pool {} | fc {}{} -> {}",
                                      fmt::join(config.model.conv_channels, ","), d.convs[0].kernel, d.convs[0].padding,
                                      d.pool,
                                      d.hidden.empty() ? std::string("none") : fmt::format("{}", fmt::join(d.hidden, ",")),
                                      d.dropout > 0 ? fmt::format(" dropout {:g}", d.dropout) : "", d.classes);
                 },
                 [&](const EncoderDims& d) {
                   return fmt::format("encoder {} L={} C={} H={} T={} V={} pooling {}{} -> {} classes",
                                      name_of(d.layout), d.n_layer, d.channels, d.n_head, d.seq_len, d.vocab,
                                      name_of(config.model.pooling),
                                      d.dropout > 0 ? fmt::format(" dropout {:g}", d.dropout) : "", d.classes);
                 }},
      dims);
}

template <class P>
void classifier_warm_up(const ClassifierDims& dims) {
  if (const CnnDims* d = std::get_if<CnnDims>(&dims)) cnn_warm_up_kernels<P>(*d);
}

#define SHARDTRAIN_INSTANTIATE(P)                                                                             \
  template void classifier_init_params<P>(const ClassifierDims&, const RunConfig&, const ParamLayout&, P*,     \
                                          std::int64_t, std::int64_t);                                        \
  template ClassifierCosts classifier_costs<P>(const ClassifierDims&);                                        \
  template std::unique_ptr<Classifier<P>> make_classifier<P>(const ClassifierDims&, const RunConfig&,        \
                                                             const ParamLayout&, MemoryTracker&, Backend&,    \
                                                             const RecomputeSchedule&);                       \
  template void classifier_warm_up<P>(const ClassifierDims&);
SHARDTRAIN_INSTANTIATE(float)
SHARDTRAIN_INSTANTIATE(f16)
SHARDTRAIN_INSTANTIATE(bf16)
#undef SHARDTRAIN_INSTANTIATE

}  // namespace shardtrain
