// shardtrain/io/text_import.hpp
// Owns the `trainer-data text` importer: one text file -> one token data set.
// Reads the whole input into memory (about 7 bytes per input byte at peak for the
// char tokenizer: text + int32 ids + the code-point table), so it suits inputs up
// to a few GB.
#pragma once

#include <cstdint>
#include <string>

#include "io/text_tokenizer.hpp"

namespace shardtrain {

struct TextImportOptions {
  TextTokenizer tokenizer = TextTokenizer::Char;
  double val_fraction = 0.1;
};

struct TextImportSummary {
  std::int64_t tokens = 0;
  std::int64_t vocab_size = 0;
  std::int64_t train = 0;
  std::int64_t val = 0;
};

// Imports `input` into the data set file `output`. Every problem with the input
// (missing, unreadable, empty, invalid UTF-8, too short) or the options is an
// InputError whose message names the file or option.
TextImportSummary import_text(const std::string& input, const std::string& output,
                              const TextImportOptions& options);

}  // namespace shardtrain
