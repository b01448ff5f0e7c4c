// The text importer: read -> tokenize -> write (see text_import.hpp).
#include "io/text_import.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "io/token_dataset_writer.hpp"

namespace shardtrain {

namespace {
std::string read_all(const std::string& input) {
  std::error_code ec;
  const auto st = std::filesystem::status(input, ec);
  if (!std::filesystem::exists(st)) throw InputError(input + ": no such file");
  if (std::filesystem::is_directory(st)) throw InputError(input + ": is a directory, expected a text file");
  std::ifstream f(input, std::ios::binary);
  if (!f) throw InputError(input + ": cannot open for reading: " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw InputError(input + ": read error: " + std::strerror(errno));
  return bytes;
}
}  // namespace

TextImportSummary import_text(const std::string& input, const std::string& output,
                              const TextImportOptions& options) {
  if (!(options.val_fraction > 0.0 && options.val_fraction < 1.0))
  {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", options.val_fraction);
    throw InputError(std::string("--val-fraction must be in (0, 1), got ") + buf);
  }
  const std::string bytes = read_all(input);
  if (bytes.empty()) throw InputError(input + ": empty file, nothing to import");

  TokenizedText text = tokenize_text(bytes, options.tokenizer, input);
  const auto n = static_cast<std::int64_t>(text.tokens.size());
  if (n < 2)
    throw InputError(input + ": only " + std::to_string(n) +
                     " token; need at least 2 (one for train, one for val)");

  TokenDatasetSpec spec;
  spec.tokenizer = std::string(to_string(options.tokenizer));
  spec.vocab = std::move(text.vocab);
  spec.source = std::filesystem::path(input).filename().string();
  spec.val_fraction = options.val_fraction;
  const TokenSplitCounts counts = write_token_dataset(output, spec, text.tokens);
  return {n, static_cast<std::int64_t>(spec.vocab.size()), counts.train, counts.val};
}

}  // namespace shardtrain
