// shardtrain/tests/bench/core_peak.cpp
// This machine's own arithmetic limit (kernels/core_peak.hpp), the denominator of
// the FLOP floor in tests/bench/torch_parity_speed.sh and share/doc/benchmarks.md.
// Every rank measures at the same time (between barriers), one thread each, so
// at R ranks on R cores the aggregate is what R busy cores give (clock limits
// under load included). Prints, on rank 0:
//   core_peak ranks R fp32_isa ISA fp32_gflops_per_core F bf16_gflops_per_core B aggregate_fp32_gflops AF aggregate_bf16_gflops AB
// where F and B are the slowest rank's rates (0: the CPU lacks the instructions).
// Usage: core_peak [SECONDS=1]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "kernels/core_peak.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1, rc = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  if (argc > 2 || !(seconds >= 0.01 && seconds <= 60)) {
    if (rank == 0) std::fprintf(stderr, "usage: core_peak [SECONDS in 0.01..60, default 1]\n");
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
  MPI_Finalize();
  return rc;
}
