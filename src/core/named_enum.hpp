// shardtrain/core/named_enum.hpp
// An enum whose values have names that input files and checkpoints spell
// (ModelType, PrecisionMode): its header declares enum_names(E) giving them in
// the order of the enum (a value is its index), and the two directions are
// these, the same for every such enum (the config schema reads such a key by
// them too).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

namespace shardtrain {

template <class E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) {
  { enum_names(e) } -> std::convertible_to<std::span<const std::string_view>>;
};

// The name of `e`.
template <NamedEnum E>
constexpr std::string_view name_of(E e) {
  return enum_names(e)[static_cast<std::size_t>(e)];
}

// The value spelled `name`, or nothing.
template <NamedEnum E>
constexpr std::optional<E> enum_named(std::string_view name) {
  const auto names = enum_names(E{});
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace shardtrain
