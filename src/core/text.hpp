// shardtrain/core/text.hpp
// Owns the small text helpers every folder shares: the edit distance behind
// every did-you-mean (the config's unknown keys and sections,
// config/suggest.cpp; trainer-ckpt's unknown parameter names,
// tools/ckpt_export.cpp), a tensor's shape as Python writes a tuple, and the
// joining of a list of items.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain {

// Levenshtein distance between a and b (insertions, deletions and
// substitutions of one character each cost 1). With a `limit`, it gives up
// as soon as the distance must exceed it and returns limit + 1; distances up
// to the limit are exact.
std::size_t edit_distance(std::string_view a, std::string_view b,
                          std::size_t limit = std::numeric_limits<std::size_t>::max() - 1);

// A shape as Python writes a tuple: "()", "(5,)", "(3, 4)" (messages, .npy headers).
std::string shape_text(const std::vector<std::int64_t>& shape);

// The items with `sep` between them: join({"a", "b"}, ", ") is "a, b".
std::string join(const std::vector<std::string>& items, std::string_view sep);
std::string join(const std::vector<std::int64_t>& items, std::string_view sep);

}  // namespace shardtrain
