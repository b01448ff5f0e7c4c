// shardtrain/config/resolver.hpp
// Where each key's value comes from and how it is read (internal to
// shardtrain_config): the file's TOML table, overlaid by the --set overrides (the
// last one of a key wins). read() checks a value against its schema row (type,
// range, choices) and stores it in the row's RunConfig field; a key not given
// keeps its default. Every problem goes to Diagnostics as one line
// "dotted.key: message" at the place the value came from, and marks the key failed
// so that cross-key checks skip it.
#pragma once

#include <toml++/toml.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/diagnostics.hpp"
#include "config/schema.hpp"

namespace shardtrain {

// One `--set section.key=value` argument, parsed.
struct Override {
  std::size_t index;     // position among the --set arguments
  std::string argument;  // as given: "optim.lr=3e-4"
  const KeySpec* key;
  toml::table holder;    // holds the value as holder["v"]
};

// Where one key's value came from.
struct Origin {
  const toml::node* node = nullptr;  // nullptr: not given, the default applies
  const Override* set = nullptr;     // the --set argument, when it came from one
  bool given() const { return node != nullptr; }
};

class Resolver {
 public:
  Resolver(const toml::table& root, const std::vector<Override>& overrides, Diagnostics& diagnostics);

  // Reports unknown sections and keys in the file, with suggestions.
  void check_unknown();

  Origin origin(std::string_view key) const;

  // Reports `message` about `key` at the place its value came from.
  void report(const Origin& where, std::string_view key, std::string_view message);
  bool failed(std::string_view key) const { return m_failed.count(std::string(key)) > 0; }

  // Reads the row's key into its field of `config` (unchanged when not given).
  void read(const KeySpec& k, RunConfig& config);

  // Picks where to report a problem between two keys: the first one if the user
  // gave it, else the second (at least one of them was given, or defaults clash).
  std::pair<Origin, bool> pick(std::string_view first, std::string_view second) const {
    if (Origin o = origin(first); o.given()) return {o, true};
    return {origin(second), false};
  }

  const toml::table& root() const { return m_root; }

 private:
  template <class T>
  void read_int(std::string_view key, T& out, const IntRange& range);
  void read_number(std::string_view key, double& out, const NumberRange& range);
  void read_time_limit(std::string_view key, double& minutes, const NumberRange& range);
  void read_bool(std::string_view key, bool& out);
  void read_int_list(std::string_view key, std::vector<std::int64_t>& out, const IntRange& range,
                     std::size_t max_entries);
  void read_string(std::string_view key, std::string& out, const KeySpec& k);

  const toml::table& m_root;
  Diagnostics& m_diagnostics;
  std::map<std::string, const Override*> m_overrides;
  std::set<std::string> m_failed;
};

}  // namespace shardtrain
