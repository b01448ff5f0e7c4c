// shardtrain/rundir/flop_floor.cpp
// Owns the collective FLOP-floor measurement (flop_floor.hpp).
#include "rundir/flop_floor.hpp"

#include <fmt/format.h>

#include "core/mpi_check.hpp"
#include "parallel/device_context.hpp"  // computes_on_cuda

namespace shardtrain {

FlopFloor measure_flop_floor(MPI_Comm comm, Backend& backend, PrecisionMode precision, int threads,
                             double flops_per_rank) {
  SHARDTRAIN_MPI_CHECK(MPI_Barrier(comm));
  const Backend::ComputePeak mine = backend.compute_peak(precision, threads);
  struct {
    double gflops;
    int rank;
  } in{mine.gflops, 0}, out{};
  SHARDTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &in.rank));
  SHARDTRAIN_MPI_CHECK(MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MINLOC, comm));
  FlopFloor f;
  f.flops_per_rank = flops_per_rank;
  f.gflops_per_rank = out.gflops;
  f.ms_per_step = out.gflops > 0 ? flops_per_rank / (out.gflops * 1e9) * 1e3 : 0.0;
  // The slowest rank's description, on every rank.
  std::string what = mine.what;
  int len = static_cast<int>(what.size());
  SHARDTRAIN_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, out.rank, comm));
  what.resize(static_cast<std::size_t>(len));
  SHARDTRAIN_MPI_CHECK(MPI_Bcast(what.data(), len, MPI_CHAR, out.rank, comm));
  f.what = what;
  return f;
}

FlopFloor plan_flop_floor(const RunConfig& config, double flops_per_rank, MPI_Comm comm) {
  const bool host = !computes_on_cuda(config.train.device);
  if (!host) return FlopFloor{0, 0, flops_per_rank, "no peak probe for CUDA devices yet"};
  set_host_compute_threads(config.parallel.threads);
  return measure_flop_floor(comm, host_backend(), config.precision.mode, config.parallel.threads, flops_per_rank);
}

std::string format_flop_floor(const FlopFloor& f) {
  if (f.gflops_per_rank <= 0) return fmt::format("FLOP floor: not known ({})\n", f.what);
  return fmt::format(
      "FLOP floor: {:.4g} ms per step ({:.4g} GFLOP per rank at {}, the slowest rank's, measured now with every "
      "rank busy: this core's own limit, not a library's GEMM rate)\n",
      f.ms_per_step, f.flops_per_rank / 1e9, f.what);
}

}  // namespace shardtrain
