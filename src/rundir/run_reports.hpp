// shardtrain/rundir/run_reports.hpp
// Owns the three reports at the end of a job, appended by rank 0 to the report
// text (`out`/`report`) that the run writes to RUN_DIR/report.txt, and their
// files in the run directory: the memory report (tracked peaks per category against the
// plan, the activations' measured high-water, the process's RSS against the
// predicted process peak: memory.csv, process_memory.csv), the --profile
// breakdown per op (profile.txt), and the communication report (payload, ring
// and modelled wire bytes per step and rank against ZeRO's theory, and the
// communicators' whole tallies). Each is collective over the run's host
// communicator; `dir` is rank 0's run directory (nullptr elsewhere).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/memory.hpp"
#include "core/profiler.hpp"
#include "parallel/communicator.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "core/param_layout.hpp"
#include "plan/memory_plan.hpp"
#include "rundir/flop_floor.hpp"
#include "rundir/run_directory.hpp"

namespace shardtrain {

// `activation_high_water`: this rank's measured activation high-water
// (Task::activation_high_water_bytes), reported beside the tracked arena.
// Returns (rank 0; "" elsewhere) the summary's one line: the largest rank's
// tracked peak against the plan and its VmHWM against the predicted process peak.
std::string report_memory(Communicator& comm, const MemoryTracker& memory, const MemoryPlan& run_plan,
                          std::int64_t activation_high_water, RunDirectory* dir, std::string& out);

// The per-op times of `profiler` (the job's steps but its first), mean over
// ranks and the slowest rank's, and the step against `floor` (flop_floor.hpp,
// measured by the caller on every rank).
void report_profile(MpiCommunicator& comm, const Profiler& profiler, const FlopFloor& floor, RunDirectory* dir,
                    std::string& report);

// What the communication report says of the run.
struct CommReportLayout {
  const ParamLayout& layout;
  int zero_stage = 0;
  std::size_t element_bytes = 4;     // of the parameters and gradients
  double bucket_mb = 0;
  std::int64_t micro_batches = 1;    // per step, on every rank
  bool device_comm = false;          // the model state moves through a second communicator (NCCL)
};

// `job`: this rank's collectives over the job's `steps` training steps;
// `all_time`: everything the rank's communicators ran since they were created.
void report_communication(MpiCommunicator& comm, const CommTally& job, const CommTally& all_time, std::int64_t steps,
                          const CommReportLayout& run, std::string& report);

}  // namespace shardtrain
