// The pre-tokenized shard importer (see token_import.hpp).
#include "io/token_import.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "io/token_dataset.hpp"
#include "io/token_dataset_writer.hpp"

namespace shardtrain {

namespace {

struct Shard {
  std::string path;
  std::int64_t offset = 0;  // byte offset of the first token
  std::int64_t tokens = 0;
};

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::int32_t le_int32(const unsigned char* p) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                                   static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24);
}

std::ifstream open_input(const std::string& path, std::int64_t& size) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) throw InputError(path + ": no such file");
  if (std::filesystem::is_directory(st)) throw InputError(path + ": is a directory, expected a token file");
  if (!std::filesystem::is_regular_file(st)) throw InputError(path + ": not a regular file");
  const auto sz = std::filesystem::file_size(path, ec);
  if (ec) throw InputError(path + ": cannot examine: " + ec.message());
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path + ": cannot open for reading: " + std::strerror(errno));
  size = static_cast<std::int64_t>(sz);
  return f;
}

// Checks one input from its header and size alone.
Shard inspect(const std::string& path, TokenFileFormat format) {
  std::int64_t size = 0;
  std::ifstream f = open_input(path, size);
  Shard s{path, 0, 0};
  if (format == TokenFileFormat::Raw) {
    if (size % 2 != 0)
      throw InputError(path + ": " + std::to_string(size) +
                       " bytes: a raw uint16 token file needs an even number of bytes (truncated?)");
    s.tokens = size / 2;
    return s;
  }
  std::array<unsigned char, kLlmcHeaderBytes> header{};
  const std::int64_t got = std::min<std::int64_t>(size, kLlmcHeaderBytes);
  f.read(reinterpret_cast<char*>(header.data()), got);
  if (f.gcount() != got) throw InputError(path + ": read error: " + std::strerror(errno));
  const std::int32_t magic = size >= 4 ? le_int32(header.data()) : 0;
  if (size < 4 || magic != kLlmcMagic) {
    std::string m = path + ": not an llm.c token file (";
    m += size < 4 ? std::to_string(size) + " bytes, no header" : "magic " + std::to_string(magic);
    m += ", expected " + std::to_string(kLlmcMagic) + ")";
    if (format == TokenFileFormat::Auto) m += "; for headerless uint16 tokens pass --format raw";
    throw InputError(m);
  }
  if (size < kLlmcHeaderBytes)
    throw InputError(path + ": truncated header: " + std::to_string(size) + " bytes, an llm.c header is " +
                     std::to_string(kLlmcHeaderBytes));
  const std::int32_t version = le_int32(header.data() + 4);
  if (version != kLlmcVersion)
    throw InputError(path + ": unsupported llm.c version " + std::to_string(version) +
                     " (this build reads version 1, uint16 tokens)");
  const std::int32_t declared = le_int32(header.data() + 8);
  if (declared < 0) throw InputError(path + ": header declares a negative token count " + std::to_string(declared));
  const std::int64_t need = kLlmcHeaderBytes + 2 * static_cast<std::int64_t>(declared);
  if (size < need)
    throw InputError(path + ": truncated: " + std::to_string(size) + " bytes, the header (" +
                     std::to_string(declared) + " tokens) implies " + std::to_string(need));
  if (size > need)
    throw InputError(path + ": " + std::to_string(size - need) + " bytes after the " + std::to_string(declared) +
                     " tokens the header declares (" + std::to_string(size) + " bytes, expected " +
                     std::to_string(need) + ")");
  s.offset = kLlmcHeaderBytes;
  s.tokens = declared;
  return s;
}

class Progress {
 public:
  Progress(std::int64_t total, double every) : m_total(total), m_every(every), m_t0(clock::now()), m_last(m_t0) {}
  void update(std::int64_t done) {
    if (m_every <= 0) return;
    const auto now = clock::now();
    if (std::chrono::duration<double>(now - m_last).count() < m_every) return;
    m_last = now;
    const double secs = std::chrono::duration<double>(now - m_t0).count();
    std::fprintf(stderr, "trainer-data tokens: %lld / %lld tokens (%.1f%%), %.1f M tokens/s\n",
                 static_cast<long long>(done), static_cast<long long>(m_total),
                 100.0 * static_cast<double>(done) / static_cast<double>(m_total),
                 static_cast<double>(done) / secs / 1e6);
    std::fflush(stderr);
  }

 private:
  using clock = std::chrono::steady_clock;
  std::int64_t m_total;
  double m_every;
  clock::time_point m_t0, m_last;
};

void copy_shard(const Shard& s, std::int64_t vocab, std::int64_t chunk, TokenDatasetWriter& writer,
                Progress& progress, std::vector<unsigned char>& raw, std::vector<TokenIndex>& ids) {
  std::int64_t size = 0;
  std::ifstream f = open_input(s.path, size);
  f.seekg(s.offset);
  for (std::int64_t done = 0; done < s.tokens;) {
    const std::int64_t n = std::min(chunk, s.tokens - done);
    f.read(reinterpret_cast<char*>(raw.data()), 2 * n);
    if (f.gcount() != 2 * n)
      throw InputError(s.path + ": read error or file shrank at byte offset " +
                       std::to_string(s.offset + 2 * done + f.gcount()));
    for (std::int64_t i = 0; i < n; ++i) {
      const TokenIndex t = static_cast<TokenIndex>(raw[2 * i] | raw[2 * i + 1] << 8);
      if (t >= vocab)
        throw InputError(s.path + ": token " + std::to_string(t) + " at byte offset " +
                         std::to_string(s.offset + 2 * (done + i)) + " is out of the vocabulary (--vocab " +
                         std::to_string(vocab) + ")");
      ids[static_cast<std::size_t>(i)] = t;
    }
    writer.append(std::span<const TokenIndex>(ids.data(), static_cast<std::size_t>(n)));
    done += n;
    progress.update(writer.written());
  }
}

}  // namespace

TokenImportSummary import_tokens(const std::vector<std::string>& inputs, const std::string& output,
                                 const TokenImportOptions& options) {
  if (inputs.empty()) throw InputError("no input files");
  const bool explicit_val = !options.val_inputs.empty();
  if (!explicit_val && !(options.val_fraction > 0.0 && options.val_fraction < 1.0))
    throw InputError("--val-fraction must be in (0, 1), got " + fmt_double(options.val_fraction));
  if (options.vocab < 1 || options.vocab > 65536)
    throw InputError("--vocab must be in [1, 65536] (tokens are uint16), got " + std::to_string(options.vocab));
  if (options.chunk_tokens < 1 || options.chunk_tokens > (std::int64_t{1} << 28))
    throw InputError("--chunk-tokens must be in [1, 2^28], got " + std::to_string(options.chunk_tokens));

  std::vector<Shard> train, val;
  std::int64_t n_train = 0, n_val = 0;
  for (const auto& p : inputs) train.push_back(inspect(p, options.format)), n_train += train.back().tokens;
  for (const auto& p : options.val_inputs) val.push_back(inspect(p, options.format)), n_val += val.back().tokens;

  std::string source;
  if (explicit_val) {
    if (n_train < 1) throw InputError(inputs.front() + ": the training inputs hold no tokens");
    if (n_val < 1) throw InputError(options.val_inputs.front() + ": the --val inputs hold no tokens");
  } else {
    const std::int64_t n = n_train;
    if (n < 2)
      throw InputError(inputs.front() + ": the inputs hold only " + std::to_string(n) +
                       " token(s); need at least 2 (one for train, one for val)");
    n_val = val_token_count(n, options.val_fraction);
    n_train = n - n_val;
  }
  for (const auto& s : train) source += (source.empty() ? "" : ", ") + std::filesystem::path(s.path).filename().string();
  if (explicit_val) {
    source += "; val: ";
    bool first = true;
    for (const auto& s : val)
      source += (first ? "" : ", ") + std::filesystem::path(s.path).filename().string(), first = false;
  }

  TokenDatasetSpec spec;
  spec.tokenizer = TextTokenizer::Pretokenized;
  spec.vocab_size = options.vocab;
  spec.source = source;
  spec.val_fraction = explicit_val ? static_cast<double>(n_val) / static_cast<double>(n_train + n_val)
                                   : options.val_fraction;
  TokenDatasetWriter writer(output, spec, n_train, n_val);
  std::vector<unsigned char> raw(static_cast<std::size_t>(2 * options.chunk_tokens));
  std::vector<TokenIndex> ids(static_cast<std::size_t>(options.chunk_tokens));
  Progress progress(n_train + n_val, options.progress_seconds);
  for (const auto& s : train) copy_shard(s, options.vocab, options.chunk_tokens, writer, progress, raw, ids);
  for (const auto& s : val) copy_shard(s, options.vocab, options.chunk_tokens, writer, progress, raw, ids);
  const TokenSplitCounts counts = writer.commit();
  return {static_cast<std::int64_t>(train.size() + val.size()), counts.train + counts.val, counts.train, counts.val};
}

}  // namespace shardtrain
