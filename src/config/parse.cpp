// shardtrain/config/parse.cpp
// TOML text + `--set` overrides -> validated RunConfig, and RunConfig -> TOML.
// The schema (which keys exist and their types) lives in k_keys below; the ranges
// live in resolve(). Both must stay in step with run_config.hpp and
// share/doc/config.md. Problems are collected, not thrown one by one, so the user
// sees every mistake in one run; each is one line "WHERE: dotted.key: message".
#include "config/parse.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace shardtrain {
namespace {

// ---------------------------------------------------------------------------------
// Schema

enum class Kind { integer, number, string, boolean, integer_list };

struct KeySpec {
  std::string_view section;
  std::string_view key;
  Kind kind;
};

constexpr std::array<std::string_view, 8> k_sections = {"model",     "data",      "train",
                                                        "optim",     "parallel",  "precision",
                                                        "recompute", "checkpoint"};

constexpr std::array<KeySpec, 55> k_keys = {{
    {"model", "type", Kind::string},
    {"model", "n_layer", Kind::integer},
    {"model", "n_head", Kind::integer},
    {"model", "d_model", Kind::integer},
    {"model", "seq_len", Kind::integer},
    {"model", "init_std", Kind::number},
    {"model", "layernorm_eps", Kind::number},
    {"model", "pooling", Kind::string},
    {"model", "hidden", Kind::integer_list},
    {"model", "conv_channels", Kind::integer_list},
    {"model", "conv_kernel", Kind::integer},
    {"model", "conv_padding", Kind::integer},
    {"model", "pool", Kind::integer},
    {"model", "dropout", Kind::number},
    {"data", "path", Kind::string},
    {"train", "steps", Kind::integer},
    {"train", "batch_size", Kind::integer},
    {"train", "micro_batch", Kind::integer},
    {"train", "seed", Kind::integer},
    {"train", "eval_every", Kind::integer},
    {"train", "eval_windows", Kind::integer},
    {"train", "log_every", Kind::integer},
    {"train", "run_dir", Kind::string},
    {"train", "memory_limit_mb", Kind::number},
    {"train", "time_limit", Kind::number},
    {"train", "device", Kind::string},
    {"optim", "type", Kind::string},
    {"optim", "lr", Kind::number},
    {"optim", "min_lr", Kind::number},
    {"optim", "warmup_steps", Kind::integer},
    {"optim", "schedule", Kind::string},
    {"optim", "weight_decay", Kind::number},
    {"optim", "beta1", Kind::number},
    {"optim", "beta2", Kind::number},
    {"optim", "eps", Kind::number},
    {"optim", "grad_clip", Kind::number},
    {"parallel", "zero_stage", Kind::integer},
    {"parallel", "overlap", Kind::boolean},
    {"parallel", "bucket_mb", Kind::number},
    {"parallel", "collective_timeout_s", Kind::number},
    {"precision", "mode", Kind::string},
    {"precision", "init_scale", Kind::number},
    {"precision", "growth_interval", Kind::integer},
    {"precision", "growth_factor", Kind::number},
    {"precision", "backoff_factor", Kind::number},
    {"precision", "hysteresis", Kind::integer},
    {"precision", "min_scale", Kind::number},
    {"precision", "max_consecutive_skips", Kind::integer},
    {"recompute", "policy", Kind::string},
    {"recompute", "budget_mb", Kind::number},
    {"checkpoint", "dir", Kind::string},
    {"checkpoint", "every_steps", Kind::integer},
    {"checkpoint", "every_minutes", Kind::number},
    {"checkpoint", "keep_last", Kind::integer},
    {"checkpoint", "resume", Kind::string},
}};

std::string dotted(const KeySpec& k) { return fmt::format("{}.{}", k.section, k.key); }

const KeySpec* find_key(std::string_view section, std::string_view key) {
  for (const auto& k : k_keys)
    if (k.section == section && k.key == key) return &k;
  return nullptr;
}

bool is_section(std::string_view name) {
  return std::find(k_sections.begin(), k_sections.end(), name) != k_sections.end();
}

// ---------------------------------------------------------------------------------
// Text helpers

// Makes user text safe to put inside a one-line message: control characters are
// written as escapes, so a message never spans more than one line.
std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

// A TOML basic string, quoted and escaped.
std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f)
          out += fmt::format("\\u{:04X}", u);
        else
          out += c;
    }
  }
  out += '"';
  return out;
}

// Shortest decimal form that reads back to the same double (fmt's default is
// round-trip exact), always spelled as a TOML float.
std::string toml_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// A number in a message: shortest round-trip form, e.g. -0.001, 1e-05.
std::string show(double v) { return fmt::format("{}", v); }

std::string_view type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::array:
      return "array";
    case toml::node_type::table:
      return "table";
    default:
      return "nothing";
  }
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

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

// " (did you mean optim.lr?)" for a mistyped key, or "" when nothing is close.
// A key that exists in another section ("[train] lr") is suggested there.
std::string suggest_key(std::string_view section, std::string_view key) {
  for (const auto& k : k_keys)
    if (k.key == key && k.section != section) return fmt::format(" (did you mean {}?)", dotted(k));
  const KeySpec* best = nullptr;
  std::size_t best_d = 0;
  for (const auto& k : k_keys) {
    const bool same_section = k.section == section;
    if (!same_section && is_section(section)) continue;
    const auto d = same_section ? closeness(key, k.key)
                                : closeness(fmt::format("{}.{}", section, key), dotted(k));
    if (d && (!best || *d < best_d)) best = &k, best_d = *d;
  }
  if (best) return fmt::format(" (did you mean {}?)", dotted(*best));
  if (is_section(section)) {
    std::string keys;
    for (const auto& k : k_keys)
      if (k.section == section) keys += fmt::format("{}{}", keys.empty() ? "" : ", ", k.key);
    return fmt::format(" (keys of [{}] are {})", section, keys);
  }
  return "";
}

std::string suggest_section(std::string_view name) {
  for (auto s : k_sections)
    if (closeness(name, s)) return fmt::format(" (did you mean [{}]?)", s);
  return " (sections are [model], [data], [train], [optim], [parallel], [precision], [recompute], [checkpoint])";
}

// ---------------------------------------------------------------------------------
// Diagnostics: every problem found, each one line.

struct Diagnostic {
  int group;  // 0: at a place in the file, 1: the file as a whole, 2: a --set argument
  std::uint32_t line;
  std::uint32_t column;
  std::size_t order;
  std::string text;
};

class Diagnostics {
 public:
  explicit Diagnostics(std::string_view source) : m_source(source) {}

  void at(const toml::source_region& where, std::string_view message) {
    if (where.begin.line == 0) return in_file(message);
    add(0, where.begin.line, where.begin.column,
        fmt::format("{}:{}:{}: {}", m_source, where.begin.line, where.begin.column, message));
  }
  void in_file(std::string_view message) { add(1, 0, 0, fmt::format("{}: {}", m_source, message)); }
  // `index`: the position of the argument among the overrides, to keep their order.
  void in_override(std::size_t index, std::string_view argument, std::string_view message) {
    add(2, static_cast<std::uint32_t>(index), 0,
        fmt::format("--set {}: {}", printable(argument), message));
  }
  bool empty() const { return m_list.empty(); }

  [[noreturn]] void raise() {
    std::stable_sort(m_list.begin(), m_list.end(), [](const Diagnostic& a, const Diagnostic& b) {
      return std::tie(a.group, a.line, a.column, a.order) <
             std::tie(b.group, b.line, b.column, b.order);
    });
    std::string all;
    for (const auto& d : m_list) all += (all.empty() ? "" : "\n") + d.text;
    throw InputError(all);
  }

 private:
  void add(int group, std::uint32_t line, std::uint32_t column, std::string text) {
    m_list.push_back({group, line, column, m_list.size(), std::move(text)});
  }
  std::string m_source;
  std::vector<Diagnostic> m_list;
};

// ---------------------------------------------------------------------------------
// --set overrides

struct Override {
  std::size_t index;     // position among the --set arguments
  std::string argument;  // as given: "optim.lr=3e-4"
  const KeySpec* key;
  toml::table holder;  // holds the value as holder["v"]
};

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

// Parses each "section.key=value"; the value is read as a TOML value, or taken as a
// bare string when it is not one (and does not start like a quoted string, array or
// inline table, where a TOML syntax error is more likely the user's intent).
std::vector<Override> parse_overrides(std::span<const std::string> arguments,
                                      Diagnostics& diagnostics) {
  std::vector<Override> out;
  for (std::size_t index = 0; index < arguments.size(); ++index) {
    const std::string& argument = arguments[index];
    const auto eq = argument.find('=');
    if (eq == std::string::npos) {
      diagnostics.in_override(index, argument, "expected section.key=value (no '=' found)");
      continue;
    }
    const std::string_view name = trim(std::string_view(argument).substr(0, eq));
    const std::string_view value = trim(std::string_view(argument).substr(eq + 1));
    const auto dot = name.find('.');
    if (name.empty() || dot == std::string_view::npos) {
      diagnostics.in_override(
          index, argument,
          fmt::format("expected section.key=value, got key '{}' without a section",
                      printable(name)));
      continue;
    }
    const std::string_view section = name.substr(0, dot);
    const std::string_view key = name.substr(dot + 1);
    const KeySpec* spec = find_key(section, key);
    if (!spec) {
      diagnostics.in_override(
          index, argument,
          fmt::format("unknown key {}{}", printable(name), suggest_key(section, key)));
      continue;
    }
    if (value.empty()) {
      diagnostics.in_override(index, argument, fmt::format("{}: missing value after '='", name));
      continue;
    }
    Override o{index, argument, spec, {}};
    try {
      toml::table parsed =
          toml::parse(std::string_view(fmt::format("v = {}", value)), std::string_view("--set"));
      if (parsed.size() == 1 && parsed.contains("v")) o.holder = std::move(parsed);
    } catch (const toml::parse_error& e) {
      if (value.front() == '"' || value.front() == '\'' || value.front() == '[' ||
          value.front() == '{') {
        diagnostics.in_override(
            index, argument,
            fmt::format("{}: not a valid TOML value: {}", name, printable(e.description())));
        continue;
      }
    }
    if (o.holder.empty()) o.holder.insert("v", std::string(value));
    out.push_back(std::move(o));
  }
  return out;
}

// ---------------------------------------------------------------------------------
// Resolution: file + overrides + defaults -> RunConfig

// Where one key's value came from.
struct Origin {
  const toml::node* node = nullptr;  // nullptr: not given, the default applies
  const Override* set = nullptr;     // the --set argument, when it came from one
  bool given() const { return node != nullptr; }
};

struct FloatRange {
  double lo;
  bool lo_open;              // lo < v (else lo <= v)
  std::optional<double> hi;  // v < hi (exclusive) when set
  std::string text() const {
    if (hi) return fmt::format("in [{}, {})", show(lo), show(*hi));
    return fmt::format("{} {}", lo_open ? ">" : ">=", show(lo));
  }
  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (!hi || v < *hi); }
};

std::optional<double> slurm_minutes(std::string_view s);  // below

class Resolver {
 public:
  Resolver(const toml::table& root, const std::vector<Override>& overrides,
           Diagnostics& diagnostics)
      : m_root(root), m_diagnostics(diagnostics) {
    for (const auto& o : overrides) m_overrides[dotted(*o.key)] = &o;  // later ones win
  }

  // Unknown sections and keys in the file.
  void check_unknown() {
    for (auto&& [name, node] : m_root) {
      if (!is_section(name.str())) {
        if (node.is_table())
          m_diagnostics.at(name.source(),
                           fmt::format("unknown section [{}]{}", printable(name.str()),
                                       suggest_section(name.str())));
        else
          m_diagnostics.at(name.source(), fmt::format("unknown key {}{}", printable(name.str()),
                                                      suggest_key("", name.str())));
        continue;
      }
      const toml::table* section = node.as_table();
      if (!section) {
        m_diagnostics.at(node.source(),
                         fmt::format("{}: expected a table ([{}]), got {}", name.str(), name.str(),
                                     type_name(node.type())));
        continue;
      }
      for (auto&& [key, value] : *section)
        if (!find_key(name.str(), key.str()))
          m_diagnostics.at(key.source(),
                           fmt::format("unknown key {}.{}{}", name.str(), printable(key.str()),
                                       suggest_key(name.str(), key.str())));
    }
  }

  Origin origin(std::string_view key) const {
    if (auto it = m_overrides.find(std::string(key)); it != m_overrides.end())
      return {it->second->holder.get("v"), it->second};
    const auto dot = key.find('.');
    const toml::table* section = m_root.get_as<toml::table>(key.substr(0, dot));
    if (!section) return {};
    return {section->get(key.substr(dot + 1)), nullptr};
  }

  // Reports `message` about `key` at the place its value came from.
  void report(const Origin& where, std::string_view key, std::string_view message) {
    m_failed.emplace(key);
    const std::string text = fmt::format("{}: {}", key, message);
    if (where.set)
      m_diagnostics.in_override(where.set->index, where.set->argument, text);
    else if (where.node)
      m_diagnostics.at(where.node->source(), text);
    else
      m_diagnostics.in_file(text);
  }
  bool failed(std::string_view key) const { return m_failed.count(std::string(key)) > 0; }

  // Reads an integer key in [lo, hi]; keeps `out` (the default) when not given.
  template <class T>
  void read_int(std::string_view key, T& out, std::int64_t lo,
                std::int64_t hi = std::numeric_limits<std::int64_t>::max()) {
    const Origin o = origin(key);
    if (!o.given()) return;
    const auto* v = o.node->as_integer();
    if (!v) {
      std::string hint;
      if (auto f = o.node->value_exact<double>();
          o.node->is_floating_point() && f && std::isfinite(*f) && std::trunc(*f) == *f)
        hint = " (write it without a decimal point or exponent)";
      report(o, key, fmt::format("expected an integer, got {}{}", type_name(o.node->type()), hint));
      return;
    }
    const std::int64_t i = v->get();
    if (i < lo) return report(o, key, fmt::format("must be >= {}, got {}", lo, i));
    if (i > hi) return report(o, key, fmt::format("must be <= {}, got {}", hi, i));
    out = static_cast<T>(i);
  }

  // Reads a number (float, or integer converted) that must be finite and in `range`.
  void read_number(std::string_view key, double& out, const FloatRange& range) {
    const Origin o = origin(key);
    if (!o.given()) return;
    double v = 0;
    if (auto i = o.node->as_integer())
      v = static_cast<double>(i->get());
    else if (auto f = o.node->as_floating_point())
      v = f->get();
    else
      return report(o, key, fmt::format("expected a number, got {}", type_name(o.node->type())));
    if (!std::isfinite(v))
      return report(o, key, fmt::format("must be a finite number, got {}", show(v)));
    if (!range.contains(v))
      return report(o, key, fmt::format("must be {}, got {}", range.text(), show(v)));
    out = v;
  }

  // Reads a wall-time limit: a number of minutes (>= 0), or a string in
  // Slurm's --time form: "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS".
  void read_time_limit(std::string_view key, double& minutes) {
    const Origin o = origin(key);
    if (!o.given()) return;
    if (o.node->is_string()) {
      const std::optional<double> m = slurm_minutes(o.node->as_string()->get());
      if (!m)
        return report(o, key, fmt::format("expected minutes (a number) or a time like \"HH:MM:SS\" or "
                                          "\"D-HH:MM:SS\", got {}", toml_string(o.node->as_string()->get())));
      minutes = *m;
      return;
    }
    double v = minutes;
    read_number(key, v, {0, false, {}});
    if (!failed(key)) minutes = v;
  }

  // Reads a string; when `allowed` is not empty the value must be one of them.
  void read_bool(std::string_view key, bool& out) {
    const Origin o = origin(key);
    if (!o.given()) return;
    const auto* b = o.node->as_boolean();
    if (!b) return report(o, key, fmt::format("expected a boolean, got {}", type_name(o.node->type())));
    out = b->get();
  }

  // Reads an array of integers, each in [lo, hi], with at most max_size entries.
  void read_int_list(std::string_view key, std::vector<std::int64_t>& out, std::int64_t lo, std::int64_t hi,
                     std::size_t max_size) {
    const Origin o = origin(key);
    if (!o.given()) return;
    const auto* a = o.node->as_array();
    if (!a)
      return report(o, key, fmt::format("expected an array of integers like [300, 100], got {}",
                                        type_name(o.node->type())));
    if (a->size() > max_size)
      return report(o, key, fmt::format("at most {} entries, got {}", max_size, a->size()));
    std::vector<std::int64_t> values;
    for (std::size_t i = 0; i < a->size(); ++i) {
      const auto* v = a->get(i)->as_integer();
      if (!v)
        return report(o, key, fmt::format("entry {} must be an integer, got {}", i + 1, type_name(a->get(i)->type())));
      if (v->get() < lo || v->get() > hi)
        return report(o, key, fmt::format("entry {} must be in [{}, {}], got {}", i + 1, lo, hi, v->get()));
      values.push_back(v->get());
    }
    out = std::move(values);
  }

  void read_string(std::string_view key, std::string& out,
                   std::initializer_list<std::string_view> allowed = {},
                   std::string_view why = {}) {
    const Origin o = origin(key);
    if (!o.given()) return;
    const auto* s = o.node->as_string();
    if (!s)
      return report(o, key, fmt::format("expected a string, got {}", type_name(o.node->type())));
    const std::string& v = s->get();
    if (allowed.size() > 0 && std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
      std::string list;
      for (auto a : allowed) list += fmt::format("{}\"{}\"", list.empty() ? "" : " or ", a);
      return report(o, key, fmt::format("must be {}{}, got {}", list, why, toml_string(v)));
    }
    if (v.empty()) return report(o, key, "must not be empty");
    out = v;
  }

  // Picks where to report a problem between two keys: the first one if the user
  // gave it, else the second (at least one of them was given, or defaults clash).
  std::pair<Origin, bool> pick(std::string_view first, std::string_view second) const {
    if (Origin o = origin(first); o.given()) return {o, true};
    return {origin(second), false};
  }

  const toml::table& root() const { return m_root; }

 private:
  const toml::table& m_root;
  Diagnostics& m_diagnostics;
  std::map<std::string, const Override*> m_overrides;
  std::set<std::string> m_failed;
};

// Slurm's --time forms ("MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM",
// "D-HH:MM:SS") in minutes; nullopt for anything else.
std::optional<double> slurm_minutes(std::string_view s) {
  std::int64_t days = 0;
  if (const auto dash = s.find('-'); dash != std::string_view::npos) {
    const auto d = s.substr(0, dash);
    if (d.empty() || d.size() > 6 || !std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    days = std::stoll(std::string(d));
    s = s.substr(dash + 1);
  }
  std::vector<std::int64_t> parts;
  std::size_t start = 0;
  while (true) {
    const auto colon = s.find(':', start);
    const auto p = s.substr(start, colon == std::string_view::npos ? std::string_view::npos : colon - start);
    if (p.empty() || p.size() > 6 || !std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    parts.push_back(std::stoll(std::string(p)));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  if (parts.size() > 3) return std::nullopt;
  double seconds = 0;
  if (days > 0) {  // D-HH[:MM[:SS]]
    const std::int64_t h = parts[0], m = parts.size() > 1 ? parts[1] : 0, sec = parts.size() > 2 ? parts[2] : 0;
    seconds = static_cast<double>(((days * 24 + h) * 60 + m) * 60 + sec);
  } else if (parts.size() == 1) {  // MM
    seconds = static_cast<double>(parts[0] * 60);
  } else if (parts.size() == 2) {  // MM:SS
    seconds = static_cast<double>(parts[0] * 60 + parts[1]);
  } else {  // HH:MM:SS
    seconds = static_cast<double>((parts[0] * 60 + parts[1]) * 60 + parts[2]);
  }
  return seconds / 60.0;
}

std::string default_run_dir(std::string_view source_name) {
  const std::string stem = std::filesystem::path(source_name).stem().string();
  if (stem.empty() || stem == "." || stem == ".." || stem == "-") return "runs/run";
  return "runs/" + stem;
}

bool multiply_fits(std::int64_t a, std::int64_t b, std::int64_t& product) {
  return !__builtin_mul_overflow(a, b, &product);
}

void resolve(Resolver& r, RunConfig& c, Diagnostics& diagnostics) {
  constexpr std::int64_t k_int_max = std::numeric_limits<int>::max();

  // [model]
  r.read_string("model.type", c.model.type, {"gpt", "encoder_classifier", "mlp", "cnn"});
  const bool model_type_ok = !r.failed("model.type");
  const std::string& type = c.model.type;
  // Keys of one model type only: given for another type, they are a mistake.
  struct TypedKey {
    std::string_view key, types;
  };
  static constexpr TypedKey k_typed[] = {
      {"model.n_layer", "gpt encoder_classifier"}, {"model.n_head", "gpt encoder_classifier"},
      {"model.d_model", "gpt encoder_classifier"}, {"model.seq_len", "gpt encoder_classifier"},
      {"model.init_std", "gpt encoder_classifier"}, {"model.layernorm_eps", "gpt encoder_classifier"},
      {"model.pooling", "encoder_classifier"},      {"model.dropout", "encoder_classifier cnn"},
      {"model.hidden", "mlp cnn"},                  {"model.conv_channels", "cnn"},
      {"model.conv_kernel", "cnn"},                 {"model.conv_padding", "cnn"},
      {"model.pool", "cnn"}};
  if (model_type_ok)
    for (const auto& k : k_typed) {
      const Origin o = r.origin(k.key);
      std::string types = std::string(k.types);
      bool used = false;
      for (std::size_t at = 0; at <= types.size();) {
        const std::size_t end = std::min(types.find(' ', at), types.size());
        used = used || types.substr(at, end - at) == type;
        at = end + 1;
      }
      if (o.given() && !used) {
        std::replace(types.begin(), types.end(), ' ', '/');
        r.report(o, k.key, fmt::format("is not used by model.type = \"{}\" (only by {})", type, types));
      }
    }
  if (type != "gpt") c.model.seq_len = 0;  // the encoder's default: the data set's length
  r.read_int("model.n_layer", c.model.n_layer, 1, k_int_max);
  r.read_int("model.n_head", c.model.n_head, 1, k_int_max);
  r.read_int("model.d_model", c.model.d_model, 1, k_int_max);
  r.read_int("model.seq_len", c.model.seq_len, 2, k_int_max);
  r.read_number("model.init_std", c.model.init_std, {0, false, {}});
  r.read_number("model.layernorm_eps", c.model.layernorm_eps, {0, true, {}});
  r.read_string("model.pooling", c.model.pooling, {"cls", "mean"});
  r.read_int_list("model.hidden", c.model.hidden, 1, 1 << 24, 16);
  r.read_int_list("model.conv_channels", c.model.conv_channels, 1, 1 << 16, 16);
  r.read_int("model.conv_kernel", c.model.conv_kernel, 1, 1024);
  r.read_int("model.conv_padding", c.model.conv_padding, 0, 1024);
  r.read_int("model.pool", c.model.pool, 1, 1024);
  r.read_number("model.dropout", c.model.dropout, {0, false, 1.0});
  if (type == "cnn" && !r.failed("model.conv_channels") && c.model.conv_channels.empty())
    r.report(r.origin("model.conv_channels"), "model.conv_channels",
             "model.type = \"cnn\" needs at least one convolution (use model.type = \"mlp\" for none)");
  const bool transformer = type == "gpt" || type == "encoder_classifier";
  if (transformer && !r.failed("model.n_head") && !r.failed("model.d_model") &&
      c.model.d_model % c.model.n_head != 0) {
    auto [where, first] = r.pick("model.n_head", "model.d_model");
    if (first)
      r.report(
          where, "model.n_head",
          fmt::format("must divide model.d_model ({}), got {}", c.model.d_model, c.model.n_head));
    else
      r.report(where, "model.d_model",
               fmt::format("must be a multiple of model.n_head ({}), got {}", c.model.n_head,
                           c.model.d_model));
  }

  // [data]
  if (const Origin o = r.origin("data.path"); !o.given()) {
    const toml::table* data = r.root().get_as<toml::table>("data");
    if (data && data->source().begin.line > 0)
      diagnostics.at(data->source(), "missing required key data.path");
    else
      diagnostics.in_file("missing required key data.path");
  } else {
    r.read_string("data.path", c.data.path);
    if (!r.failed("data.path")) {
      std::error_code ec;
      const auto status = std::filesystem::status(c.data.path, ec);
      if (!std::filesystem::exists(status))
        r.report(o, "data.path", fmt::format("no such file '{}'", printable(c.data.path)));
      else if (!std::filesystem::is_regular_file(status))
        r.report(o, "data.path", fmt::format("'{}' is not a regular file", printable(c.data.path)));
    }
  }

  // [train]
  r.read_int("train.steps", c.train.steps, 1);
  r.read_int("train.batch_size", c.train.batch_size, 1);
  r.read_int("train.micro_batch", c.train.micro_batch, 1);
  r.read_int("train.seed", c.train.seed, 0);
  r.read_int("train.eval_every", c.train.eval_every, 0);
  r.read_int("train.eval_windows", c.train.eval_windows, 0);
  r.read_int("train.log_every", c.train.log_every, 1);
  r.read_string("train.run_dir", c.train.run_dir);
  r.read_number("train.memory_limit_mb", c.train.memory_limit_mb, {0, false, {}});
  r.read_time_limit("train.time_limit", c.train.time_limit_minutes);
  r.read_string("train.device", c.train.device, {"auto", "cpu", "cuda"});
  if (!r.failed("train.steps") && !r.failed("train.batch_size") && !r.failed("model.seq_len")) {
    std::int64_t sequences = 0, tokens = 0;
    auto [where, first] = r.pick("train.steps", "train.batch_size");
    const std::string_view key = first ? "train.steps" : "train.batch_size";
    if (!multiply_fits(c.train.steps, c.train.batch_size, sequences))
      r.report(where, key,
               fmt::format("train.steps * train.batch_size (sequences in the run) must fit in "
                           "int64, got {} * {}",
                           c.train.steps, c.train.batch_size));
    else if (!multiply_fits(sequences, c.model.seq_len, tokens))
      r.report(where, key,
               fmt::format("train.steps * train.batch_size * model.seq_len (tokens in the run) "
                           "must fit in int64, got {} * {} * {}",
                           c.train.steps, c.train.batch_size, c.model.seq_len));
  }
  if (c.train.run_dir.empty()) c.train.run_dir = default_run_dir(c.source_name);

  // [optim]
  r.read_string("optim.type", c.optim.type, {"adamw"}, " (the only optimizer implemented so far)");
  r.read_number("optim.lr", c.optim.lr, {0, true, {}});
  r.read_number("optim.min_lr", c.optim.min_lr, {0, false, {}});
  r.read_int("optim.warmup_steps", c.optim.warmup_steps, 0);
  r.read_string("optim.schedule", c.optim.schedule, {"cosine", "constant"});
  r.read_number("optim.weight_decay", c.optim.weight_decay, {0, false, {}});
  r.read_number("optim.beta1", c.optim.beta1, {0, false, 1.0});
  r.read_number("optim.beta2", c.optim.beta2, {0, false, 1.0});
  r.read_number("optim.eps", c.optim.eps, {0, true, {}});
  r.read_number("optim.grad_clip", c.optim.grad_clip, {0, false, {}});
  if (!r.failed("optim.lr") && !r.failed("optim.min_lr") && c.optim.min_lr > c.optim.lr) {
    auto [where, first] = r.pick("optim.min_lr", "optim.lr");
    if (first)
      r.report(
          where, "optim.min_lr",
          fmt::format("must be <= optim.lr ({}), got {}", show(c.optim.lr), show(c.optim.min_lr)));
    else
      r.report(where, "optim.lr",
               fmt::format("must be >= optim.min_lr ({}), got {}", show(c.optim.min_lr),
                           show(c.optim.lr)));
  }

  // [parallel]
  std::int64_t stage = c.parallel.zero_stage;
  r.read_int("parallel.zero_stage", stage, 0);
  if (!r.failed("parallel.zero_stage") && (stage < 0 || stage > 3))
    r.report(r.origin("parallel.zero_stage"), "parallel.zero_stage",
             fmt::format("must be 0, 1, 2 or 3, got {}", stage));
  r.read_bool("parallel.overlap", c.parallel.overlap);
  r.read_number("parallel.bucket_mb", c.parallel.bucket_mb, {0, false, {}});
  r.read_number("parallel.collective_timeout_s", c.parallel.collective_timeout_s, {0, false, {}});

  // [precision]
  auto& pr = c.precision;
  r.read_string("precision.mode", pr.mode, {"fp32", "fp16", "bf16"});
  r.read_number("precision.init_scale", pr.init_scale, {0, true, {}});
  r.read_int("precision.growth_interval", pr.growth_interval, 1);
  r.read_number("precision.growth_factor", pr.growth_factor, {1, true, {}});
  r.read_number("precision.backoff_factor", pr.backoff_factor, {0, true, 1.0});
  r.read_int("precision.hysteresis", pr.hysteresis, 1, 1000000);
  r.read_number("precision.min_scale", pr.min_scale, {0, true, {}});
  r.read_int("precision.max_consecutive_skips", pr.max_consecutive_skips, 1);
  if (!r.failed("precision.init_scale") && !r.failed("precision.min_scale") &&
      pr.min_scale > pr.init_scale) {
    auto [where, first] = r.pick("precision.min_scale", "precision.init_scale");
    r.report(where, first ? "precision.min_scale" : "precision.init_scale",
             fmt::format("precision.min_scale ({}) must be <= precision.init_scale ({})",
                         show(pr.min_scale), show(pr.init_scale)));
  }
  // [recompute]
  auto& rc = c.recompute;
  r.read_string("recompute.policy", rc.policy, {"none", "full", "sqrt", "budget"});
  r.read_number("recompute.budget_mb", rc.budget_mb, {0, false, {}});
  if (!r.failed("recompute.policy") && !r.failed("recompute.budget_mb")) {
    if (rc.policy == "budget" && rc.budget_mb <= 0) {
      auto [where, first] = r.pick("recompute.budget_mb", "recompute.policy");
      r.report(where, first ? "recompute.budget_mb" : "recompute.policy",
               "recompute.policy = \"budget\" needs recompute.budget_mb > 0 (activation MiB per rank)");
    } else if (rc.policy != "budget" && rc.budget_mb > 0) {
      r.report(r.origin("recompute.budget_mb"), "recompute.budget_mb",
               fmt::format("is only used by recompute.policy = \"budget\", but the policy is \"{}\"",
                           rc.policy));
    }
  }

  // [checkpoint]
  auto& ck = c.checkpoint;
  r.read_string("checkpoint.dir", ck.dir);
  if (ck.dir.empty()) ck.dir = (std::filesystem::path(c.train.run_dir) / "checkpoints").string();
  r.read_int("checkpoint.every_steps", ck.every_steps, 0);
  r.read_number("checkpoint.every_minutes", ck.every_minutes, {0, false, {}});
  r.read_int("checkpoint.keep_last", ck.keep_last, 1);
  r.read_string("checkpoint.resume", ck.resume);
  if (!r.failed("checkpoint.resume") && ck.resume != "auto" && ck.resume != "never") {
    std::error_code ec;
    if (!std::filesystem::exists(ck.resume, ec))
      r.report(r.origin("checkpoint.resume"), "checkpoint.resume",
               fmt::format("must be \"auto\", \"never\" or an existing checkpoint file or directory; "
                           "no such file or directory '{}'",
                           printable(ck.resume)));
  }

  if (!r.failed("precision.init_scale") && pr.init_scale > 3.4e38)
    r.report(r.origin("precision.init_scale"), "precision.init_scale",
             fmt::format("must fit in a float (<= 3.4e38), got {}", show(pr.init_scale)));
  if (!r.failed("parallel.zero_stage")) c.parallel.zero_stage = static_cast<int>(stage);
}

}  // namespace

RunConfig parse_run_config(std::string_view text, std::string_view source_name,
                           std::span<const std::string> overrides) {
  Diagnostics diagnostics(source_name);
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    diagnostics.at(e.source(), printable(e.description()));
    diagnostics.raise();  // nothing else can be checked without a document
  }

  const std::vector<Override> parsed = parse_overrides(overrides, diagnostics);
  RunConfig config;
  config.source_name = std::string(source_name);
  config.source_text = std::string(text);
  Resolver resolver(root, parsed, diagnostics);
  resolver.check_unknown();
  resolve(resolver, config, diagnostics);
  if (!diagnostics.empty()) diagnostics.raise();
  return config;
}

std::string to_toml(const RunConfig& c) {
  const auto& m = c.model;
  const auto& t = c.train;
  const auto& o = c.optim;
  std::string s =
      "# shardtrain run configuration, fully resolved (every key, defaults filled in)\n";
  auto int_list = [](const std::vector<std::int64_t>& v) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", v[i]);
    return out + "]";
  };
  // Only the keys of the model's type (the others are errors in an input).
  s += fmt::format("\n[model]\ntype = {}\n", toml_string(m.type));
  if (m.type == "gpt" || m.type == "encoder_classifier")
    s += fmt::format("n_layer = {}\nn_head = {}\nd_model = {}\n{}init_std = {}\nlayernorm_eps = {}\n", m.n_layer,
                     m.n_head, m.d_model, m.seq_len > 0 ? fmt::format("seq_len = {}\n", m.seq_len) : "",
                     toml_float(m.init_std), toml_float(m.layernorm_eps));
  if (m.type == "encoder_classifier") s += fmt::format("pooling = {}\n", toml_string(m.pooling));
  if (m.type == "mlp" || m.type == "cnn") s += fmt::format("hidden = {}\n", int_list(m.hidden));
  if (m.type == "cnn")
    s += fmt::format("conv_channels = {}\nconv_kernel = {}\nconv_padding = {}\npool = {}\n",
                     int_list(m.conv_channels), m.conv_kernel, m.conv_padding, m.pool);
  if (m.type == "cnn" || m.type == "encoder_classifier") s += fmt::format("dropout = {}\n", toml_float(m.dropout));
  s += fmt::format("\n[data]\npath = {}\n", toml_string(c.data.path));
  s += fmt::format(
      "\n[train]\nsteps = {}\nbatch_size = {}\nmicro_batch = {}\nseed = {}\n"
      "eval_every = {}\neval_windows = {}\nlog_every = {}\nrun_dir = {}\nmemory_limit_mb = {}\n"
      "time_limit = {}\ndevice = {}\n",
      t.steps, t.batch_size, t.micro_batch, t.seed, t.eval_every, t.eval_windows, t.log_every,
      toml_string(t.run_dir), toml_float(t.memory_limit_mb), toml_float(t.time_limit_minutes),
      toml_string(t.device));
  s += fmt::format(
      "\n[optim]\ntype = {}\nlr = {}\nmin_lr = {}\nwarmup_steps = {}\nschedule = {}\n"
      "weight_decay = {}\nbeta1 = {}\nbeta2 = {}\neps = {}\ngrad_clip = {}\n",
      toml_string(o.type), toml_float(o.lr), toml_float(o.min_lr), o.warmup_steps,
      toml_string(o.schedule), toml_float(o.weight_decay), toml_float(o.beta1), toml_float(o.beta2),
      toml_float(o.eps), toml_float(o.grad_clip));
  s += fmt::format("\n[parallel]\nzero_stage = {}\noverlap = {}\nbucket_mb = {}\ncollective_timeout_s = {}\n",
                   c.parallel.zero_stage, c.parallel.overlap ? "true" : "false",
                   toml_float(c.parallel.bucket_mb), toml_float(c.parallel.collective_timeout_s));
  const auto& pr = c.precision;
  s += fmt::format(
      "\n[precision]\nmode = {}\ninit_scale = {}\ngrowth_interval = {}\ngrowth_factor = {}\n"
      "backoff_factor = {}\nhysteresis = {}\nmin_scale = {}\nmax_consecutive_skips = {}\n",
      toml_string(pr.mode), toml_float(pr.init_scale), pr.growth_interval,
      toml_float(pr.growth_factor), toml_float(pr.backoff_factor), pr.hysteresis,
      toml_float(pr.min_scale), pr.max_consecutive_skips);
  s += fmt::format("\n[recompute]\npolicy = {}\nbudget_mb = {}\n", toml_string(c.recompute.policy),
                   toml_float(c.recompute.budget_mb));
  const auto& ck = c.checkpoint;
  s += "\n[checkpoint]\n";
  if (!ck.dir.empty()) s += fmt::format("dir = {}\n", toml_string(ck.dir));  // empty: not resolved yet
  s += fmt::format("every_steps = {}\nevery_minutes = {}\nkeep_last = {}\nresume = {}\n", ck.every_steps,
                   toml_float(ck.every_minutes), ck.keep_last, toml_string(ck.resume));
  return s;
}

}  // namespace shardtrain
