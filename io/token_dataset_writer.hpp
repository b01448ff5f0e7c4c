// shardtrain/io/token_dataset_writer.hpp
// Owns writing a token data set file (format: share/doc/dataset-format.md) for
// the importers of trainer-data. One process writes, serially.
// Invariants: the file appears atomically: it is written to PATH.partial, closed
// (checked: closing flushes), then renamed to PATH; on any failure the partial
// file is removed and PATH is untouched. Train = the first tokens of the stream,
// val = the last n_val tokens. Both splits are contiguous datasets sized up front;
// TokenDatasetWriter fills them in stream order, one appended chunk at a time, so
// a caller never needs the whole stream in memory.
#pragma once

#include "core/types.hpp"
#include "io/text_tokenizer.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace shardtrain {


struct TokenDatasetSpec {
  TextTokenizer tokenizer = TextTokenizer::Char;  // written as its name
  std::vector<std::string> vocab;   // token id -> UTF-8 text; vocab_size = vocab.size()
  // Only when `vocab` is empty (pre-tokenized ids, no strings known): the declared
  // vocab_size; /vocab is then written with 0 entries.
  std::int64_t vocab_size = 0;
  std::string source;               // name of the imported input
  double val_fraction = 0.1;        // in (0, 1); recorded as an attribute
  // The vocabulary file of a wordpiece set: written as the attributes vocab_file,
  // vocab_sha256 and lowercase when vocab_sha256 is set (informational).
  std::string vocab_file;           // its file name
  std::string vocab_sha256;         // its SHA-256, hex
  bool lowercase = false;           // uncased rules (lower-casing, accents stripped)
};

struct TokenSplitCounts {
  std::int64_t train = 0;
  std::int64_t val = 0;
};

// Tokens in the val split: round(n * val_fraction), clamped to [1, n-1] so neither
// split is empty. Throws InputError if n < 2 or val_fraction is not in (0, 1).
std::int64_t val_token_count(std::int64_t n_tokens, double val_fraction);

// Streaming writer. The constructor creates PATH.partial with /train/tokens of
// n_train and /val/tokens of n_val tokens (both >= 1) and the attributes; append()
// writes the next tokens of the stream (train first, then val; a chunk may cross
// the boundary); commit() checks that exactly n_train + n_val tokens arrived,
// closes the file and renames it to PATH. Destroying the writer without a
// successful commit() removes PATH.partial.
// Throws InputError if PATH cannot be created (message names it), Error otherwise
// (a token outside [0, vocab_size) or too many tokens is a caller bug).
class TokenDatasetWriter {
 public:
  TokenDatasetWriter(const std::string& path, const TokenDatasetSpec& spec, std::int64_t n_train,
                     std::int64_t n_val);
  ~TokenDatasetWriter();
  TokenDatasetWriter(const TokenDatasetWriter&) = delete;
  TokenDatasetWriter& operator=(const TokenDatasetWriter&) = delete;

  void append(std::span<const TokenIndex> tokens);
  std::int64_t written() const;
  std::int64_t vocab_size() const;
  TokenSplitCounts commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// Writes `tokens` (every id in [0, vocab size)) as a data set at `path`, val =
// the last val_token_count(n, spec.val_fraction) tokens.
// Throws InputError if `path` cannot be created (message names it), Error otherwise.
TokenSplitCounts write_token_dataset(const std::string& path, const TokenDatasetSpec& spec,
                                     std::span<const TokenIndex> tokens);

}  // namespace shardtrain
