// shardtrain/rundir/flop_floor.hpp
// Owns the FLOP floor that `trainer --plan` and `--profile` print: the time a
// step would take if every rank did its share of the step's FLOPs at the
// arithmetic limit of where it computes (Backend::compute_peak: on the host,
// this core's own FMA or bf16 dot-product rate, kernels/core_peak.hpp), not at
// a library's GEMM rate.
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

// "FLOP floor: 461.2 ms per step (237 GFLOP per rank at bf16 dot-product ... measured now on every rank)".
std::string format_flop_floor(const FlopFloor& f);

}  // namespace shardtrain
