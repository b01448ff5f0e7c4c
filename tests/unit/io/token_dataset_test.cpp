// Unit tests of the token data set round trip (import_text / write_token_dataset
// -> TokenDataset::read_windows) and of hostile files built with the HDF5 C API:
// every bad file must give an InputError whose message starts with its path.
#include "io/token_dataset.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/text_import.hpp"
#include "io/token_dataset_writer.hpp"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    m_path = fs::temp_directory_path() / ("shardtrain_io_test_" + std::to_string(::getpid()));
    fs::create_directories(m_path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  std::string file(const std::string& name) const { return (m_path / name).string(); }

 private:
  fs::path m_path;
};

const TempDir& tmp() {
  static TempDir dir;
  return dir;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// ---------------------------------------------------------------- round trips

// Alphabet with 1-, 2-, 3- and 4-byte UTF-8 characters, listed in code point order
// (so the expected token id of alphabet[i] is i).
const std::vector<std::string> kAlphabet = {
    "\n", " ", ",", "a", "b", "z",
    "\xC3\xA9",          // é U+00E9
    "\xCE\xB1",          // α U+03B1
    "\xD0\x96",          // Ж U+0416
    "\xE2\x80\x94",      // — U+2014
    "\xE2\x98\x83",      // ☃ U+2603
    "\xE6\x97\xA5",      // 日 U+65E5
    "\xF0\x9D\x84\x9E",  // 𝄞 U+1D11E
    "\xF0\x9F\x98\x80",  // 😀 U+1F600
};

struct Stream {
  std::string text;
  std::vector<TokenIndex> ids;
};

Stream make_stream(std::int64_t n) {
  Stream s;
  std::uint64_t x = 12345;
  for (std::int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const auto id = static_cast<TokenIndex>((x >> 33) % kAlphabet.size());
    s.ids.push_back(id);
    s.text += kAlphabet[static_cast<std::size_t>(id)];
  }
  return s;
}

TEST(TokenDatasetRoundTrip, CharImportReadsBackExactly) {
  const std::int64_t n = 5003;
  const Stream s = make_stream(n);
  const std::string in = tmp().file("multibyte.txt"), out = tmp().file("multibyte.h5");
  write_bytes(in, s.text);
  const auto summary = import_text(in, out, {TextTokenizer::Char, 0.1});
  const std::int64_t n_val = std::llround(n * 0.1);
  EXPECT_EQ(summary.tokens, n);
  EXPECT_EQ(summary.vocab_size, static_cast<std::int64_t>(kAlphabet.size()));
  EXPECT_EQ(summary.val, n_val);
  EXPECT_EQ(summary.train, n - n_val);
  EXPECT_FALSE(fs::exists(out + ".partial"));

  TokenDataset ds(out, MPI_COMM_WORLD);
  EXPECT_EQ(ds.path(), out);
  EXPECT_EQ(ds.tokenizer(), TextTokenizer::Char);
  EXPECT_EQ(ds.source(), "multibyte.txt");
  EXPECT_DOUBLE_EQ(ds.val_fraction(), 0.1);
  EXPECT_EQ(ds.vocab_size(), static_cast<std::int64_t>(kAlphabet.size()));
  EXPECT_EQ(ds.vocab(), kAlphabet);
  ASSERT_EQ(ds.size(Split::Train), n - n_val);
  ASSERT_EQ(ds.size(Split::Val), n_val);

  // Unsorted, duplicated, overlapping and adjacent windows, plus both ends.
  const std::int64_t len = 9, ntr = ds.size(Split::Train);
  const std::vector<std::int64_t> starts = {4000, 17, 0, 17, 20, 26, 4000, 3, ntr - len, 2500, 8, 1};
  std::vector<TokenIndex> got(starts.size() * len, -7);
  ds.read_windows(Split::Train, starts, len, got.data());
  for (std::size_t i = 0; i < starts.size(); ++i)
    for (std::int64_t j = 0; j < len; ++j)
      ASSERT_EQ(got[i * len + static_cast<std::size_t>(j)], s.ids[static_cast<std::size_t>(starts[i] + j)])
          << "window " << i << " (start " << starts[i] << ") token " << j;

  // Val split: its token 0 is token n - n_val of the stream.
  const std::vector<std::int64_t> vstarts = {n_val - 5, 0, 100};
  std::vector<TokenIndex> vgot(vstarts.size() * 5);
  ds.read_windows(Split::Val, vstarts, 5, vgot.data());
  for (std::size_t i = 0; i < vstarts.size(); ++i)
    for (std::int64_t j = 0; j < 5; ++j)
      ASSERT_EQ(vgot[i * 5 + static_cast<std::size_t>(j)],
                s.ids[static_cast<std::size_t>(n - n_val + vstarts[i] + j)]);

  // The whole split as one window.
  std::vector<TokenIndex> all(static_cast<std::size_t>(ntr));
  const std::int64_t zero = 0;
  ds.read_windows(Split::Train, std::span(&zero, 1), ntr, all.data());
  EXPECT_TRUE(std::equal(all.begin(), all.end(), s.ids.begin()));

  // No windows at all is fine and touches nothing.
  ds.read_windows(Split::Train, {}, len, nullptr);

  // Out-of-bounds windows are a caller bug: Error, not InputError.
  const std::vector<std::int64_t> past_end = {ntr - len + 1};
  EXPECT_THROW(ds.read_windows(Split::Train, past_end, len, got.data()), Error);
  const std::vector<std::int64_t> negative = {-1};
  EXPECT_THROW(ds.read_windows(Split::Train, negative, len, got.data()), Error);
}

TEST(TokenDatasetRoundTrip, ByteImport) {
  const std::string text = "caf\xC3\xA9 \xFF\x01 bytes\n";
  const std::string in = tmp().file("bytes.txt"), out = tmp().file("bytes.h5");
  write_bytes(in, text);
  const auto summary = import_text(in, out, {TextTokenizer::Byte, 0.25});
  EXPECT_EQ(summary.vocab_size, 256);
  TokenDataset ds(out, MPI_COMM_WORLD);
  EXPECT_EQ(ds.tokenizer(), TextTokenizer::Byte);
  EXPECT_EQ(ds.size(Split::Train) + ds.size(Split::Val), static_cast<std::int64_t>(text.size()));
  std::vector<TokenIndex> got(static_cast<std::size_t>(ds.size(Split::Train)));
  const std::int64_t zero = 0;
  ds.read_windows(Split::Train, std::span(&zero, 1), ds.size(Split::Train), got.data());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], static_cast<unsigned char>(text[i]));
}

TEST(TokenDatasetRoundTrip, LargeVocabUsesInt32) {
  TokenDatasetSpec spec;
  spec.tokenizer = TextTokenizer::Char;
  for (int i = 0; i < 70000; ++i) spec.vocab.push_back("t" + std::to_string(i));
  spec.source = "synthetic";
  spec.val_fraction = 0.5;
  std::vector<TokenIndex> tokens = {0, 69999, 65536, 65535, 12, 40000, 1, 2};
  const std::string out = tmp().file("bigvocab.h5");
  write_token_dataset(out, spec, tokens);
  {
    hid_t f = H5Fopen(out.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/train/tokens", H5P_DEFAULT);
    hid_t t = H5Dget_type(d);
    EXPECT_TRUE(H5Tequal(t, H5T_STD_I32LE) > 0);
    H5Tclose(t), H5Dclose(d), H5Fclose(f);
  }
  TokenDataset ds(out, MPI_COMM_WORLD);
  EXPECT_EQ(ds.vocab_size(), 70000);
  EXPECT_EQ(ds.vocab()[69999], "t69999");
  std::vector<TokenIndex> got(4);
  const std::int64_t zero = 0;
  ds.read_windows(Split::Val, std::span(&zero, 1), 4, got.data());
  EXPECT_EQ(got, (std::vector<TokenIndex>{12, 40000, 1, 2}));
}

// The streaming writer: chunks appended in stream order, one of them crossing the
// train/val boundary; a pre-tokenized data set (no vocab strings) reads back with
// its declared vocab_size and an empty vocab().
TEST(TokenDatasetRoundTrip, StreamingWriterPretokenized) {
  TokenDatasetSpec spec;
  spec.tokenizer = TextTokenizer::Pretokenized;
  spec.vocab_size = 50257;
  spec.source = "shards";
  spec.val_fraction = 0.3;
  std::vector<TokenIndex> tokens(1003);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<TokenIndex>((i * 7919) % 50257);
  const std::string out = tmp().file("stream.h5");
  {
    TokenDatasetWriter w(out, spec, 700, 303);
    for (std::size_t at = 0; at < tokens.size(); at += 97)
      w.append(std::span<const TokenIndex>(tokens).subspan(at, std::min<std::size_t>(97, tokens.size() - at)));
    EXPECT_TRUE(fs::exists(out + ".partial"));
    EXPECT_FALSE(fs::exists(out));
    const TokenSplitCounts c = w.commit();
    EXPECT_EQ(c.train, 700);
    EXPECT_EQ(c.val, 303);
  }
  EXPECT_FALSE(fs::exists(out + ".partial"));
  TokenDataset ds(out, MPI_COMM_WORLD);
  EXPECT_EQ(ds.tokenizer(), TextTokenizer::Pretokenized);
  EXPECT_EQ(ds.vocab_size(), 50257);
  EXPECT_TRUE(ds.vocab().empty());
  ASSERT_EQ(ds.size(Split::Train), 700);
  ASSERT_EQ(ds.size(Split::Val), 303);
  std::vector<TokenIndex> got(700);
  const std::int64_t zero = 0;
  ds.read_windows(Split::Train, std::span(&zero, 1), 700, got.data());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), tokens.begin()));
  got.resize(303);
  ds.read_windows(Split::Val, std::span(&zero, 1), 303, got.data());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), tokens.begin() + 700));
}

// A writer dropped before commit (a failed import) leaves neither file behind,
// and commit refuses a stream shorter than the declared splits.
TEST(TokenDatasetRoundTrip, StreamingWriterAbandoned) {
  TokenDatasetSpec spec;
  spec.tokenizer = TextTokenizer::Pretokenized;
  spec.vocab_size = 100;
  const std::string out = tmp().file("abandoned.h5");
  {
    TokenDatasetWriter w(out, spec, 10, 5);
    const std::vector<TokenIndex> some = {1, 2, 3};
    w.append(some);
    EXPECT_THROW(w.commit(), Error);
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".partial"));
}

TEST(TokenDatasetRoundTrip, ImportRejectsBadInput) {
  auto msg = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const InputError& e) {
      return e.what();
    }
    return "<no InputError>";
  };
  const std::string empty = tmp().file("empty.txt"), one = tmp().file("one.txt"), out = tmp().file("x.h5");
  write_bytes(empty, "");
  write_bytes(one, "\xE2\x98\x83");
  EXPECT_EQ(msg([&] { import_text(empty, out, {}); }), empty + ": empty file, nothing to import");
  EXPECT_EQ(msg([&] { import_text(tmp().file("missing.txt"), out, {}); }).rfind(tmp().file("missing.txt") + ": no such file", 0), 0u);
  EXPECT_NE(msg([&] { import_text(one, out, {}); }).find(one + ": only 1 token"), std::string::npos);
  EXPECT_NE(msg([&] { import_text(one, out, {TextTokenizer::Char, 1.0}); }).find("--val-fraction"), std::string::npos);
  EXPECT_NE(msg([&] { import_text(one, out, {TextTokenizer::Char, 0.0}); }).find("--val-fraction"), std::string::npos);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".partial"));
}

TEST(TokenDatasetRoundTrip, ValTokenCount) {
  EXPECT_EQ(val_token_count(1000, 0.1), 100);
  EXPECT_EQ(val_token_count(5, 0.1), 1);      // at least one val token
  EXPECT_EQ(val_token_count(5, 0.99), 4);     // at least one train token
  EXPECT_EQ(val_token_count(2, 0.5), 1);
  EXPECT_THROW(val_token_count(1, 0.5), InputError);
  EXPECT_THROW(val_token_count(10, std::nan("")), InputError);
}

// ------------------------------------------------------------- hostile files

// What a hostile-file builder may change relative to a valid file.
struct Recipe {
  std::string format = "shardtrain-tokens";
  bool format_is_int = false;
  bool with_format = true;
  std::int64_t version = 1;
  std::string tokenizer = "char";
  std::int64_t vocab_size = 4;
  bool vocab_size_is_float = false;
  hid_t token_type = H5T_STD_U16LE;
  int token_rank = 1;
  bool with_train = true;
  bool val_is_group = false;
  std::vector<std::int64_t> train = {0, 1, 2, 3, 2, 1, 0, 1};
  std::vector<std::int64_t> val = {3, 2, 1};
  std::int64_t vocab_entries = 4;
  bool vocab_is_int = false;
  hsize_t train_fake_len = 0;  // if set: /train/tokens claims this length, with no data written
};

void str_attr(hid_t obj, const char* name, const std::string& v) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, v.size() + 1);  // fixed-length, as some writers do
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, v.c_str());
  H5Aclose(a), H5Sclose(s), H5Tclose(t);
}

template <class T>
void num_attr(hid_t obj, const char* name, hid_t type, T v) {
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, type, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, type == H5T_NATIVE_DOUBLE ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64, &v);
  H5Aclose(a), H5Sclose(s);
}

void tokens(hid_t file, const char* group, const std::vector<std::int64_t>& v, hid_t type, int rank,
            hsize_t fake_len = 0) {
  hid_t g = H5Gcreate2(file, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t dims[2] = {fake_len ? fake_len : v.size(), 1};
  hid_t s = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims, nullptr);
  hid_t d = H5Dcreate2(g, "tokens", type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (fake_len) {
    // storage is allocated late and never written: the file stays tiny
  } else if (H5Tget_class(type) == H5T_FLOAT) {
    std::vector<double> f(v.begin(), v.end());
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, f.data());
  } else {
    H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  }
  H5Dclose(d), H5Sclose(s), H5Gclose(g);
}

std::string build(const std::string& name, const Recipe& r) {
  const std::string path = tmp().file(name);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (r.with_format) {
    if (r.format_is_int) num_attr(f, "format", H5T_NATIVE_INT64, std::int64_t{1});
    else str_attr(f, "format", r.format);
  }
  num_attr(f, "format_version", H5T_NATIVE_INT64, r.version);
  str_attr(f, "tokenizer", r.tokenizer);
  if (r.vocab_size_is_float) num_attr(f, "vocab_size", H5T_NATIVE_DOUBLE, static_cast<double>(r.vocab_size));
  else num_attr(f, "vocab_size", H5T_NATIVE_INT64, r.vocab_size);
  if (r.with_train) tokens(f, "/train", r.train, r.token_type, r.token_rank, r.train_fake_len);
  if (r.val_is_group) {
    hid_t g = H5Gcreate2(f, "/val", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g2 = H5Gcreate2(g, "tokens", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g2), H5Gclose(g);
  } else {
    tokens(f, "/val", r.val, r.token_type, r.token_rank);
  }
  hsize_t n = static_cast<hsize_t>(r.vocab_entries);
  hid_t s = H5Screate_simple(1, &n, nullptr);
  if (r.vocab_is_int) {
    hid_t d = H5Dcreate2(f, "vocab", H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
  } else {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 4);
    std::vector<char> text(static_cast<std::size_t>(4 * std::min<std::int64_t>(r.vocab_entries, 1000)), 'x');
    hid_t d = H5Dcreate2(f, "vocab", t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (r.vocab_entries <= 1000) H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data());
    H5Dclose(d), H5Tclose(t);
  }
  H5Sclose(s);
  EXPECT_GE(H5Fclose(f), 0);
  return path;
}

// Runs f; expects an InputError whose message starts with "PATH: " and contains `needle`.
void expect_input_error(const std::string& path, const std::string& needle, const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << path << ": no error, expected one containing '" << needle << "'";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message does not start with the path: " << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << path << ": wrong exception type: " << e.what();
  }
}

void expect_open_error(const std::string& path, const std::string& needle) {
  expect_input_error(path, needle, [&] { TokenDataset ds(path, MPI_COMM_WORLD); });
}

TEST(TokenDatasetHostile, ControlFileIsValid) {
  const std::string p = build("control.h5", Recipe{});
  TokenDataset ds(p, MPI_COMM_WORLD);
  EXPECT_EQ(ds.vocab_size(), 4);
  EXPECT_EQ(ds.vocab()[0], "xxxx");
  std::vector<TokenIndex> got(8);
  const std::int64_t zero = 0;
  ds.read_windows(Split::Train, std::span(&zero, 1), 8, got.data());
  EXPECT_EQ(got, (std::vector<TokenIndex>{0, 1, 2, 3, 2, 1, 0, 1}));
}

TEST(TokenDatasetHostile, NotAFile) {
  expect_open_error(tmp().file("does_not_exist.h5"), "no such file");
  fs::create_directories(tmp().file("a_directory.h5"));
  expect_open_error(tmp().file("a_directory.h5"), "is a directory");
  const std::string text = tmp().file("text.h5");
  write_bytes(text, "this is not HDF5\n");
  expect_open_error(text, "not an HDF5 file");
  const std::string empty = tmp().file("empty.h5");
  write_bytes(empty, "");
  expect_open_error(empty, "not an HDF5 file");
  // HDF5 signature followed by garbage.
  const std::string trunc = tmp().file("truncated.h5");
  write_bytes(trunc, std::string("\x89HDF\r\n\x1a\n", 8) + std::string(100, '\x07'));
  expect_open_error(trunc, "cannot open as HDF5");
}

TEST(TokenDatasetHostile, FormatAttribute) {
  Recipe r;
  r.with_format = false;
  expect_open_error(build("no_format.h5", r), "no 'format' attribute");
  r = {};
  r.format = "someone-elses-format";
  expect_open_error(build("wrong_format.h5", r), "format is 'someone-elses-format'");
  r = {};
  r.format_is_int = true;
  expect_open_error(build("int_format.h5", r), "attribute 'format' must be a string");
  r = {};
  r.version = 2;
  expect_open_error(build("version2.h5", r), "unsupported format_version 2");
  r = {};
  r.tokenizer = "sentencepiece";
  expect_open_error(build("tokenizer.h5", r), "unknown tokenizer 'sentencepiece'");
  r = {};
  r.tokenizer = "byte";
  expect_open_error(build("byte_vocab.h5", r), "tokenizer 'byte' needs vocab_size 256");
}

TEST(TokenDatasetHostile, VocabSize) {
  Recipe r;
  r.vocab_size = std::int64_t{1} << 40;
  expect_open_error(build("vocab_huge.h5", r), "vocab_size 1099511627776 out of range [1, 16777216]");
  r.vocab_size = 0;
  expect_open_error(build("vocab_zero.h5", r), "vocab_size 0 out of range");
  r.vocab_size = -3;
  expect_open_error(build("vocab_negative.h5", r), "vocab_size -3 out of range");
  r.vocab_size = std::numeric_limits<std::int64_t>::max();
  expect_open_error(build("vocab_max.h5", r), "out of range");
  r = {};
  r.vocab_size_is_float = true;
  expect_open_error(build("vocab_float.h5", r), "attribute 'vocab_size' must be an integer, is float");
  r = {};
  r.vocab_entries = 3;
  expect_open_error(build("vocab_short.h5", r), "'/vocab' has 3 entries, vocab_size is 4");
  r = {};
  r.vocab_is_int = true;
  expect_open_error(build("vocab_int.h5", r), "'/vocab' must hold strings");
  r = {};
  r.vocab_entries = std::int64_t{1} << 40;  // checked before any buffer is sized from it
  expect_open_error(build("vocab_entries_huge.h5", r), "'/vocab' has an implausible length 1099511627776");
}

TEST(TokenDatasetHostile, TokenDatasets) {
  Recipe r;
  r.with_train = false;
  expect_open_error(build("no_train.h5", r), "missing dataset '/train/tokens'");
  r = {};
  r.val_is_group = true;
  expect_open_error(build("val_group.h5", r), "'/val/tokens' is not a dataset");
  r = {};
  r.token_type = H5T_IEEE_F32LE;
  expect_open_error(build("float_tokens.h5", r), "'/train/tokens' must hold integer token ids, holds float");
  r = {};
  r.token_rank = 2;
  expect_open_error(build("rank2_tokens.h5", r), "'/train/tokens' must be 1-D, has rank 2");
  r = {};
  r.train_fake_len = hsize_t{1} << 50;
  expect_open_error(build("tokens_huge.h5", r), "'/train/tokens' has an implausible length 1125899906842624");
  r = {};
  r.token_rank = 0;
  expect_open_error(build("scalar_tokens.h5", r), "'/train/tokens' must be 1-D, has rank 0");
}

TEST(TokenDatasetHostile, TokenOutOfRangeOnRead) {
  Recipe r;
  r.train = {0, 1, 2, 3, 300, 1, 0, 1};  // 300 >= vocab_size 4, at position 4
  const std::string p = build("token_range.h5", r);
  TokenDataset ds(p, MPI_COMM_WORLD);  // opening does not read tokens
  std::vector<TokenIndex> got(8);
  const std::vector<std::int64_t> fine = {0};
  ds.read_windows(Split::Train, fine, 4, got.data());  // window [0, 4) is clean
  const std::vector<std::int64_t> starts = {5, 2};
  expect_input_error(p, "/train/tokens[4]: token id 300 out of range [0, 4)",
                     [&] { ds.read_windows(Split::Train, starts, 3, got.data()); });

  r = {};
  r.token_type = H5T_STD_I32LE;
  r.val = {3, -1, 2};
  const std::string neg = build("token_negative.h5", r);
  TokenDataset dn(neg, MPI_COMM_WORLD);
  const std::vector<std::int64_t> all = {0};
  expect_input_error(neg, "/val/tokens[1]: token id -1 out of range",
                     [&] { dn.read_windows(Split::Val, all, 3, got.data()); });

  // int64 ids beyond int32: HDF5's conversion clips them, which still fails the range check.
  r = {};
  r.token_type = H5T_STD_I64LE;
  r.val = {3, std::int64_t{1} << 40, 2};
  const std::string wide = build("token_wide.h5", r);
  TokenDataset dw(wide, MPI_COMM_WORLD);
  expect_input_error(wide, "/val/tokens[1]: token id",
                     [&] { dw.read_windows(Split::Val, all, 3, got.data()); });
}

}  // namespace
}  // namespace shardtrain
