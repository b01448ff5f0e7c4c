// MPI test of SampleDataset at any rank count: rank 0 writes an image and a
// token data set with SampleDatasetWriter; every rank opens them collectively and
// reads its own disjoint share of a global index list (round-robin, so the counts
// differ when the rank count does not divide the list), checking every value
// against the formula it was written from. Also: only rank 0 has rows (the others
// read zero rows), and a hostile file fails on every rank with the same
// InputError. The same shares read from a copy every rank holds in memory
// (hold_in_memory, independent) give the same bytes as the file reads. Every
// rank takes part in every collective whatever its checks say.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/sample_dataset.hpp"
#include "io/sample_dataset_writer.hpp"

namespace shardtrain {
namespace {

constexpr std::int64_t kTrain = 1001, kVal = 37;  // 1001 > one chunk (873 rows of 1200 bytes)
constexpr std::int64_t kC = 3, kH = 20, kW = 20;
constexpr std::int64_t kElems = kC * kH * kW;
constexpr std::int64_t kSeq = 24, kVocab = 1000;

int rank_of() { int r = 0; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }
int world() { int n = 0; MPI_Comm_size(MPI_COMM_WORLD, &n); return n; }

std::uint8_t pixel(int s, std::int64_t i, std::int64_t e) { return static_cast<std::uint8_t>((i * 13 + e * 5 + s * 77) % 256); }
std::int32_t label_of(int s, std::int64_t i) { return static_cast<std::int32_t>((i * 7 + s) % 10); }
TokenIndex token(int s, std::int64_t i, std::int64_t j) { return static_cast<TokenIndex>((i * 31 + j * 3 + s) % kVocab); }
std::int64_t length_of(std::int64_t i) { return 1 + i % kSeq; }

bool all_ranks(bool ok) {
  int v = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

std::string bcast(std::string s) {
  int len = static_cast<int>(s.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  s.resize(static_cast<std::size_t>(len));
  MPI_Bcast(s.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  return s;
}

class SampleDatasetMpi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string dir;
    if (rank_of() == 0) {
      s_dir = std::filesystem::temp_directory_path() / ("shardtrain_mpi_samples_" + std::to_string(::getpid()));
      std::filesystem::create_directories(s_dir);
      dir = s_dir.string();
      SampleDatasetSpec spec;
      spec.kind = SampleKind::Image;
      spec.sample_shape = {kC, kH, kW};
      for (int c = 0; c < 10; ++c) spec.class_names.push_back(std::to_string(c));
      SampleDatasetWriter w(dir + "/images.h5", spec);
      std::vector<std::uint8_t> px(kElems);
      for (int s = 0; s < 2; ++s)
        for (std::int64_t i = 0; i < (s ? kVal : kTrain); ++i) {
          for (std::int64_t e = 0; e < kElems; ++e) px[static_cast<std::size_t>(e)] = pixel(s, i, e);
          w.append_image(s ? SampleSplit::Val : SampleSplit::Train, px, label_of(s, i));
        }
      w.commit();

      SampleDatasetSpec ts;
      ts.kind = SampleKind::Tokens;
      ts.sample_shape = {kSeq};
      ts.class_names = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
      ts.tokenizer = "byte";
      ts.vocab_size = kVocab;
      ts.pad_id = 0;
      SampleDatasetWriter tw(dir + "/tokens.h5", ts);
      std::vector<TokenIndex> ids(kSeq);
      for (int s = 0; s < 2; ++s)
        for (std::int64_t i = 0; i < (s ? kVal : kTrain); ++i) {
          for (std::int64_t j = 0; j < kSeq; ++j) ids[static_cast<std::size_t>(j)] = token(s, i, j);
          tw.append_tokens(s ? SampleSplit::Val : SampleSplit::Train, ids, length_of(i), label_of(s, i));
        }
      tw.commit();

      // Hostile: labels shorter than inputs.
      std::filesystem::copy_file(dir + "/images.h5", dir + "/hostile.h5");
      const hid_t f = H5Fopen((dir + "/hostile.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      H5Ldelete(f, "/val/labels", H5P_DEFAULT);
      const hsize_t n = kVal + 1;
      const hid_t sp = H5Screate_simple(1, &n, nullptr);
      const hid_t d = H5Dcreate2(f, "/val/labels", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      H5Dclose(d), H5Sclose(sp), H5Fclose(f);
    }
    s_path = bcast(dir);
  }
  static void TearDownTestSuite() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_of() == 0) std::filesystem::remove_all(s_dir);
  }
  static inline std::string s_path;
  static inline std::filesystem::path s_dir;
};

// Global list of `count` distinct rows of a split of n (a stride permutation),
// dealt round-robin: rank r gets entries r, r + world, ...
std::vector<std::int64_t> my_rows(std::int64_t n, std::int64_t count) {
  std::vector<std::int64_t> mine;
  for (std::int64_t k = rank_of(); k < count; k += world()) mine.push_back((k * 389 + 11) % n);
  return mine;
}

TEST_F(SampleDatasetMpi, ImagesDisjointShares) {
  SampleDataset ds(s_path + "/images.h5", MPI_COMM_WORLD);
  ASSERT_EQ(ds.size(SampleSplit::Train), kTrain);
  for (const std::int64_t count : {std::int64_t{1}, std::int64_t{2}, std::int64_t{101}, kTrain}) {
    for (int s = 0; s < 2; ++s) {
      const std::int64_t n = s ? kVal : kTrain;
      const auto rows = my_rows(n, std::min(count, n));
      std::vector<float> in(rows.size() * kElems, -1.0f);
      std::vector<std::int32_t> labels(rows.size(), -1);
      ds.read(s ? SampleSplit::Val : SampleSplit::Train, rows, in.data(), nullptr, labels.data(), nullptr);
      bool ok = true;
      for (std::size_t i = 0; i < rows.size() && ok; ++i) {
        ok = labels[i] == label_of(s, rows[i]);
        for (std::int64_t e = 0; e < kElems && ok; ++e)
          ok = in[i * kElems + static_cast<std::size_t>(e)] == static_cast<float>(pixel(s, rows[i], e)) / 255.0f;
        EXPECT_TRUE(ok) << "rank " << rank_of() << " split " << s << " row " << rows[i];
      }
      // With count 1 (and 2 at 3 ranks) some ranks read zero rows.
      if (count == 1 && rank_of() > 0) EXPECT_TRUE(rows.empty());
      ASSERT_TRUE(all_ranks(ok)) << "count " << count << " split " << s;
    }
  }
}

TEST_F(SampleDatasetMpi, TokensDisjointShares) {
  SampleDataset ds(s_path + "/tokens.h5", MPI_COMM_WORLD);
  ASSERT_EQ(ds.vocab_size(), kVocab);
  for (const std::int64_t count : {std::int64_t{1}, std::int64_t{5}, std::int64_t{500}}) {
    const auto rows = my_rows(kTrain, count);
    std::vector<TokenIndex> tok(rows.size() * kSeq, -1);
    std::vector<std::int32_t> labels(rows.size(), -1), lengths(rows.size(), -1);
    ds.read(SampleSplit::Train, rows, nullptr, tok.data(), labels.data(), lengths.data());
    bool ok = true;
    for (std::size_t i = 0; i < rows.size() && ok; ++i) {
      ok = labels[i] == label_of(0, rows[i]) && lengths[i] == length_of(rows[i]);
      for (std::int64_t j = 0; j < kSeq && ok; ++j) ok = tok[i * kSeq + static_cast<std::size_t>(j)] == token(0, rows[i], j);
      EXPECT_TRUE(ok) << "rank " << rank_of() << " row " << rows[i];
    }
    ASSERT_TRUE(all_ranks(ok)) << "count " << count;
  }
}

// Every rank holds both splits (its own copy) and serves its share of the rows
// from memory: the same bytes as the file reads, for images and tokens.
TEST_F(SampleDatasetMpi, InMemorySharesMatchFileReads) {
  for (const char* name : {"/images.h5", "/tokens.h5"}) {
    SampleDataset file(s_path + name, MPI_COMM_WORLD), held(s_path + name, MPI_COMM_WORLD);
    MemoryTracker tracker;
    held.hold_in_memory(tracker, MemCategory::Data);
    bool ok = static_cast<std::int64_t>(tracker.current(MemCategory::Data)) == held.in_memory_bytes();
    const bool image = file.kind() == SampleKind::Image;
    const auto elems = static_cast<std::size_t>(file.sample_elems());
    for (const std::int64_t count : {std::int64_t{1}, std::int64_t{2}, std::int64_t{101}, kTrain})
      for (int s = 0; s < 2; ++s) {
        const SampleSplit split = s ? SampleSplit::Val : SampleSplit::Train;
        const auto rows = my_rows(file.size(split), std::min(count, file.size(split)));
        const std::size_t n = rows.size();
        std::vector<float> in_a(image ? n * elems : 0, -1.0f), in_b(in_a.size(), -2.0f);
        std::vector<TokenIndex> tok_a(image ? 0 : n * elems, -1), tok_b(tok_a.size(), -2);
        std::vector<std::int32_t> lab_a(n, -1), lab_b(n, -2), len_a(image ? 0 : n, -1), len_b(len_a.size(), -2);
        file.read(split, rows, image ? in_a.data() : nullptr, image ? nullptr : tok_a.data(), lab_a.data(),
                  image ? nullptr : len_a.data());
        held.read(split, rows, image ? in_b.data() : nullptr, image ? nullptr : tok_b.data(), lab_b.data(),
                  image ? nullptr : len_b.data());
        const bool same = lab_a == lab_b && len_a == len_b && tok_a == tok_b &&
                          std::memcmp(in_a.data(), in_b.data(), in_a.size() * sizeof(float)) == 0;
        EXPECT_TRUE(same) << "rank " << rank_of() << " " << name << " split " << s << " count " << count;
        ok = ok && same;
      }
    ASSERT_TRUE(all_ranks(ok)) << name;
  }
}

TEST_F(SampleDatasetMpi, HostileFileFailsOnEveryRank) {
  const std::string p = s_path + "/hostile.h5";
  std::string msg;
  try {
    SampleDataset ds(p, MPI_COMM_WORLD);
  } catch (const InputError& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg, p + ": dataset '/val/labels' has 38 labels for 37 samples in '/val/inputs'");
  ASSERT_TRUE(all_ranks(!msg.empty()));
}

}  // namespace
}  // namespace shardtrain
