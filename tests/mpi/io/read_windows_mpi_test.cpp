// MPI test of the data path at any rank count: every rank reads its rank_slice
// of each global batch with TokenDataset::read_windows (independent hyperslab
// reads), rank 0 gathers the pieces, and the result must equal a serial read of
// the whole batch and the known token stream. Batch sizes include ones not
// divisible by the rank count and ones smaller than it (ranks with no windows).
// Every rank takes part in every collective whatever its own checks say, so a
// failure can never leave a rank waiting.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/token_dataset.hpp"
#include "io/token_dataset_writer.hpp"
#include "task/batch_sampler.hpp"

namespace shardtrain {
namespace {

constexpr std::int64_t kTokens = 20011;  // prime: nothing lines up by accident
constexpr std::int64_t kVocab = 97;
constexpr std::int64_t kSeqLen = 8;

int rank_of(MPI_Comm c) { int r = 0; MPI_Comm_rank(c, &r); return r; }
int size_of(MPI_Comm c) { int n = 0; MPI_Comm_size(c, &n); return n; }

TokenIndex token_at(std::int64_t i) { return static_cast<TokenIndex>((i * 31 + i / 7) % kVocab); }

class ReadWindowsMpi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Rank 0 writes the file; its path is broadcast so every rank opens the same one.
    std::string path;
    if (rank_of(MPI_COMM_WORLD) == 0) {
      s_dir = std::filesystem::temp_directory_path() / ("shardtrain_mpi_io_" + std::to_string(::getpid()));
      std::filesystem::create_directories(s_dir);
      path = (s_dir / "stream.h5").string();
      TokenDatasetSpec spec;
      spec.tokenizer = TextTokenizer::Char;
      for (int v = 0; v < kVocab; ++v) spec.vocab.push_back("v" + std::to_string(v));
      spec.source = "synthetic";
      spec.val_fraction = 0.2;
      std::vector<TokenIndex> tokens(kTokens);
      for (std::int64_t i = 0; i < kTokens; ++i) tokens[static_cast<std::size_t>(i)] = token_at(i);
      write_token_dataset(path, spec, tokens);
    }
    int len = static_cast<int>(path.size());
    MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path.resize(static_cast<std::size_t>(len));
    MPI_Bcast(path.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
    s_path = path;
  }
  static void TearDownTestSuite() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_of(MPI_COMM_WORLD) == 0) std::filesystem::remove_all(s_dir);
  }

  static inline std::string s_path;
  static inline std::filesystem::path s_dir;
};

// Reads the windows of global indices [first, first + batch) split over the
// ranks; returns (on rank 0) the gathered batch in global order.
std::vector<TokenIndex> distributed_read(const TokenDataset& ds, Split split,
                                         const std::vector<std::int64_t>& global_starts, std::int64_t len,
                                         std::int64_t& my_windows) {
  const int rank = rank_of(MPI_COMM_WORLD), world = size_of(MPI_COMM_WORLD);
  const auto batch = static_cast<std::int64_t>(global_starts.size());
  const auto [lo, hi] = rank_slice(batch, rank, world);
  my_windows = hi - lo;
  std::vector<std::int64_t> mine(global_starts.begin() + lo, global_starts.begin() + hi);
  std::vector<TokenIndex> local(static_cast<std::size_t>((hi - lo) * len));
  ds.read_windows(split, mine, len, local.data());

  std::vector<int> counts(static_cast<std::size_t>(world)), displs(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    const auto [a, b] = rank_slice(batch, r, world);
    counts[static_cast<std::size_t>(r)] = static_cast<int>((b - a) * len);
    displs[static_cast<std::size_t>(r)] = static_cast<int>(a * len);
  }
  std::vector<TokenIndex> gathered(rank == 0 ? static_cast<std::size_t>(batch * len) : 0);
  MPI_Gatherv(local.data(), static_cast<int>(local.size()), MPI_INT32_T, gathered.data(), counts.data(),
              displs.data(), MPI_INT32_T, 0, MPI_COMM_WORLD);
  return gathered;
}

// True on every rank iff `ok` is true on every rank.
bool all_ranks(bool ok) {
  int v = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

TEST_F(ReadWindowsMpi, TrainBatchesEqualSerialRead) {
  TokenDataset ds(s_path, MPI_COMM_WORLD);  // collective open
  const int rank = rank_of(MPI_COMM_WORLD), world = size_of(MPI_COMM_WORLD);
  const std::int64_t n_val = val_token_count(kTokens, 0.2), n_train = kTokens - n_val;
  ASSERT_EQ(ds.size(Split::Train), n_train);
  const WindowSampler sampler(n_train, kSeqLen, 777);
  const std::int64_t len = sampler.window_len();

  std::int64_t step_base = 0;
  for (std::int64_t batch : {1, 2, 3, 4, 5, 7, 8, 16, 31}) {
    for (int step = 0; step < 3; ++step) {
      std::vector<std::int64_t> starts;
      for (std::int64_t i = 0; i < batch; ++i) starts.push_back(sampler.window_start(step_base + i));
      step_base += batch;

      std::int64_t mine = -1;
      const auto gathered = distributed_read(ds, Split::Train, starts, len, mine);
      if (world == 3 && batch == 2 && rank == 2) EXPECT_EQ(mine, 0) << "rank 2 of 3 should have no window";

      bool ok = true;
      if (rank == 0) {
        std::vector<TokenIndex> serial(static_cast<std::size_t>(batch * len));
        ds.read_windows(Split::Train, starts, len, serial.data());
        EXPECT_EQ(gathered, serial) << "batch " << batch << " step " << step;
        ok = gathered == serial;
        for (std::int64_t w = 0; w < batch && ok; ++w)
          for (std::int64_t j = 0; j < len; ++j)
            if (serial[static_cast<std::size_t>(w * len + j)] != token_at(starts[static_cast<std::size_t>(w)] + j)) {
              ADD_FAILURE() << "window " << w << " token " << j << " differs from the written stream";
              ok = false;
              break;
            }
      }
      ASSERT_TRUE(all_ranks(ok));
    }
  }
}

TEST_F(ReadWindowsMpi, ValidationWindowsEqualSerialRead) {
  TokenDataset ds(s_path, MPI_COMM_WORLD);
  const int rank = rank_of(MPI_COMM_WORLD);
  const std::int64_t n_val = ds.size(Split::Val), n_train = ds.size(Split::Train);
  const std::int64_t windows = eval_window_count(n_val, kSeqLen);
  for (std::int64_t limit : {windows, std::int64_t{2}, std::int64_t{5}}) {
    std::vector<std::int64_t> starts;
    for (std::int64_t i = 0; i < limit; ++i) starts.push_back(eval_window_start(i, kSeqLen));
    std::int64_t mine = -1;
    const auto gathered = distributed_read(ds, Split::Val, starts, kSeqLen + 1, mine);
    bool ok = true;
    if (rank == 0) {
      for (std::int64_t w = 0; w < limit && ok; ++w)
        for (std::int64_t j = 0; j <= kSeqLen; ++j)
          if (gathered[static_cast<std::size_t>(w * (kSeqLen + 1) + j)] != token_at(n_train + w * kSeqLen + j)) {
            ADD_FAILURE() << "val window " << w << " token " << j;
            ok = false;
            break;
          }
    }
    ASSERT_TRUE(all_ranks(ok));
  }
}

}  // namespace
}  // namespace shardtrain
