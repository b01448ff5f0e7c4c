// shardtrain/config/suggest.cpp
// Did-you-mean from the schema (suggest.hpp): edit distance (core/text.hpp) or a shared prefix.
#include "config/suggest.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

#include "config/schema.hpp"
#include "core/text.hpp"

namespace shardtrain {
namespace {

// Whether `typed` is close enough to `known` to suggest it: a small edit distance,
// or one is a prefix (>= 3 characters) of the other ("seq_length" -> "seq_len").
std::optional<std::size_t> closeness(std::string_view typed, std::string_view known) {
  const std::size_t d = edit_distance(typed, known);
  const std::size_t limit = std::clamp<std::size_t>(known.size() / 3, 1, 3);
  if (d <= limit) return d;
  const std::size_t shorter = std::min(typed.size(), known.size());
  if (shorter >= 3 && typed.substr(0, shorter) == known.substr(0, shorter)) return limit + 1;
  return std::nullopt;
}

bool is_section(std::string_view name) {
  const auto sections = config_sections();
  return std::find(sections.begin(), sections.end(), name) != sections.end();
}

}  // namespace

std::string suggest_key(std::string_view section, std::string_view key) {
  const auto schema = config_schema();
  for (const KeySpec& k : schema)
    if (k.key == key && k.section != section) return fmt::format(" (did you mean {}?)", dotted_name(k));
  const KeySpec* best = nullptr;
  std::size_t best_d = 0;
  for (const KeySpec& k : schema) {
    const bool same_section = k.section == section;
    if (!same_section && is_section(section)) continue;
    const auto d = same_section ? closeness(key, k.key) : closeness(fmt::format("{}.{}", section, key), dotted_name(k));
    if (d && (!best || *d < best_d)) best = &k, best_d = *d;
  }
  if (best) return fmt::format(" (did you mean {}?)", dotted_name(*best));
  if (is_section(section)) {
    std::string keys;
    for (const KeySpec& k : schema)
      if (k.section == section) keys += fmt::format("{}{}", keys.empty() ? "" : ", ", k.key);
    return fmt::format(" (keys of [{}] are {})", section, keys);
  }
  return "";
}

std::string suggest_section(std::string_view name) {
  std::string all;
  for (std::string_view s : config_sections()) {
    if (closeness(name, s)) return fmt::format(" (did you mean [{}]?)", s);
    all += fmt::format("{}[{}]", all.empty() ? "" : ", ", s);
  }
  return fmt::format(" (sections are {})", all);
}

}  // namespace shardtrain
