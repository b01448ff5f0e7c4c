// shardtrain/parallel/device_context.hpp
// Owns the bring-up of where a run computes: the host, or (CUDA build,
// train.device = "cuda" or "auto") a CUDA device per rank -- the rank's device
// (parallel/device_assignment.hpp) and the communicator that moves its memory:
// the NcclCommunicator (parallel.device_collectives = "nccl", the default), or
// the StagingCommunicator over a CudaStager (= "mpi": the host MPI library
// through pinned staging, which alone lets ranks share a device when
// parallel.share_device = true), then the CudaBackend on it (with the cuBLASLt
// context for the Linear layers when model.gemm = "cublaslt").
// Invariant: bring-up is agreed on (parallel/mpi/agreement.hpp): a failure on any
// rank is thrown on every rank with the lowest failing rank's message, before
// any rank goes on to the collectives of the run's set-up.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "core/run_choices.hpp"
#include "parallel/communicator.hpp"

namespace shardtrain {

class StagingCommunicator;
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
  // The MPI device collectives (parallel.device_collectives = "mpi") and the
  // communicator they run on (a duplicate of the world, freed here).
  std::unique_ptr<StagingCommunicator> staging;
  MPI_Comm staging_comm = MPI_COMM_NULL;
#ifdef SHARDTRAIN_WITH_CUDA
  std::unique_ptr<NcclCommunicator> nccl;
  std::unique_ptr<CudaBackend> cuda;  // declared last: destroyed before the stream it orders against
#endif
  // Ranks of this node on this rank's device (parallel.share_device), 1 on the host.
  int device_sharers = 1;
  // The device's memory in bytes (0 on the host), for the memory plan.
  std::size_t device_bytes = 0;
  // The communicator for backend memory; nullptr: the run's MpiCommunicator.
  Communicator* comm();
};

// What bring_up_device needs of the input file.
struct DeviceChoice {
  TrainDevice device = TrainDevice::Auto;                           // train.device
  DeviceCollectives collectives = DeviceCollectives::Nccl;         // parallel.device_collectives
  bool share_device = false;                                        // parallel.share_device
  GemmImpl gemm = GemmImpl::Cublas;                                 // model.gemm: the CudaBackend's Linear
  DeviceKernels kernels = DeviceKernels::Validated;                 // train.device_kernels
};

// Whether train.device = `device` computes on CUDA devices in this build (auto:
// in the CUDA build; cuda: always, refused by bring_up_device without CUDA).
bool computes_on_cuda(TrainDevice device);

// `choice.device`: train.device (auto: cuda in the CUDA build, cpu otherwise);
// `source_name`: the input file, for messages. Collective over `world`. Throws
// InputError for cuda in a build without CUDA, Error (on every rank) when a
// device cannot be brought up (ranks that would share a device without
// parallel.share_device = true and the MPI device collectives included).
std::unique_ptr<DeviceContext> bring_up_device(const DeviceChoice& choice, const std::string& source_name,
                                               MPI_Comm world);

}  // namespace shardtrain
