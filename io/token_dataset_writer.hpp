// shardtrain/io/token_dataset_writer.hpp
// Owns writing a token data set file (format: share/doc/dataset-format.md) for
// the importers of trainer-data. One process writes, serially.
// Invariants: the file appears atomically: it is written to PATH.partial, closed
// (checked: closing flushes), then renamed to PATH; on any failure the partial
// file is removed and PATH is untouched. Train = the first tokens of the stream,
// val = the last val_token_count(n, val_fraction) tokens.
#pragma once

#include "core/types.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shardtrain {


struct TokenDatasetSpec {
  std::string tokenizer;            // "char" or "byte"
  std::vector<std::string> vocab;   // token id -> UTF-8 text; vocab_size = vocab.size()
  std::string source;               // name of the imported input
  double val_fraction = 0.1;        // in (0, 1)
};

struct TokenSplitCounts {
  std::int64_t train = 0;
  std::int64_t val = 0;
};

// Tokens in the val split: round(n * val_fraction), clamped to [1, n-1] so neither
// split is empty. Throws InputError if n < 2 or val_fraction is not in (0, 1).
std::int64_t val_token_count(std::int64_t n_tokens, double val_fraction);

// Writes `tokens` (every id in [0, vocab.size())) as a data set at `path`.
// Throws InputError if `path` cannot be created (message names it), Error otherwise.
TokenSplitCounts write_token_dataset(const std::string& path, const TokenDatasetSpec& spec,
                                     std::span<const TokenIndex> tokens);

}  // namespace shardtrain
