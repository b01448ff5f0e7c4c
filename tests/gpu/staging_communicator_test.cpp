// The MPI device collectives on a device (label gpu1: 2 and 3 ranks on ONE GPU,
// parallel.share_device's rule): StagingCommunicator over a CudaStager on device
// buffers against MpiCommunicator on host copies of the same bytes, bit for bit,
// for every collective the ZeRO engine uses and every DType; the inputs are
// written by a separate non-blocking "compute" stream and read back on it, so the
// collective stream's ordering (wait_for_stream / make_stream_wait) is what makes
// the results right. Bring-up is agreed on: without a device (or with one rank
// unable to use it) every rank's tests fail with the reason; none waits in a
// collective. Every test takes part in every collective (EXPECT, not ASSERT).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "parallel/cuda/cuda_stager.hpp"
#include "parallel/device_assignment.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/mpi/staging_communicator.hpp"

namespace shardtrain {
namespace {

using Bytes = std::vector<unsigned char>;

// One device communicator per process, brought up inside RUN_ALL_TESTS (MPI is
// initialised); a failure on any rank is every rank's, with its message.
class StagingEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::string problem;
    DeviceAssignment a = assign_node_device(MPI_COMM_WORLD, visible_cuda_devices(rank), /*share=*/true);
    problem = a.problem;
    if (problem.empty()) {
      try {
        auto stager = std::make_unique<CudaStager>(a.device, mpi_is_cuda_aware());
        s_stager = stager.get();
        s_comm = std::make_unique<StagingCommunicator>(MPI_COMM_WORLD, std::move(stager));
        SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&s_compute, cudaStreamNonBlocking));
      } catch (const std::exception& e) {
        problem = e.what();
      }
    }
    int first_failing = problem.empty() ? size : rank;
    MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first_failing < size) {
      s_problem = problem.empty() ? "rank " + std::to_string(first_failing) + " could not bring up its device" : problem;
      s_comm.reset();
    }
  }
  void TearDown() override {
    if (s_compute) cudaStreamDestroy(s_compute);
    s_comm.reset();
  }
  static inline std::unique_ptr<StagingCommunicator> s_comm;
  static inline CudaStager* s_stager = nullptr;
  static inline cudaStream_t s_compute = nullptr;
  static inline std::string s_problem;
};
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new StagingEnvironment);

constexpr DType kTypes[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8, DType::F16, DType::BF16};

Bytes values(DType type, std::size_t count, int rank, int salt) {
  Bytes b(count * dtype_size(type));
  for (std::size_t i = 0; i < count; ++i) {
    const double x = std::sin(0.37 * static_cast<double>(i) + 1.3 * rank + 0.11 * salt) * (1.0 + 0.01 * i);
    unsigned char* at = b.data() + i * dtype_size(type);
    const auto put = [&](auto v) { std::memcpy(at, &v, sizeof v); };
    switch (type) {
      case DType::F32: put(static_cast<float>(x)); break;
      case DType::F64: put(x); break;
      case DType::I32: put(static_cast<std::int32_t>(x * 1e6)); break;
      case DType::I64: put(static_cast<std::int64_t>(x * 1e12)); break;
      case DType::U8: put(static_cast<std::uint8_t>(static_cast<int>(std::fabs(x) * 60.0) + rank)); break;
      case DType::F16: put(f16(static_cast<float>(x))); break;
      case DType::BF16: put(bf16(static_cast<float>(x))); break;
    }
  }
  return b;
}

// Device memory holding `host`, written on the compute stream (not waited for:
// the collective stream must be ordered after it).
struct Device {
  explicit Device(const Bytes& host) : bytes(host.size()) {
    SHARDTRAIN_CUDA_CHECK(cudaMalloc(&data, bytes > 0 ? bytes : 1));
    SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(data, host.data(), bytes, cudaMemcpyHostToDevice,
                                          StagingEnvironment::s_compute));
    StagingEnvironment::s_stager->wait_for_stream(StagingEnvironment::s_compute);
  }
  ~Device() { cudaFree(data); }
  // Read back on the compute stream, after everything queued on the collective stream.
  Bytes read() const {
    Bytes out(bytes);
    StagingEnvironment::s_stager->make_stream_wait(StagingEnvironment::s_compute);
    SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(out.data(), data, bytes, cudaMemcpyDeviceToHost,
                                          StagingEnvironment::s_compute));
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(StagingEnvironment::s_compute));
    return out;
  }
  unsigned char* data = nullptr;
  std::size_t bytes;
};

// `call` on MPI with host bytes and on the device communicator with device bytes.
template <class Call>
void expect_same(const std::string& what, const Bytes& input, Call&& call) {
  Bytes host = input;
  MpiCommunicator mpi(MPI_COMM_WORLD);
  call(static_cast<Communicator&>(mpi), host.data());
  Device dev(input);
  call(static_cast<Communicator&>(*StagingEnvironment::s_comm), dev.data);
  EXPECT_TRUE(dev.read() == host) << what << ": the device result differs from the host MPI engine's";
}

#define REQUIRE_DEVICE() \
  if (!StagingEnvironment::s_comm) FAIL() << "no device communicator: " << StagingEnvironment::s_problem

TEST(StagingCommunicatorOnDevice, EveryCollectiveOfTheEngineMatchesTheHostBitwise) {
  REQUIRE_DEVICE();
  Communicator& dc = *StagingEnvironment::s_comm;
  const int r = dc.rank(), n = dc.size();
  std::vector<std::size_t> counts(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) counts[static_cast<std::size_t>(q)] = (q == 1 && n >= 3) ? 0 : 7 + 4 * static_cast<std::size_t>(q);
  std::size_t total = 0, own = 0;
  for (int q = 0; q < n; ++q) {
    if (q < r) own += counts[static_cast<std::size_t>(q)];
    total += counts[static_cast<std::size_t>(q)];
  }
  const std::size_t block = 13, count = 1001;
  for (DType t : kTypes) {
    const std::size_t e = dtype_size(t);
    const std::string name = std::to_string(static_cast<int>(t));
    expect_same("all_reduce " + name, values(t, count, r, 1),
                [&](Communicator& c, unsigned char* p) { c.all_reduce(p, count, t, ReduceOp::Sum); });
    expect_same("iall_reduce " + name, values(t, count, r, 2),
                [&](Communicator& c, unsigned char* p) { c.iall_reduce(p, count, t, ReduceOp::Max)->wait(); });
    expect_same("broadcast " + name, values(t, count, r, 3),
                [&](Communicator& c, unsigned char* p) { c.broadcast(p, count, t, n - 1); });
    expect_same("reduce_scatter in place " + name, values(t, n * block, r, 4),
                [&](Communicator& c, unsigned char* p) { c.reduce_scatter(p, p + r * block * e, block, t, ReduceOp::Sum); });
    expect_same("all_gather in place " + name, values(t, n * block, r, 5),
                [&](Communicator& c, unsigned char* p) { c.all_gather(p + r * block * e, p, block, t); });
    expect_same("ireduce_scatter_v in place " + name, values(t, total, r, 6), [&](Communicator& c, unsigned char* p) {
      c.ireduce_scatter_v(p, p + own * e, counts, t, ReduceOp::Sum)->wait();
    });
    expect_same("iall_gather_v " + name, values(t, total + counts[r], r, 7), [&](Communicator& c, unsigned char* p) {
      auto request = c.iall_gather_v(p + total * e, p, counts, t);
      while (!request->test()) {
      }
    });
  }
  float loss = 0.5f + static_cast<float>(r);  // host memory through the device communicator
  MpiCommunicator mpi(MPI_COMM_WORLD);
  EXPECT_EQ(dc.all_reduce_value(loss), mpi.all_reduce_value(loss));
  dc.barrier();
}

}  // namespace
}  // namespace shardtrain
