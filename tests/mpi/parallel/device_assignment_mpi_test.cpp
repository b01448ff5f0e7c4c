// tests/mpi/parallel/device_assignment_mpi_test.cpp
// assign_node_device at any rank count (all ranks share this test machine, one
// node): each rank presents the view a launcher's GPU binding would give it
// (fabricated UUIDs; no GPU needed), the views are gathered over the node, and
// every rank must take a distinct physical device or be refused with the rule's
// message. Runs at 1-4 ranks; at 3 ranks the --gpu-bind=closest case splits the
// node 2 + 1 (the rank count does not divide the socket layout).
#include <gtest/gtest.h>
#include <mpi.h>

#include <set>
#include <string>
#include <vector>

#include "parallel/device_assignment.hpp"

namespace shardtrain {
namespace {

std::string gpu(int i) { return "GPU-" + std::to_string(i); }

std::vector<std::string> gpus(int first, int count) {
  std::vector<std::string> v;
  for (int i = first; i < first + count; ++i) v.push_back(gpu(i));
  return v;
}

struct World {
  int rank = 0, size = 1;
  World() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
};

// The physical device (UUID) of every rank of `comm`, "" for a refused rank.
std::vector<std::string> gathered(MPI_Comm comm, const std::string& mine) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  char buf[32] = {};
  mine.copy(buf, sizeof buf - 1);
  std::vector<char> all(static_cast<std::size_t>(size) * sizeof buf);
  MPI_Allgather(buf, sizeof buf, MPI_CHAR, all.data(), sizeof buf, MPI_CHAR, comm);
  std::vector<std::string> out;
  for (int j = 0; j < size; ++j) out.emplace_back(all.data() + j * sizeof buf);
  return out;
}

std::string taken(const VisibleDevices& v, const DeviceAssignment& a) {
  return a.device >= 0 ? v.uuids.at(static_cast<std::size_t>(a.device)) : std::string();
}

void expect_distinct(const std::vector<std::string>& devices) {
  std::set<std::string> seen;
  for (const auto& d : devices) {
    EXPECT_FALSE(d.empty());
    EXPECT_TRUE(seen.insert(d).second) << d << " taken twice";
  }
}

TEST(AssignNodeDevice, MpirunEveryRankSeesAllDevices) {
  World w;
  const VisibleDevices v{w.rank, gpus(0, w.size + 1), {}};  // one spare device
  const DeviceAssignment a = assign_node_device(MPI_COMM_WORLD, v);
  EXPECT_TRUE(a.problem.empty()) << a.problem;
  EXPECT_EQ(a.device, w.rank);
  expect_distinct(gathered(MPI_COMM_WORLD, taken(v, a)));
}

TEST(AssignNodeDevice, LocalRankOrderIsTheCommunicatorsNotTheWorlds) {
  World w;
  MPI_Comm reversed = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, 0, w.size - 1 - w.rank, &reversed);
  const VisibleDevices v{w.rank, gpus(0, w.size), {}};
  const DeviceAssignment a = assign_node_device(reversed, v);
  EXPECT_EQ(a.device, w.size - 1 - w.rank);
  MPI_Comm_free(&reversed);
}

TEST(AssignNodeDevice, GpusPerTaskOneEachRankUsesItsOnlyDevice) {
  World w;
  const VisibleDevices v{w.rank, {gpu(w.rank)}, {}};
  const DeviceAssignment a = assign_node_device(MPI_COMM_WORLD, v);
  EXPECT_TRUE(a.problem.empty()) << a.problem;
  EXPECT_EQ(a.device, 0);
  expect_distinct(gathered(MPI_COMM_WORLD, taken(v, a)));
}

TEST(AssignNodeDevice, GpuBindClosestSharesEachSocketsDevices) {
  World w;
  const int first_socket = (w.size + 1) / 2;  // 1 -> 1+0, 2 -> 1+1, 3 -> 2+1, 4 -> 2+2
  const bool near_first = w.rank < first_socket;
  const VisibleDevices v{w.rank, near_first ? gpus(0, first_socket) : gpus(10, w.size - first_socket), {}};
  const DeviceAssignment a = assign_node_device(MPI_COMM_WORLD, v);
  EXPECT_TRUE(a.problem.empty()) << a.problem;
  EXPECT_EQ(a.device, near_first ? w.rank : w.rank - first_socket);
  expect_distinct(gathered(MPI_COMM_WORLD, taken(v, a)));
}

TEST(AssignNodeDevice, RanksSharingOneDeviceAreRefused) {
  World w;
  const VisibleDevices v{w.rank, {gpu(7)}, {}};
  const DeviceAssignment a = assign_node_device(MPI_COMM_WORLD, v);
  if (w.size == 1) {
    EXPECT_EQ(a.device, 0);
    return;
  }
  EXPECT_EQ(a.device, -1);
  std::string ranks;
  for (int r = 0; r < w.size; ++r) ranks += (r ? ", " : "") + std::to_string(r);
  EXPECT_EQ(a.problem, "rank " + std::to_string(w.rank) + ": " + std::to_string(w.size) + " ranks on this node (" +
                           ranks + ") see the same 1 CUDA device(s) (GPU-7); one device per rank is needed (start "
                           "at most 1 ranks per node, give each task its own GPU with srun --gpus-per-task=1, or "
                           "make more devices visible); or let ranks share a device with parallel.share_device = "
                           "true and parallel.device_collectives = \"mpi\"");
  // Asked for (parallel.share_device = true): every rank on the one device, all of them counted.
  const DeviceAssignment shared = assign_node_device(MPI_COMM_WORLD, v, /*share=*/true);
  EXPECT_EQ(shared.device, 0);
  EXPECT_TRUE(shared.problem.empty()) << shared.problem;
  EXPECT_EQ(shared.sharers, w.size);
}

TEST(AssignNodeDevice, ARankWithoutADeviceIsRefusedAlone) {
  World w;
  const bool last = w.rank == w.size - 1;
  VisibleDevices v{w.rank, {gpu(w.rank)}, {}};
  if (last) v = {w.rank, {}, "error 100 cudaErrorNoDevice: no CUDA-capable device is detected"};
  const DeviceAssignment a = assign_node_device(MPI_COMM_WORLD, v);
  if (last) {
    EXPECT_EQ(a.device, -1);
    EXPECT_EQ(a.problem, "no CUDA device available to rank " + std::to_string(w.rank) +
                             " (cudaGetDeviceCount: error 100 cudaErrorNoDevice: no CUDA-capable device is detected)");
  } else {
    EXPECT_EQ(a.device, 0) << a.problem;
  }
}

}  // namespace
}  // namespace shardtrain
