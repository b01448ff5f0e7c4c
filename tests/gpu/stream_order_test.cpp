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

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "core/cuda_check.hpp"
#include "core/memory.hpp"
#include "device_buffer.hpp"
#include "device_fill.hpp"
#include "parallel/nccl/nccl_communicator.hpp"

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

// Milliseconds `f` took on the host.
template <class F>
double host_ms(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

ModelOpsLimits small_limits() {
  ModelOpsLimits l;
  l.max_batch = 4;
  l.seq_len = 64;
  l.channels = 16;
  l.n_head = 2;
  l.vocab = 101;
  return l;
}

TEST(CudaModelOps, StagedTokensDoNotDependOnTheCallersArrays) {
  Device dev;
  MemoryTracker memory;
  const ModelOpsLimits l = small_limits();
  auto ops = make_cuda_model_ops<float>(dev.backend, l, memory);
  const std::int64_t n = l.max_batch * l.seq_len;
  for (const bool with_tokens : {true, false}) {
    std::vector<TokenIndex> tokens(static_cast<std::size_t>(n)), targets(static_cast<std::size_t>(n));
    std::iota(tokens.begin(), tokens.end(), 3);
    std::iota(targets.begin(), targets.end(), -5);
    const std::vector<TokenIndex> want_tokens = tokens, want_targets = targets;
    dev.backend.synchronize();  // the previous round's staging buffer is free: staging below never waits
    ASSERT_EQ(gpu_test::spin(kSpinNs, dev.backend.stream()), cudaSuccess);
    const TokenIndex *kt = nullptr, *kg = nullptr;
    const double ms = host_ms([&] {
      ops->stage_tokens(with_tokens ? tokens.data() : nullptr, targets.data(), n, &kt, &kg);
    });
    std::fill(tokens.begin(), tokens.end(), -7);  // the caller reuses its arrays at once
    std::fill(targets.begin(), targets.end(), -7);
    EXPECT_LT(ms, 100.0) << "stage_tokens waited for the compute stream's queued work";
    ASSERT_EQ(kt == nullptr, !with_tokens);
    std::vector<TokenIndex> got(static_cast<std::size_t>(n));
    dev.backend.copy_to_host(got.data(), kg, got.size() * sizeof(TokenIndex));
    EXPECT_EQ(got, want_targets) << "targets on the device" << (with_tokens ? "" : " (no tokens)");
    if (with_tokens) {
      dev.backend.copy_to_host(got.data(), kt, got.size() * sizeof(TokenIndex));
      EXPECT_EQ(got, want_tokens) << "tokens on the device";
    }
  }
}

TEST(CudaModelOps, StagedLengthsDoNotDependOnTheCallersArray) {
  Device dev;
  MemoryTracker memory;
  const ModelOpsLimits l = small_limits();
  auto ops = make_cuda_model_ops<float>(dev.backend, l, memory);
  const std::int64_t b = 3, t = 5, c = 4;
  std::vector<float> x(static_cast<std::size_t>(b * t * c));
  std::iota(x.begin(), x.end(), 1.0f);
  TrackedBuffer<float> dx(memory, MemCategory::Activations, x.size(), dev.backend.memory()),
      dy(memory, MemCategory::Activations, static_cast<std::size_t>(b * c), dev.backend.memory());
  dev.backend.copy_from_host(dx.data(), x.data(), x.size() * sizeof(float));
  // A warm-up call with other lengths first: a kernel's first launch in the process
  // loads its module (CUDA's lazy loading), which waits for the queued work (seen on
  // an H100, 2026-11-28: 200 ms, the whole spin). The timed call below is the
  // second, and its lengths differ, so it stages them again.
  const std::vector<std::int32_t> warm_lengths{2, 2, 2};
  ops->seq_mean_pool_forward(dx.data(), warm_lengths.data(), dy.data(), b, t, c);
  dev.backend.synchronize();
  std::vector<std::int32_t> lengths{5, 1, 3};
  const std::vector<std::int32_t> want_lengths = lengths;
  ASSERT_EQ(gpu_test::spin(kSpinNs, dev.backend.stream()), cudaSuccess);
  const double ms = host_ms([&] { ops->seq_mean_pool_forward(dx.data(), lengths.data(), dy.data(), b, t, c); });
  std::fill(lengths.begin(), lengths.end(), 2);  // the caller reuses its array at once
  EXPECT_LT(ms, 100.0) << "staging the lengths waited for the compute stream's queued work";
  std::vector<float> got(static_cast<std::size_t>(b * c));
  dev.backend.copy_to_host(got.data(), dy.data(), got.size() * sizeof(float));
  for (std::int64_t s = 0; s < b; ++s)
    for (std::int64_t j = 0; j < c; ++j) {
      float sum = 0.0f;
      for (std::int64_t p = 0; p < want_lengths[s]; ++p) sum += x[static_cast<std::size_t>((s * t + p) * c + j)];
      EXPECT_FLOAT_EQ(got[static_cast<std::size_t>(s * c + j)], sum / static_cast<float>(want_lengths[s]))
          << "sequence " << s << " channel " << j;
    }
}

TEST(DeviceBufferUpload, IsCompleteOnReturn) {
  ASSERT_EQ(test::device_problem(), std::string());
  const std::size_t n = std::size_t{64} << 20;  // 256 MiB: the last DMA chunk takes a while
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = gpu_test::pattern_value(i, 1.5f, -3.0f);
  DeviceBuffer<float> d(n);
  d.upload(host);
  const cudaError_t rc = cudaStreamQuery(cudaStreamLegacy);
  cudaGetLastError();
  EXPECT_EQ(rc, cudaSuccess) << "upload returned with its copy still queued on the legacy stream";
  // A non-blocking stream reads the buffer right away.
  cudaStream_t stream = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer<float> copy(n);
  SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(copy.data(), d.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
  SHARDTRAIN_CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_EQ(pattern_mismatches(copy.download(), 0, 1.5f, -3.0f), 0u)
      << "a non-blocking stream read the buffer before the upload had landed";
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
