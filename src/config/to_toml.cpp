// shardtrain/config/to_toml.cpp
// RunConfig -> TOML (parse.hpp), from the schema's rows: every section, and every
// key the model's type uses, in schema order; a key whose value is still to be
// derived (written_when_set, not positive or empty) is left out.
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "config/parse.hpp"
#include "config/schema.hpp"

namespace shardtrain {
namespace {

bool is_set(const KeySpec& k, const RunConfig& c) {
  return std::visit(
      [&](const auto& field) {
        const auto& v = field.get(c);
        using T = std::remove_cvref_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>)
          return !v.empty();
        else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, std::int64_t>)
          return v > 0;
        else
          return true;
      },
      k.field);
}

}  // namespace

std::string to_toml(const RunConfig& c) {
  std::string s = "# shardtrain run configuration, fully resolved (every key, defaults filled in)\n";
  std::string_view section;
  for (const KeySpec& k : config_schema()) {
    if (k.section != section) {
      section = k.section;
      s += "\n[" + std::string(section) + "]\n";
    }
    if (!used_by_model_type(k, c.model.type) || (k.written_when_set && !is_set(k, c))) continue;
    s += std::string(k.key) + " = " + toml_value(k, c) + "\n";
  }
  return s;
}

}  // namespace shardtrain
