// MpiCommunicator at any rank count: all-reduce (sum/max/min, float/double/int64),
// broadcast from every root, buffers whose length does not divide by the rank
// count, determinism of repeated reductions, and the byte accounting.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "dist/mpi/mpi_communicator.hpp"

namespace shardtrain {
namespace {

TEST(MpiCommunicator, AllReduceSumMaxMin) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  std::vector<double> d(1001);  // 1001 = 7*11*13: no rank count here divides it
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = (r + 1) * 0.5 + static_cast<double>(i);
  comm.all_reduce(std::span<double>(d), ReduceOp::Sum);
  for (std::size_t i = 0; i < d.size(); ++i)
    EXPECT_DOUBLE_EQ(d[i], 0.25 * n * (n + 1) + static_cast<double>(n * i)) << i;

  std::vector<std::int64_t> v{r, -r, 5};
  comm.all_reduce(std::span<std::int64_t>(v), ReduceOp::Max);
  EXPECT_EQ(v, (std::vector<std::int64_t>{n - 1, 0, 5}));
  EXPECT_EQ(comm.all_reduce_value<std::int64_t>(r, ReduceOp::Min), 0);
  EXPECT_FLOAT_EQ(comm.all_reduce_value<float>(1.5f), 1.5f * n);
}

TEST(MpiCommunicator, RepeatedReductionsAreBitwiseIdentical) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  std::vector<float> base(4099);
  for (std::size_t i = 0; i < base.size(); ++i)
    base[i] = std::sin(static_cast<float>(i * (comm.rank() + 3))) * 1e-3f + 1.0f;
  std::vector<float> a = base, b = base;
  comm.all_reduce(std::span<float>(a));
  comm.all_reduce(std::span<float>(b));
  EXPECT_EQ(a, b);
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<std::int32_t> x(37, comm.rank() == root ? root * 10 + 1 : -1);
    comm.broadcast(std::span<std::int32_t>(x), root);
    for (auto e : x) EXPECT_EQ(e, root * 10 + 1);
  }
  comm.barrier();
}

TEST(MpiCommunicator, CountsBytesOfRingAllReduce) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int n = comm.size();
  std::vector<float> x(1200, 1.0f);
  const auto before = comm.bytes_sent();
  comm.all_reduce(std::span<float>(x));
  const std::uint64_t expected = n > 1 ? 2ull * 1200 * 4 * (n - 1) / n : 0;
  EXPECT_EQ(comm.bytes_sent() - before, expected);
}

}  // namespace
}  // namespace shardtrain
