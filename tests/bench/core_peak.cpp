// shardtrain/tests/bench/core_peak.cpp
// This machine's own arithmetic limit (kernels/core_peak.hpp), the denominator of
// the FLOP floor in tests/bench/torch_parity_speed.sh and share/doc/benchmarks.md.
// Every rank measures at the same time (between barriers), one thread each, so
// at R ranks on R cores the aggregate is what R busy cores give (clock limits
// under load included). Prints, on rank 0:
//   core_peak ranks R fp32_isa ISA fp32_gflops_per_core F bf16_gflops_per_core B aggregate_fp32_gflops AF aggregate_bf16_gflops AB
// where F and B are the slowest rank's rates (0: the CPU lacks the instructions).
// Then, as an independent check of the probe, every rank runs the trainer's own
// GEMMs (kernels/gemm.hpp: oneDNN, fp32 and, with native bf16, bf16; 1024^3, best
// of 5) and rank 0 prints
//   library_gemm fp32_gflops_per_core G bf16_gflops_per_core H fp32_of_peak R bf16_of_peak S
// A library cannot beat the hardware: a ratio above MAX_RATIO means the probe
// measured less than the core can do, and the program fails (exit 1). (MAX_RATIO
// above 1 absorbs timing noise: on this 2-vCPU VM the host moves vCPUs around.)
// Usage: core_peak [SECONDS=1] [MAX_RATIO=1.05]
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "core/half.hpp"
#include "kernels/core_peak.hpp"
#include "kernels/cpu_compute.hpp"
#include "kernels/gemm.hpp"

namespace {

// Best rate (GFLOP/s) of 5 timed n^3 GEMMs through the trainer's gemm<T>, all
// ranks together (between barriers).
template <class T>
double library_gemm_rate(long n) {
  std::vector<T> a(n * n), b(n * n), c(n * n);
  for (long i = 0; i < n * n; ++i) {
    a[i] = T(static_cast<float>((i * 7) % 13) * 0.01f);
    b[i] = T(static_cast<float>((i * 5 + 3) % 11) * 0.01f);
  }
  shardtrain::CView2<T> av(a.data(), n, n), bv(b.data(), n, n);
  shardtrain::View2<T> cv(c.data(), n, n);
  double best = 0;
  for (int r = 0; r < 6; ++r) {  // the first warms up (primitive creation, page faults)
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    shardtrain::gemm<T>(shardtrain::Trans::N, shardtrain::Trans::N, T(1.0f), av, bv, T(0.0f), cv);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::max(best, 2.0 * n * n * n / dt / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1, rc = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  const double max_ratio = argc > 2 ? std::atof(argv[2]) : 1.05;
  if (argc > 3 || !(seconds >= 0.01 && seconds <= 60) || !(max_ratio >= 1.0 && max_ratio <= 10)) {
    if (rank == 0)
      std::fprintf(stderr, "usage: core_peak [SECONDS in 0.01..60, default 1] [MAX_RATIO in 1..10, default 1.05]\n");
    MPI_Finalize();
    return 2;
  }
  shardtrain::CorePeak p;
  try {
    MPI_Barrier(MPI_COMM_WORLD);
    p = shardtrain::measure_core_peak(seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "core_peak: rank %d: %s\n", rank, e.what());
    rc = 1;
  }
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  double rates[2] = {p.fp32_gflops, p.bf16_gflops};
  MPI_Allreduce(MPI_IN_PLACE, rates, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0 && rc == 0)
    std::printf(
        "core_peak ranks %d fp32_isa %s fp32_gflops_per_core %.1f bf16_gflops_per_core %.1f "
        "aggregate_fp32_gflops %.1f aggregate_bf16_gflops %.1f\n",
        ranks, p.fp32_isa.c_str(), rates[0], rates[1], rates[0] * ranks, rates[1] * ranks);
  if (rc == 0) {
    Kokkos::ScopeGuard kokkos(argc, argv);
    shardtrain::set_compute_threads(1);
    double lib[2] = {library_gemm_rate<float>(1024),
                     shardtrain::cpu_bf16_native() ? library_gemm_rate<shardtrain::bf16>(1024) : 0.0};
    MPI_Allreduce(MPI_IN_PLACE, lib, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    const double r32 = rates[0] > 0 ? lib[0] / rates[0] : 0, r16 = rates[1] > 0 ? lib[1] / rates[1] : 0;
    if (rank == 0) {
      std::printf("library_gemm fp32_gflops_per_core %.1f bf16_gflops_per_core %.1f fp32_of_peak %.3f bf16_of_peak %.3f\n",
                  lib[0], lib[1], r32, r16);
      if (r32 > max_ratio || r16 > max_ratio) {
        std::fprintf(stderr, "core_peak: the library's GEMM ran above %.2fx the measured core peak: the probe "
                             "under-measures this core\n", max_ratio);
        rc = 1;
      }
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
  MPI_Finalize();
  return rc;
}
