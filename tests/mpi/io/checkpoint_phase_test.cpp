// MPI tests of the checkpoint phase agreement (io/checkpoint_phase.hpp): a
// failure on any subset of ranks is thrown on every rank as the same
// CheckpointIoError (the lowest failing rank, the phase, the file, the errno
// and that rank's message); root-only phases run on rank 0 alone; a phase
// that succeeds everywhere returns everywhere; a read phase (read_phase) keeps a
// bad file's InputError an InputError, verbatim, on every rank. Each check is
// agreed on over the ranks (all_ranks) so that no rank passes alone.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cerrno>
#include <string>

#include "io/checkpoint_phase.hpp"

namespace shardtrain {
namespace {

int rank_of() { int r = 0; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }
int size_of() { int n = 1; MPI_Comm_size(MPI_COMM_WORLD, &n); return n; }
bool all_ranks(bool ok) {
  int v = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return v == 1;
}

TEST(CheckpointPhase, SucceedsEverywhereWhenEveryRankSucceeds) {
  int runs = 0;
  bool ok = true;
  try {
    checkpoint_phase(MPI_COMM_WORLD, nullptr, "write", "f.partial", false, [&] { ++runs; });
  } catch (...) {
    ok = false;
  }
  EXPECT_TRUE(all_ranks(ok && runs == 1));
}

TEST(CheckpointPhase, OneRanksSystemErrorReachesEveryRankWithRankPhaseAndErrno) {
  IoDeadline deadline(60.0, rank_of());  // watched, and far from firing
  const int victim = size_of() - 1;
  bool ok = false;
  try {
    checkpoint_phase(MPI_COMM_WORLD, &deadline, "fsync", "dir/step_00000010.h5.partial", false, [&] {
      if (rank_of() == victim) throw SystemIoError("dir/step_00000010.h5.partial: fsync failed: Input/output error", EIO);
    });
  } catch (const CheckpointIoError& e) {
    const std::string what = e.what();
    ok = e.rank() == victim && e.phase() == "fsync" && e.path() == "dir/step_00000010.h5.partial" &&
         e.error_number() == EIO && e.detail().find("fsync failed") != std::string::npos &&
         what.find("rank " + std::to_string(victim) + ", phase 'fsync'") == 0 &&
         what.find("[EIO (Input/output error)]") != std::string::npos;
    if (!ok) ADD_FAILURE() << what;
  }
  EXPECT_TRUE(all_ranks(ok));
}

TEST(CheckpointPhase, TheLowestFailingRankIsReported) {
  const int n = size_of();
  bool ok = false;
  try {
    checkpoint_phase(MPI_COMM_WORLD, nullptr, "write", "f.partial", false, [&] {
      if (rank_of() == 0) throw SystemIoError("first: quota", EDQUOT);
      if (rank_of() == n - 1) throw SystemIoError("last: no space", ENOSPC);
    });
  } catch (const CheckpointIoError& e) {
    ok = e.rank() == 0 && e.error_number() == EDQUOT && e.detail() == "first: quota";
  }
  EXPECT_TRUE(all_ranks(ok));
}

TEST(CheckpointPhase, RootOnlyPhaseRunsOnRankZeroAloneAndItsFailureIsEveryRanks) {
  int runs = 0;
  checkpoint_phase(MPI_COMM_WORLD, nullptr, "commit", "f", true, [&] { ++runs; });
  int total = runs;
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_TRUE(all_ranks(total == 1 && runs == (rank_of() == 0 ? 1 : 0)));
  // A failure that is not a SystemIoError: its errno is read from HDF5's "errno = N" text.
  bool ok = false;
  try {
    checkpoint_phase(MPI_COMM_WORLD, nullptr, "create", "f", true, [&] {
      throw Error("H5Fcreate: unable to open file: name = 'f', errno = 28, error message = 'No space left on device'");
    });
  } catch (const CheckpointIoError& e) {
    ok = e.rank() == 0 && e.phase() == "create" && e.error_number() == ENOSPC;
  }
  EXPECT_TRUE(all_ranks(ok));
}

TEST(CheckpointPhase, ReadPhaseKeepsABadFilesInputErrorOnEveryRank) {
  IoDeadline deadline(60.0, rank_of(), "data set I/O");
  const int victim = size_of() - 1;
  bool ok = false;
  try {
    read_phase(MPI_COMM_WORLD, &deadline, "open", "d.h5", false, [&] {
      if (rank_of() == victim) throw InputError("d.h5: not a shardtrain token data set (no 'format' attribute)");
    });
  } catch (const InputError& e) {
    ok = std::string(e.what()) == "d.h5: not a shardtrain token data set (no 'format' attribute)";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an InputError: " << e.what();
  }
  EXPECT_TRUE(all_ranks(ok));
  // ... and a failing read stays the CheckpointIoError naming the rank, the phase and the errno.
  ok = false;
  try {
    read_phase(MPI_COMM_WORLD, &deadline, "read", "c.h5", false, [&] {
      if (rank_of() == victim) throw SystemIoError("c.h5: /state/master: read failed: Input/output error", EIO);
    });
  } catch (const CheckpointIoError& e) {
    ok = e.rank() == victim && e.phase() == "read" && e.error_number() == EIO;
  }
  EXPECT_TRUE(all_ranks(ok));
  // checkpoint_phase (writes) turns the same InputError into a CheckpointIoError, as before.
  ok = false;
  try {
    checkpoint_phase(MPI_COMM_WORLD, nullptr, "prepare", "dir", true, [&] { throw InputError("dir: cannot create"); });
  } catch (const CheckpointIoError& e) {
    ok = e.rank() == 0 && e.phase() == "prepare";
  }
  EXPECT_TRUE(all_ranks(ok));
}

}  // namespace
}  // namespace shardtrain
