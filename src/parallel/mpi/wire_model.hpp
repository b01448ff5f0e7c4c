// shardtrain/parallel/mpi/wire_model.hpp
// Owns the wire model of MpiCommunicator: for one collective call, the bytes
// this rank sends through the PML under the algorithm Open MPI 4.1.x picks with
// its default MCA settings (coll/self at one rank; coll/libnbc for the
// non-blocking calls; coll/tuned's fixed decision rules for the blocking ones),
// or, for reduce-scatter, under MpiCommunicator's own pairwise exchange.
// A model, not a measurement: tests/mpi/parallel/wire_check.py compares it, per
// rank and exactly, with what Open MPI's pml monitoring dump reports.
// Invariants:
//  - bytes are per rank and per call; the caller adds them to CommTally::model;
//  - where the rules or the algorithm are not modelled (coll/tuned decisions
//    past 7 ranks), `modelled` is false and `bytes` is 0;
//  - only the call forms MpiCommunicator makes are modelled: commutative
//    operations, in-place non-blocking all-reduce, root 0 not assumed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace shardtrain {

struct WireEstimate {
  std::uint64_t bytes = 0;
  const char* algorithm = "";  // e.g. "libnbc iallgather: linear (own block to every other rank)"
  bool modelled = true;
};

// Blocking (coll/tuned, fixed decision). `count` elements of `esize` bytes.
WireEstimate wire_all_reduce(int n, int rank, std::size_t count, std::size_t esize);
WireEstimate wire_broadcast(int n, int rank, int root, std::size_t count, std::size_t esize);
WireEstimate wire_all_gather(int n, int rank, std::size_t send_count, std::size_t esize);
WireEstimate wire_barrier(int n);

// Non-blocking (coll/libnbc). counts: one per rank (equal for the _block forms).
WireEstimate wire_iall_reduce(int n, int rank, std::size_t count, std::size_t esize);
WireEstimate wire_iall_gather(int n, int rank, std::span<const std::size_t> counts, std::size_t esize);

// Every reduce-scatter form of MpiCommunicator (blocking and non-blocking): its
// own pairwise exchange of point-to-point messages, not an MPI collective.
WireEstimate wire_pairwise_reduce_scatter(int n, int rank, std::span<const std::size_t> counts,
                                          std::size_t esize);

}  // namespace shardtrain
