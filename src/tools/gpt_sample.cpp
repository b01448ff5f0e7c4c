// trainer-ckpt sample's loaders: a GPT's weights from a checkpoint or an
// export (gpt_sample.hpp); the forward and the sampling loop are infer/gpt_kv.*.
#include "tools/gpt_sample.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <toml++/toml.h>

#include "core/error.hpp"
#include "core/model_type.hpp"
#include "core/state_vectors.hpp"
#include "io/checkpoint.hpp"
#include "io/gpt2_names.hpp"
#include "io/weights_file.hpp"

namespace shardtrain {

GptSampleWeights load_gpt_sample_weights(CheckpointReader& ckpt) {
  const std::string& path = ckpt.path();
  toml::table root;
  try {
    root = toml::parse(ckpt.meta().config_text, std::string_view("/config"));
  } catch (const toml::parse_error& e) {
    throw InputError(path + ": the stored config text (/config) does not parse as TOML: " +
                     std::string(e.description()));
  }
  const std::string type = root["model"]["type"].value_or(std::string("(none)"));
  if (enum_named<ModelType>(type) != ModelType::Gpt) throw InputError(path + ": sample needs a GPT checkpoint; this one's model.type is \"" + type + "\"");
  const std::string master(saved_name(StateVector::Master));  // the fp32 weights
  if (!ckpt.has_vector(master)) throw InputError(path + ": no state vector '" + master + "' (the fp32 weights)");
  for (const auto& [name, t] : ckpt.vectors())
    if (name == master && t != DType::F32)
      throw InputError(path + ": state vector '" + master + "' is " + std::string(numpy_name(t)) +
                       ", expected float32");
  const auto& layout = ckpt.layout();
  auto find = [&](const std::string& name) {
    return std::find_if(layout.begin(), layout.end(), [&](const auto& t) { return t.name == name; });
  };
  TensorSource src{
      [&](const std::string& name) -> std::optional<std::vector<std::int64_t>> {
        const auto it = find(name);
        if (it == layout.end()) return std::nullopt;
        return it->shape;
      },
      [&](const std::string& name) {
        const auto it = find(name);
        std::vector<float> f(static_cast<std::size_t>(it->numel));
        ckpt.read_range(master, it->offset, it->offset + it->numel, f.data());
        return f;
      }};
  return build_gpt_weights(path, root["model"]["n_head"].value_or(std::int64_t{0}),
                       root["model"]["layernorm_eps"].value_or(1e-5), src);
}

GptSampleWeights load_gpt_sample_weights(const WeightsFile& file) {
  const std::string& path = file.path();
  bool gpt2 = false;
  for (const WeightsTensor& t : file.tensors()) gpt2 = gpt2 || is_gpt2_name(t.name);
  const std::string type = file.metadata_or("model_type", gpt2 ? "gpt" : "");
  if (enum_named<ModelType>(type) != ModelType::Gpt)
    throw InputError(path + ": sample needs a GPT's weights; " +
                     (type.empty() ? std::string("the file records no model_type (export it with trainer-ckpt export)")
                                   : "the file's model_type is \"" + type + "\""));
  const std::string heads = file.metadata_or("n_head", "");
  if (heads.empty() || heads.find_first_not_of("0123456789") != std::string::npos || heads.size() > 9)
    throw InputError(path + ": the file records no n_head (the attention heads; `trainer-ckpt export` writes it)");
  double eps = 1e-5;
  const std::string eps_text = file.metadata_or("layernorm_eps", file.metadata_or("layer_norm_epsilon", ""));
  if (!eps_text.empty()) {
    try {
      eps = std::stod(eps_text);
    } catch (const std::exception&) {
      throw InputError(path + ": layernorm_eps '" + eps_text + "' is not a number");
    }
  }
  // GPT-2's names carry "transformer." and hold the four Linear weights as Conv1D's (in, out).
  auto conv1d = [&](const std::string& name) { return gpt2 && gpt2_conv1d(name); };
  auto tensor = [&](const std::string& name) { return file.find(gpt2 ? gpt2_name(name) : name); };
  TensorSource src{
      [&](const std::string& name) -> std::optional<std::vector<std::int64_t>> {
        const WeightsTensor* t = tensor(name);
        if (!t) return std::nullopt;
        if (conv1d(name) && t->shape.size() == 2) return std::vector<std::int64_t>{t->shape[1], t->shape[0]};
        return t->shape;
      },
      [&](const std::string& name) {
        const WeightsTensor* t = tensor(name);
        std::vector<float> f(static_cast<std::size_t>(t->numel));
        file.read(*t, 0, t->numel, f.data());
        if (!conv1d(name)) return f;
        const std::int64_t K = t->shape[0], R = t->shape[1];  // the file's (in, out): ours is (R, K)
        std::vector<float> out(f.size());
        for (std::int64_t i = 0; i < K; ++i)
          for (std::int64_t o = 0; o < R; ++o) out[static_cast<std::size_t>(o * K + i)] = f[static_cast<std::size_t>(i * R + o)];
        return out;
      }};
  return build_gpt_weights(path, std::stoll(heads), eps, src);
}

}  // namespace shardtrain
