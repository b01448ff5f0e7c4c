// tests/unit/parallel/device_assignment_test.cpp
// Ranks to GPUs (parallel/device_assignment.hpp), the pure rule: what each
// launcher's binding makes the ranks see, the device each rank takes, and one
// clear refusal for every way the node cannot give each rank its own device.
// The MPI test (tests/mpi/parallel/device_assignment_mpi_test.cpp) runs the same
// cases through the gather at 1-4 ranks.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "parallel/device_assignment.hpp"

namespace shardtrain {
namespace {

std::string gpu(int i) { return "GPU-" + std::to_string(i); }

// n ranks (global ranks first_rank...) that each see `views[j]`.
std::vector<VisibleDevices> node_of(const std::vector<std::vector<std::string>>& views, int first_rank = 0) {
  std::vector<VisibleDevices> node;
  for (std::size_t j = 0; j < views.size(); ++j)
    node.push_back({first_rank + static_cast<int>(j), views[j], {}});
  return node;
}

std::vector<std::string> gpus(int first, int count) {
  std::vector<std::string> v;
  for (int i = first; i < first + count; ++i) v.push_back(gpu(i));
  return v;
}

// Each rank's physical device (its UUID), checked to be distinct.
std::vector<std::string> physical(const std::vector<VisibleDevices>& node) {
  std::vector<std::string> out;
  for (std::size_t j = 0; j < node.size(); ++j) {
    const DeviceAssignment a = assign_device(static_cast<int>(j), node);
    EXPECT_TRUE(a.problem.empty()) << a.problem;
    if (a.device < 0) return {};
    out.push_back(node[j].uuids.at(static_cast<std::size_t>(a.device)));
  }
  EXPECT_EQ(std::set<std::string>(out.begin(), out.end()).size(), out.size());
  return out;
}

TEST(DeviceAssignment, EveryRankSeesAllDevicesTakesItsNodeLocalRank) {
  // mpirun, or srun without GPU binding: every rank sees the node's GPUs.
  for (int local_size = 1; local_size <= 8; ++local_size)
    for (int devices = local_size; devices <= 8; ++devices) {
      const auto node = node_of(std::vector<std::vector<std::string>>(local_size, gpus(0, devices)), 40);
      for (int j = 0; j < local_size; ++j) EXPECT_EQ(assign_device(j, node).device, j);
      physical(node);
    }
}

TEST(DeviceAssignment, OneGpuPerTaskTakesItsOnlyVisibleDevice) {
  // srun --gpus-per-task=1 (jobs/train.sbatch): rank j sees exactly GPU j.
  for (int local_size = 1; local_size <= 8; ++local_size) {
    std::vector<std::vector<std::string>> views;
    for (int j = 0; j < local_size; ++j) views.push_back({gpu(j)});
    const auto node = node_of(views);
    for (int j = 0; j < local_size; ++j) EXPECT_EQ(assign_device(j, node).device, 0);
    EXPECT_EQ(physical(node), gpus(0, local_size));
  }
}

TEST(DeviceAssignment, GpuBindClosestSharesEachSocketsDevices) {
  // srun --gpu-bind=closest on a 2-socket node with 4 GPUs per socket: the
  // first 5 ranks see GPUs 0-3, the other 3 ranks GPUs 4-7 (in their own order 0-3).
  std::vector<std::vector<std::string>> views;
  for (int j = 0; j < 5; ++j) views.push_back(gpus(0, 4));
  for (int j = 0; j < 3; ++j) views.push_back(gpus(4, 4));
  // 5 ranks on 4 devices: refused, naming the 5 sharers.
  auto node = node_of(views, 8);
  const DeviceAssignment over = assign_device(4, node);
  EXPECT_EQ(over.device, -1);
  EXPECT_EQ(over.problem,
            "rank 12: 5 ranks on this node (8, 9, 10, 11, 12) see the same 4 CUDA device(s) (GPU-0, GPU-1, GPU-2, "
            "GPU-3); one device per rank is needed (start at most 4 ranks per node, give each task its own GPU "
            "with srun --gpus-per-task=1, or make more devices visible); or let ranks share a device with "
            "parallel.share_device = true and parallel.device_collectives = \"mpi\"");
  // The other socket's ranks are fine.
  for (int j = 5; j < 8; ++j) EXPECT_EQ(assign_device(j, node).device, j - 5);
  views.erase(views.begin());  // 4 + 3 ranks
  node = node_of(views, 8);
  EXPECT_EQ(physical(node), (std::vector<std::string>{gpu(0), gpu(1), gpu(2), gpu(3), gpu(4), gpu(5), gpu(6)}));
}

TEST(DeviceAssignment, TheGlobalRankDoesNotChooseTheDevice) {
  // Ranks 8..15 on the second node of 8-GPU nodes: rank 13 is local rank 5 there.
  const auto node = node_of(std::vector<std::vector<std::string>>(8, gpus(0, 8)), 8);
  EXPECT_EQ(assign_device(5, node).device, 5);
}

TEST(DeviceAssignment, NoDeviceIsRefusedWithTheDriversReason) {
  std::vector<VisibleDevices> node = {
      {2, {}, "error 35 cudaErrorInsufficientDriver: CUDA driver version is insufficient"},
      {3, {}, "error 35 cudaErrorInsufficientDriver: CUDA driver version is insufficient"}};
  const DeviceAssignment a = assign_device(1, node);
  EXPECT_EQ(a.device, -1);
  EXPECT_EQ(a.problem, "no CUDA device available to rank 3 (cudaGetDeviceCount: error 35 "
                       "cudaErrorInsufficientDriver: CUDA driver version is insufficient)");
  const DeviceAssignment b = assign_device(0, node_of({{}}));
  EXPECT_EQ(b.device, -1);
  EXPECT_EQ(b.problem, "no CUDA device available to rank 0 (cudaGetDeviceCount: 0 devices)");
}

TEST(DeviceAssignment, TooFewDevicesForTheRanksSharingThemIsRefused) {
  // NCCL refuses two ranks on one GPU: 4 ranks that all see 1-3 devices.
  for (int devices = 1; devices < 4; ++devices) {
    const auto node = node_of(std::vector<std::vector<std::string>>(4, gpus(0, devices)));
    for (int j = 0; j < 4; ++j) {
      const DeviceAssignment a = assign_device(j, node);
      EXPECT_EQ(a.device, -1);
      EXPECT_NE(a.problem.find("4 ranks on this node (0, 1, 2, 3) see the same " + std::to_string(devices) +
                               " CUDA device(s)"),
                std::string::npos)
          << a.problem;
    }
  }
}

TEST(DeviceAssignment, TwoRanksOnOnePhysicalDeviceAreRefused) {
  // Overlapping views: rank 0 sees {A, B}, rank 1 sees only {A}: both would take A.
  const auto node = node_of({{gpu(0), gpu(1)}, {gpu(0)}});
  const DeviceAssignment a = assign_device(0, node), b = assign_device(1, node);
  EXPECT_EQ(a.device, -1);
  EXPECT_EQ(b.device, -1);
  EXPECT_EQ(a.problem, "rank 0: CUDA device GPU-0 (its visible device 0) would also be used by rank(s) 1 on this "
                       "node; NCCL needs one device per rank (give the ranks disjoint CUDA_VISIBLE_DEVICES, or one "
                       "GPU per task with srun --gpus-per-task=1); or let ranks share a device with "
                       "parallel.share_device = true and parallel.device_collectives = \"mpi\"");
  // Two tasks bound to the same single GPU (a wrong map_gpu): both refused, the third is fine.
  const auto same = node_of({{gpu(3)}, {gpu(1)}, {gpu(3)}});
  EXPECT_EQ(assign_device(0, same).device, -1);
  EXPECT_EQ(assign_device(1, same).device, 0);
  EXPECT_NE(assign_device(2, same).problem.find("2 ranks on this node (0, 2) see the same 1 CUDA device(s) (GPU-3)"),
            std::string::npos)
      << assign_device(2, same).problem;
  // A third view overlapping two others: {B} for rank 2 while rank 1 takes B as its second.
  const auto three = node_of({{gpu(0), gpu(1)}, {gpu(0), gpu(1)}, {gpu(1)}});
  EXPECT_EQ(assign_device(0, three).device, 0);
  EXPECT_NE(assign_device(1, three).problem.find("GPU-1 (its visible device 1) would also be used by rank(s) 2"),
            std::string::npos)
      << assign_device(1, three).problem;
  EXPECT_NE(assign_device(2, three).problem.find("would also be used by rank(s) 1"), std::string::npos);
}

// parallel.share_device: refused by default (the message names the key), allowed
// when asked: the k-th rank of a view takes device k mod devices, and each rank
// learns how many ranks of the node are on its device.
TEST(DeviceAssignment, SharingADeviceOnlyWhenAsked) {
  const auto one_gpu = node_of({{gpu(0)}, {gpu(0)}, {gpu(0)}});
  for (int j = 0; j < 3; ++j) {
    const DeviceAssignment refused = assign_device(j, one_gpu);
    EXPECT_EQ(refused.device, -1);
    EXPECT_NE(refused.problem.find("parallel.share_device = true"), std::string::npos) << refused.problem;
    EXPECT_NE(refused.problem.find("parallel.device_collectives = \"mpi\""), std::string::npos) << refused.problem;
    const DeviceAssignment shared = assign_device(j, one_gpu, /*share=*/true);
    EXPECT_EQ(shared.device, 0);
    EXPECT_TRUE(shared.problem.empty()) << shared.problem;
    EXPECT_EQ(shared.sharers, 3);
  }
  // 5 ranks on 2 devices: 0, 1, 0, 1, 0; three ranks on device 0, two on device 1.
  std::vector<std::vector<std::string>> views(5, gpus(0, 2));
  const auto node = node_of(views);
  for (int j = 0; j < 5; ++j) {
    const DeviceAssignment a = assign_device(j, node, true);
    EXPECT_EQ(a.device, j % 2);
    EXPECT_EQ(a.sharers, j % 2 == 0 ? 3 : 2);
  }
  // Overlapping views (a wrong map_gpu) share too when asked, and are counted.
  const auto overlap = node_of({{gpu(0), gpu(1)}, {gpu(0)}});
  EXPECT_NE(assign_device(0, overlap).problem.find("parallel.share_device"), std::string::npos);
  EXPECT_EQ(assign_device(0, overlap, true).device, 0);
  EXPECT_EQ(assign_device(0, overlap, true).sharers, 2);
  // One rank per device: sharing changes nothing.
  const auto own = node_of({gpus(0, 2), gpus(0, 2)});
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(assign_device(j, own, true).device, j);
    EXPECT_EQ(assign_device(j, own, true).sharers, 1);
    EXPECT_EQ(assign_device(j, own).sharers, 1);
  }
}

TEST(DeviceAssignment, AnInvalidLocalRankIsRefused) {
  const auto node = node_of({gpus(0, 4), gpus(0, 4)});
  EXPECT_EQ(assign_device(2, node).device, -1);
  EXPECT_EQ(assign_device(-1, node).device, -1);
  EXPECT_EQ(assign_device(0, {}).problem, "invalid node-local rank 0 of 0");
}

}  // namespace
}  // namespace shardtrain
