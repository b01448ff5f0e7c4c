// nccl_probe: the smallest end-to-end use of NcclCommunicator. Initialises MPI,
// constructs an NcclCommunicator on MPI_COMM_WORLD and reduce-scatters 4 floats
// per rank from device memory, checking the result on the host.
//   success: rank 0 prints "nccl_probe: ok ..." and every rank exits 0;
//   failure: each failing rank prints "error: <message>" and exits 1.
// Construction failures (no device) are agreed on by all ranks inside the
// constructor, so every rank fails together and MPI_Finalize is safe; a failure
// after construction may be rank-local, so it aborts the job instead of letting
// another rank wait in a collective.
// Usage: mpiexec -n N nccl_probe
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "parallel/nccl/nccl_communicator.hpp"

namespace {

using namespace shardtrain;

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DevicePtr = std::unique_ptr<void, CudaFree>;

DevicePtr device_alloc(std::size_t bytes) {
  void* p = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaMalloc(&p, bytes));
  return DevicePtr(p);
}

// Rank r contributes r + 1 + i in slot i; block b of the sum is sum_r (r + 1 + b*k + j).
void probe(NcclCommunicator& comm) {
  const int n = comm.size();
  constexpr std::size_t block = 4;
  std::vector<float> send(block * n);
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(comm.rank() + 1 + i);
  DevicePtr d_send = device_alloc(send.size() * sizeof(float));
  DevicePtr d_recv = device_alloc(block * sizeof(float));
  SHARDTRAIN_CUDA_CHECK(cudaMemcpy(d_send.get(), send.data(), send.size() * sizeof(float),
                                   cudaMemcpyHostToDevice));
  comm.reduce_scatter(d_send.get(), d_recv.get(), block, DType::F32, ReduceOp::Sum);
  std::vector<float> recv(block);
  SHARDTRAIN_CUDA_CHECK(
      cudaMemcpy(recv.data(), d_recv.get(), block * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t j = 0; j < block; ++j) {
    const double expected =
        0.5 * n * (n + 1) + static_cast<double>(n) * (comm.rank() * block + j);
    if (recv[j] != static_cast<float>(expected))
      SHARDTRAIN_FAIL("reduce_scatter result " + std::to_string(recv[j]) + " at " +
                      std::to_string(j) + ", expected " + std::to_string(expected));
  }
  if (comm.rank() == 0)
    std::printf("nccl_probe: ok: %d rank(s), device %d on rank 0, reduce_scatter of %zu floats "
                "per rank correct, %llu bytes sent\n",
                n, comm.device(), block, static_cast<unsigned long long>(comm.tally().payload_total()));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  std::unique_ptr<NcclCommunicator> comm;
  try {
    comm = std::make_unique<NcclCommunicator>(MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    MPI_Finalize();
    return 1;
  }
  try {
    probe(*comm);
    comm.reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
