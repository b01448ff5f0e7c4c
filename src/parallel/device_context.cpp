// Device bring-up: the host, or one CUDA device per rank (see device_context.hpp).
#include "parallel/device_context.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "parallel/mpi/agreement.hpp"

#ifdef SHARDTRAIN_WITH_CUDA
#include "backend/cuda/cuda_backend.hpp"
#include "parallel/nccl/nccl_communicator.hpp"
#endif

namespace shardtrain {

DeviceContext::DeviceContext() = default;
DeviceContext::~DeviceContext() = default;

Communicator* DeviceContext::comm() {
#ifdef SHARDTRAIN_WITH_CUDA
  if (nccl) return nccl.get();
#endif
  return nullptr;
}

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

std::unique_ptr<DeviceContext> bring_up_device(TrainDevice device, const std::string& source_name, MPI_Comm world) {
  auto context = std::make_unique<DeviceContext>();
#ifdef SHARDTRAIN_WITH_CUDA
  if (computes_on_cuda(device)) {
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
        agree_on_failure(world, [&] { context->cuda = std::make_unique<CudaBackend>(*context->nccl); });
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
#endif
  return context;
}

}  // namespace shardtrain
