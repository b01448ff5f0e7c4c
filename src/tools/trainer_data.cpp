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
#include <chrono>
#include <cstdio>
#include <string>

#include "core/error.hpp"
#include "core/mpi_world.hpp"
#include "io/text_import.hpp"
#include "tools/data_commands.hpp"

namespace {

using shardtrain::MpiSession;

int run(int argc, char** argv) {
  CLI::App app{
      "Convert raw data into a shardtrain data set (HDF5; formats: share/doc/dataset-format.md): a token "
      "stream for language models (text, tokens) or labelled samples for classifiers (mnist, textdir, csv).",
      "trainer-data"};
  app.require_subcommand(1);
  app.footer("Exit codes: 0 success, 2 bad input or usage, 1 internal error.");

  std::string input, output;
  std::string tokenizer = "char";
  double val_fraction = 0.1;
  CLI::App* text = app.add_subcommand("text", "Import one text file as character or byte tokens");
  text->footer(
      "char: the file must be UTF-8; tokens are Unicode code points, vocab = the sorted distinct "
      "code points of the file.\nbyte: tokens are raw bytes, vocab of 256.\nThe last VAL_FRACTION "
      "of the token stream becomes the validation split (at least 1 token each). OUTPUT is "
      "written to OUTPUT.partial and renamed into place when complete; an existing OUTPUT is "
      "replaced.");
  text->add_option("INPUT", input, "Text file to import")->required();
  text->add_option("OUTPUT", output, "Data set file to write (.h5)")->required();
  text->add_option("--tokenizer", tokenizer, "char or byte")
      ->check(CLI::IsMember({"char", "byte"}))
      ->capture_default_str();
  text->add_option("--val-fraction", val_fraction,
                   "Fraction of tokens (at the end of the stream) held out for validation, in (0, 1)")
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
    opt.tokenizer = tokenizer == "byte" ? shardtrain::TextTokenizer::Byte : shardtrain::TextTokenizer::Char;
    opt.val_fraction = val_fraction;
    const auto t0 = std::chrono::steady_clock::now();
    const auto s = shardtrain::import_text(input, output, opt);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %lld tokens, vocab %lld (%s), train %lld, val %lld, %.2f s\n", output.c_str(),
                static_cast<long long>(s.tokens), static_cast<long long>(s.vocab_size), tokenizer.c_str(),
                static_cast<long long>(s.train), static_cast<long long>(s.val), secs);
  }
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
