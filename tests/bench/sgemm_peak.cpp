// shardtrain/tests/bench/sgemm_peak.cpp
// The machine's measured float GEMM rate through the trainer's own entry point
// (kernels/gemm.hpp: KokkosBlas::gemm -> OpenBLAS sgemm), the denominator of the
// FLOP floor in tests/bench/torch_parity_speed.sh. Every rank multiplies its own
// N x N matrices at the same time (between barriers), so at 2 ranks x 1 thread
// the aggregate is what two busy cores give; at 1 rank the thread count is
// OpenBLAS's (OPENBLAS_NUM_THREADS). Prints, on rank 0:
//   sgemm_peak ranks R n N reps K best_gflops_per_rank G aggregate_gflops A
// where G is the best repetition (the slowest rank's time of that repetition).
// Usage: sgemm_peak [N=2048] [REPS=10]
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/gemm.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const long n = argc > 1 ? std::atol(argv[1]) : 2048;
    const int reps = argc > 2 ? std::atoi(argv[2]) : 10;
    if (n < 64 || n > 16384 || reps < 1 || reps > 1000 || argc > 3) {
      if (rank == 0) std::fprintf(stderr, "usage: sgemm_peak [N in 64..16384, default 2048] [REPS in 1..1000, default 10]\n");
      rc = 2;
    } else {
      using shardtrain::Trans;
      std::vector<float> a(n * n), b(n * n), c(n * n, 0.0f);
      for (long i = 0; i < n * n; ++i) {
        a[i] = static_cast<float>((i * 7 + rank) % 13) * 0.01f;
        b[i] = static_cast<float>((i * 5 + 3) % 11) * 0.01f;
      }
      shardtrain::CView2<float> av(a.data(), n, n), bv(b.data(), n, n);
      shardtrain::View2<float> cv(c.data(), n, n);
      double best = 1e30;
      for (int r = 0; r < reps + 1; ++r) {  // repetition 0 warms up (OpenBLAS buffers, page faults)
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        shardtrain::gemm<float>(Trans::N, Trans::N, 1.0f, av, bv, 0.0f, cv);
        double dt = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r > 0) best = std::min(best, dt);
      }
      const double per_rank = 2.0 * n * n * n / best / 1e9;
      if (rank == 0)
        std::printf("sgemm_peak ranks %d n %ld reps %d best_gflops_per_rank %.2f aggregate_gflops %.2f\n",
                    ranks, n, reps, per_rank, per_rank * ranks);
    }
  }
  MPI_Finalize();
  return rc;
}
