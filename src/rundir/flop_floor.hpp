// shardtrain/rundir/flop_floor.hpp
// Owns the FLOP floor that `trainer --plan` and `--profile` print: the time a
// step would take if every rank did its share of the step's FLOPs at the
// arithmetic limit of where it computes (Backend::compute_peak: on the host,
// this core's own rate on the unit oneDNN runs that precision on, named in the
// line with oneDNN's ISA: "bf16 on AMX tdpbf16ps", "bf16 on AVX512-BF16
// vdpbf16ps", "fp32 on AVX2 FMA vfmadd231ps", or for bf16 without native bf16 the
// fp32 unit, labelled so; kernels/core_peak.hpp), not at a library's GEMM rate.
// Invariant: collective over `comm`; every rank measures at the same time
// (between barriers), so the rate is what all of the job's cores give together,
// and the slowest rank's rate is used.
#pragma once

#include <mpi.h>

#include <string>

#include "backend/backend.hpp"
#include "config/run_config.hpp"

namespace shardtrain {

struct FlopFloor {
  double ms_per_step = 0;       // 0 when the backend has no probe
  double gflops_per_rank = 0;   // the slowest rank's
  double flops_per_rank = 0;    // one step's share of one rank
  std::string what;             // what was measured (the slowest rank's description)
};

FlopFloor measure_flop_floor(MPI_Comm comm, Backend& backend, PrecisionMode precision, int threads,
                             double flops_per_rank);

// --plan's floor (no device is brought up for a plan): the host's when the run
// would compute on the host (train.device "cpu", or "auto" in a build without
// CUDA), with parallel.threads set first; otherwise "not known".
FlopFloor plan_flop_floor(const RunConfig& config, double flops_per_rank, MPI_Comm comm);

// "FLOP floor: 461.2 ms per step (237 GFLOP per rank at bf16 on AMX tdpbf16ps ... GFLOP/s per core x 1 thread;
// oneDNN ISA AVX-512 AMX, the slowest rank's, ...)": one "GFLOP/s", after the rate (profile_e2e.sh reads it).
std::string format_flop_floor(const FlopFloor& f);

}  // namespace shardtrain
