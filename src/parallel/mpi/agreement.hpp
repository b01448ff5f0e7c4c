// shardtrain/parallel/mpi/agreement.hpp
// Owns the agreements the ranks reach over a plain MPI_Comm, outside every
// Communicator: whether work every rank ran failed on some rank (and with
// which message), rank 0's outcome of work only it does (the file system), and
// the gathers of the end-of-job reports. They run before a run's
// communicators exist (command line, config, device bring-up), or must stay
// out of a Communicator's tally (the reports describe that tally; rank 0's
// file-system outcomes are not training traffic) and its collective watchdog
// (rank 0's fsyncs may outlast parallel.collective_timeout_s).
// Invariants: every function is collective over `comm`; every rank returns the
// same value or throws the same error.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "parallel/communicator.hpp"

namespace shardtrain {

// Ordered: the worst outcome is the largest.
enum class Outcome : int { Ok = 0, Failed = 1, BadInput = 2 };

struct Agreement {
  Outcome worst = Outcome::Ok;  // the worst outcome over the ranks
  int first_failing = -1;       // the lowest failing rank; -1 when none failed
  std::string message;          // that rank's error message, on every rank
  bool failed() const { return worst != Outcome::Ok; }
};

// Runs `fn` on every rank and agrees on the outcome: an InputError is
// BadInput, any other std::exception Failed. `fn` must not start a collective
// after a point where it may throw on a subset of ranks.
Agreement agree_on_failure(MPI_Comm comm, const std::function<void()>& fn);

// Runs `fn` on rank 0 only and gives its outcome to every rank: an InputError
// there is thrown on every rank as InputError, any other failure as
// AgreedError, so no rank goes on alone.
void on_root(MPI_Comm comm, const std::function<void()>& fn);

// Rank 0's `s` on every rank.
std::string broadcast_string(MPI_Comm comm, std::string s);

// On rank 0: `out`[i] = op over the ranks of `mine`[i] (the same length
// everywhere; `out` is not written on other ranks).
void reduce_to_root(MPI_Comm comm, std::span<const double> mine, std::span<double> out, ReduceOp op);
// On rank 0: every rank's `mine` (the same length everywhere), in rank order,
// in `out` (size() * mine.size() elements; ignored on other ranks).
void gather_to_root(MPI_Comm comm, std::span<const std::uint64_t> mine, std::span<std::uint64_t> out);
// The same for float values (train.sample_every: the ZeRO-3 shards of the
// weights, all of one length, to rank 0).
void gather_to_root(MPI_Comm comm, std::span<const float> mine, std::span<float> out);

}  // namespace shardtrain
