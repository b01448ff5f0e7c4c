// shardtrain/tests/bench/core_peak.cpp
// This machine's own arithmetic limit (kernels/core_peak.hpp), the denominator of
// the FLOP floor in tests/bench/torch_parity_speed.sh and share/doc/benchmarks.md.
// Every rank measures at the same time (between barriers), one thread each, so
// at R ranks on R cores the aggregate is what R busy cores give (clock limits
// under load included). Prints, on rank 0, one line of key/value pairs:
//   core_peak ranks R fp32_isa ISA fp32_gflops_per_core F bf16_gflops_per_core B aggregate_fp32_gflops AF
//     aggregate_bf16_gflops AB fp32_unit U bf16_floor_unit V bf16_native 0|1 bf16_floor_gflops_per_core BF
//     aggregate_bf16_floor_gflops ABF fp16_gflops_per_core H amx_bf16_gflops_per_core X onednn_isa I
//     cpu_features LIST amx A
// where F is the fp32 floor unit's rate (U: avx2-fma or avx512-fma), B vdpbf16ps's,
// H vfmadd231ph's, X AMX tdpbf16ps's (0: the CPU lacks the unit, or Linux refused
// AMX), and BF the bf16 floor's: the rate of V, the unit oneDNN runs bf16 GEMMs on
// (amx-tdpbf16ps, avx512bf16-vdpbf16ps, or the fp32 unit with bf16_native 0: bf16
// GEMMs then run in fp32 on converted tiles). Rates are the slowest rank's; I is
// oneDNN's effective ISA (spaces as _), LIST the usable units from cpuid + XCR0
// (kernels/cpu_features.hpp), A "granted", "no-amx" or "refused-errno-N". The
// first eleven pairs are the line before issue 50, unchanged. Then the same in words:
//   core_peak_floors fp32: LABEL; bf16: LABEL; oneDNN ISA NAME; AMX: WHAT
// Then, as an independent check of the probe, every rank runs the trainer's own
// GEMMs (kernels/gemm.hpp: oneDNN, fp32 and, with native bf16, bf16; 1024^3, best
// of 5) and rank 0 prints
//   library_gemm fp32_gflops_per_core G bf16_gflops_per_core H fp32_of_peak R bf16_of_peak S
// (S against the bf16 floor's unit: AMX where oneDNN runs AMX). A library cannot
// beat the hardware: a ratio above MAX_RATIO means the probe measured less than
// the core can do, and the program fails (exit 1). (MAX_RATIO above 1 absorbs
// timing noise: on this 2-vCPU VM the host moves vCPUs around.)
// Usage: core_peak [SECONDS=1] [MAX_RATIO=1.05]
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

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
  double rates[5] = {p.fp32_gflops, p.bf16_gflops, p.bf16_floor_gflops, p.fp16_gflops, p.amx_bf16_gflops};
  MPI_Allreduce(MPI_IN_PLACE, rates, 5, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0 && rc == 0) {
    std::string isa = p.onednn_isa;
    for (char& c : isa) if (c == ' ') c = '_';
    const std::string amx = p.amx == "granted" ? "granted"
                            : p.amx.rfind("refused", 0) == 0 ? "refused-errno-" + std::to_string(p.amx_error)
                                                               : "no-amx";
    std::printf(
        "core_peak ranks %d fp32_isa %s fp32_gflops_per_core %.1f bf16_gflops_per_core %.1f "
        "aggregate_fp32_gflops %.1f aggregate_bf16_gflops %.1f fp32_unit %s bf16_floor_unit %s bf16_native %d "
        "bf16_floor_gflops_per_core %.1f aggregate_bf16_floor_gflops %.1f fp16_gflops_per_core %.1f "
        "amx_bf16_gflops_per_core %.1f onednn_isa %s cpu_features %s amx %s\n",
        ranks, p.fp32_isa.c_str(), rates[0], rates[1], rates[0] * ranks, rates[1] * ranks,
        shardtrain::peak_unit_token(p.units.fp32), shardtrain::peak_unit_token(p.units.bf16), p.units.bf16_native ? 1 : 0,
        rates[2], rates[2] * ranks, rates[3], rates[4], isa.c_str(), shardtrain::describe_cpu_features(p.cpu).c_str(),
        amx.c_str());
    std::printf("core_peak_floors fp32: %s; bf16: %s; oneDNN ISA %s; AMX: %s\n", p.fp32_floor_label().c_str(),
                p.bf16_floor_label().c_str(), p.onednn_isa.c_str(), p.amx.c_str());
  }
  if (rc == 0) {
    Kokkos::ScopeGuard kokkos(argc, argv);
    shardtrain::set_compute_threads(1);
    double lib[2] = {library_gemm_rate<float>(1024),
                     shardtrain::cpu_bf16_native() ? library_gemm_rate<shardtrain::bf16>(1024) : 0.0};
    MPI_Allreduce(MPI_IN_PLACE, lib, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    // bf16 against the bf16 floor's unit (the one oneDNN runs bf16 on); lib[1] is 0 without native bf16.
    double r32 = rates[0] > 0 ? lib[0] / rates[0] : 0, r16 = rates[2] > 0 ? lib[1] / rates[2] : 0;
    // The probe's windows are short (seconds / 10 each): under ctest -j other tests can take a core
    // during all of them (a CI rehearsal on 2026-11-30 read 1.254 against the bound of 1.25). Above the
    // bound, every rank probes once more and keeps the better rate of the two (the peak is a best rate):
    // a probe that really under-measures the core fails again.
    int retry = (r32 > max_ratio || r16 > max_ratio) ? 1 : 0;
    MPI_Bcast(&retry, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (retry) {
      const shardtrain::CorePeak again = shardtrain::measure_core_peak(seconds);
      double best[3] = {std::max(p.fp32_gflops, again.fp32_gflops), 0.0,
                        std::max(p.bf16_floor_gflops, again.bf16_floor_gflops)};
      MPI_Allreduce(MPI_IN_PLACE, best, 3, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
      if (rank == 0)
        std::printf("core_peak: library GEMM above %.2fx the probe (fp32 %.3f, bf16 %.3f): probed again, fp32 "
                    "%.1f -> %.1f, bf16 floor %.1f -> %.1f GFLOP/s per core\n",
                    max_ratio, r32, r16, rates[0], best[0], rates[2], best[2]);
      r32 = best[0] > 0 ? lib[0] / best[0] : 0;
      r16 = best[2] > 0 ? lib[1] / best[2] : 0;
    }
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
