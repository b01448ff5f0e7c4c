// trainer-data `tokens`: pre-tokenized shards (llm.c / nanoGPT .bin, or raw
// uint16) -> a "shardtrain-tokens" data set (io/token_import.hpp). This file only
// parses the command line and prints the one-line summary.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "core/error.hpp"
#include "io/token_import.hpp"
#include "tools/data_commands.hpp"

namespace shardtrain {

std::vector<DataCommand> add_token_commands(CLI::App& app) {
  struct Args {
    std::vector<std::string> files, inputs;
    std::string output, format = "auto";
    TokenImportOptions options;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("tokens", "Import pre-tokenized shards (llm.c/nanoGPT .bin or raw uint16)");
  sub->footer(
      "Usage: trainer-data tokens INPUT... OUTPUT [OPTIONS] (OUTPUT is the last file named).\n"
      "Formats (--format):\n"
      "  llmc: llm.c / nanoGPT shards: a header of 256 little-endian int32 (magic 20240520, version 1, "
      "token count), then exactly that many little-endian uint16 tokens; a short file or bytes after the "
      "tokens are refused.\n"
      "  raw: headerless little-endian uint16 tokens (an odd byte count is refused).\n"
      "  auto (default): llmc, and a file without the llm.c magic is an error. Auto does not fall back to "
      "raw: every byte pair is a valid uint16, so a corrupt or foreign file would import silently as "
      "garbage tokens; headerless files must be named as such with --format raw.\n"
      "Every token must be < VOCAB (default 50257, GPT-2 BPE); the first one that is not ends the import "
      "with its file, byte offset and value. The data set records tokenizer 'pretokenized', vocab_size = "
      "VOCAB and no token strings; the trainer sizes the GPT's vocabulary from it.\n"
      "Split: the inputs are concatenated in the order given; the last VAL_FRACTION of that stream is the "
      "validation split, or, with --val, the --val files (in order) are the validation split and every "
      "INPUT is training data.\n"
      "Every file is checked from its header and size before anything is written; tokens are then read in "
      "chunks of CHUNK_TOKENS, so memory stays at about 6 bytes x CHUNK_TOKENS. A progress line goes to "
      "stderr every PROGRESS seconds. OUTPUT is written to OUTPUT.partial and renamed into place when "
      "complete; an existing OUTPUT is replaced.");
  // One positional list, split here: CLI11 (2.1) would give a vector positional
  // every argument, leaving none for a separate OUTPUT positional after it.
  sub->add_option("FILES", a->files,
                  "INPUT... OUTPUT: the token files to import (training data, or all data without --val), "
                  "then the data set file to write (.h5), last")
      ->required()
      ->expected(2, -1);
  sub->add_option("--format", a->format, "auto, llmc or raw (see below)")
      ->check(CLI::IsMember({"auto", "llmc", "raw"}))
      ->capture_default_str();
  sub->add_option("--vocab", a->options.vocab, "Declared vocabulary size: every token id must be below it, in [1, 65536]")
      ->capture_default_str();
  auto* frac = sub->add_option("--val-fraction", a->options.val_fraction,
                               "Fraction of tokens (at the end of the stream) held out for validation, in (0, 1)")
                   ->capture_default_str();
  sub->add_option("--val", a->options.val_inputs,
                  "Validation shard (repeatable: --val A --val B); then every INPUT is training data")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->excludes(frac);
  sub->add_option("--chunk-tokens", a->options.chunk_tokens, "Tokens read and written per chunk")
      ->capture_default_str();
  sub->add_option("--progress", a->options.progress_seconds, "Seconds between progress lines on stderr (0: none)")
      ->capture_default_str();
  return {{sub, [a] {
             a->output = a->files.back();
             a->inputs.assign(a->files.begin(), a->files.end() - 1);
             a->options.format = a->format == "llmc"  ? TokenFileFormat::Llmc
                                 : a->format == "raw" ? TokenFileFormat::Raw
                                                      : TokenFileFormat::Auto;
             const auto t0 = std::chrono::steady_clock::now();
             const TokenImportSummary s = import_tokens(a->inputs, a->output, a->options);
             const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
             std::printf("%s: %lld tokens from %lld file%s, vocab %lld (pretokenized), train %lld, val %lld, %.2f s\n",
                         a->output.c_str(), static_cast<long long>(s.tokens), static_cast<long long>(s.files),
                         s.files == 1 ? "" : "s",
                         static_cast<long long>(a->options.vocab), static_cast<long long>(s.train),
                         static_cast<long long>(s.val), secs);
           }}};
}

}  // namespace shardtrain
