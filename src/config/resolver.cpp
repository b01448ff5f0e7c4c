// shardtrain/config/resolver.cpp
// Reading one key's value against its schema row (resolver.hpp). The messages
// here are the ones users see for a value of the wrong type or out of range.
// Booleans never stand for numbers or strings, except for a string or enum key
// whose choices include "on" and "off" (data.in_memory): true and false mean those.
#include "config/resolver.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <variant>

#include "config/suggest.hpp"
#include "config/toml_text.hpp"

namespace shardtrain {
namespace {

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

// "in [0, 1)", "> 0", ">= 0" (an open lower bound with an upper one also reads "[").
std::string range_text(const NumberRange& r) {
  if (r.hi) return fmt::format("in [{}, {})", show(r.lo), show(*r.hi));
  return fmt::format("{} {}", r.lo_open ? ">" : ">=", show(r.lo));
}

bool in_range(const NumberRange& r, double v) { return (r.lo_open ? v > r.lo : v >= r.lo) && (!r.hi || v < *r.hi); }

bool all_digits(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Slurm's --time forms ("MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM",
// "D-HH:MM:SS") in minutes; nullopt for anything else.
std::optional<double> slurm_minutes(std::string_view s) {
  std::int64_t days = 0;
  if (const auto dash = s.find('-'); dash != std::string_view::npos) {
    const auto d = s.substr(0, dash);
    if (d.empty() || d.size() > 6 || !all_digits(d)) return std::nullopt;
    days = std::stoll(std::string(d));
    s = s.substr(dash + 1);
  }
  std::vector<std::int64_t> parts;
  std::size_t start = 0;
  while (true) {
    const auto colon = s.find(':', start);
    const auto p = s.substr(start, colon == std::string_view::npos ? std::string_view::npos : colon - start);
    if (p.empty() || p.size() > 6 || !all_digits(p)) return std::nullopt;
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

}  // namespace

Resolver::Resolver(const toml::table& root, const std::vector<Override>& overrides, Diagnostics& diagnostics)
    : m_root(root), m_diagnostics(diagnostics) {
  for (const auto& o : overrides) m_overrides[dotted_name(*o.key)] = &o;  // later ones win
}

void Resolver::check_unknown() {
  const auto sections = config_sections();
  for (auto&& [name, node] : m_root) {
    if (std::find(sections.begin(), sections.end(), name.str()) == sections.end()) {
      if (node.is_table())
        m_diagnostics.at(name.source(), fmt::format("unknown section [{}]{}", printable(name.str()),
                                                    suggest_section(name.str())));
      else
        m_diagnostics.at(name.source(),
                         fmt::format("unknown key {}{}", printable(name.str()), suggest_key("", name.str())));
      continue;
    }
    const toml::table* section = node.as_table();
    if (!section) {
      m_diagnostics.at(node.source(), fmt::format("{}: expected a table ([{}]), got {}", name.str(), name.str(),
                                                  type_name(node.type())));
      continue;
    }
    for (auto&& [key, value] : *section)
      if (!find_config_key(name.str(), key.str()))
        m_diagnostics.at(key.source(), fmt::format("unknown key {}.{}{}", name.str(), printable(key.str()),
                                                   suggest_key(name.str(), key.str())));
  }
}

Origin Resolver::origin(std::string_view key) const {
  if (auto it = m_overrides.find(std::string(key)); it != m_overrides.end())
    return {it->second->holder.get("v"), it->second};
  const auto dot = key.find('.');
  const toml::table* section = m_root.get_as<toml::table>(key.substr(0, dot));
  if (!section) return {};
  return {section->get(key.substr(dot + 1)), nullptr};
}

void Resolver::report(const Origin& where, std::string_view key, std::string_view message) {
  m_failed.emplace(key);
  const std::string text = fmt::format("{}: {}", key, message);
  if (where.set)
    m_diagnostics.in_override(where.set->index, where.set->argument, text);
  else if (where.node)
    m_diagnostics.at(where.node->source(), text);
  else
    m_diagnostics.in_file(text);
}

void Resolver::read(const KeySpec& k, RunConfig& config) {
  const std::string key = dotted_name(k);
  std::visit(
      [&](const auto& field) {
        auto& out = field.ref(config);
        using T = std::remove_cvref_t<decltype(out)>;
        if constexpr (std::is_same_v<T, double>) {
          if (k.time_string)
            read_time_limit(key, out, k.numbers);
          else
            read_number(key, out, k.numbers);
        } else if constexpr (std::is_same_v<T, bool>) {
          read_bool(key, out);
        } else if constexpr (std::is_same_v<T, std::string>) {
          read_string(key, out, k);
        } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          read_int_list(key, out, k.ints, k.max_entries);
        } else if constexpr (std::is_enum_v<T>) {
          std::string name;  // one of the choices, which are the enum's names (schema.cpp checks it)
          read_string(key, name, k);
          if (!name.empty()) out = *enum_named<T>(name);
        } else {
          read_int(key, out, k.ints);
        }
      },
      k.field);
}

template <class T>
void Resolver::read_int(std::string_view key, T& out, const IntRange& range) {
  const Origin o = origin(key);
  if (!o.given()) return;
  const auto* v = o.node->as_integer();
  if (!v) {
    std::string hint;
    if (auto f = o.node->value_exact<double>();
        o.node->is_floating_point() && f && std::isfinite(*f) && std::trunc(*f) == *f)
      hint = " (write it without a decimal point or exponent)";
    return report(o, key, fmt::format("expected an integer, got {}{}", type_name(o.node->type()), hint));
  }
  const std::int64_t i = v->get();
  if (i < range.lo) return report(o, key, fmt::format("must be >= {}, got {}", range.lo, i));
  if (i > range.hi && range.enumerated) {
    std::string list;
    for (std::int64_t e = range.lo; e <= range.hi; ++e)
      list += fmt::format("{}{}", e == range.lo ? "" : e == range.hi ? " or " : ", ", e);
    return report(o, key, fmt::format("must be {}, got {}", list, i));
  }
  if (i > range.hi) return report(o, key, fmt::format("must be <= {}, got {}", range.hi, i));
  out = static_cast<T>(i);
}

// A float, or an integer converted; finite and in range.
void Resolver::read_number(std::string_view key, double& out, const NumberRange& range) {
  const Origin o = origin(key);
  if (!o.given()) return;
  double v = 0;
  if (auto i = o.node->as_integer())
    v = static_cast<double>(i->get());
  else if (auto f = o.node->as_floating_point())
    v = f->get();
  else
    return report(o, key, fmt::format("expected a number, got {}", type_name(o.node->type())));
  if (!std::isfinite(v)) return report(o, key, fmt::format("must be a finite number, got {}", show(v)));
  if (!in_range(range, v)) return report(o, key, fmt::format("must be {}, got {}", range_text(range), show(v)));
  out = v;
}

// Minutes as a number, or a string in one of Slurm's --time forms.
void Resolver::read_time_limit(std::string_view key, double& minutes, const NumberRange& range) {
  const Origin o = origin(key);
  if (!o.given()) return;
  if (o.node->is_string()) {
    const std::optional<double> m = slurm_minutes(o.node->as_string()->get());
    if (!m)
      return report(o, key,
                    fmt::format("expected minutes (a number) or a time like \"HH:MM:SS\" or "
                                "\"D-HH:MM:SS\", got {}",
                                toml_string(o.node->as_string()->get())));
    minutes = *m;
    return;
  }
  read_number(key, minutes, range);
}

void Resolver::read_bool(std::string_view key, bool& out) {
  const Origin o = origin(key);
  if (!o.given()) return;
  const auto* b = o.node->as_boolean();
  if (!b) return report(o, key, fmt::format("expected a boolean, got {}", type_name(o.node->type())));
  out = b->get();
}

void Resolver::read_int_list(std::string_view key, std::vector<std::int64_t>& out, const IntRange& range,
                             std::size_t max_entries) {
  const Origin o = origin(key);
  if (!o.given()) return;
  const auto* a = o.node->as_array();
  if (!a)
    return report(o, key,
                  fmt::format("expected an array of integers like [300, 100], got {}", type_name(o.node->type())));
  if (a->size() > max_entries) return report(o, key, fmt::format("at most {} entries, got {}", max_entries, a->size()));
  std::vector<std::int64_t> values;
  for (std::size_t i = 0; i < a->size(); ++i) {
    const auto* v = a->get(i)->as_integer();
    if (!v)
      return report(o, key, fmt::format("entry {} must be an integer, got {}", i + 1, type_name(a->get(i)->type())));
    if (v->get() < range.lo || v->get() > range.hi)
      return report(o, key, fmt::format("entry {} must be in [{}, {}], got {}", i + 1, range.lo, range.hi, v->get()));
    values.push_back(v->get());
  }
  out = std::move(values);
}

// A non-empty string; one of the row's choices when it has some. A key whose
// choices include "on" and "off" also takes true and false for them.
void Resolver::read_string(std::string_view key, std::string& out, const KeySpec& k) {
  const Origin o = origin(key);
  if (!o.given()) return;
  auto has = [&k](std::string_view c) { return std::find(k.choices.begin(), k.choices.end(), c) != k.choices.end(); };
  if (const auto* b = o.node->as_boolean(); b && has("on") && has("off")) {
    out = b->get() ? "on" : "off";
    return;
  }
  const auto* s = o.node->as_string();
  if (!s) return report(o, key, fmt::format("expected a string, got {}", type_name(o.node->type())));
  const std::string& v = s->get();
  if (!k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), v) == k.choices.end()) {
    std::string list;
    for (std::string_view a : k.choices) list += fmt::format("{}\"{}\"", list.empty() ? "" : " or ", a);
    return report(o, key, fmt::format("must be {}{}, got {}", list, k.choices_note, toml_string(v)));
  }
  if (v.empty()) return report(o, key, "must not be empty");
  out = v;
}

}  // namespace shardtrain
