// NcclCommunicator on device memory against MpiCommunicator on host copies of the
// same data, at whatever rank count is launched (registered at 2; needs one GPU
// per rank). Covers reduce_scatter, all_gather (out of place, in place), all_reduce
// (sum/max/min over several types), broadcast, the non-blocking and grouped
// variants, stream ordering against a kernel on a compute stream, host staging
// for all_reduce_value, and that byte accounting matches the MPI backend.
// Every test takes part in every collective whatever its own checks say (EXPECT,
// not ASSERT, before a collective).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "device_fill.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/nccl/nccl_communicator.hpp"
#include "device_buffer.hpp"

namespace shardtrain {
namespace {

using shardtrain::test::DeviceBuffer;

// One NcclCommunicator per process (ncclCommInitRank is expensive), created and
// destroyed inside RUN_ALL_TESTS, i.e. while MPI is initialised.
class NcclEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { s_comm = std::make_unique<NcclCommunicator>(MPI_COMM_WORLD); }
  void TearDown() override { s_comm.reset(); }
  static NcclCommunicator& comm() { return *s_comm; }

 private:
  static inline std::unique_ptr<NcclCommunicator> s_comm;
};
[[maybe_unused]] ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new NcclEnvironment);



// Values whose sums over a few ranks are exact in float: integers below 2^20.
std::vector<float> exact_floats(std::size_t n, int rank) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + 13 * rank) % 1000) - 500.0f;
  return v;
}

// Arbitrary floats: NCCL and MPI may sum in different orders, so compare with a tolerance.
std::vector<float> rough_floats(std::size_t n, int rank) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = std::sin(static_cast<float>(i) * 0.37f + static_cast<float>(rank)) * 3.0f;
  return v;
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, float rel) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], rel * (1.0f + std::abs(b[i]))) << "at " << i;
}

TEST(NcclCommunicator, RanksMatchMpi) {
  NcclCommunicator& nccl = NcclEnvironment::comm();
  MpiCommunicator mpi(MPI_COMM_WORLD);
  EXPECT_EQ(nccl.rank(), mpi.rank());
  EXPECT_EQ(nccl.size(), mpi.size());
  EXPECT_GE(nccl.device(), 0);
  EXPECT_NE(nccl.stream(), nullptr);
}

TEST(NcclCommunicator, ReduceScatterMatchesMpi) {
  NcclCommunicator& nccl = NcclEnvironment::comm();
  MpiCommunicator mpi(MPI_COMM_WORLD);
  const int r = nccl.rank(), n = nccl.size();
  for (const std::size_t block : {std::size_t{1}, std::size_t{7}, std::size_t{4099}}) {
    for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      const std::vector<float> send = exact_floats(block * n, r);
      std::vector<float> want(block);
      const auto mpi_before = mpi.tally().payload_total();
      mpi.reduce_scatter(send.data(), want.data(), block, DType::F32, op);

      DeviceBuffer<float> d_send(send), d_recv(block);
      const auto nccl_before = nccl.tally().payload_total();
      nccl.reduce_scatter(d_send.data(), d_recv.data(), block, DType::F32, op);
      EXPECT_EQ(d_recv.download(), want) << "block " << block;
      EXPECT_EQ(nccl.tally().payload_total() - nccl_before, mpi.tally().payload_total() - mpi_before);
      EXPECT_EQ(nccl.tally().payload_total() - nccl_before, n * block * sizeof(float));  // the whole input

      DeviceBuffer<float> d_recv2(block);
      RequestPtr req = nccl.ireduce_scatter(d_send.data(), d_recv2.data(), block, DType::F32, op);
      req->wait();
      EXPECT_TRUE(req->test());
      EXPECT_EQ(d_recv2.download(), want) << "non-blocking, block " << block;
    }
  }
  // Arbitrary values in double and float, against MPI within rounding.
  const std::size_t block = 1001;
  const std::vector<float> send = rough_floats(block * n, r);
  std::vector<float> want(block);
  mpi.reduce_scatter(send.data(), want.data(), block, DType::F32, ReduceOp::Sum);
  DeviceBuffer<float> d_send(send), d_recv(block);
  nccl.reduce_scatter(d_send.data(), d_recv.data(), block, DType::F32, ReduceOp::Sum);
  expect_near(d_recv.download(), want, 1e-5f);

  std::vector<double> send64(block * n), want64(block);
  for (std::size_t i = 0; i < send64.size(); ++i) send64[i] = std::cos(0.1 * i + r);
  mpi.reduce_scatter(send64.data(), want64.data(), block, DType::F64, ReduceOp::Sum);
  DeviceBuffer<double> d_send64(send64), d_recv64(block);
  nccl.reduce_scatter(d_send64.data(), d_recv64.data(), block, DType::F64, ReduceOp::Sum);
  const std::vector<double> got64 = d_recv64.download();
  for (std::size_t j = 0; j < block; ++j) EXPECT_NEAR(got64[j], want64[j], 1e-12) << j;
}

TEST(NcclCommunicator, ReduceScatterInPlaceLeavesResultAtOwnBlock) {
  NcclCommunicator& nccl = NcclEnvironment::comm();
  MpiCommunicator mpi(MPI_COMM_WORLD);
  const int r = nccl.rank(), n = nccl.size();
  const std::size_t block = 6;
  const std::vector<float> buf = exact_floats(block * n, r);
  std::vector<float> want(block);
  mpi.reduce_scatter(buf.data(), want.data(), block, DType::F32, ReduceOp::Sum);
  DeviceBuffer<float> d(buf);
  nccl.reduce_scatter(d.data(), d.data() + r * block, block, DType::F32, ReduceOp::Sum);
  const std::vector<float> got = d.download();
  EXPECT_EQ(std::vector<float>(got.begin() + r * block, got.begin() + (r + 1) * block), want);
}

// Variable blocks, including empty ones (ZeRO buckets straddling shards), against
// the MPI backend's -v collectives and its byte accounting.
TEST(NcclCommunicator, VariableBlockReduceScatterAndAllGatherMatchMpi) {
  NcclCommunicator& nccl = NcclEnvironment::comm();
  MpiCommunicator mpi(MPI_COMM_WORLD);
  const int r = nccl.rank(), n = nccl.size();
  std::vector<std::size_t> counts(n);
  for (int q = 0; q < n; ++q) counts[q] = (q % 2 == 0) ? 3 + 100 * q : 0;  // odd ranks own nothing
  std::size_t total = 0, displ = 0;
  for (int q = 0; q < n; ++q) {
    if (q < r) displ += counts[q];
    total += counts[q];
  }
  const std::vector<float> send = exact_floats(total, r);
  std::vector<float> want(counts[r]);
  const auto mpi_before = mpi.tally().payload_total();
  mpi.ireduce_scatter_v(send.data(), want.data(), counts, DType::F32, ReduceOp::Sum)->wait();
  DeviceBuffer<float> d_send(send), d_recv(counts[r]);
  const auto before = nccl.tally().payload_total();
  nccl.ireduce_scatter_v(d_send.data(), d_recv.data(), counts, DType::F32, ReduceOp::Sum)->wait();
  EXPECT_EQ(d_recv.download(), want);
  EXPECT_EQ(nccl.tally().payload_total() - before, mpi.tally().payload_total() - mpi_before);

  const std::vector<float> mine = rough_floats(counts[r], r);
  std::vector<float> all(total);
  mpi.iall_gather_v(mine.data(), all.data(), counts, DType::F32)->wait();
  DeviceBuffer<float> d_mine(mine), d_all(total);
  nccl.iall_gather_v(d_mine.data(), d_all.data(), counts, DType::F32)->wait();
  EXPECT_EQ(d_all.download(), all);
  std::vector<float> inplace(total, -1.0f);
  std::copy(mine.begin(), mine.end(), inplace.begin() + displ);
  DeviceBuffer<float> d_inplace(inplace);
  nccl.iall_gather_v(d_inplace.data() + displ, d_inplace.data(), counts, DType::F32)->wait();
  EXPECT_EQ(d_inplace.download(), all);
}

TEST(NcclCommunicator, AllGatherOutOfPlaceInPlaceAndNonBlocking) {
  NcclCommunicator& nccl = NcclEnvironment::comm();
  MpiCommunicator mpi(MPI_COMM_WORLD);
  const int r = nccl.rank(), n = nccl.size();
  const std::size_t block = 513;
  const std::vector<float> mine = rough_floats(block, r);
  std::vector<float> want(block * n);
  mpi.all_gather(mine.data(), want.data(), block, DType::F32);

  DeviceBuffer<float> d_mine(mine), d_out(block * n);
  const auto before = nccl.tally().payload_total();
  nccl.all_gather(d_mine.data(), d_out.data(), block, DType::F32);
  EXPECT_EQ(d_out.download(), want);  // a gather moves bits: exact
  EXPECT_EQ(nccl.tally().payload_total() - before, block * sizeof(float));  // the own block

  // In place: the rank's own block already sits at its offset (a ZeRO shard).
  std::vector<float> inplace(block * n, -1.0f);
  std::copy(mine.begin(), mine.end(), inplace.begin() + r * block);
  DeviceBuffer<float> d_inplace(inplace);
  nccl.all_gather(d_inplace.data() + r * block, d_inplace.data(), block, DType::F32);
  EXPECT_EQ(d_inplace.download(), want);

  DeviceBuffer<float> d_out2(block * n);
  RequestPtr req = nccl.iall_gather(d_mine.data(), d_out2.data(), block, DType::F32);
  while (!req->test()) {
  }
  EXPECT_EQ(d_out2.download(), want);
}

template <class T>
void all_reduce_matches_mpi(NcclCommunicator& nccl, MpiCommunicator& mpi, ReduceOp op) {
  const int r = nccl.rank(), n = nccl.size();
  std::vector<T> host(1001);  // no rank count here divides 1001
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<T>((i * 3 + 5 * r) % 100);
  std::vector<T> want = host;
  mpi.all_reduce(want.data(), want.size(), dtype_of<T>(), op);
  DeviceBuffer<T> d(host);
  const auto before = nccl.tally().payload_total();
  nccl.all_reduce(d.data(), d.size(), dtype_of<T>(), op);
  EXPECT_EQ(d.download(), want);
  (void)n;
  EXPECT_EQ(nccl.tally().payload_total() - before, host.size() * sizeof(T));  // the buffer

  DeviceBuffer<T> d2(host);
  RequestPtr req = nccl.iall_reduce(d2.data(), d2.size(), dtype_of<T>(), op);
  req.reset();  // destruction waits
  EXPECT_EQ(d2.download(), want);
}

TEST(NcclCommunicator, AllReduceMatchesMpiForEveryTypeAndOp) {
  NcclCommunicator& nccl = NcclEnvironment::comm();
  MpiCommunicator mpi(MPI_COMM_WORLD);
  for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
    all_reduce_matches_mpi<float>(nccl, mpi, op);
    all_reduce_matches_mpi<double>(nccl, mpi, op);
    all_reduce_matches_mpi<std::int32_t>(nccl, mpi, op);
    all_reduce_matches_mpi<std::int64_t>(nccl, mpi, op);
  }
  all_reduce_matches_mpi<std::uint8_t>(nccl, mpi, ReduceOp::Max);  // a sum could wrap
}

TEST(NcclCommunicator, BroadcastFromEveryRootAndBarrier) {
  NcclCommunicator& nccl = NcclEnvironment::comm();
  for (int root = 0; root < nccl.size(); ++root) {
    DeviceBuffer<std::int32_t> d(std::vector<std::int32_t>(37, nccl.rank() == root ? root * 10 + 1 : -1));
    const auto before = nccl.tally().payload_total();
    nccl.broadcast(d.data(), d.size(), DType::I32, root);
    EXPECT_EQ(d.download(), std::vector<std::int32_t>(37, root * 10 + 1));
    const std::uint64_t sent = nccl.rank() == root ? 37 * 4 : 0;  // the root's buffer
    EXPECT_EQ(nccl.tally().payload_total() - before, sent);
  }
  nccl.barrier();
}

// The base class's typed helpers pass host memory (all_reduce_value: the loss,
// the inf/NaN flag); blocking all_reduce and broadcast stage it through the device.
TEST(NcclCommunicator, HostValuesAreStagedForBlockingAllReduceAndBroadcast) {
  NcclCommunicator& nccl = NcclEnvironment::comm();
  const int r = nccl.rank(), n = nccl.size();
  EXPECT_FLOAT_EQ(nccl.all_reduce_value<float>(1.5f), 1.5f * n);
  EXPECT_EQ(nccl.all_reduce_value<std::int64_t>(r, ReduceOp::Max), n - 1);
  std::vector<double> v(3, r == 0 ? 2.5 : 0.0);
  nccl.broadcast(std::span<double>(v), 0);
  EXPECT_EQ(v, std::vector<double>(3, 2.5));
}

// Non-blocking and gather/scatter calls refuse plain host memory before any
// collective starts (every rank throws locally: nothing is left pending).
TEST(NcclCommunicator, RejectsHostMemoryWhereItCannotStage) {
  NcclCommunicator& nccl = NcclEnvironment::comm();
  const int n = nccl.size();
  std::vector<float> send(4 * n), recv(4);
  EXPECT_THROW(nccl.reduce_scatter(send.data(), recv.data(), 4, DType::F32, ReduceOp::Sum), Error);
  EXPECT_THROW(nccl.iall_reduce(recv.data(), 4, DType::F32, ReduceOp::Sum), Error);
  EXPECT_THROW(nccl.all_gather(recv.data(), send.data(), 4, DType::F32), Error);
  nccl.barrier();
}

TEST(NcclCommunicator, GroupedReduceScatterAndAllGatherMatchSingleCalls) {
  NcclCommunicator& nccl = NcclEnvironment::comm();
  MpiCommunicator mpi(MPI_COMM_WORLD);
  const int r = nccl.rank(), n = nccl.size();
  const std::vector<std::size_t> blocks{3, 1000, 17};  // three buckets of different sizes
  std::vector<std::unique_ptr<DeviceBuffer<float>>> d_send, d_recv;
  std::vector<std::vector<float>> want;
  std::vector<NcclCommunicator::ReduceScatterPart> parts;
  std::uint64_t expected_bytes = 0;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::vector<float> send = exact_floats(blocks[b] * n, r + static_cast<int>(b));
    want.emplace_back(blocks[b]);
    mpi.reduce_scatter(send.data(), want.back().data(), blocks[b], DType::F32, ReduceOp::Sum);
    d_send.push_back(std::make_unique<DeviceBuffer<float>>(send));
    d_recv.push_back(std::make_unique<DeviceBuffer<float>>(blocks[b]));
    parts.push_back({d_send.back()->data(), d_recv.back()->data(), blocks[b]});
    expected_bytes += n * blocks[b] * sizeof(float);  // every part's whole input
  }
  const auto before = nccl.tally().payload_total();
  RequestPtr req = nccl.ireduce_scatter_group(parts, DType::F32, ReduceOp::Sum);
  req->wait();
  EXPECT_EQ(nccl.tally().payload_total() - before, expected_bytes);
  for (std::size_t b = 0; b < blocks.size(); ++b) EXPECT_EQ(d_recv[b]->download(), want[b]) << b;

  // Gather the reduced shards back in place, as ZeRO does after the optimizer step.
  std::vector<std::unique_ptr<DeviceBuffer<float>>> d_full;
  std::vector<NcclCommunicator::AllGatherPart> gather;
  std::vector<std::vector<float>> want_full;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    want_full.emplace_back(blocks[b] * n);
    mpi.all_gather(want[b].data(), want_full.back().data(), blocks[b], DType::F32);
    std::vector<float> full(blocks[b] * n, -1.0f);
    std::copy(want[b].begin(), want[b].end(), full.begin() + r * blocks[b]);
    d_full.push_back(std::make_unique<DeviceBuffer<float>>(full));
    gather.push_back({d_full.back()->data() + r * blocks[b], d_full.back()->data(), blocks[b]});
  }
  nccl.iall_gather_group(gather, DType::F32)->wait();
  for (std::size_t b = 0; b < blocks.size(); ++b) EXPECT_EQ(d_full[b]->download(), want_full[b]) << b;
}

// A kernel on a compute stream produces the gradients; the comm stream waits for it
// on the device (no host sync), reduce-scatters, and the compute stream waits for
// the result before a second kernel overwrites the input.
TEST(NcclCommunicator, CommStreamWaitsForComputeStreamAndBack) {
  NcclCommunicator& nccl = NcclEnvironment::comm();
  const int r = nccl.rank(), n = nccl.size();
  const std::size_t block = 1 << 16;
  cudaStream_t compute = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  DeviceBuffer<float> d_send(block * n), d_recv(block);
  const float scale = 0.5f, offset = static_cast<float>(r);
  EXPECT_EQ(gpu_test::fill_pattern(d_send.data(), d_send.size(), scale, offset, compute), cudaSuccess);
  nccl.wait_for_stream(compute);
  RequestPtr req = nccl.ireduce_scatter(d_send.data(), d_recv.data(), block, DType::F32, ReduceOp::Sum);
  nccl.make_stream_wait(compute);
  // Overwrites the input only after the reduce-scatter has read it.
  EXPECT_EQ(gpu_test::fill_pattern(d_send.data(), d_send.size(), 0.0f, -1.0f, compute), cudaSuccess);
  req->wait();
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(compute));
  SHARDTRAIN_CUDA_CHECK(cudaStreamDestroy(compute));
  const std::vector<float> got = d_recv.download();
  const float rank_sum = 0.5f * static_cast<float>(n * (n - 1));
  for (std::size_t j = 0; j < block; j += 997) {
    const float want = n * gpu_test::pattern_value(r * block + j, scale, 0.0f) + rank_sum;
    EXPECT_FLOAT_EQ(got[j], want) << j;
  }
}

}  // namespace
}  // namespace shardtrain
