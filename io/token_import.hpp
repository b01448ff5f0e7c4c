// shardtrain/io/token_import.hpp
// Owns the `trainer-data tokens` importer: pre-tokenized shards (llm.c / nanoGPT
// .bin files, or headerless uint16 files) -> one token data set.
// Streams: every input is first checked from its header and size alone (magic,
// version, declared count == bytes present), so a malformed file is refused
// before anything is written; then the tokens are read in chunks of
// chunk_tokens, range-checked and appended to the writer. Memory is about
// 6 bytes x chunk_tokens, whatever the input size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shardtrain {

enum class TokenFileFormat { Auto, Llmc, Raw };

// llm.c's shard header: 256 little-endian int32; [0] magic, [1] version, [2] tokens.
inline constexpr std::int32_t kLlmcMagic = 20240520;
inline constexpr std::int32_t kLlmcVersion = 1;  // uint16 tokens (GPT-2); llm.c's 2 is uint32
inline constexpr std::int64_t kLlmcHeaderBytes = 256 * 4;

struct TokenImportOptions {
  TokenFileFormat format = TokenFileFormat::Auto;
  std::int64_t vocab = 50257;                 // declared vocabulary: every id must be < vocab
  double val_fraction = 0.1;                  // used when val_inputs is empty
  std::vector<std::string> val_inputs;        // explicit validation shards (then no val_fraction)
  std::int64_t chunk_tokens = std::int64_t{1} << 20;
  double progress_seconds = 5.0;              // stderr progress line interval; <= 0: none
};

struct TokenImportSummary {
  std::int64_t files = 0;
  std::int64_t tokens = 0;
  std::int64_t train = 0;
  std::int64_t val = 0;
};

// Imports `inputs` (then options.val_inputs) into the data set file `output`.
// Every problem with an input (missing, not a regular file, bad magic, unsupported
// version, truncated or with trailing bytes, odd size for raw, a token >= vocab)
// or with the options is an InputError whose message names the file or option
// (a bad token: the file, its byte offset and its value). Nothing is left at
// `output` after a failure.
TokenImportSummary import_tokens(const std::vector<std::string>& inputs, const std::string& output,
                                 const TokenImportOptions& options);

}  // namespace shardtrain
