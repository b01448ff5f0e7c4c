// shardtrain/parallel/device_context.hpp
// Owns the bring-up of where a run computes: the host, or (CUDA build,
// train.device = "cuda" or "auto") one CUDA device per rank -- the
// NcclCommunicator, which assigns the rank its device
// (parallel/device_assignment.hpp), then the CudaBackend on it -- and the
// communicator that moves that memory.
// Invariant: bring-up is agreed on (parallel/mpi/agreement.hpp): a failure on any
// rank is thrown on every rank with the lowest failing rank's message, before
// any rank goes on to the collectives of the run's set-up.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "core/run_choices.hpp"
#include "parallel/communicator.hpp"

namespace shardtrain {

#ifdef SHARDTRAIN_WITH_CUDA
class NcclCommunicator;
class CudaBackend;
#endif

// Where the run computes and the communicator that moves its memory: the host
// and the run's own MpiCommunicator, or one CUDA device per rank with an
// NcclCommunicator (CUDA build). Outlives the run.
struct DeviceContext {
  DeviceContext();
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  Backend* backend = &host_backend();
#ifdef SHARDTRAIN_WITH_CUDA
  std::unique_ptr<NcclCommunicator> nccl;
  std::unique_ptr<CudaBackend> cuda;
#endif
  // The communicator for backend memory; nullptr: the run's MpiCommunicator.
  Communicator* comm();
};

// Whether train.device = `device` computes on CUDA devices in this build (auto:
// in the CUDA build; cuda: always, refused by bring_up_device without CUDA).
bool computes_on_cuda(TrainDevice device);

// `device`: train.device (auto: cuda in the CUDA build, cpu otherwise);
// `source_name`: the input file, for messages. Collective over `world`. Throws
// InputError for cuda in a build without CUDA, Error (on every rank) when a
// device cannot be brought up.
std::unique_ptr<DeviceContext> bring_up_device(TrainDevice device, const std::string& source_name, MPI_Comm world);

}  // namespace shardtrain
