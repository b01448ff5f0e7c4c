// shardtrain/core/model_type.hpp
// model.type as a value: the enum of core/model_types.def's lines and their
// names (name_of, enum_named: core/named_enum.hpp). In core because the config (RunConfig::model.type), the checkpoint
// files' metadata and trainer-ckpt all name it; what each type is (its dims,
// layout, init, costs, plan and task) is its row in task/model_registry.hpp.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

#include "core/named_enum.hpp"

namespace shardtrain {

enum class ModelType : unsigned char {
#define SHARDTRAIN_MODEL_TYPE(id, name, transformer) id,
#include "core/model_types.def"
};

// Every name, in the order of the enum (ModelType's value is the index).
inline constexpr std::string_view k_model_type_names[] = {
#define SHARDTRAIN_MODEL_TYPE(id, name, transformer) name,
#include "core/model_types.def"
};

inline constexpr std::size_t k_model_type_count = std::size(k_model_type_names);

// Every type, in the order of the enum.
inline constexpr auto k_model_type_values = [] {
  std::array<ModelType, k_model_type_count> out{};
  for (std::size_t i = 0; i < k_model_type_count; ++i) out[i] = static_cast<ModelType>(i);
  return out;
}();

// Whether each type is made of transformer blocks, in the order of the enum.
inline constexpr bool k_model_type_transformer[] = {
#define SHARDTRAIN_MODEL_TYPE(id, name, transformer) transformer,
#include "core/model_types.def"
};

// Whether `t` is made of transformer blocks (it has model.n_layer, n_head,
// d_model and seq_len).
constexpr bool is_transformer(ModelType t) { return k_model_type_transformer[static_cast<std::size_t>(t)]; }

// The names, as input files, checkpoints and exports spell them: name_of(t) and
// enum_named<ModelType>(name) (core/named_enum.hpp).
constexpr std::span<const std::string_view> enum_names(ModelType) { return k_model_type_names; }

}  // namespace shardtrain
