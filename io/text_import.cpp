// The text importer: read -> tokenize -> write (see text_import.hpp).
#include "io/text_import.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "core/error.hpp"
#include "io/gpt2_bpe.hpp"
#include "io/token_dataset_writer.hpp"
#include "io/wordpiece.hpp"

namespace shardtrain {

namespace {
void check_input_file(const std::string& input) {
  std::error_code ec;
  const auto st = std::filesystem::status(input, ec);
  if (!std::filesystem::exists(st)) throw InputError(input + ": no such file");
  if (std::filesystem::is_directory(st)) throw InputError(input + ": is a directory, expected a text file");
}

std::string read_all(const std::string& input) {
  check_input_file(input);
  std::ifstream f(input, std::ios::binary);
  if (!f) throw InputError(input + ": cannot open for reading: " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw InputError(input + ": read error: " + std::strerror(errno));
  return bytes;
}
// Where the next block may end: just after a '\n' that a printable ASCII
// character follows. No pre-token crosses that point (a token holding the line
// break is all whitespace, and one starting at the character does not look back),
// and the token before it looks only at that character. The last such point at or
// after `lo` (points before it were looked at already); npos if there is none.
std::size_t block_end(const std::string& pending, std::size_t lo) {
  for (std::size_t k = pending.size() - 1; k >= std::max<std::size_t>(lo, 1) && k < pending.size(); --k)
    if (pending[k - 1] == '\n' && pending[k] > ' ' && pending[k] < 0x7F) return k;
  return std::string::npos;
}

// One line on stderr: carriage return on a terminal, a new line otherwise.
void progress(const std::string& input, std::uint64_t done, std::uint64_t total, std::size_t tokens, double secs) {
  const double mb = 1.0 / (1 << 20);
  std::fprintf(stderr, "%strainer-data: %s: %.0f of %.0f MiB (%.0f%%), %zu tokens, %.1f MiB/s%s",
               isatty(2) ? "\r" : "", input.c_str(), done * mb, total * mb, total ? 100.0 * done / total : 100.0,
               tokens, secs > 0 ? done * mb / secs : 0.0, isatty(2) ? "" : "\n");
  std::fflush(stderr);
}

// What stream_blocks read: the bytes of the file and the seconds spent encoding them.
struct Streamed {
  std::uint64_t bytes = 0;
  double encode_seconds = 0;
};

// Reads `input` in reads of `block_bytes` and hands it on in blocks: `end_at(pending,
// lo)` says where the text read so far may end a block (npos: read more; the end of
// the file ends the last one), `encode(pending, end, base)` tokenizes pending[0, end)
// (pending may hold more after it, base is pending[0]'s file offset) and `tokens()`
// counts what is encoded, for the progress line (stderr, about once a second).
Streamed stream_blocks(const std::string& input, std::size_t block_bytes,
                       const std::function<std::size_t(const std::string&, std::size_t)>& end_at,
                       const std::function<void(const std::string&, std::size_t, std::uint64_t)>& encode,
                       const std::function<std::size_t()>& tokens) {
  if (block_bytes < 1) throw InputError("--block-size must be at least 1 byte");
  check_input_file(input);
  std::ifstream f(input, std::ios::binary);
  if (!f) throw InputError(input + ": cannot open for reading: " + std::strerror(errno));
  const std::uint64_t total = std::filesystem::file_size(input);
  Streamed out;
  std::string pending;  // bytes read and not yet encoded; pending[0] is at file offset out.bytes
  bool eof = false;
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  bool printed = false;
  for (;;) {
    std::size_t end = std::string::npos;
    while (!eof && end == std::string::npos) {  // read until a block can end (the rest of the last block cannot)
      const std::size_t had = pending.size();
      pending.resize(had + block_bytes);
      f.read(pending.data() + had, static_cast<std::streamsize>(block_bytes));
      if (f.bad()) throw InputError(input + ": read error: " + std::strerror(errno));
      pending.resize(had + static_cast<std::size_t>(f.gcount()));
      eof = f.eof();
      end = end_at(pending, had);
    }
    if (end == std::string::npos) end = pending.size();  // the end of the file ends the last block
    if (end == 0) break;
    const auto e0 = std::chrono::steady_clock::now();
    encode(pending, end, out.bytes);
    const auto now = std::chrono::steady_clock::now();
    out.encode_seconds += std::chrono::duration<double>(now - e0).count();
    pending.erase(0, end);
    out.bytes += end;
    if (now - last >= std::chrono::seconds(1) || (printed && pending.empty() && eof)) {
      progress(input, out.bytes, total, tokens(), std::chrono::duration<double>(now - t0).count());
      last = now;
      printed = true;
    }
  }
  if (printed && isatty(2)) std::fputc('\n', stderr);
  if (out.bytes == 0) throw InputError(input + ": empty file, nothing to import");
  return out;
}

// At least one token for each split.
void check_token_count(const std::string& input, std::int64_t n) {
  if (n < 2)
    throw InputError(input + ": only " + std::to_string(n) + " token; need at least 2 (one for train, one for val)");
}

TextImportSummary import_gpt2(const std::string& input, const std::string& output, const TextImportOptions& options) {
  if (options.bpe_dir.empty())
    throw InputError("--tokenizer gpt2 needs --bpe DIR, the folder of GPT-2's encoder.json and vocab.bpe "
                     "(share/data/fetch-gpt2-bpe.sh DIR fetches them)");
  Gpt2Bpe bpe(options.bpe_dir);
  std::vector<std::uint16_t> ids;
  const Streamed read = stream_blocks(
      input, options.block_bytes, block_end,
      [&](const std::string& pending, std::size_t end, std::uint64_t base) {
        validate_utf8(std::string_view(pending).substr(0, end), input, base, true);
        const std::size_t look = std::min(end + 1, pending.size());  // the character after the block, ASCII
        bpe.encode(std::string_view(pending).substr(0, look), end, ids);
      },
      [&] { return ids.size(); });
  const auto n = static_cast<std::int64_t>(ids.size());
  check_token_count(input, n);

  TokenDatasetSpec spec;
  spec.tokenizer = TextTokenizer::Gpt2;
  spec.vocab = bpe.vocab();
  spec.source = std::filesystem::path(input).filename().string();
  spec.val_fraction = options.val_fraction;
  const std::int64_t n_val = val_token_count(n, options.val_fraction);
  TokenDatasetWriter writer(output, spec, n - n_val, n_val);
  std::vector<TokenIndex> chunk;
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  for (std::size_t i = 0; i < ids.size(); i += kChunk) {
    chunk.assign(ids.begin() + static_cast<std::ptrdiff_t>(i),
                 ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), i + kChunk)));
    writer.append(chunk);
  }
  const TokenSplitCounts counts = writer.commit();
  return {n, static_cast<std::int64_t>(spec.vocab.size()), counts.train, counts.val, read.encode_seconds};
}

// Where the next wordpiece block may end: just after the last '\n' at or after
// `lo`, else just after the last ' ' (no word of BERT's rules holds either, and
// NFC composes nothing across them); npos if there is neither.
std::size_t wordpiece_block_end(const std::string& pending, std::size_t lo) {
  for (const char sep : {'\n', ' '}) {
    const std::size_t k = pending.rfind(sep);
    if (k != std::string::npos && k + 1 > lo) return k + 1;
  }
  return std::string::npos;
}

TextImportSummary import_wordpiece(const std::string& input, const std::string& output,
                                   const TextImportOptions& options) {
  if (options.vocab_path.empty())
    throw InputError("--tokenizer wordpiece needs --vocab FILE, BERT's vocab.txt (share/data/fetch-bert-vocab.sh DIR "
                     "fetches bert-base-uncased's)");
  const WordPiece wp(read_wordpiece_vocab(options.vocab_path), options.lowercase);
  std::vector<TokenIndex> ids;
  const Streamed read = stream_blocks(
      input, options.block_bytes, wordpiece_block_end,
      [&](const std::string& pending, std::size_t end, std::uint64_t base) {
        const std::string_view block = std::string_view(pending).substr(0, end);
        validate_utf8(block, input, base, true);
        wp.encode(block, ids);
      },
      [&] { return ids.size(); });
  const auto n = static_cast<std::int64_t>(ids.size());
  check_token_count(input, n);

  TokenDatasetSpec spec;
  spec.tokenizer = TextTokenizer::Wordpiece;
  spec.vocab = wp.vocab();
  spec.source = std::filesystem::path(input).filename().string();
  spec.val_fraction = options.val_fraction;
  spec.vocab_file = std::filesystem::path(options.vocab_path).filename().string();
  spec.vocab_sha256 = wp.vocab_sha256();
  spec.lowercase = wp.lowercase();
  const TokenSplitCounts counts = write_token_dataset(output, spec, ids);
  return {n, static_cast<std::int64_t>(spec.vocab.size()), counts.train, counts.val, read.encode_seconds};
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
  if (options.tokenizer == TextTokenizer::Gpt2) return import_gpt2(input, output, options);
  if (options.tokenizer == TextTokenizer::Wordpiece) return import_wordpiece(input, output, options);
  const std::string bytes = read_all(input);
  if (bytes.empty()) throw InputError(input + ": empty file, nothing to import");

  TokenizedText text = tokenize_text(bytes, options.tokenizer, input);
  const auto n = static_cast<std::int64_t>(text.tokens.size());
  check_token_count(input, n);

  TokenDatasetSpec spec;
  spec.tokenizer = options.tokenizer;
  spec.vocab = std::move(text.vocab);
  spec.source = std::filesystem::path(input).filename().string();
  spec.val_fraction = options.val_fraction;
  const TokenSplitCounts counts = write_token_dataset(output, spec, text.tokens);
  return {n, static_cast<std::int64_t>(spec.vocab.size()), counts.train, counts.val};
}

}  // namespace shardtrain
