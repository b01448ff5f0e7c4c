// shardtrain/rundir/process_memory.hpp
// Owns the measured part of the process memory prediction: what the memory
// plan (plan/memory_plan.hpp, computed from the config alone) cannot know.
//   before_model: the process's VmRSS just before the model's state is
//     allocated (MPI, Kokkos, libraries, code, heap, the opened data set), after
//     the checkpoint write path has been brought up once (io/checkpoint.hpp
//     warm_checkpoint_io: the MPI-IO components and HDF5 state a first
//     checkpoint would otherwise add).
//   io_scratch: how far VmHWM rises above VmRSS while that probe file is
//     written (HDF5 and MPI-IO transients, about 2-3 MiB per rank here).
//     The probe has the real checkpoint's structure (attributes, config text,
//     layout rows, virtual views, state vectors), only tiny data.
//   collective_scratch: how far VmHWM rises above VmRSS while the MPI library
//     runs the step's largest gradient collective (its internal temporaries,
//     e.g. Open MPI's ring all-reduce buffers), probed once on a temporary
//     buffer of that collective's size.
// Invariants: both are measured on every rank of the job and gathered, so every
// rank holds every rank's values and decides the same way about
// train.memory_limit_mb (the limit uses the maximum over ranks). Collective.
#pragma once

#include <string>

#include "config/run_config.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "core/param_layout.hpp"
#include "plan/memory_plan.hpp"

namespace shardtrain {

// Sets plan.process.before_model on every rank (collective; allocates nothing
// the model needs). First brings up the checkpoint write path with a probe
// checkpoint of `layout`'s tensors (one element each; a single tensor when no
// checkpoint is scheduled: then only a signal's stop writes one) and the state
// vectors of config's precision, written in config.checkpoint.dir (or its
// nearest existing ancestor when it does not exist yet) and deleted; an empty
// dir skips that.
void measure_process_before_model(MemoryPlan& plan, MpiCommunicator& comm, const RunConfig& config,
                                  const ParamLayout& layout);

// Sets plan.process.collective_scratch on every rank (collective): runs the
// gradient collective of `config`'s ZeRO stage once on a temporary host
// buffer of `type` elements -- stage 0 the all-reduce of the padded
// gradients, stage 1 their reduce-scatter, stages 2 and 3 the largest bucket's
// reduce-scatter (stage 3 also its all-gather) -- and records VmHWM's rise
// above the VmRSS with that buffer. `layout` is finalized for comm.size().
void measure_collective_scratch(MemoryPlan& plan, const RunConfig& config, const ParamLayout& layout,
                                DType type, MpiCommunicator& comm);

}  // namespace shardtrain
