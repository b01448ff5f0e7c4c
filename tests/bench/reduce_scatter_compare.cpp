// reduce_scatter_compare: MpiCommunicator's pairwise reduce-scatter against Open
// MPI's own, on a ZeRO-2/3 gradient split into buckets, at the job's rank count.
//   reduce_scatter_compare [TOTAL [BUCKETS [ROUNDS]]]   (default 37937664 28 5:
//   the 12-layer d=512 GPT's fp32 gradient in 28 buckets)
// Each bucket is split over the ranks the way ZeroEngine splits a span (the first
// size % N ranks get one element more), so counts differ when N does not divide.
// Variants, every one on the same freshly filled buffer, all buckets posted before
// the first wait (as the engine's overlap does):
//   ours    Communicator::ireduce_scatter_v (the pairwise exchange);
//   libnbc  MPI_Ireduce_scatter (Open MPI's coll/libnbc, what we called before);
//   tuned   MPI_Reduce_scatter per bucket (blocking, coll/tuned's fixed rules).
// Rounds rotate the order. Time per variant = the slowest rank's (MPI_MAX) wall
// time from a barrier to its last wait. Prints the median and best over rounds
// and ours / libnbc; checks every variant's reduced blocks against ours: bitwise
// at 2 ranks (two operands commute), else within 1e-5 relative; exit 1 if not.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/mpi/mpi_communicator.hpp"

namespace {

using shardtrain::DType;
using shardtrain::MpiCommunicator;
using shardtrain::ReduceOp;
using shardtrain::RequestPtr;

struct Bucket {
  std::size_t offset = 0, size = 0;
  std::vector<std::size_t> counts;
  std::vector<int> icounts;
  std::size_t own_displ = 0;
};

void fill(std::vector<float>& g, int rank) {
  for (std::size_t i = 0; i < g.size(); ++i)
    g[i] = static_cast<float>((i * 2654435761u + static_cast<std::size_t>(rank) * 40503u) % 1000003u) * 1e-6f - 0.5f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const std::size_t total = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 37937664u;
  const int nbuckets = argc > 2 ? std::atoi(argv[2]) : 28;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  if (total == 0 || nbuckets <= 0 || rounds <= 0 || total < static_cast<std::size_t>(nbuckets)) {
    if (rank == 0) std::fprintf(stderr, "usage: reduce_scatter_compare [TOTAL>=BUCKETS [BUCKETS>0 [ROUNDS>0]]]\n");
    MPI_Finalize();
    return 2;
  }
  std::vector<Bucket> buckets(static_cast<std::size_t>(nbuckets));
  for (int b = 0; b < nbuckets; ++b) {
    Bucket& k = buckets[b];
    k.offset = total / nbuckets * b;
    k.size = b + 1 == nbuckets ? total - k.offset : total / nbuckets;
    for (int q = 0; q < n; ++q) {
      const std::size_t c = k.size / n + (static_cast<std::size_t>(q) < k.size % n ? 1 : 0);
      if (q < rank) k.own_displ += c;
      k.counts.push_back(c);
      k.icounts.push_back(static_cast<int>(c));
    }
  }
  MpiCommunicator comm(MPI_COMM_WORLD);
  const char* names[3] = {"ours", "libnbc", "tuned"};
  std::vector<float> g(total), result[3];
  std::vector<double> times[3];
  for (int round = 0; round < rounds; ++round) {
    for (int j = 0; j < 3; ++j) {
      const int v = (round + j) % 3;
      fill(g, rank);
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      if (v == 0) {
        std::vector<RequestPtr> reqs;
        for (Bucket& k : buckets)
          reqs.push_back(comm.ireduce_scatter_v(g.data() + k.offset, g.data() + k.offset + k.own_displ, k.counts,
                                                DType::F32, ReduceOp::Sum));
        for (RequestPtr& r : reqs) r->wait();
      } else if (v == 1) {
        std::vector<MPI_Request> reqs(buckets.size());
        for (std::size_t b = 0; b < buckets.size(); ++b)
          MPI_Ireduce_scatter(MPI_IN_PLACE, g.data() + buckets[b].offset, buckets[b].icounts.data(), MPI_FLOAT,
                              MPI_SUM, MPI_COMM_WORLD, &reqs[b]);
        MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
      } else {
        for (Bucket& k : buckets)
          MPI_Reduce_scatter(MPI_IN_PLACE, g.data() + k.offset, k.icounts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
      double t = MPI_Wtime() - t0, slowest = 0.0;
      MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      times[v].push_back(slowest * 1e3);
      if (round == 0) {  // the reduced blocks: ours in place at own_displ, MPI's at the bucket start
        result[v].clear();
        for (const Bucket& k : buckets) {
          const float* at = g.data() + k.offset + (v == 0 ? k.own_displ : 0);
          result[v].insert(result[v].end(), at, at + k.counts[rank]);
        }
      }
    }
  }
  int bad = 0;
  double worst = 0.0;
  for (int v = 1; v < 3; ++v)
    for (std::size_t i = 0; i < result[0].size(); ++i) {
      const double a = result[0][i], b = result[v][i];
      if (n == 2 ? std::memcmp(&result[0][i], &result[v][i], sizeof(float)) != 0
                 : std::fabs(a - b) > 1e-5 * std::max(1.0, std::fabs(b))) {
        if (bad++ < 3) std::fprintf(stderr, "rank %d: %s element %zu is %.9g, ours %.9g\n", rank, names[v], i, b, a);
      }
      worst = std::max(worst, std::fabs(a - b));
    }
  int bad_any = 0;
  MPI_Allreduce(&bad, &bad_any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("reduce_scatter_compare: %d ranks, %zu fp32 elements in %d buckets, %d rounds (order rotated); "
                "slowest rank's ms from barrier to last wait\n", n, total, nbuckets, rounds);
    for (int v = 0; v < 3; ++v)
      std::printf("  %-7s median %9.2f ms  best %9.2f ms\n", names[v], median(times[v]),
                  *std::min_element(times[v].begin(), times[v].end()));
    std::printf("  ours / libnbc (medians): %.3f\n", median(times[0]) / median(times[1]));
    std::printf("  results: %s (largest difference %.3g)\n",
                bad_any ? "DIFFER" : n == 2 ? "bitwise equal" : "equal within 1e-5", worst);
  }
  MPI_Finalize();
  return bad_any ? 1 : 0;
}
