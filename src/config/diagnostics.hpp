// shardtrain/config/diagnostics.hpp
// The parser's list of problems (internal to shardtrain_config): every problem
// found in one pass, each one line, raised together as one InputError sorted by
// place: first those at a position in the file (in file order), then those about
// the file as a whole, then those of --set arguments (in command-line order).
#pragma once

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "config/toml_text.hpp"
#include "core/error.hpp"

namespace shardtrain {

class Diagnostics {
 public:
  explicit Diagnostics(std::string_view source) : m_source(source) {}

  // "FILE:LINE:COL: message" (or "FILE: message" for a place without a line).
  void at(const toml::source_region& where, std::string_view message) {
    if (where.begin.line == 0) return in_file(message);
    add(0, where.begin.line, where.begin.column,
        fmt::format("{}:{}:{}: {}", m_source, where.begin.line, where.begin.column, message));
  }
  void in_file(std::string_view message) { add(1, 0, 0, fmt::format("{}: {}", m_source, message)); }
  // `index`: the position of the argument among the overrides, to keep their order.
  void in_override(std::size_t index, std::string_view argument, std::string_view message) {
    add(2, static_cast<std::uint32_t>(index), 0, fmt::format("--set {}: {}", printable(argument), message));
  }
  bool empty() const { return m_list.empty(); }

  [[noreturn]] void raise() {
    std::stable_sort(m_list.begin(), m_list.end(), [](const Problem& a, const Problem& b) {
      return std::tie(a.group, a.line, a.column, a.order) < std::tie(b.group, b.line, b.column, b.order);
    });
    std::string all;
    for (const auto& d : m_list) all += (all.empty() ? "" : "\n") + d.text;
    throw InputError(all);
  }

 private:
  struct Problem {
    int group;  // 0: at a place in the file, 1: the file as a whole, 2: a --set argument
    std::uint32_t line;
    std::uint32_t column;
    std::size_t order;
    std::string text;
  };
  void add(int group, std::uint32_t line, std::uint32_t column, std::string text) {
    m_list.push_back({group, line, column, m_list.size(), std::move(text)});
  }
  std::string m_source;
  std::vector<Problem> m_list;
};

}  // namespace shardtrain
