// Device bring-up: the host, or one CUDA device per rank (see device_context.hpp).
#include "parallel/device_context.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/mpi_check.hpp"
#include "parallel/mpi/agreement.hpp"
#include "parallel/mpi/staging_communicator.hpp"

#ifdef SHARDTRAIN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.hpp"
#include "core/cuda_check.hpp"
#include "parallel/cuda/cuda_stager.hpp"
#include "parallel/device_assignment.hpp"
#include "parallel/nccl/nccl_communicator.hpp"
#endif

namespace shardtrain {

DeviceContext::DeviceContext() = default;
DeviceContext::~DeviceContext() {
#ifdef SHARDTRAIN_WITH_CUDA
  cuda.reset();  // before the collective stream it orders against
#endif
  staging.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (staging_comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&staging_comm);
}

Communicator* DeviceContext::comm() {
  if (staging) return staging.get();
#ifdef SHARDTRAIN_WITH_CUDA
  if (nccl) return nccl.get();
#endif
  return nullptr;
}

#ifdef SHARDTRAIN_WITH_CUDA
namespace {

// The MPI device collectives: the rank's device (shared when asked), its own
// collective stream and pinned staging, over a duplicate of `world`. Agreed on:
// a refusal or failure on one rank is thrown on every rank.
void bring_up_mpi_collectives(DeviceContext& context, bool share, GemmImpl gemm, DeviceKernels kernels,
                              MPI_Comm world) {
  int rank = 0;
  SHARDTRAIN_MPI_CHECK(MPI_Comm_rank(world, &rank));
  const DeviceAssignment assignment = assign_node_device(world, visible_cuda_devices(rank), share);
  SHARDTRAIN_MPI_CHECK(MPI_Comm_dup(world, &context.staging_comm));
  CudaStager* stager = nullptr;
  const Agreement made = agree_on_failure(world, [&] {
    if (!assignment.problem.empty()) throw Error(assignment.problem);
    auto owned = std::make_unique<CudaStager>(assignment.device, mpi_is_cuda_aware());
    stager = owned.get();
    context.staging = std::make_unique<StagingCommunicator>(context.staging_comm, std::move(owned));
    std::size_t free_bytes = 0, total_bytes = 0;
    SHARDTRAIN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    context.device_bytes = total_bytes;
    context.device_sharers = assignment.sharers;
  });
  if (made.failed()) throw Error(made.message);
  const Agreement backend =
      agree_on_failure(world, [&] { context.cuda = std::make_unique<CudaBackend>(*stager, gemm, kernels); });
  if (backend.failed()) throw Error(backend.message);
}

}  // namespace
#endif

bool computes_on_cuda(TrainDevice device) {
  switch (device) {
    case TrainDevice::Auto:
#ifdef SHARDTRAIN_WITH_CUDA
      return true;
#else
      return false;
#endif
    case TrainDevice::Cpu:
      return false;
    case TrainDevice::Cuda:
      return true;
  }
  SHARDTRAIN_FAIL(fmt::format("unknown train.device {}", static_cast<int>(device)));
}

std::unique_ptr<DeviceContext> bring_up_device(const DeviceChoice& choice, const std::string& source_name,
                                               MPI_Comm world) {
  const TrainDevice device = choice.device;
  auto context = std::make_unique<DeviceContext>();
#ifdef SHARDTRAIN_WITH_CUDA
  if (computes_on_cuda(device) && choice.collectives == DeviceCollectives::Mpi) {
    try {
      bring_up_mpi_collectives(*context, choice.share_device, choice.gemm, choice.kernels, world);
    } catch (const Error& e) {
      throw Error(fmt::format("{}; train.device = \"{}\" with parallel.device_collectives = \"mpi\" trains on a "
                              "CUDA device per rank: run on GPU nodes, or set train.device = \"cpu\" to train on "
                              "the host", e.what(), name_of(device)));
    }
    context->backend = context->cuda.get();
  } else if (computes_on_cuda(device)) {
    if (choice.share_device)
      throw InputError(fmt::format("{}: parallel.share_device = true needs parallel.device_collectives = \"mpi\" "
                                   "(NCCL refuses two ranks on one device)", source_name));
    // First, before anything is allocated: the device check (agreed by all ranks).
    try {
      context->nccl = std::make_unique<NcclCommunicator>(world);
    } catch (const Error& e) {
      throw Error(fmt::format("{}; train.device = \"{}\" trains on one CUDA device per rank: run on GPU nodes, "
                              "or set train.device = \"cpu\" (--set train.device=cpu) to train on the host",
                              e.what(), name_of(device)));
    }
    // Stream and cuBLAS handle: may fail on one rank only, so the ranks agree
    // before any of them goes on to the collectives of the run's set-up.
    const Agreement made =
        agree_on_failure(world, [&] { context->cuda = std::make_unique<CudaBackend>(*context->nccl, choice.gemm, choice.kernels);
        });
    if (made.failed()) throw Error(made.message);  // every rank, the failing rank's message
    context->backend = context->cuda.get();
  }
  (void)source_name;
#else
  if (computes_on_cuda(device))
    throw InputError(fmt::format("{}: train.device = \"cuda\", but this trainer was built without CUDA; rebuild "
                                 "with -DSHARDTRAIN_ENABLE_CUDA=ON (share/doc/gpu.md) or use train.device = \"cpu\"",
                                 source_name));
  (void)world;
  (void)choice;
#endif
  return context;
}

}  // namespace shardtrain
