// shardtrain/core/text.hpp
// Owns the edit distance behind every did-you-mean: the config's unknown keys
// and sections (config/suggest.cpp) and trainer-ckpt's unknown parameter names
// (tools/trainer_ckpt.cpp).
#pragma once

#include <cstddef>
#include <limits>
#include <string_view>

namespace shardtrain {

// Levenshtein distance between a and b (insertions, deletions and
// substitutions of one character each cost 1). With a `limit`, it gives up
// as soon as the distance must exceed it and returns limit + 1; distances up
// to the limit are exact.
std::size_t edit_distance(std::string_view a, std::string_view b,
                          std::size_t limit = std::numeric_limits<std::size_t>::max() - 1);

}  // namespace shardtrain
