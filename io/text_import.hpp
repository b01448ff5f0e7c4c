// shardtrain/io/text_import.hpp
// Owns the `trainer-data text` importer: one text file -> one token data set.
// char and byte read the whole input into memory (about 7 bytes per input byte at
// peak for char: text + int32 ids + the code-point table), so they suit inputs up
// to a few GB. gpt2 streams the input in blocks (a block ends after a line break
// followed by a printable ASCII character, where no pre-token can cross) and
// keeps only the ids (2 bytes per token, about half a byte per input byte of
// English), printing a progress line to stderr once a second. wordpiece streams
// too, in blocks that end at a line break (or, on a longer line, a space), where
// no word of BERT's rules crosses, and keeps the ids (4 bytes per token).
#pragma once

#include <cstdint>
#include <string>

#include "io/text_tokenizer.hpp"

namespace shardtrain {

struct TextImportOptions {
  TextTokenizer tokenizer = TextTokenizer::Char;
  double val_fraction = 0.1;
  std::string bpe_dir;                       // gpt2: the folder of encoder.json and vocab.bpe
  std::string vocab_path;                    // wordpiece: BERT's vocab.txt
  bool lowercase = true;                     // wordpiece: uncased rules (false: --cased)
  std::size_t block_bytes = std::size_t{16} << 20;  // gpt2, wordpiece: bytes read per block (ids do not depend on it)
};

struct TextImportSummary {
  std::int64_t tokens = 0;
  std::int64_t vocab_size = 0;
  std::int64_t train = 0;
  std::int64_t val = 0;
  double encode_seconds = 0;  // gpt2, wordpiece: validating and encoding the text (not loading the vocabulary or writing)
};

// Imports `input` into the data set file `output`. Every problem with the input
// (missing, unreadable, empty, invalid UTF-8, too short) or the options is an
// InputError whose message names the file or option.
TextImportSummary import_text(const std::string& input, const std::string& output,
                              const TextImportOptions& options);

}  // namespace shardtrain
