// shardtrain/config/schema.hpp
// The config schema: one row (KeySpec) per input key, in the order of the input
// file's sections. A row holds every per-key fact: its section and name, the
// RunConfig field it fills, its type (the field's), its range or choices, the
// model types that use it, how its default is derived when that is not the field's
// initializer, a further check of its value, and its documentation. The parser
// (parse.cpp), the did-you-mean suggestions, to_toml and the generated reference
// share/doc/config.md (trainer-config-doc) all read the rows; nothing else lists
// keys. Defaults are the initializers of run_config.hpp, read through the field.
// Checks that involve two keys (n_head divides d_model, ...) are code in parse.cpp.
// Adding a key: a field in run_config.hpp, a row in schema.cpp, then regenerate
// share/doc/config.md (the config_doc_current test says how).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "config/run_config.hpp"

namespace shardtrain {

// A key's RunConfig field: ref() to fill it when parsing, get() to write it out.
template <class T>
struct ConfigField {
  T& (*ref)(RunConfig&);
  const T& (*get)(const RunConfig&);
};

// The field config.*Section.*Member, e.g. config_field<&RunConfig::model, &ModelConfig::n_layer>().
template <auto Section, auto Member>
constexpr auto config_field() {
  using T = std::remove_cvref_t<decltype(std::declval<RunConfig&>().*Section.*Member)>;
  return ConfigField<T>{[](RunConfig& c) -> T& { return c.*Section.*Member; },
                        [](const RunConfig& c) -> const T& { return c.*Section.*Member; }};
}

// The field types a key can have; the alternative is the key's type: integer (int,
// int64, uint64), float (double), boolean, string, array of integers, and, from
// index k_first_enum_field on, the enums written as a string (model.type,
// precision.mode and the choices of core/run_choices.hpp: their names, enum_names,
// are the row's choices).
using AnyConfigField =
    std::variant<ConfigField<int>, ConfigField<std::int64_t>, ConfigField<std::uint64_t>, ConfigField<double>,
                 ConfigField<bool>, ConfigField<std::string>, ConfigField<std::vector<std::int64_t>>,
                 ConfigField<ModelType>, ConfigField<PrecisionMode>, ConfigField<AttentionImpl>, ConfigField<GemmImpl>,
                 ConfigField<GeluImpl>,
                 ConfigField<Pooling>, ConfigField<EncoderLayout>, ConfigField<DataInMemory>, ConfigField<TrainDevice>,
                 ConfigField<DeviceCollectives>, ConfigField<DeviceKernels>,
                 ConfigField<OptimizerType>, ConfigField<LrSchedule>, ConfigField<RecomputePolicy>,
                 ConfigField<NonFinitePolicy>, ConfigField<LossSpikePolicy>, ConfigField<ReplicaPolicy>>;

// AnyConfigField's alternatives from this index on are the enums.
inline constexpr std::size_t k_first_enum_field = 7;

// Integer keys, and each entry of an integer array: lo <= v <= hi.
struct IntRange {
  std::int64_t lo = 0;
  std::int64_t hi = std::numeric_limits<std::int64_t>::max();
  bool enumerated = false;  // a value above hi reads "must be 0, 1, 2 or 3", not "must be <= 3"
};

// Float keys: v > lo (lo_open) or v >= lo, and v < hi when hi is set; always finite.
struct NumberRange {
  double lo = 0;
  bool lo_open = false;
  std::optional<double> hi;
};

struct KeySpec {
  std::string_view section;
  std::string_view key;
  AnyConfigField field;
  IntRange ints;                              // integer keys; integer arrays: every entry
  NumberRange numbers;                        // float keys
  std::size_t max_entries = 0;                // integer arrays: at most this many entries
  std::span<const std::string_view> choices;  // string keys: the allowed values (empty: any non-empty string);
                                              // enum keys: the enum's names, in its order
  std::string_view choices_note;              // said after the choices when a value is not one of them
  bool time_string = false;                   // float keys: also a Slurm --time string, in minutes
  bool required = false;                      // no default: the input must give it
  bool written_when_set = false;              // to_toml leaves it out while not positive or empty (derived when parsed)
  std::span<const ModelType> model_types;     // the model types that use it (empty: every type)
  // Fills the default when the key is not given, where it depends on other keys.
  void (*derive)(RunConfig&) = nullptr;
  // A check of the given value beyond its type and range, run after the cross-key
  // checks: the problem (e.g. "no such file 'x'"), or "" when the value is fine.
  std::string (*check)(const RunConfig&) = nullptr;
  // share/doc/config.md: the Default cell when `derive` or `required` makes it no
  // constant, text added to the generated Range cell, and the Meaning cell.
  std::string_view default_doc;
  std::string_view range_doc;
  std::string_view doc;
};

// Every key, sections in file order ([model], [data], [train], ...), keys in
// to_toml order within each.
std::span<const KeySpec> config_schema();

// The sections, in order of their first key.
std::span<const std::string_view> config_sections();

// The row of section.key, or nullptr.
const KeySpec* find_config_key(std::string_view section, std::string_view key);

// "section.key".
std::string dotted_name(const KeySpec& k);

// Whether model.type = `model_type` uses the key.
bool used_by_model_type(const KeySpec& k, ModelType model_type);

// The key's value in `config` as a TOML literal (as to_toml writes it).
std::string toml_value(const KeySpec& k, const RunConfig& config);

}  // namespace shardtrain
