// Wire model: per-rank bytes of Open MPI 4.1.x collectives and of our pairwise
// reduce-scatter (wire_model.hpp).
// Read from Open MPI 4.1's sources: coll/tuned/coll_tuned_decision_fixed.c
// (the decision rules), coll/base/coll_base_{allreduce,bcast,
// allgather}.c (the algorithms), coll/libnbc/nbc_i{allreduce,
// allgather,allgatherv}.c; checked against the pml
// monitoring dump at 1-4 ranks (tests/mpi/parallel/wire_check.py).
#include "parallel/mpi/wire_model.hpp"

#include <vector>

namespace shardtrain {

namespace {

using u64 = std::uint64_t;

WireEstimate unmodelled(const char* what) { return {0, what, false}; }

// Children of vrank v in a binomial tree rooted at 0 over n ranks (v + 2^k for
// every 2^k > v with v + 2^k < n): coll/base's bmtree and libnbc's tree.
int binomial_children(int v, int n) {
  int c = 0;
  for (long long m = 1; m < n; m <<= 1)
    if (m > v && v + m < n) ++c;
  return c;
}

// coll/base recursive doubling: the largest power of two p' <= n; the first
// 2 (n - p') ranks pair up (even sends its buffer to odd, odd sends the result
// back); p' ranks exchange the whole buffer log2 p' times.
u64 recursive_doubling_allreduce(int n, int rank, u64 bytes) {
  int pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2;
  const int extra = n - pof2;
  int rounds = 0;
  for (int m = 1; m < pof2; m <<= 1) ++rounds;
  if (rank < 2 * extra) return rank % 2 == 0 ? bytes : (rounds + 1) * bytes;
  return rounds * bytes;
}

// coll/base ring: count split into n blocks (the first count % n one element
// longer); rank r sends every block but r+1 in the reduce-scatter phase and
// every block but r+2 in the all-gather phase.
u64 ring_allreduce(int n, int rank, std::size_t count, std::size_t esize) {
  const std::size_t early = (count + n - 1) / n, late = count / n, split = count % n;
  const auto block = [&](int b) { return split == 0 || static_cast<std::size_t>(b) < split ? early : late; };
  return (2 * count - block((rank + 1) % n) - block((rank + 2) % n)) * esize;
}

// coll/base redscat_allgather (Rabenseifner): see the 4.1 source; replayed here.
u64 rabenseifner_allreduce(int n, int rank, std::size_t count, std::size_t esize) {
  int nsteps = 0, pof2 = 1;
  while (pof2 * 2 <= n) { pof2 *= 2; ++nsteps; }
  const int rem = n - pof2;
  std::size_t sent = 0;
  int vrank;
  if (rank < 2 * rem) {
    const std::size_t lhalf = count / 2, rhalf = count - lhalf;
    if (rank % 2 != 0) return (lhalf + rhalf) * esize;  // sends its halves, then waits
    sent += rhalf;
    vrank = rank / 2;
  } else {
    vrank = rank - rem;
  }
  std::vector<std::size_t> rcount;
  std::size_t wsize = count;
  for (int mask = 1; mask < pof2; mask <<= 1) {
    const int vdest = vrank ^ mask;
    const int dest = vdest < rem ? vdest * 2 : vdest + rem;
    std::size_t r, s;
    if (rank < dest) { r = wsize / 2; s = wsize - r; }
    else { s = wsize / 2; r = wsize - s; }
    sent += s;
    rcount.push_back(r);
    wsize = r;
  }
  for (std::size_t r : rcount) sent += r;           // all-gather by recursive doubling
  if (rank < 2 * rem) sent += count;                // the result to the removed odd rank
  return sent * esize;
}

}  // namespace

WireEstimate wire_all_reduce(int n, int rank, std::size_t count, std::size_t esize) {
  if (n <= 1) return {0, "coll/self: no messages"};
  const u64 total = static_cast<u64>(count) * esize;
  // coll/tuned fixed rules, commutative operations: 1 linear, 2 nonoverlapping,
  // 3 recursive doubling, 4 ring, 5 segmented ring, 6 Rabenseifner.
  int alg;
  if (n < 4) {
    alg = total < 8 ? 4 : total < 4096 ? 3 : total < 8192 ? 4 : total < 16384 ? 3 : total < 65536 ? 4
        : total < 262144 ? 5 : 6;
  } else if (n < 8) {
    alg = total < 16 ? 4 : total < 8192 ? 3 : 6;
  } else {
    return unmodelled("coll/tuned allreduce: decision past 7 ranks not modelled");
  }
  if ((alg == 4 || alg == 5) && count < static_cast<std::size_t>(n)) alg = 3;  // ring falls back
  if (alg == 6) {
    int pof2 = 1;
    while (pof2 * 2 <= n) pof2 *= 2;
    if (count < static_cast<std::size_t>(pof2)) return unmodelled("coll/tuned allreduce: Rabenseifner on count < p' (linear) not modelled");
  }
  switch (alg) {
    case 3: return {recursive_doubling_allreduce(n, rank, total), "coll/tuned allreduce: recursive doubling"};
    case 4: return {ring_allreduce(n, rank, count, esize), "coll/tuned allreduce: ring"};
    // segmented ring with the rules' segment size 0 runs the plain ring
    case 5: return {ring_allreduce(n, rank, count, esize), "coll/tuned allreduce: segmented ring (= ring: segment size 0)"};
    default: return {rabenseifner_allreduce(n, rank, count, esize), "coll/tuned allreduce: Rabenseifner (reduce-scatter by recursive halving + all-gather by recursive doubling)"};
  }
}

WireEstimate wire_broadcast(int n, int rank, int root, std::size_t count, std::size_t esize) {
  if (n <= 1) return {0, "coll/self: no messages"};
  const u64 total = static_cast<u64>(count) * esize;
  const int v = (rank - root + n) % n;
  // 1 linear, 2 chain, 3 pipeline, 5 binary tree, 6 binomial, 7 k-nomial (radix 4).
  int alg;
  if (n < 4) {
    alg = total < 32 ? 3 : total < 256 ? 5 : total < 512 ? 3 : total < 1024 ? 7 : total < 32768 ? 1
        : total < 131072 ? 5 : total < 262144 ? 2 : total < 524288 ? 1 : total < 1048576 ? 6 : 5;
  } else if (n < 8) {
    alg = total < 64 ? 5 : total < 128 ? 6 : total < 2048 ? 5 : total < 8192 ? 6 : total < 1048576 ? 1 : 2;
  } else {
    return unmodelled("coll/tuned bcast: decision past 7 ranks not modelled");
  }
  switch (alg) {
    case 1: return {v == 0 ? (n - 1) * total : 0, "coll/tuned bcast: linear (the root sends to every rank)"};
    case 2: return {v < n - 1 ? total : 0, "coll/tuned bcast: chain (one chain: each rank forwards to the next)"};
    case 3: return {v < n - 1 ? total : 0, "coll/tuned bcast: pipeline (each rank forwards to the next)"};
    case 5: {
      int c = 0;
      for (int child : {2 * v + 1, 2 * v + 2}) c += child < n;
      return {c * total, "coll/tuned bcast: binary tree"};
    }
    case 6: return {binomial_children(v, n) * total, "coll/tuned bcast: binomial tree"};
    default:
      if (n <= 5) return {v == 0 ? (n - 1) * total : 0, "coll/tuned bcast: k-nomial tree, radix 4 (the root sends to every rank)"};
      return unmodelled("coll/tuned bcast: k-nomial past 5 ranks not modelled");
  }
}

WireEstimate wire_all_gather(int n, int rank, std::size_t send_count, std::size_t esize) {
  (void)rank;
  if (n <= 1) return {0, "coll/self: no messages"};
  const u64 block = static_cast<u64>(send_count) * esize;
  // 2 ranks: two_proc; below 32: recursive doubling (Bruck where n is not a
  // power of two); above: neighbour exchange / ring / Bruck. Each sends the
  // rank's data to the N-1 others once: (N-1) blocks.
  if (n == 2) return {block, "coll/tuned allgather: two_proc"};
  return {(n - 1) * block, (n & (n - 1)) == 0 ? "coll/tuned allgather: recursive doubling"
                                               : "coll/tuned allgather: Bruck (recursive doubling's fallback off powers of two)"};
}

WireEstimate wire_barrier(int n) {
  return {0, n <= 1 ? "coll/self: no messages" : "coll/tuned barrier: zero-byte messages"};
}

WireEstimate wire_iall_reduce(int n, int rank, std::size_t count, std::size_t esize) {
  if (n <= 1) return {0, "coll/self: no messages"};
  // libnbc iallreduce in place: binomial reduce to rank 0 (every other rank
  // sends the whole buffer once), then binomial broadcast.
  const u64 total = static_cast<u64>(count) * esize;
  return {(rank != 0 ? total : 0) + binomial_children(rank, n) * total,
          "libnbc iallreduce: binomial reduce to rank 0 + binomial broadcast"};
}

WireEstimate wire_pairwise_reduce_scatter(int n, int rank, std::span<const std::size_t> counts,
                                          std::size_t esize) {
  if (n <= 1) return {0, "pairwise exchange: no messages at one rank"};
  u64 total = 0;
  for (std::size_t c : counts) total += c;
  // MpiCommunicator's own reduce-scatter: each other rank's block is sent to it once.
  return {(total - counts[rank]) * esize, "pairwise exchange (ours): each other rank's block sent to it once"};
}

WireEstimate wire_iall_gather(int n, int rank, std::span<const std::size_t> counts, std::size_t esize) {
  if (n <= 1) return {0, "coll/self: no messages"};
  // libnbc iallgather(v): linear, the own block to each of the N-1 others.
  return {static_cast<u64>(n - 1) * counts[rank] * esize, "libnbc iallgather: linear (own block to every other rank)"};
}

}  // namespace shardtrain
