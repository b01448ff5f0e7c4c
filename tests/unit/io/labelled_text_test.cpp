// Unit tests of the labelled-text pieces (io/labelled_text.*) that need no HDF5:
// the byte-level classification tokenizer, e-mail header stripping, the RFC 4180
// CSV reader (quotes, embedded line breaks, errors with line numbers), the seeded
// hash split and the directory walk.
#include "io/labelled_text.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/error.hpp"

namespace shardtrain {
namespace {

constexpr TokenIndex P = kClassifierPadId, C = kClassifierClsId;

std::vector<TokenIndex> encode(std::string_view text, std::size_t seq_len, bool lowercase, std::int64_t& length) {
  std::vector<TokenIndex> ids(seq_len, -7);
  length = encode_classifier_bytes(text, lowercase, ids);
  return ids;
}

TEST(ClassifierTokenizer, ClsThenBytesThenPad) {
  EXPECT_EQ(kClassifierVocabSize, 258);
  std::int64_t len = 0;
  EXPECT_EQ(encode("Hi", 6, false, len), (std::vector<TokenIndex>{C, 'H', 'i', P, P, P}));
  EXPECT_EQ(len, 3);
  // Bytes >= 0x80 and NUL are tokens like any other (no unknown token).
  EXPECT_EQ(encode(std::string("\xE9\x00\xFF", 3), 5, false, len), (std::vector<TokenIndex>{C, 0xE9, 0, 0xFF, P}));
  EXPECT_EQ(len, 4);
}

TEST(ClassifierTokenizer, TruncatesToSeqLenMinusOne) {
  std::int64_t len = 0;
  EXPECT_EQ(encode("abcd", 5, false, len), (std::vector<TokenIndex>{C, 'a', 'b', 'c', 'd'}));  // exact fit
  EXPECT_EQ(len, 5);
  EXPECT_EQ(encode("abcdefgh", 4, false, len), (std::vector<TokenIndex>{C, 'a', 'b', 'c'}));
  EXPECT_EQ(len, 4);
  EXPECT_EQ(encode("", 3, false, len), (std::vector<TokenIndex>{C, P, P}));
  EXPECT_EQ(len, 1);
}

TEST(ClassifierTokenizer, LowercaseOnlyAsciiLetters) {
  std::int64_t len = 0;
  EXPECT_EQ(encode("AbZ@[\xC3\x89", 8, true, len), (std::vector<TokenIndex>{C, 'a', 'b', 'z', '@', '[', 0xC3, 0x89}));
  EXPECT_EQ(encode("AbZ", 4, false, len), (std::vector<TokenIndex>{C, 'A', 'b', 'Z'}));
}

// The word-hash tokenizer: FNV-1a 64 of each token's bytes mod the buckets.
TokenIndex word_id(std::string_view token, std::int64_t buckets) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : token) h = (h ^ c) * 1099511628211ull;
  return static_cast<TokenIndex>(h % static_cast<std::uint64_t>(buckets));
}

TEST(WordHashTokenizer, WordsAndSymbolsHashedThenPad) {
  const std::int64_t b = 1000;
  std::vector<TokenIndex> ids(8, -7);
  std::int64_t total = 0;
  // Words are runs of ASCII letters and digits; blanks separate; every other byte is a token.
  const std::int64_t len = encode_classifier_words("Win $100\tnow!!", false, b, ids, &total);
  EXPECT_EQ(len, 7);
  EXPECT_EQ(total, 6);
  EXPECT_EQ(ids, (std::vector<TokenIndex>{b + 1, word_id("Win", b), word_id("$", b), word_id("100", b),
                                           word_id("now", b), word_id("!", b), word_id("!", b), b}));
  // Lowercasing maps "Win" and "win" to one id; without it they differ (for these buckets).
  std::vector<TokenIndex> lower(3, -7);
  encode_classifier_words("WIN", true, b, lower);
  EXPECT_EQ(lower[1], word_id("win", b));
  EXPECT_NE(word_id("WIN", b), word_id("win", b));
  // Truncation: the first seq_len - 1 tokens are kept, the total still counts all.
  std::vector<TokenIndex> two(3, -7);
  EXPECT_EQ(encode_classifier_words("a b c d", false, b, two, &total), 3);
  EXPECT_EQ(total, 4);
  EXPECT_EQ(two, (std::vector<TokenIndex>{b + 1, word_id("a", b), word_id("b", b)}));
  // Empty and blank-only text: [CLS] then [PAD]; every id is below the vocabulary b + 2.
  std::vector<TokenIndex> empty(3, -7);
  EXPECT_EQ(encode_classifier_words(" \r\n", false, b, empty, &total), 1);
  EXPECT_EQ(total, 0);
  EXPECT_EQ(empty, (std::vector<TokenIndex>{b + 1, b, b}));
  std::vector<TokenIndex> bytes(64, -7);
  encode_classifier_words(std::string("\xE9t\xC3\xA9 \x00x", 7), false, b, bytes);
  for (TokenIndex id : bytes) EXPECT_TRUE(id >= 0 && id < b + 2);
}

TEST(EmailHeaders, KeepsSubjectFirstThenBody) {
  const std::string mail =
      "From someone@example.com  Thu Aug 22 13:17:22 2002\n"
      "Return-Path: <someone@example.com>\n"
      "Received: from localhost\n"
      "\tby host.example.com\n"
      "subject: Cheap\n"
      "  pills now\n"
      "To: you@example.com\n"
      "Subject: a second subject is ignored\n"
      "\n"
      "Body line 1\n\nBody line 3\n";
  EXPECT_EQ(strip_email_headers(mail), "Subject: Cheap  pills now\nBody line 1\n\nBody line 3\n");
}

TEST(EmailHeaders, CrlfNoSubjectNoHeadersNoBody) {
  EXPECT_EQ(strip_email_headers("Subject: Hi\r\nX-A: b\r\n\r\nbody\r\n"), "Subject: Hi\nbody\r\n");
  EXPECT_EQ(strip_email_headers("From: a@b\nTo: c@d\n\nonly body"), "only body");
  EXPECT_EQ(strip_email_headers("Subject: all header\nTo: x"), "Subject: all header\n");
  // Not an e-mail: the first line is not a header field, nothing is stripped.
  EXPECT_EQ(strip_email_headers("Dear friend: hello\n\nbye"), "Dear friend: hello\n\nbye");
  EXPECT_EQ(strip_email_headers("plain text\n\nmore"), "plain text\n\nmore");
  EXPECT_EQ(strip_email_headers(""), "");
}

std::vector<std::vector<std::string>> read_csv(const std::string& text, char delim = ',',
                                               std::vector<std::int64_t>* lines = nullptr) {
  std::istringstream in(text);
  CsvReader r(in, "t.csv", delim);
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> f;
  while (r.next(f)) {
    rows.push_back(f);
    if (lines) lines->push_back(r.record_line());
  }
  return rows;
}

using Rows = std::vector<std::vector<std::string>>;

TEST(Csv, PlainAndQuotedFields) {
  EXPECT_EQ(read_csv("a,b\nc,d\n"), (Rows{{"a", "b"}, {"c", "d"}}));
  EXPECT_EQ(read_csv("a,b"), (Rows{{"a", "b"}}));  // no final line break
  EXPECT_EQ(read_csv("spam,\"Win, now\"\n"), (Rows{{"spam", "Win, now"}}));
  EXPECT_EQ(read_csv("ham,\"say \"\"hi\"\"\"\n"), (Rows{{"ham", "say \"hi\""}}));
  EXPECT_EQ(read_csv("\"\",,x\n"), (Rows{{"", "", "x"}}));
  EXPECT_EQ(read_csv("a,\n"), (Rows{{"a", ""}}));
  EXPECT_EQ(read_csv("a,b\r\nc,d\r\n"), (Rows{{"a", "b"}, {"c", "d"}}));
  EXPECT_EQ(read_csv("ham,He said \"hi\"\n"), (Rows{{"ham", "He said \"hi\""}}));  // lenient, like Python
  EXPECT_EQ(read_csv("a\tb,c\n", '\t'), (Rows{{"a", "b,c"}}));
  EXPECT_EQ(read_csv("a,b\n\nc,d\n"), (Rows{{"a", "b"}, {""}, {"c", "d"}}));  // blank line: one empty field
}

TEST(Csv, LineBreaksInsideQuotesAndRecordLines) {
  std::vector<std::int64_t> lines;
  const Rows rows = read_csv("h1,h2\nspam,\"line1\nline2\r\nline3\"\nham,ok\n", ',', &lines);
  EXPECT_EQ(rows, (Rows{{"h1", "h2"}, {"spam", "line1\nline2\r\nline3"}, {"ham", "ok"}}));
  EXPECT_EQ(lines, (std::vector<std::int64_t>{1, 2, 5}));
}

std::string csv_error(const std::string& text) {
  try {
    read_csv(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Csv, ErrorsNameFileAndLine) {
  EXPECT_EQ(csv_error("a,b\nc,\"open\nstill open\n").rfind("t.csv:2: unterminated quoted field", 0), 0u)
      << csv_error("a,b\nc,\"open\nstill open\n");
  EXPECT_EQ(csv_error("a,b\n\n\nc,\"x\"y\n").rfind("t.csv:4: unexpected character after the closing quote", 0), 0u)
      << csv_error("a,b\n\n\nc,\"x\"y\n");
  EXPECT_EQ(csv_error("a,\"x\ny\"z\n").rfind("t.csv:2: unexpected character", 0), 0u);
}

TEST(Split, DeterministicAndSeeded) {
  EXPECT_EQ(split_hash(1234, "spam-1/00001.txt"), split_hash(1234, "spam-1/00001.txt"));
  EXPECT_NE(split_hash(1234, "spam-1/00001.txt"), split_hash(1235, "spam-1/00001.txt"));
  EXPECT_NE(split_hash(1234, "spam-1/00001.txt"), split_hash(1234, "spam-1/00002.txt"));
  // A known value (computed independently in Python): the split of a corpus must not change.
  EXPECT_EQ(split_hash(1234, "spam-1/00001.txt"), 0x15F8EBE2CFE4CACDull);
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string k = "f/" + std::to_string(i);
    differ += in_val_split(1, k, 0.5) != in_val_split(2, k, 0.5);
  }
  EXPECT_GT(differ, 400);  // another seed is another split (about half differ at 0.5)
  EXPECT_LT(differ, 600);
}

TEST(Split, OrderIndependentAndAboutTheFraction) {
  std::vector<std::string> keys;
  for (int i = 0; i < 20000; ++i) keys.push_back("class-" + std::to_string(i % 3) + "/" + std::to_string(i) + ".txt");
  auto val_set = [](const std::vector<std::string>& ks, double f) {
    std::set<std::string> v;
    for (const auto& k : ks)
      if (in_val_split(1234, k, f)) v.insert(k);
    return v;
  };
  const auto v1 = val_set(keys, 0.2);
  std::vector<std::string> shuffled = keys;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(7));
  EXPECT_EQ(val_set(shuffled, 0.2), v1);
  // Binomial(20000, 0.2): sd 57; allow 5 sd.
  EXPECT_NEAR(static_cast<double>(v1.size()), 4000.0, 285.0);
  const auto v05 = val_set(keys, 0.05);
  EXPECT_NEAR(static_cast<double>(v05.size()), 1000.0, 155.0);
  // Nested: what is val at 5% is val at 20%.
  EXPECT_TRUE(std::includes(v1.begin(), v1.end(), v05.begin(), v05.end()));
}

class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "labelled_text_test.XXXXXX").string();
    SHARDTRAIN_CHECK(mkdtemp(t.data()) != nullptr, "mkdtemp");
    m_path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  const std::filesystem::path& path() const { return m_path; }
  void write(const std::string& rel, const std::string& text) const {
    std::filesystem::create_directories((m_path / rel).parent_path());
    std::ofstream(m_path / rel, std::ios::binary) << text;
  }

 private:
  std::filesystem::path m_path;
};

TEST(TextDir, ListsEveryFileBelowEachFolderSorted) {
  TempDir d;
  d.write("spam/b.txt", "x");
  d.write("spam/a.txt", "x");
  d.write("ham/deep/er/z.txt", "x");
  d.write("ham/m.txt", "x");
  d.write("README", "top-level files are skipped");
  std::filesystem::create_directories(d.path() / "empty-folder");
  const auto docs = list_text_documents(d.path().string());
  std::vector<std::string> rel, folder;
  for (const auto& doc : docs) rel.push_back(doc.relative), folder.push_back(doc.folder);
  EXPECT_EQ(rel, (std::vector<std::string>{"ham/deep/er/z.txt", "ham/m.txt", "spam/a.txt", "spam/b.txt"}));
  EXPECT_EQ(folder, (std::vector<std::string>{"ham", "ham", "spam", "spam"}));
}

TEST(TextDir, ErrorsNameThePath) {
  TempDir d;
  d.write("spam/a.txt", "x");
  std::filesystem::create_symlink(d.path() / "nowhere", d.path() / "spam" / "dangling");
  try {
    list_text_documents(d.path().string());
    FAIL() << "no error for a dangling symlink";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("spam/dangling: cannot examine"), std::string::npos) << e.what();
  }
  try {
    list_text_documents((d.path() / "missing").string());
    FAIL() << "no error for a missing directory";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("missing: no such directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardtrain
