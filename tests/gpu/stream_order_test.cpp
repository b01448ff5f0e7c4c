// Stream-order tests of the CUDA backend (labels gpu;mpi, one GPU, one rank;
// built in CI, run only on a GPU machine). Each test makes a missing stream
// dependency DETERMINISTIC instead of rare: a spin kernel (device_fill.hpp)
// keeps one stream busy for 200 ms, so work that is wrongly ordered behind it
// lands 200 ms late, after the data it was supposed to precede.
//  - DeviceMemory (CudaBackend::memory()): a new buffer's zero-fill is ordered
//    before work on the compute stream (catches a cudaMemset on the legacy
//    default stream, which the non-blocking compute stream does not wait for)
//    and before collectives on the NCCL stream (catches a fill on the compute
//    stream that the comm stream was not made to wait for).
// Without a device main() prints why and exits 1: it never skips.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "core/cuda_check.hpp"
#include "device_buffer.hpp"
#include "device_fill.hpp"
#include "dist/nccl/nccl_communicator.hpp"

namespace shardtrain {
namespace {

using shardtrain::test::DeviceBuffer;

constexpr std::uint64_t kSpinNs = 200'000'000;  // 200 ms

struct Device {
  Device() : nccl(MPI_COMM_WORLD), backend(nccl) {}
  NcclCommunicator nccl;
  CudaBackend backend;
};

// Elements of `got` that differ from fill_pattern(scale, offset) at index i + first.
std::size_t pattern_mismatches(const std::vector<float>& got, std::size_t first, float scale, float offset) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != gpu_test::pattern_value(i + first, scale, offset)) ++bad;
  return bad;
}

std::vector<float> to_host(const void* device, std::size_t n) {
  SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> host(n);
  SHARDTRAIN_CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

// True when `event` has not completed yet (clears the query's status).
bool still_running(cudaEvent_t event) {
  const cudaError_t rc = cudaEventQuery(event);
  cudaGetLastError();
  return rc == cudaErrorNotReady;
}

// Catches: the zero-fill of a new buffer queued on the legacy default stream
// (cudaMemset). With the legacy stream busy, that fill lands 200 ms after the
// pattern the compute stream wrote right after allocate() returned, and wipes it.
TEST(DeviceMemory, ZeroFillIsOrderedBeforeComputeStreamWork) {
  Device dev;
  const std::size_t n = std::size_t{1} << 20;
  cudaEvent_t spin_done = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&spin_done, cudaEventDisableTiming));
  ASSERT_EQ(gpu_test::spin(kSpinNs, cudaStreamLegacy), cudaSuccess);
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(spin_done, cudaStreamLegacy));
  MemorySpace* space = dev.backend.memory();
  void* p = space->allocate(n * sizeof(float));
  ASSERT_EQ(gpu_test::fill_pattern(static_cast<float*>(p), n, 0.5f, 1.0f, dev.backend.stream()), cudaSuccess);
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(dev.backend.stream()));
  if (!still_running(spin_done))
    std::printf("[note] the default stream was idle when the pattern landed: this run could not catch the race\n");
  const std::vector<float> got = to_host(p, n);
  EXPECT_EQ(pattern_mismatches(got, 0, 0.5f, 1.0f), 0u)
      << "the zero-fill of a new buffer landed after a compute-stream kernel's writes";
  space->deallocate(p);
  SHARDTRAIN_CUDA_CHECK(cudaEventDestroy(spin_done));
}

// Catches: a zero-fill queued on the compute stream that the NCCL stream is not
// made to wait for. With the compute stream busy, the fill lands 200 ms after
// the all-gather that wrote the new buffer, and wipes its result.
TEST(DeviceMemory, ZeroFillIsOrderedBeforeCollectives) {
  Device dev;
  const std::size_t n = std::size_t{1} << 20;
  const int r = dev.nccl.rank(), size = dev.nccl.size();
  DeviceBuffer<float> send(n);
  ASSERT_EQ(gpu_test::fill_pattern(send.data(), n, 0.25f, static_cast<float>(r), cudaStreamLegacy), cudaSuccess);
  SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t spin_done = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&spin_done, cudaEventDisableTiming));
  ASSERT_EQ(gpu_test::spin(kSpinNs, dev.backend.stream()), cudaSuccess);
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(spin_done, dev.backend.stream()));
  MemorySpace* space = dev.backend.memory();
  void* recv = space->allocate(n * static_cast<std::size_t>(size) * sizeof(float));
  RequestPtr req = dev.nccl.iall_gather(send.data(), recv, n, DType::F32);
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(dev.nccl.stream()));
  // Informational: with the fix the gather waited for the spin; without it, it did not.
  std::printf("[note] the all-gather finished %s the compute stream's spin\n",
              still_running(spin_done) ? "before" : "after");
  req->wait();
  const std::vector<float> got = to_host(recv, n * static_cast<std::size_t>(size));
  for (int q = 0; q < size; ++q) {
    const std::vector<float> block(got.begin() + static_cast<std::ptrdiff_t>(q * n),
                                   got.begin() + static_cast<std::ptrdiff_t>((q + 1) * n));
    EXPECT_EQ(pattern_mismatches(block, 0, 0.25f, static_cast<float>(q)), 0u)
        << "rank " << q << "'s block: the zero-fill of a new buffer landed after the collective that wrote it";
  }
  space->deallocate(recv);
  SHARDTRAIN_CUDA_CHECK(cudaEventDestroy(spin_done));
}

}  // namespace
}  // namespace shardtrain

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int result = 1;
  if (!shardtrain::test::no_device("gpu_stream_order_test")) {
    ::testing::InitGoogleTest(&argc, argv);
    result = RUN_ALL_TESTS();
  }
  MPI_Finalize();
  return result;
}
