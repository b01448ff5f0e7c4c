// trainer-data `textdir` and `csv`: labelled text -> a "shardtrain-samples" data
// set for a text classifier (io/labelled_text.hpp). This file only parses the
// command line and prints the one-line summary.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/labelled_text.hpp"
#include "tools/data_commands.hpp"

namespace shardtrain {

namespace {

const char* kTokensFooter =
    "Tokens (--tokenizer): byte (default): vocab 258 (ids 0-255 are bytes, 256 [PAD], 257 [CLS]); "
    "word-hash: words (runs of ASCII letters and digits) and every other non-blank byte, each hashed "
    "(FNV-1a) into BUCKETS ids, BUCKETS = [PAD], BUCKETS+1 = [CLS], vocab BUCKETS+2; wordpiece: BERT's "
    "WordPiece with the vocabulary --vocab FILE (a vocab.txt, one token per line, id = line number; "
    "share/data/fetch-bert-vocab.sh DIR fetches bert-base-uncased's), Hugging Face transformers.BertTokenizer's "
    "rules, uncased (lower-cased, accents stripped) unless --cased, bytes that are not UTF-8 dropped (as BERT "
    "drops U+FFFD); the data set records the vocab file's name and SHA-256. A sample is [CLS] followed by the first SEQ_LEN-1 tokens of the document (wordpiece: [CLS], "
    "the first SEQ_LEN-2 tokens, [SEP]), padded with [PAD]. Classes are the "
    "labels sorted by name (id 0 first). The split is seeded: a document is in val when a hash of "
    "(SEED, its key) falls in VAL_FRACTION, so it does not depend on listing or row order. OUTPUT "
    "is written to OUTPUT.partial and renamed into place when complete.";

void add_common_options(CLI::App* sub, LabelledTextOptions& o) {
  sub->add_option("--seq-len", o.seq_len, "Tokens per sample, [CLS] included")->capture_default_str();
  sub->add_option("--val-fraction", o.val_fraction, "Expected fraction of documents held out for validation, in (0, 1)")
      ->capture_default_str();
  sub->add_option("--seed", o.seed, "Seed of the train/val split")->capture_default_str();
  sub->add_flag("--strip-headers", o.strip_headers,
                "Treat documents as e-mails: drop the RFC 822 header block except the Subject line, "
                "which is kept first");
  sub->add_flag("--lowercase", o.lowercase, "byte, word-hash: lowercase ASCII letters A-Z");
  const auto names = enum_names(ClassifierTokenizer{});
  sub->add_option_function<std::string>(
         "--tokenizer", [&o](const std::string& name) { o.tokenizer = *enum_named<ClassifierTokenizer>(name); },
         "byte, word-hash or wordpiece (see below)")
      ->check(CLI::IsMember(std::vector<std::string>(names.begin(), names.end())))
      ->default_str(std::string(name_of(o.tokenizer)));
  sub->add_option("--buckets", o.buckets, "word-hash: hash buckets (vocabulary without [PAD], [CLS])")
      ->capture_default_str();
  sub->add_option("--vocab", o.vocab_path, "wordpiece: BERT's vocab.txt (one token per line)");
  sub->add_flag("--cased", o.cased, "wordpiece: a cased model's rules (no lower-casing, accents kept)");
}

std::string class_counts(const LabelledTextSummary& s) {
  std::string out;
  for (std::size_t c = 0; c < s.class_names.size(); ++c) {
    if (c) out += ", ";
    out += s.class_names[c] + " " + std::to_string(s.train_per_class[c] + s.val_per_class[c]) + " (train " +
           std::to_string(s.train_per_class[c]) + ", val " + std::to_string(s.val_per_class[c]) + ")";
  }
  return out;
}

void print_summary(const std::string& output, const LabelledTextSummary& s, std::int64_t seq_len, double secs) {
  std::printf("%s: %lld documents, %zu classes: %s; train %lld, val %lld; %lld truncated to %lld tokens; %.2f s\n",
              output.c_str(), static_cast<long long>(s.train() + s.val()), s.class_names.size(),
              class_counts(s).c_str(), static_cast<long long>(s.train()), static_cast<long long>(s.val()),
              static_cast<long long>(s.truncated), static_cast<long long>(seq_len), secs);
}

template <class F>
void timed(const std::string& output, std::int64_t seq_len, F&& import) {
  const auto t0 = std::chrono::steady_clock::now();
  const LabelledTextSummary s = import();
  print_summary(output, s, seq_len,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

char parse_delimiter(const std::string& d) {
  if (d == "\\t" || d == "tab" || d == "\t") return '\t';
  if (d.size() != 1 || d[0] == '"' || d[0] == '\n' || d[0] == '\r')
    throw InputError("--delimiter must be one character (not a quote or a line break) or 'tab', got '" + d + "'");
  return d[0];
}

}  // namespace

std::vector<DataCommand> add_labelled_text_commands(CLI::App& app) {
  std::vector<DataCommand> commands;

  {
    struct Args {
      std::string dir, output;
      std::vector<std::string> labels;
      TextDirOptions options;
    };
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("textdir", "Import a directory of labelled text files (one folder per class)");
    sub->footer(std::string("Every regular file below DIR/<folder>/ (recursive) is one document; its class is "
                            "<folder>, or the class --label maps it to (several folders may map to one class; "
                            "with a mapping, every folder must be mapped). Files directly in DIR are skipped. "
                            "The split key is the path relative to DIR.\n") +
                kTokensFooter);
    sub->add_option("DIR", a->dir, "Directory with one sub-folder per class (or per --label mapping)")->required();
    sub->add_option("OUTPUT", a->output, "Data set file to write (.h5)")->required();
    sub->add_option("--label", a->labels, "FOLDER=CLASS: documents below DIR/FOLDER have class CLASS (repeatable)");
    add_common_options(sub, a->options);
    commands.push_back({sub, [a] {
                          for (const auto& m : a->labels) {
                            const auto eq = m.find('=');
                            if (eq == std::string::npos || eq == 0 || eq + 1 == m.size())
                              throw InputError("--label must be FOLDER=CLASS, got '" + m + "'");
                            const std::string folder = m.substr(0, eq);
                            if (a->options.folder_to_class.count(folder))
                              throw InputError("--label: folder '" + folder + "' mapped twice");
                            a->options.folder_to_class[folder] = m.substr(eq + 1);
                          }
                          timed(a->output, a->options.seq_len,
                                [&] { return import_text_dir(a->dir, a->output, a->options); });
                        }});
  }

  {
    struct Args {
      std::string file, output, delimiter = ",";
      CsvOptions options;
    };
    auto a = std::make_shared<Args>();
    CLI::App* sub = app.add_subcommand("csv", "Import a CSV/TSV file of (label, text) rows");
    sub->footer(std::string("RFC 4180: fields may be quoted, with doubled quotes and line breaks inside quotes; "
                            "blank lines are skipped. Columns are counted from 0. The split key is the text "
                            "field, so duplicate texts land in the same split.\n") +
                kTokensFooter);
    sub->add_option("FILE", a->file, "CSV or TSV file")->required();
    sub->add_option("OUTPUT", a->output, "Data set file to write (.h5)")->required();
    sub->add_option("--delimiter", a->delimiter, "Field delimiter: one character, or 'tab' / '\\t'")
        ->capture_default_str();
    sub->add_option("--label-column", a->options.label_column, "Column of the label (from 0)")->capture_default_str();
    sub->add_option("--text-column", a->options.text_column, "Column of the text (from 0)")->capture_default_str();
    sub->add_flag("--header", a->options.header, "The first row is a header: skip it");
    add_common_options(sub, a->options);
    commands.push_back({sub, [a] {
                          a->options.delimiter = parse_delimiter(a->delimiter);
                          timed(a->output, a->options.seq_len,
                                [&] { return import_csv(a->file, a->output, a->options); });
                        }});
  }
  return commands;
}

}  // namespace shardtrain
