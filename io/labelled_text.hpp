// shardtrain/io/labelled_text.hpp
// Owns the labelled-text importers of trainer-data (`textdir`, `csv`): documents
// with a class label -> a "shardtrain-samples" token data set for a text
// classifier, written through SampleDatasetWriter. Also owns their pieces, which
// use no HDF5 and are unit-tested on their own: the byte-level classification
// tokenizer, e-mail header stripping, an RFC 4180 CSV reader, the directory walk
// and the seeded hash split.
// Invariants:
//  - Streaming: one document (one file, one CSV record) is in memory at a time,
//    never the corpus. textdir holds the sorted list of paths; csv reads its file
//    twice (labels first, then samples).
//  - Sample = [CLS] + the first seq_len-1 tokens of the processed document, padded
//    with [PAD] to seq_len; length counts [CLS]. Tokenizer "byte": ids 0..255 are
//    bytes, 256 [PAD], 257 [CLS]; vocab_size 258. Tokenizer "word-hash" (--buckets
//    B): words (runs of ASCII letters and digits) and every other non-blank byte
//    are tokens, each hashed (FNV-1a) into ids 0..B-1; B [PAD], B+1 [CLS];
//    vocab_size B+2 (share/doc/dataset-format.md says why). Tokenizer
//    "wordpiece" (--vocab FILE, BERT's vocab.txt; io/wordpiece.hpp): sample =
//    [CLS] + the first seq_len-2 WordPiece ids + [SEP], padded with [PAD], ids
//    of the vocabulary; length counts [CLS] and [SEP]; uncased rules unless
//    `cased`. The data set records the vocabulary's file name and SHA-256.
//  - Class ids are the class names sorted (byte order): the same label set always
//    gives the same ids.
//  - The split of a document depends only on (seed, its key): textdir's key is the
//    relative path, csv's the text field. It does not depend on listing or row
//    order, and the two splits are checked non-empty before anything is written.
//  - Every problem with the data is an InputError naming the file (and the line
//    for CSV): exit code 2.
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/named_enum.hpp"
#include "core/types.hpp"

namespace shardtrain {

// ---- byte-level classification tokenizer -----------------------------------

// A labelled-text data set's tokenizer (trainer-data's --tokenizer; the data
// set's 'tokenizer' attribute): bytes, hashed words or BERT's WordPiece (the
// invariants above).
enum class ClassifierTokenizer : unsigned char { Byte, WordHash, Wordpiece };
inline constexpr std::string_view k_classifier_tokenizer_names[] = {"byte", "word-hash", "wordpiece"};
constexpr std::span<const std::string_view> enum_names(ClassifierTokenizer) { return k_classifier_tokenizer_names; }
inline constexpr TokenIndex kClassifierPadId = 256;
inline constexpr TokenIndex kClassifierClsId = 257;
inline constexpr std::int64_t kClassifierVocabSize = 258;

// Writes [CLS] + the first out.size()-1 bytes of `text` (ASCII A-Z lowercased
// when `lowercase`) + [PAD]... into `out` (out.size() = seq_len >= 2). Returns the
// number of real tokens (including [CLS]).
std::int64_t encode_classifier_bytes(std::string_view text, bool lowercase, std::span<TokenIndex> out);

// The "word-hash" tokenizer: [CLS] (= buckets + 1) + the first out.size()-1
// tokens of `text` (words: maximal runs of ASCII letters and digits, lowercased
// when `lowercase`; every other byte except blanks (space, tab, CR, LF) is a
// token of its own), each id = FNV-1a(token) mod buckets, then [PAD] (= buckets).
// Returns the number of real tokens (including [CLS]); *total (if given) gets
// the document's whole token count (for the truncation count).
std::int64_t encode_classifier_words(std::string_view text, bool lowercase, std::int64_t buckets,
                                     std::span<TokenIndex> out, std::int64_t* total = nullptr);

// ---- e-mail ------------------------------------------------------------------
// Drops the RFC 822 header block of `email` (everything up to the first empty
// line; an mbox "From " line counts as part of it) except the Subject field,
// which is kept first as "Subject: ...\n" (folded lines unfolded), followed by
// the body. Text whose first line is neither a header field nor an mbox "From "
// line has no header block and is returned unchanged.
std::string strip_email_headers(std::string_view email);

// ---- seeded split ------------------------------------------------------------
// A 64-bit hash of (seed, key): FNV-1a of the key bytes, mixed with the seed
// through splitmix64's finaliser.
std::uint64_t split_hash(std::uint64_t seed, std::string_view key);
// True when the document with `key` belongs to the validation split: the top 53
// bits of split_hash, as a number in [0, 1), are below `val_fraction`.
bool in_val_split(std::uint64_t seed, std::string_view key, double val_fraction);

// ---- CSV (RFC 4180) ----------------------------------------------------------
// Reads records one at a time. Fields may be quoted ("a, b"), with doubled quotes
// ("say ""hi""") and line breaks inside quotes; CRLF and LF both end a record.
// Errors (an unterminated quote, a quote inside an unquoted field, text after a
// closing quote) are InputErrors "NAME:LINE: ...".
class CsvReader {
 public:
  CsvReader(std::istream& in, std::string name, char delimiter);
  // Reads the next record into `fields`; false at the end of the input. An empty
  // line is a record of one empty field.
  bool next(std::vector<std::string>& fields);
  std::int64_t record_line() const { return m_record_line; }  // 1-based line where the last record began

 private:
  int get();
  std::istream& m_in;
  std::string m_name;
  char m_delimiter;
  std::int64_t m_line = 1;
  std::int64_t m_record_line = 0;
};

// ---- directory walk ----------------------------------------------------------
struct TextDocumentPath {
  std::string relative;  // below DIR, '/'-separated, e.g. "spam-1/00001.txt"
  std::string folder;    // its top-level folder, e.g. "spam-1"
};
// Every regular file below DIR/<folder>/ (recursive, following symlinks), sorted
// by relative path. Files directly in DIR belong to no folder and are skipped.
// An entry that is neither a directory nor a regular file (dangling symlink,
// FIFO, ...) or cannot be examined is an InputError naming it.
std::vector<TextDocumentPath> list_text_documents(const std::string& dir);

// ---- importers ---------------------------------------------------------------
struct LabelledTextOptions {
  std::int64_t seq_len = 512;
  double val_fraction = 0.2;
  std::uint64_t seed = 1234;
  bool strip_headers = false;
  bool lowercase = false;
  ClassifierTokenizer tokenizer = ClassifierTokenizer::Byte;
  std::int64_t buckets = 32768;    // word-hash: hash buckets B (ids 0..B-1)
  std::string vocab_path;          // wordpiece: BERT's vocab.txt
  bool cased = false;              // wordpiece: a cased model's rules (no lower-casing, accents kept)
};

struct LabelledTextSummary {
  std::vector<std::string> class_names;      // id -> name
  std::vector<std::int64_t> train_per_class;  // id -> documents
  std::vector<std::int64_t> val_per_class;
  std::int64_t truncated = 0;                 // documents longer than seq_len-1 tokens (wordpiece: seq_len-2)
  std::int64_t train() const;
  std::int64_t val() const;
};

struct TextDirOptions : LabelledTextOptions {
  std::map<std::string, std::string> folder_to_class;  // empty: class = folder name
};
// `trainer-data textdir DIR OUTPUT`.
LabelledTextSummary import_text_dir(const std::string& dir, const std::string& output,
                                    const TextDirOptions& options);

struct CsvOptions : LabelledTextOptions {
  char delimiter = ',';
  int label_column = 0;  // 0-based
  int text_column = 1;
  bool header = false;   // the first record is a header and is skipped
};
// `trainer-data csv FILE OUTPUT`.
LabelledTextSummary import_csv(const std::string& file, const std::string& output,
                               const CsvOptions& options);

}  // namespace shardtrain
