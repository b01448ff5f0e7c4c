// The labelled-text importers and their pieces (see labelled_text.hpp).
// Length (~550 lines): the pieces here (the CSV reader, document reading with e-mail
// header stripping, the hashed train/val split, the option and class checks) are private
// to the two importers (textdir, csv) at the bottom, which share all of them.
#include "io/labelled_text.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <system_error>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/sample_dataset_writer.hpp"
#include "io/wordpiece.hpp"

namespace shardtrain {

namespace fs = std::filesystem;

// ---- tokenizer ---------------------------------------------------------------

std::int64_t encode_classifier_bytes(std::string_view text, bool lowercase, std::span<TokenIndex> out) {
  SHARDTRAIN_CHECK(out.size() >= 2, "seq_len must be at least 2");
  const std::size_t n = std::min(text.size(), out.size() - 1);
  out[0] = kClassifierClsId;
  for (std::size_t i = 0; i < n; ++i) {
    auto b = static_cast<unsigned char>(text[i]);
    if (lowercase && b >= 'A' && b <= 'Z') b = static_cast<unsigned char>(b - 'A' + 'a');
    out[i + 1] = b;
  }
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(n + 1), out.end(), kClassifierPadId);
  return static_cast<std::int64_t>(n + 1);
}

std::int64_t encode_classifier_words(std::string_view text, bool lowercase, std::int64_t buckets,
                                     std::span<TokenIndex> out, std::int64_t* total) {
  SHARDTRAIN_CHECK(out.size() >= 2, "seq_len must be at least 2");
  SHARDTRAIN_CHECK(buckets >= 1 && buckets <= (std::int64_t{1} << 24), "buckets must be in [1, 2^24]");
  auto alnum = [](unsigned char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  auto blank = [](unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  const auto cap = static_cast<std::int64_t>(out.size()) - 1;
  std::int64_t n = 0, count = 0;
  out[0] = static_cast<TokenIndex>(buckets + 1);
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (blank(c)) {
      ++i;
      continue;
    }
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a 64
    std::size_t j = i;
    do {
      auto b = static_cast<unsigned char>(text[j]);
      if (lowercase && b >= 'A' && b <= 'Z') b = static_cast<unsigned char>(b - 'A' + 'a');
      h = (h ^ b) * 1099511628211ull;
      ++j;
    } while (alnum(c) && j < text.size() && alnum(static_cast<unsigned char>(text[j])));
    if (n < cap) out[static_cast<std::size_t>(++n)] = static_cast<TokenIndex>(h % static_cast<std::uint64_t>(buckets));
    ++count;
    i = j;
  }
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(n + 1), out.end(), static_cast<TokenIndex>(buckets));
  if (total) *total = count;
  return n + 1;
}

// ---- e-mail ------------------------------------------------------------------

namespace {

// "Name:" with a field name of printable ASCII other than ':' (RFC 822 3.2).
bool is_header_field(std::string_view line) {
  std::size_t i = 0;
  while (i < line.size() && line[i] > ' ' && line[i] < 127 && line[i] != ':') ++i;
  return i > 0 && i < line.size() && line[i] == ':';
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != prefix[i]) return false;
  }
  return true;
}

std::string_view chomp_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

std::string strip_email_headers(std::string_view email) {
  const std::size_t first_end = email.find('\n');
  const std::string_view first = chomp_cr(email.substr(0, first_end));
  if (!(first.starts_with("From ") || is_header_field(first))) return std::string(email);

  std::string subject;
  bool have_subject = false, in_subject = false;
  std::size_t pos = 0;
  std::size_t body = email.size();  // no empty line: it is all header
  while (pos < email.size()) {
    const std::size_t end = email.find('\n', pos);
    const std::size_t next = end == std::string_view::npos ? email.size() : end + 1;
    const std::string_view line = chomp_cr(email.substr(pos, next - pos - (end == std::string_view::npos ? 0 : 1)));
    if (line.empty()) {
      body = next;
      break;
    }
    if (line[0] == ' ' || line[0] == '\t') {
      if (in_subject) subject.append(line);  // unfolding: drop the line break, keep the whitespace
    } else {
      in_subject = !have_subject && starts_with_ci(line, "subject:");
      if (in_subject) {
        have_subject = true;
        subject.assign(line.substr(8));
      }
    }
    pos = next;
  }
  std::string out;
  if (have_subject) {
    const std::size_t v = subject.find_first_not_of(" \t");
    out = "Subject: ";
    if (v != std::string::npos) out.append(subject, v);
    out += '\n';
  }
  out.append(email.substr(std::min(body, email.size())));
  return out;
}

// ---- split -------------------------------------------------------------------

std::uint64_t split_hash(std::uint64_t seed, std::string_view key) {
  std::uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a 64
  for (const char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return mix64(h ^ mix64(seed));
}

bool in_val_split(std::uint64_t seed, std::string_view key, double val_fraction) {
  const double u = static_cast<double>(split_hash(seed, key) >> 11) * 0x1.0p-53;
  return u < val_fraction;
}

// ---- CSV ---------------------------------------------------------------------

CsvReader::CsvReader(std::istream& in, std::string name, char delimiter)
    : m_in(in), m_name(std::move(name)), m_delimiter(delimiter) {}

int CsvReader::get() {
  const int c = m_in.rdbuf()->sbumpc();
  if (c == '\n') ++m_line;
  return c;
}

bool CsvReader::next(std::vector<std::string>& fields) {
  constexpr int kEof = std::char_traits<char>::eof();
  fields.clear();
  m_record_line = m_line;
  int c = get();
  if (c == kEof) return false;
  std::string field;
  for (;;) {
    field.clear();
    if (c == '"') {
      const std::int64_t open_line = m_line;
      for (;;) {
        c = get();
        if (c == kEof)
          throw InputError(m_name + ":" + std::to_string(open_line) +
                           ": unterminated quoted field (the quote opened on this line never closes)");
        if (c == '"') {
          if (m_in.rdbuf()->sgetc() == '"') {
            get();
            field += '"';
            continue;
          }
          break;
        }
        field += static_cast<char>(c);
      }
      c = get();
      if (c != m_delimiter && c != '\n' && c != '\r' && c != kEof)
        throw InputError(m_name + ":" + std::to_string(m_line) +
                         ": unexpected character after the closing quote of a field (expected the "
                         "delimiter or the end of the line)");
    } else {
      // Unquoted: up to the delimiter or the end of the line. A quote inside is
      // taken literally (as Python's csv module does).
      while (c != m_delimiter && c != '\n' && c != '\r' && c != kEof) {
        field += static_cast<char>(c);
        c = get();
      }
    }
    fields.push_back(field);
    if (c == m_delimiter) {
      c = get();
      continue;
    }
    if (c == '\r' && m_in.rdbuf()->sgetc() == '\n') get();
    return true;
  }
}

// ---- directory walk ----------------------------------------------------------

namespace {

[[noreturn]] void fs_error(const fs::path& p, const std::string& what, const std::error_code& ec) {
  throw InputError(p.string() + ": " + what + (ec ? ": " + ec.message() : std::string()));
}

// Kind of `p` following symlinks; an error for anything but a directory or a regular file.
bool is_dir_else_file(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (ec) fs_error(p, "cannot examine (unreadable or a dangling symlink)", ec);
  if (fs::is_directory(st)) return true;
  if (fs::is_regular_file(st)) return false;
  fs_error(p, "not a regular file or a directory", {});
}

void walk_folder(const fs::path& root, const fs::path& dir, const std::string& folder,
                 std::vector<TextDocumentPath>& out) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) fs_error(dir, "cannot list directory", ec);
  for (; it != end; it.increment(ec)) {
    const fs::path p = it->path();
    if (is_dir_else_file(p))
      walk_folder(root, p, folder, out);
    else
      out.push_back({p.lexically_relative(root).generic_string(), folder});
  }
  if (ec) fs_error(dir, "cannot list directory", ec);
}

}  // namespace

std::vector<TextDocumentPath> list_text_documents(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  const fs::file_status st = fs::status(root, ec);
  if (!fs::exists(st)) throw InputError(dir + ": no such directory");
  if (!fs::is_directory(st)) throw InputError(dir + ": not a directory (expected DIR/<folder>/<files>)");
  std::vector<TextDocumentPath> out;
  fs::directory_iterator it(root, ec), end;
  if (ec) fs_error(root, "cannot list directory", ec);
  for (; it != end; it.increment(ec)) {
    const fs::path p = it->path();
    if (is_dir_else_file(p)) walk_folder(root, p, p.filename().string(), out);
  }
  if (ec) fs_error(root, "cannot list directory", ec);
  std::sort(out.begin(), out.end(),
            [](const TextDocumentPath& a, const TextDocumentPath& b) { return a.relative < b.relative; });
  return out;
}

// ---- importers ---------------------------------------------------------------

std::int64_t LabelledTextSummary::train() const {
  std::int64_t n = 0;
  for (const auto c : train_per_class) n += c;
  return n;
}
std::int64_t LabelledTextSummary::val() const {
  std::int64_t n = 0;
  for (const auto c : val_per_class) n += c;
  return n;
}

namespace {

std::string format_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void check_options(const LabelledTextOptions& o) {
  if (!(o.val_fraction > 0.0 && o.val_fraction < 1.0))
    throw InputError("--val-fraction must be in (0, 1), got " + format_double(o.val_fraction));
  if (o.seq_len < 2 || o.seq_len > (1 << 20))
    throw InputError("--seq-len must be in [2, 1048576], got " + std::to_string(o.seq_len));
  if (o.buckets < 1 || o.buckets > (1 << 24))
    throw InputError("--buckets must be in [1, 16777216], got " + std::to_string(o.buckets));
  const bool wordpiece = o.tokenizer == ClassifierTokenizer::Wordpiece;
  if (wordpiece && o.vocab_path.empty())
    throw InputError("--tokenizer wordpiece needs --vocab FILE, BERT's vocab.txt (share/data/fetch-bert-vocab.sh "
                     "DIR fetches bert-base-uncased's)");
  if (!wordpiece && !o.vocab_path.empty()) throw InputError("--vocab is only for --tokenizer wordpiece");
  if (!wordpiece && o.cased) throw InputError("--cased is only for --tokenizer wordpiece");
  if (wordpiece && o.lowercase)
    throw InputError("--lowercase is for the byte and word-hash tokenizers; wordpiece lower-cases (and strips "
                     "accents) unless --cased");
}

// The WordPiece tokenizer of a wordpiece import (its vocab.txt read and checked
// before any document), or none.
std::unique_ptr<WordPiece> make_wordpiece(const LabelledTextOptions& o) {
  if (o.tokenizer != ClassifierTokenizer::Wordpiece) return nullptr;
  return std::make_unique<WordPiece>(read_wordpiece_vocab(o.vocab_path), !o.cased);
}

std::string split_rule(const LabelledTextOptions& o, const char* key) {
  return "seeded: seed " + std::to_string(o.seed) + ", val fraction " + format_double(o.val_fraction) +
         ", by hash of the " + key;
}

// Fails naming the split that would be empty, before anything is written.
void check_splits(const std::string& input, const LabelledTextSummary& s, const LabelledTextOptions& o) {
  if (s.train() == 0 || s.val() == 0)
    throw InputError(input + ": the " + (s.val() == 0 ? "val" : "train") + " split would be empty (" +
                     std::to_string(s.train() + s.val()) + " documents, --val-fraction " +
                     format_double(o.val_fraction) + ", --seed " + std::to_string(o.seed) +
                     "); add documents or change the fraction or seed");
}

void check_classes(const std::string& input, const std::vector<std::string>& names) {
  if (names.size() < 2) {
    std::string msg = input + ": need at least 2 classes, found " + std::to_string(names.size());
    if (names.size() == 1) msg += " ('" + names[0] + "')";
    throw InputError(msg);
  }
}

SampleDatasetSpec make_spec(const LabelledTextOptions& o, const WordPiece* wp, std::vector<std::string> class_names,
                            std::string source, const char* key) {
  SampleDatasetSpec spec;
  spec.kind = SampleKind::Tokens;
  spec.sample_shape = {o.seq_len};
  spec.class_names = std::move(class_names);
  spec.tokenizer = std::string(name_of(o.tokenizer));
  switch (o.tokenizer) {
    case ClassifierTokenizer::Byte:
      spec.vocab_size = kClassifierVocabSize;
      spec.pad_id = kClassifierPadId;
      spec.cls_id = kClassifierClsId;
      break;
    case ClassifierTokenizer::WordHash:
      spec.vocab_size = o.buckets + 2;
      spec.pad_id = o.buckets;
      spec.cls_id = o.buckets + 1;
      break;
    case ClassifierTokenizer::Wordpiece:
      spec.vocab_size = static_cast<std::int64_t>(wp->vocab().size());
      spec.pad_id = wp->pad_id();
      spec.cls_id = wp->cls_id();
      spec.sep_id = wp->sep_id();
      spec.vocab_file = fs::path(o.vocab_path).filename().string();
      spec.vocab_sha256 = wp->vocab_sha256();
      spec.lowercase = wp->lowercase();
      break;
  }
  spec.source = std::move(source);
  spec.split_rule = split_rule(o, key);
  return spec;
}

std::string read_document(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw InputError(p.string() + ": cannot open for reading: " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw InputError(p.string() + ": read error: " + std::strerror(errno));
  if (bytes.empty()) throw InputError(p.string() + ": empty file (0 bytes), not a document");
  return bytes;
}

// Encodes one processed document and appends it; counts truncation.
void append_document(SampleDatasetWriter& writer, const WordPiece* wp, std::vector<TokenIndex>& ids,
                     std::string_view raw, const LabelledTextOptions& o, bool val, std::int32_t label,
                     LabelledTextSummary& s) {
  std::string stripped;
  std::string_view text = raw;
  if (o.strip_headers) {
    stripped = strip_email_headers(raw);
    text = stripped;
  }
  std::int64_t length = 0, total = static_cast<std::int64_t>(text.size()), room = o.seq_len - 1;
  switch (o.tokenizer) {
    case ClassifierTokenizer::Wordpiece:
      length = wp->encode_sample(text, ids, &total);
      room = o.seq_len - 2;
      break;
    case ClassifierTokenizer::WordHash:
      length = encode_classifier_words(text, o.lowercase, o.buckets, ids, &total);
      break;
    case ClassifierTokenizer::Byte:
      length = encode_classifier_bytes(text, o.lowercase, ids);
      break;
  }
  if (total > room) ++s.truncated;
  writer.append_tokens(val ? SampleSplit::Val : SampleSplit::Train, ids, length, label);
}

}  // namespace

LabelledTextSummary import_text_dir(const std::string& dir, const std::string& output,
                                    const TextDirOptions& options) {
  check_options(options);
  const std::unique_ptr<WordPiece> wp = make_wordpiece(options);
  const std::vector<TextDocumentPath> docs = list_text_documents(dir);

  // Folders and the class of each.
  std::set<std::string> folders;
  for (const auto& d : docs) folders.insert(d.folder);
  {  // folders with no file at all still count: a mapping may name them
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec)) folders.insert(it->path().filename().string());
  }
  if (folders.empty()) throw InputError(dir + ": no sub-folders (expected DIR/<folder>/<files>)");
  std::map<std::string, std::string> class_of;
  if (options.folder_to_class.empty()) {
    for (const auto& f : folders) class_of[f] = f;
  } else {
    std::string unmapped, missing;
    for (const auto& f : folders)
      if (!options.folder_to_class.count(f)) unmapped += (unmapped.empty() ? "" : ", ") + f;
    for (const auto& [f, c] : options.folder_to_class) {
      if (!folders.count(f)) missing += (missing.empty() ? "" : ", ") + f;
      if (c.empty()) throw InputError("--label " + f + "=: empty class name");
    }
    if (!unmapped.empty())
      throw InputError(dir + ": folders not in the --label mapping: " + unmapped +
                       " (map each folder, e.g. --label FOLDER=CLASS)");
    if (!missing.empty()) throw InputError(dir + ": --label names folders that do not exist: " + missing);
    class_of = options.folder_to_class;
  }
  std::set<std::string> class_set;
  for (const auto& [f, c] : class_of) class_set.insert(c);
  LabelledTextSummary s;
  s.class_names.assign(class_set.begin(), class_set.end());
  check_classes(dir, s.class_names);
  std::map<std::string, std::int32_t> class_id;
  for (std::size_t i = 0; i < s.class_names.size(); ++i) class_id[s.class_names[i]] = static_cast<std::int32_t>(i);

  // Labels and splits from the paths alone, checked before any file is read.
  s.train_per_class.assign(s.class_names.size(), 0);
  s.val_per_class.assign(s.class_names.size(), 0);
  std::vector<char> val(docs.size());
  std::vector<std::int32_t> label(docs.size());
  for (std::size_t i = 0; i < docs.size(); ++i) {
    label[i] = class_id.at(class_of.at(docs[i].folder));
    val[i] = in_val_split(options.seed, docs[i].relative, options.val_fraction);
    ++(val[i] ? s.val_per_class : s.train_per_class)[static_cast<std::size_t>(label[i])];
  }
  for (std::size_t c = 0; c < s.class_names.size(); ++c)
    if (s.train_per_class[c] + s.val_per_class[c] == 0)
      throw InputError(dir + ": class '" + s.class_names[c] + "' has no documents");
  check_splits(dir, s, options);

  std::string source = fs::path(dir).lexically_normal().string();  // its last component, and the mapping
  while (source.size() > 1 && source.back() == '/') source.pop_back();
  source = fs::path(source).filename().string();
  if (!options.folder_to_class.empty()) {
    std::string sep = " (";
    for (const auto& [f, c] : options.folder_to_class) source += sep + f + "=" + c, sep = ", ";
    source += ")";
  }
  SampleDatasetWriter writer(output, make_spec(options, wp.get(), s.class_names, source, "relative path"));
  std::vector<TokenIndex> ids(static_cast<std::size_t>(options.seq_len));
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const std::string raw = read_document(fs::path(dir) / docs[i].relative);
    append_document(writer, wp.get(), ids, raw, options, val[i], label[i], s);
  }
  writer.commit();
  return s;
}

namespace {

// Reads the data records of a CSV file (header skipped, blank lines skipped),
// calling f(line, label, text) for each; checks the column count.
template <class F>
void for_each_csv_record(const std::string& file, const CsvOptions& o, F&& f) {
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  if (!fs::exists(st)) throw InputError(file + ": no such file");
  if (!fs::is_regular_file(st)) throw InputError(file + ": not a regular file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file + ": cannot open for reading: " + std::strerror(errno));
  CsvReader reader(in, file, o.delimiter);
  std::vector<std::string> fields;
  const std::size_t need = static_cast<std::size_t>(std::max(o.label_column, o.text_column)) + 1;
  bool first = true;
  while (reader.next(fields)) {
    if (first && o.header) {
      first = false;
      continue;
    }
    first = false;
    if (fields.size() == 1 && fields[0].empty()) continue;  // a blank line
    const std::string where = file + ":" + std::to_string(reader.record_line());
    if (fields.size() < need)
      throw InputError(where + ": " + std::to_string(fields.size()) + " column" +
                       (fields.size() == 1 ? "" : "s") + ", need at least " + std::to_string(need) +
                       " (--label-column " + std::to_string(o.label_column) + ", --text-column " +
                       std::to_string(o.text_column) + ", counted from 0)");
    const std::string& label = fields[static_cast<std::size_t>(o.label_column)];
    const std::string& text = fields[static_cast<std::size_t>(o.text_column)];
    if (label.empty()) throw InputError(where + ": empty label");
    if (text.empty()) throw InputError(where + ": empty text");
    f(where, label, text);
  }
  if (in.bad()) throw InputError(file + ": read error: " + std::strerror(errno));
}

}  // namespace

LabelledTextSummary import_csv(const std::string& file, const std::string& output, const CsvOptions& options) {
  check_options(options);
  const std::unique_ptr<WordPiece> wp = make_wordpiece(options);
  if (options.label_column < 0 || options.text_column < 0 || options.label_column == options.text_column)
    throw InputError("--label-column and --text-column must be different columns >= 0, got " +
                     std::to_string(options.label_column) + " and " + std::to_string(options.text_column));

  // Pass 1: the label set and the split counts (no text kept).
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> per_label;  // label -> (train, val)
  for_each_csv_record(file, options, [&](const std::string&, const std::string& label, const std::string& text) {
    auto& c = per_label[label];
    ++(in_val_split(options.seed, text, options.val_fraction) ? c.second : c.first);
  });
  if (per_label.empty()) throw InputError(file + ": no data rows");
  LabelledTextSummary s;
  std::map<std::string, std::int32_t> class_id;
  for (const auto& [label, counts] : per_label) {
    class_id[label] = static_cast<std::int32_t>(s.class_names.size());
    s.class_names.push_back(label);
    s.train_per_class.push_back(counts.first);
    s.val_per_class.push_back(counts.second);
  }
  check_classes(file, s.class_names);
  check_splits(file, s, options);

  // Pass 2: the samples, one record at a time.
  SampleDatasetWriter writer(output, make_spec(options, wp.get(), s.class_names, fs::path(file).filename().string(), "text"));
  std::vector<TokenIndex> ids(static_cast<std::size_t>(options.seq_len));
  for_each_csv_record(file, options, [&](const std::string& where, const std::string& label, const std::string& text) {
    const auto it = class_id.find(label);
    if (it == class_id.end()) throw InputError(where + ": label '" + label + "' was not there on the first read (file changed?)");
    append_document(writer, wp.get(), ids, text, options, in_val_split(options.seed, text, options.val_fraction), it->second, s);
  });
  writer.commit();
  return s;
}

}  // namespace shardtrain
