// This file is long because each hostile file is a valid one mutated here, beside the test that rejects it.
// Unit tests of the labelled-sample data set (format "shardtrain-samples"):
// SampleDatasetWriter -> SampleDataset::read round trips for images and tokens
// (several chunks, repeated and unordered rows), the writer's per-sample
// validation and atomic commit, and hostile files built by mutating a valid file
// with the HDF5 C API: every bad file must give an InputError whose message
// starts with its path. A data set held in memory (hold_in_memory) serves the
// same bytes as file reads (images, uint16 and int32 tokens; both splits; rows
// repeated, unordered, at chunk edges), tracks exactly in_memory_bytes(), and
// reports a bad label, token id or length at load time as a read would.
// Runs under the shared MPI main (singleton MPI process).
#include "io/sample_dataset.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/sample_dataset_writer.hpp"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

// The test's scratch directory, removed at exit (owned by a static object that
// is constructed before, and so destroyed after, any use).
struct ScratchDir {
  fs::path dir = fs::temp_directory_path() / ("shardtrain_sample_test_" + std::to_string(::getpid()));
  ScratchDir() { fs::create_directories(dir); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
} g_scratch;

std::string tmp_file(const std::string& name) { return (g_scratch.dir / name).string(); }

// Runs `f`, which must throw InputError whose message starts with "PREFIX: " and
// contains `needle`.
void expect_input_error(const std::function<void()>& f, const std::string& prefix, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no InputError (expected one containing '" << needle << "')";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(prefix + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

// ------------------------------------------------------------------ images

constexpr std::int64_t kC = 2, kH = 32, kW = 32;  // 2048 bytes: 512 samples per chunk
constexpr std::int64_t kElems = kC * kH * kW;
constexpr int kClasses = 7;

std::uint8_t pixel(int split, std::int64_t i, std::int64_t e) {
  return static_cast<std::uint8_t>((i * 7 + e * 3 + split * 101) % 256);
}
std::int32_t image_label(int split, std::int64_t i) { return static_cast<std::int32_t>((i * 3 + split) % kClasses); }

SampleDatasetSpec image_spec() {
  SampleDatasetSpec spec;
  spec.kind = SampleKind::Image;
  spec.sample_shape = {kC, kH, kW};
  for (int c = 0; c < kClasses; ++c) spec.class_names.push_back("class " + std::to_string(c));
  spec.source = "synthetic";
  spec.split_rule = "first 1300 / last 77";
  return spec;
}

void write_images(const std::string& path, std::int64_t n_train, std::int64_t n_val) {
  SampleDatasetWriter w(path, image_spec());
  EXPECT_EQ(w.chunk_samples(), 512);
  std::vector<std::uint8_t> px(kElems);
  for (int s = 0; s < 2; ++s)
    for (std::int64_t i = 0; i < (s == 0 ? n_train : n_val); ++i) {
      for (std::int64_t e = 0; e < kElems; ++e) px[static_cast<std::size_t>(e)] = pixel(s, i, e);
      w.append_image(s == 0 ? SampleSplit::Train : SampleSplit::Val, px, image_label(s, i));
    }
  EXPECT_EQ(w.count(SampleSplit::Train), n_train);
  EXPECT_EQ(w.count(SampleSplit::Val), n_val);
  EXPECT_FALSE(fs::exists(path)) << "PATH must not appear before commit()";
  EXPECT_TRUE(fs::exists(path + ".partial"));
  w.commit();
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".partial"));
}

const std::string& image_file() {
  static const std::string path = [] {
    const std::string p = tmp_file("images.h5");
    write_images(p, 1300, 77);
    return p;
  }();
  return path;
}

TEST(SampleDataset, ImageRoundTrip) {
  SampleDataset ds(image_file(), MPI_COMM_SELF);
  EXPECT_EQ(ds.kind(), SampleKind::Image);
  EXPECT_EQ(ds.sample_shape(), (std::vector<std::int64_t>{kC, kH, kW}));
  EXPECT_EQ(ds.sample_elems(), kElems);
  EXPECT_EQ(ds.num_classes(), kClasses);
  ASSERT_EQ(ds.class_names().size(), 7u);
  EXPECT_EQ(ds.class_names()[6], "class 6");
  EXPECT_EQ(ds.size(SampleSplit::Train), 1300);
  EXPECT_EQ(ds.size(SampleSplit::Val), 77);
  EXPECT_EQ(ds.source(), "synthetic");
  EXPECT_EQ(ds.split_rule(), "first 1300 / last 77");
  EXPECT_EQ(ds.vocab_size(), 0);

  // Unordered, repeated, across chunk boundaries (511/512, 1023/1024), the last row.
  const std::vector<std::int64_t> rows = {1299, 5, 0, 511, 512, 5, 1024, 1023, 37};
  for (const SampleSplit split : {SampleSplit::Train, SampleSplit::Val}) {
    const int s = split == SampleSplit::Train ? 0 : 1;
    std::vector<std::int64_t> idx = rows;
    if (s == 1) idx = {76, 0, 40, 40, 1};
    std::vector<float> in(idx.size() * kElems, -1.0f);
    std::vector<std::int32_t> labels(idx.size(), -1);
    ds.read(split, idx, in.data(), nullptr, labels.data(), nullptr);
    for (std::size_t i = 0; i < idx.size(); ++i) {
      EXPECT_EQ(labels[i], image_label(s, idx[i])) << "split " << s << " row " << idx[i];
      for (std::int64_t e = 0; e < kElems; ++e) {
        const float want = static_cast<float>(pixel(s, idx[i], e)) / 255.0f;
        ASSERT_FLOAT_EQ(in[i * kElems + static_cast<std::size_t>(e)], want)
            << "split " << s << " row " << idx[i] << " element " << e;
      }
    }
  }
  // pixel 255 -> 1.0 and 0 -> 0.0 exactly: row 0 train, element e with (3e) % 256 == 255 -> e = 85.
  std::vector<float> one(kElems);
  std::int32_t label = -1;
  const std::int64_t r0 = 0;
  ds.read(SampleSplit::Train, std::span(&r0, 1), one.data(), nullptr, &label, nullptr);
  EXPECT_EQ(one[0], 0.0f);
  EXPECT_EQ(one[85], 1.0f);
  // Zero rows: valid, touches nothing.
  ds.read(SampleSplit::Train, {}, nullptr, nullptr, nullptr, nullptr);
}

TEST(SampleDataset, ReadRejectsCallerBugs) {
  SampleDataset ds(image_file(), MPI_COMM_SELF);
  std::vector<float> in(kElems);
  std::int32_t label = 0;
  const std::int64_t bad_row = 1300;
  EXPECT_THROW(ds.read(SampleSplit::Train, std::span(&bad_row, 1), in.data(), nullptr, &label, nullptr), Error);
  TokenIndex tok = 0;
  const std::int64_t row = 0;
  EXPECT_THROW(ds.read(SampleSplit::Train, std::span(&row, 1), nullptr, &tok, &label, nullptr), Error);
}

// ------------------------------------------------------------------ tokens

constexpr std::int64_t kSeq = 16;

TokenIndex token(int split, std::int64_t i, std::int64_t j, std::int64_t vocab) {
  return static_cast<TokenIndex>((i * 131 + j * 17 + split * 7 + 2) % vocab);
}
std::int64_t token_length(std::int64_t i) { return 1 + (i * 5) % kSeq; }

SampleDatasetSpec token_spec(std::int64_t vocab) {
  SampleDatasetSpec spec;
  spec.kind = SampleKind::Tokens;
  spec.sample_shape = {kSeq};
  spec.class_names = {"neg", "pos", "neutral"};
  spec.tokenizer = "byte";
  spec.vocab_size = vocab;
  spec.pad_id = 0;
  spec.cls_id = 1;
  spec.sep_id = 2;
  return spec;
}

void write_tokens(const std::string& path, std::int64_t vocab, std::int64_t n_train, std::int64_t n_val) {
  SampleDatasetWriter w(path, token_spec(vocab));
  std::vector<TokenIndex> ids(kSeq);
  for (int s = 0; s < 2; ++s)
    for (std::int64_t i = 0; i < (s == 0 ? n_train : n_val); ++i) {
      for (std::int64_t j = 0; j < kSeq; ++j) ids[static_cast<std::size_t>(j)] = token(s, i, j, vocab);
      w.append_tokens(s == 0 ? SampleSplit::Train : SampleSplit::Val, ids, token_length(i),
                      static_cast<std::int32_t>((i + s) % 3));
    }
  w.commit();
}

void check_tokens(const std::string& path, std::int64_t vocab) {
  SampleDataset ds(path, MPI_COMM_SELF);
  EXPECT_EQ(ds.kind(), SampleKind::Tokens);
  EXPECT_EQ(ds.sample_shape(), std::vector<std::int64_t>{kSeq});
  EXPECT_EQ(ds.vocab_size(), vocab);
  EXPECT_EQ(ds.pad_id(), 0);
  EXPECT_EQ(ds.cls_id(), 1);
  EXPECT_EQ(ds.sep_id(), 2);
  EXPECT_EQ(ds.tokenizer(), "byte");
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"neg", "pos", "neutral"}));
  EXPECT_EQ(ds.size(SampleSplit::Train), 10000);
  EXPECT_EQ(ds.size(SampleSplit::Val), 3);
  const std::vector<std::int64_t> idx = {9999, 0, 4095, 4096, 4097, 8191, 8192, 77, 0};
  std::vector<TokenIndex> tok(idx.size() * kSeq, -1);
  std::vector<std::int32_t> labels(idx.size(), -1), lengths(idx.size(), -1);
  ds.read(SampleSplit::Train, idx, nullptr, tok.data(), labels.data(), lengths.data());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    EXPECT_EQ(labels[i], idx[i] % 3);
    EXPECT_EQ(lengths[i], token_length(idx[i]));
    for (std::int64_t j = 0; j < kSeq; ++j)
      ASSERT_EQ(tok[i * kSeq + static_cast<std::size_t>(j)], token(0, idx[i], j, vocab)) << "row " << idx[i];
  }
  const std::int64_t v = 2;
  TokenIndex vt[kSeq];
  std::int32_t vl = -1;
  ds.read(SampleSplit::Val, std::span(&v, 1), nullptr, vt, &vl, nullptr);  // lengths may be null
  EXPECT_EQ(vl, (2 + 1) % 3);
  EXPECT_EQ(vt[3], token(1, 2, 3, vocab));
}

TEST(SampleDataset, TokenRoundTripUint16) {
  const std::string p = tmp_file("tokens16.h5");
  write_tokens(p, 300, 10000, 3);
  check_tokens(p, 300);
}

TEST(SampleDataset, TokenRoundTripInt32) {
  const std::string p = tmp_file("tokens32.h5");
  write_tokens(p, 70000, 10000, 3);  // vocab > 65536: stored as int32
  check_tokens(p, 70000);
}

// ------------------------------------------------------------------ held in memory

// Rows of a split of n: chunk edges, repeats, unordered, and random ones.
std::vector<std::int64_t> probe_rows(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> rows = {n - 1, 0, n / 2, 0, n - 1};
  for (std::int64_t r : {511, 512, 513, 4095, 4096, 4097, 8191, 8192})
    if (r < n) rows.push_back(r);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 200; ++i) rows.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n)));
  return rows;
}

// Reads `rows` of every split from `file` (file reads) and `held` (in memory)
// and compares the outputs byte for byte.
void expect_same_reads(const SampleDataset& file, const SampleDataset& held) {
  ASSERT_FALSE(file.in_memory());
  ASSERT_TRUE(held.in_memory());
  const bool image = file.kind() == SampleKind::Image;
  const auto elems = static_cast<std::size_t>(file.sample_elems());
  for (SampleSplit split : {SampleSplit::Train, SampleSplit::Val}) {
    const auto rows = probe_rows(file.size(split), split == SampleSplit::Train ? 1 : 2);
    const std::size_t n = rows.size();
    std::vector<float> in_a(image ? n * elems : 0, -1.0f), in_b(in_a.size(), -2.0f);
    std::vector<TokenIndex> tok_a(image ? 0 : n * elems, -1), tok_b(tok_a.size(), -2);
    std::vector<std::int32_t> lab_a(n, -1), lab_b(n, -2), len_a(image ? 0 : n, -1), len_b(len_a.size(), -2);
    file.read(split, rows, image ? in_a.data() : nullptr, image ? nullptr : tok_a.data(), lab_a.data(),
              image ? nullptr : len_a.data());
    held.read(split, rows, image ? in_b.data() : nullptr, image ? nullptr : tok_b.data(), lab_b.data(),
              image ? nullptr : len_b.data());
    EXPECT_EQ(lab_a, lab_b) << to_string(split);
    EXPECT_EQ(len_a, len_b) << to_string(split);
    EXPECT_EQ(tok_a, tok_b) << to_string(split);
    ASSERT_EQ(in_a.size(), in_b.size());
    EXPECT_EQ(std::memcmp(in_a.data(), in_b.data(), in_a.size() * sizeof(float)), 0) << to_string(split);
    // An empty row list is fine on both.
    held.read(split, {}, nullptr, nullptr, nullptr, nullptr);
  }
}

void check_held(const std::string& path, std::int64_t bytes_per_row) {
  SampleDataset file(path, MPI_COMM_SELF), held(path, MPI_COMM_SELF);
  const std::int64_t rows = held.size(SampleSplit::Train) + held.size(SampleSplit::Val);
  EXPECT_EQ(held.in_memory_bytes(), rows * bytes_per_row);
  MemoryTracker tracker;
  held.hold_in_memory(tracker, MemCategory::Data);
  EXPECT_EQ(static_cast<std::int64_t>(tracker.current(MemCategory::Data)), held.in_memory_bytes());
  EXPECT_EQ(tracker.current_total(), tracker.current(MemCategory::Data));
  held.hold_in_memory(tracker, MemCategory::Data);  // a second call does nothing
  EXPECT_EQ(static_cast<std::int64_t>(tracker.current(MemCategory::Data)), held.in_memory_bytes());
  expect_same_reads(file, held);
}

TEST(SampleDatasetInMemory, ImagesServeTheFileBytes) {
  check_held(image_file(), kElems + 4);  // uint8 pixels and an int32 label per row
}

TEST(SampleDatasetInMemory, TokensServeTheFileBytes) {
  const std::string p16 = tmp_file("held_tokens16.h5"), p32 = tmp_file("held_tokens32.h5");
  write_tokens(p16, 300, 9000, 5);    // uint16 ids in the file
  write_tokens(p32, 70000, 9000, 5);  // int32 ids
  check_held(p16, 4 * kSeq + 8);      // int32 ids, label and length per row
  check_held(p32, 4 * kSeq + 8);
}

TEST(SampleDatasetInMemory, ReadsStillCheckRows) {
  SampleDataset held(image_file(), MPI_COMM_SELF);
  MemoryTracker tracker;
  held.hold_in_memory(tracker, MemCategory::Data);
  std::vector<float> in(kElems);
  std::int32_t label = 0;
  const std::int64_t bad = 77;  // the val split has 77 rows
  EXPECT_THROW(held.read(SampleSplit::Val, std::span(&bad, 1), in.data(), nullptr, &label, nullptr), Error);
}

// ------------------------------------------------------------------ writer validation

TEST(SampleDatasetWriter, RejectsBadSamplesAndLeavesNoFile) {
  const std::string p = tmp_file("bad_writes.h5");
  {
    SampleDatasetWriter w(p, image_spec());
    std::vector<std::uint8_t> px(kElems, 1);
    w.append_image(SampleSplit::Train, px, 0);
    expect_input_error([&] { w.append_image(SampleSplit::Train, px, kClasses); }, p,
                       "train sample 1: label 7 out of range [0, 7)");
    expect_input_error([&] { w.append_image(SampleSplit::Val, px, -1); }, p, "val sample 0: label -1 out of range");
    std::vector<std::uint8_t> short_px(kElems - 1);
    expect_input_error([&] { w.append_image(SampleSplit::Train, short_px, 0); }, p, "2047 pixels, expected 2048");
    EXPECT_EQ(w.count(SampleSplit::Train), 1);
    expect_input_error([&] { w.commit(); }, p, "the val split is empty");
  }
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".partial"));

  {
    SampleDatasetWriter w(p, token_spec(300));
    std::vector<TokenIndex> ids(kSeq, 5);
    expect_input_error([&] { w.append_tokens(SampleSplit::Train, ids, 0, 0); }, p, "length 0 out of range [1, 16]");
    expect_input_error([&] { w.append_tokens(SampleSplit::Train, ids, 17, 0); }, p, "length 17 out of range");
    ids[9] = 300;
    expect_input_error([&] { w.append_tokens(SampleSplit::Train, ids, 16, 0); }, p,
                       "token 9 has id 300 out of range [0, 300)");
    ids[9] = 5;
    std::vector<TokenIndex> short_ids(kSeq - 1, 5);
    expect_input_error([&] { w.append_tokens(SampleSplit::Train, short_ids, 3, 0); }, p, "expected seq_len 16");
    expect_input_error([&] { w.append_tokens(SampleSplit::Train, ids, 3, 3); }, p, "label 3 out of range [0, 3)");
    EXPECT_THROW(w.append_image(SampleSplit::Train, std::vector<std::uint8_t>(16), 0), Error);  // wrong kind
  }  // destroyed without commit
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".partial"));
}

TEST(SampleDatasetWriter, RejectsBadSpecs) {
  const std::string p = tmp_file("bad_spec.h5");
  auto spec = image_spec();
  spec.class_names = {"only"};
  expect_input_error([&] { SampleDatasetWriter w(p, spec); }, p, "num_classes 1 out of range [2, 1000000]");
  spec = image_spec();
  spec.sample_shape = {28, 28};
  expect_input_error([&] { SampleDatasetWriter w(p, spec); }, p, "sample_shape must have 3 dimension(s)");
  auto t = token_spec(300);
  t.pad_id = 300;
  expect_input_error([&] { SampleDatasetWriter w(p, t); }, p, "pad_id 300 out of range [0, 300)");
  t = token_spec(300);
  t.cls_id = -2;
  expect_input_error([&] { SampleDatasetWriter w(p, t); }, p, "cls_id -2 out of range");
  t = token_spec(300);
  t.sep_id = 300;
  expect_input_error([&] { SampleDatasetWriter w(p, t); }, p, "sep_id 300 out of range [-1, 300)");
  expect_input_error([&] { SampleDatasetWriter w("/nonexistent_dir/x.h5", image_spec()); }, "/nonexistent_dir/x.h5",
                     "cannot create");
  EXPECT_FALSE(fs::exists(p + ".partial"));
}

// ------------------------------------------------------------------ hostile files

// A copy of a small valid image file (60 train, 9 val, 2x32x32, 7 classes),
// mutated by `mutate` on the open file.
std::string hostile(const std::string& name, const std::function<void(hid_t)>& mutate) {
  const std::string p = tmp_file(name + ".h5");
  write_images(p, 60, 9);
  const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  EXPECT_GE(f, 0);
  mutate(f);
  EXPECT_GE(H5Fclose(f), 0);
  return p;
}

void set_string_attr(hid_t f, const char* name, const std::string& v) {
  if (H5Aexists(f, name) > 0) H5Adelete(f, name);
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  const hid_t s = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(f, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  const char* p = v.c_str();
  EXPECT_GE(H5Awrite(a, t, &p), 0);
  H5Aclose(a), H5Sclose(s), H5Tclose(t);
}

void set_int_attr(hid_t f, const char* name, std::int64_t v) {
  if (H5Aexists(f, name) > 0) H5Adelete(f, name);
  const hid_t s = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(H5Awrite(a, H5T_NATIVE_INT64, &v), 0);
  H5Aclose(a), H5Sclose(s);
}

// Replaces dataset `name` by an empty chunked one of `type` and `dims` (no data
// written: its storage is never allocated, whatever the declared size).
void replace_dataset(hid_t f, const char* name, hid_t type, std::vector<hsize_t> dims,
                     std::vector<hsize_t> chunk = {}) {
  if (H5Lexists(f, name, H5P_DEFAULT) > 0) EXPECT_GE(H5Ldelete(f, name, H5P_DEFAULT), 0);
  std::vector<hsize_t> maxdims(dims.size(), H5S_UNLIMITED);
  const hid_t s = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data());
  if (chunk.empty()) {
    chunk = dims;
    chunk[0] = 1;
  }
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  const hid_t d = H5Dcreate2(f, name, type, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  EXPECT_GE(d, 0) << name;
  H5Dclose(d), H5Pclose(dcpl), H5Sclose(s);
}

void expect_open_fails(const std::string& path, const std::string& needle) {
  expect_input_error([&] { SampleDataset ds(path, MPI_COMM_SELF); }, path, needle);
}

TEST(SampleDatasetHostile, WrongFormat) {
  expect_open_fails(hostile("fmt", [](hid_t f) { set_string_attr(f, "format", "shardtrain-tokens"); }),
                    "not a shardtrain sample data set (format is 'shardtrain-tokens', expected 'shardtrain-samples')");
}
TEST(SampleDatasetHostile, WrongVersion) {
  expect_open_fails(hostile("ver", [](hid_t f) { set_int_attr(f, "format_version", 2); }),
                    "unsupported format_version 2 (this build reads 1)");
}
TEST(SampleDatasetHostile, UnknownKind) {
  expect_open_fails(hostile("kind", [](hid_t f) { set_string_attr(f, "kind", "audio"); }), "unknown kind 'audio'");
}
TEST(SampleDatasetHostile, NumClassesOutOfRange) {
  expect_open_fails(hostile("nc1", [](hid_t f) { set_int_attr(f, "num_classes", 1); }),
                    "num_classes 1 out of range [2, 1000000]");
  expect_open_fails(hostile("nchuge", [](hid_t f) { set_int_attr(f, "num_classes", std::int64_t{1} << 40); }),
                    "num_classes 1099511627776 out of range");
}
TEST(SampleDatasetHostile, ClassesCountMismatch) {
  expect_open_fails(hostile("ncls", [](hid_t f) { set_int_attr(f, "num_classes", 8); }),
                    "dataset '/classes' has 7 entries, num_classes is 8");
}
TEST(SampleDatasetHostile, SampleShapeMismatch) {
  expect_open_fails(hostile("shape", [](hid_t f) {
                      H5Adelete(f, "sample_shape");
                      const hsize_t n = 3;
                      const std::int64_t v[3] = {1, 32, 64};
                      const hid_t s = H5Screate_simple(1, &n, nullptr);
                      const hid_t a = H5Acreate2(f, "sample_shape", H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
                      H5Awrite(a, H5T_NATIVE_INT64, v);
                      H5Aclose(a), H5Sclose(s);
                    }),
                    "dataset '/train/inputs' holds samples of shape 2x32x32, sample_shape is 1x32x64");
}
TEST(SampleDatasetHostile, MismatchedLabelCount) {
  expect_open_fails(hostile("nlabels", [](hid_t f) { replace_dataset(f, "/train/labels", H5T_STD_I32LE, {59}); }),
                    "dataset '/train/labels' has 59 labels for 60 samples in '/train/inputs'");
}
TEST(SampleDatasetHostile, TwoToThe40Rows) {
  const hsize_t big = hsize_t{1} << 40;
  expect_open_fails(
      hostile("rows40", [&](hid_t f) { replace_dataset(f, "/val/inputs", H5T_STD_U8LE, {big, kC, kH, kW}); }),
      "dataset '/val/inputs' has an implausible dimension 1099511627776 (limit 4294967296)");
  expect_open_fails(hostile("labels40", [&](hid_t f) { replace_dataset(f, "/val/labels", H5T_STD_I32LE, {big}); }),
                    "dataset '/val/labels' has an implausible dimension 1099511627776");
}
TEST(SampleDatasetHostile, WrongDtype) {
  expect_open_fails(
      hostile("float_px", [](hid_t f) { replace_dataset(f, "/train/inputs", H5T_IEEE_F32LE, {60, kC, kH, kW}); }),
      "dataset '/train/inputs' must hold uint8 pixels, holds float");
  expect_open_fails(
      hostile("u16_px", [](hid_t f) { replace_dataset(f, "/train/inputs", H5T_STD_U16LE, {60, kC, kH, kW}); }),
      "must hold uint8 pixels, holds 16-bit unsigned integers");
  expect_open_fails(hostile("float_lab", [](hid_t f) { replace_dataset(f, "/val/labels", H5T_IEEE_F64LE, {9}); }),
                    "dataset '/val/labels' must hold integer labels, holds float");
}
TEST(SampleDatasetHostile, WrongRank) {
  expect_open_fails(hostile("rank", [](hid_t f) { replace_dataset(f, "/train/inputs", H5T_STD_U8LE, {60, kElems}); }),
                    "dataset '/train/inputs' must have rank 4, has rank 2");
}
TEST(SampleDatasetHostile, HugeChunks) {
  // 2^20 rows of 2048 bytes in one chunk: 2 GiB HDF5 would have to buffer.
  expect_open_fails(hostile("chunk", [](hid_t f) {
                      replace_dataset(f, "/train/inputs", H5T_STD_U8LE, {60, kC, kH, kW},
                                      {hsize_t{1} << 20, kC, kH, kW});
                    }),
                    "dataset '/train/inputs' is stored in chunks of more than 67108864 bytes");
}
TEST(SampleDatasetHostile, MissingDatasets) {
  expect_open_fails(hostile("nolabels", [](hid_t f) { H5Ldelete(f, "/val/labels", H5P_DEFAULT); }),
                    "missing dataset '/val/labels'");
  expect_open_fails(hostile("noval", [](hid_t f) { H5Ldelete(f, "/val", H5P_DEFAULT); }),
                    "missing dataset '/val/inputs'");
  expect_open_fails(hostile("noclasses", [](hid_t f) { H5Ldelete(f, "/classes", H5P_DEFAULT); }),
                    "missing dataset '/classes'");
}
TEST(SampleDatasetHostile, LabelOutOfRangeAtReadTime) {
  const std::string p = hostile("label12", [](hid_t f) {
    const hid_t d = H5Dopen2(f, "/train/labels", H5P_DEFAULT);
    const hid_t fs_ = H5Dget_space(d);
    const hsize_t start = 3, count = 1;
    H5Sselect_hyperslab(fs_, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
    const hid_t ms = H5Screate_simple(1, &count, nullptr);
    const std::int32_t v = 12;
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_INT32, ms, fs_, H5P_DEFAULT, &v), 0);
    H5Sclose(ms), H5Sclose(fs_), H5Dclose(d);
  });
  SampleDataset ds(p, MPI_COMM_SELF);  // opens: values are checked when read
  std::vector<float> in(2 * kElems);
  std::int32_t labels[2];
  const std::vector<std::int64_t> ok_rows = {2, 4};
  ds.read(SampleSplit::Train, ok_rows, in.data(), nullptr, labels, nullptr);
  EXPECT_EQ(labels[0], image_label(0, 2));
  const std::vector<std::int64_t> rows = {10, 3};
  expect_input_error([&] { ds.read(SampleSplit::Train, rows, in.data(), nullptr, labels, nullptr); }, p,
                     "/train/labels[3]: label 12 out of range [0, 7)");
}
TEST(SampleDatasetHostile, TokenOutOfRangeAndBadLengthAtReadTime) {
  const std::string p = tmp_file("tok_hostile.h5");
  write_tokens(p, 300, 20, 3);
  {
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    set_int_attr(f, "vocab_size", 100);  // ids up to 299 were written
    const hid_t d = H5Dopen2(f, "/val/lengths", H5P_DEFAULT);
    const std::int32_t v[3] = {1, 17, 2};
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v), 0);
    H5Dclose(d), H5Fclose(f);
  }
  TokenIndex tok[kSeq];
  std::int32_t label = 0, length = 0;
  const std::int64_t vrow = 1, vrow0 = 0;
  {  // closed before the file is rewritten: HDF5's POSIX driver refuses to open
     // for writing a file this process holds open read-only
    SampleDataset ds(p, MPI_COMM_SELF);
    const std::int64_t row = 1;  // token(0, 1, 0) = 133 >= 100
    expect_input_error([&] { ds.read(SampleSplit::Train, std::span(&row, 1), nullptr, tok, &label, &length); }, p,
                       "/train/inputs[1][0]: token id 133 out of range [0, 100)");
    // val row 0: tokens (0*131 + j*17 + 9) % 300 -> token 0 = 9 < 100, but j = 6 gives 111.
    expect_input_error([&] { ds.read(SampleSplit::Val, std::span(&vrow0, 1), nullptr, tok, &label, &length); }, p,
                       "/val/inputs[0][6]: token id 111 out of range [0, 100)");
  }
  {
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    set_int_attr(f, "vocab_size", 300);
    H5Fclose(f);
  }
  SampleDataset ds2(p, MPI_COMM_SELF);
  expect_input_error([&] { ds2.read(SampleSplit::Val, std::span(&vrow, 1), nullptr, tok, &label, &length); }, p,
                     "/val/lengths[1]: length 17 out of range [1, 16]");
}
// The same bad values, now found when the data set is loaded into memory: the
// first bad row of the split, named as a read names it.
TEST(SampleDatasetHostile, BadValuesAtLoadTime) {
  const std::string p = hostile("label12_held", [](hid_t f) {
    const hid_t d = H5Dopen2(f, "/train/labels", H5P_DEFAULT);
    const hid_t fs_ = H5Dget_space(d);
    const hsize_t start = 3, count = 1;
    H5Sselect_hyperslab(fs_, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
    const hid_t ms = H5Screate_simple(1, &count, nullptr);
    const std::int32_t v = 12;
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_INT32, ms, fs_, H5P_DEFAULT, &v), 0);
    H5Sclose(ms), H5Sclose(fs_), H5Dclose(d);
  });
  SampleDataset ds(p, MPI_COMM_SELF);
  MemoryTracker tracker;
  expect_input_error([&] { ds.hold_in_memory(tracker, MemCategory::Data); }, p,
                     "/train/labels[3]: label 12 out of range [0, 7)");
  EXPECT_FALSE(ds.in_memory());

  const std::string t = tmp_file("tok_hostile_held.h5");
  write_tokens(t, 300, 20, 3);
  auto set_vocab = [&](std::int64_t v) {
    const hid_t f = H5Fopen(t.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    set_int_attr(f, "vocab_size", v);
    H5Fclose(f);
  };
  set_vocab(100);  // ids up to 299 were written
  {
    SampleDataset tds(t, MPI_COMM_SELF);
    std::int64_t row = -1, pos = -1;  // the first id >= 100 of the train split, row-major
    for (std::int64_t i = 0; i < 20 && row < 0; ++i)
      for (std::int64_t j = 0; j < kSeq && row < 0; ++j)
        if (token(0, i, j, 300) >= 100) row = i, pos = j;
    ASSERT_GE(row, 0);
    expect_input_error([&] { tds.hold_in_memory(tracker, MemCategory::Data); }, t,
                       "/train/inputs[" + std::to_string(row) + "][" + std::to_string(pos) + "]: token id " +
                           std::to_string(token(0, row, pos, 300)) + " out of range [0, 100)");
  }
  set_vocab(300);
  {
    const hid_t f = H5Fopen(t.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, "/val/lengths", H5P_DEFAULT);
    const std::int32_t v[3] = {1, 17, 2};
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v), 0);
    H5Dclose(d), H5Fclose(f);
  }
  SampleDataset lds(t, MPI_COMM_SELF);
  expect_input_error([&] { lds.hold_in_memory(tracker, MemCategory::Data); }, t,
                     "/val/lengths[1]: length 17 out of range [1, 16]");
}
TEST(SampleDatasetHostile, TokenAttributes) {
  const std::string p = tmp_file("tok_attr.h5");
  write_tokens(p, 300, 5, 2);
  auto mutate = [&](const std::function<void(hid_t)>& m) {
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    m(f);
    H5Fclose(f);
  };
  mutate([](hid_t f) { set_int_attr(f, "pad_id", 300); });
  expect_open_fails(p, "pad_id 300 out of range [0, 299]");
  mutate([](hid_t f) { set_int_attr(f, "pad_id", 0); H5Adelete(f, "cls_id"); });
  expect_open_fails(p, "missing attribute 'cls_id'");
  mutate([](hid_t f) { set_int_attr(f, "cls_id", -1); set_int_attr(f, "sep_id", 300); });
  expect_open_fails(p, "sep_id 300 out of range [-1, 299]");
  mutate([](hid_t f) { H5Adelete(f, "sep_id"); });  // optional: a file from before it was recorded
  EXPECT_EQ(SampleDataset(p, MPI_COMM_SELF).sep_id(), -1);
  mutate([](hid_t f) { H5Ldelete(f, "/train/lengths", H5P_DEFAULT); });
  expect_open_fails(p, "missing dataset '/train/lengths'");
}
TEST(SampleDatasetHostile, NotAFile) {
  expect_open_fails(tmp_file("no_such.h5"), "no such file");
  const std::string p = tmp_file("text.h5");
  { std::FILE* f = std::fopen(p.c_str(), "wb"); std::fputs("hello", f); std::fclose(f); }
  expect_open_fails(p, "not an HDF5 file");
}

}  // namespace
}  // namespace shardtrain
