// tests/unit/dist/device_assignment_test.cpp
// One GPU per node-local rank (dist/device_assignment.hpp): the device index,
// and one clear refusal for every way the node cannot give each rank a device.
#include <gtest/gtest.h>

#include "dist/device_assignment.hpp"

namespace shardtrain {
namespace {

TEST(DeviceAssignment, EachLocalRankGetsItsOwnDevice) {
  for (int local_size = 1; local_size <= 8; ++local_size)
    for (int devices = local_size; devices <= 8; ++devices)
      for (int local_rank = 0; local_rank < local_size; ++local_rank) {
        const DeviceAssignment a = assign_device(40 + local_rank, local_rank, local_size, devices);
        EXPECT_EQ(a.device, local_rank);
        EXPECT_TRUE(a.problem.empty()) << a.problem;
      }
}

TEST(DeviceAssignment, TheGlobalRankDoesNotChooseTheDevice) {
  // Rank 13 on the second node of 8-GPU nodes is local rank 5 there.
  EXPECT_EQ(assign_device(13, 5, 8, 8).device, 5);
}

TEST(DeviceAssignment, NoDeviceIsRefusedWithTheDriversReason) {
  const DeviceAssignment a =
      assign_device(3, 1, 2, 0, "error 35 cudaErrorInsufficientDriver: CUDA driver version is insufficient");
  EXPECT_EQ(a.device, -1);
  EXPECT_EQ(a.problem, "no CUDA device available to rank 3 (cudaGetDeviceCount: error 35 "
                       "cudaErrorInsufficientDriver: CUDA driver version is insufficient)");
  const DeviceAssignment b = assign_device(0, 0, 1, 0);
  EXPECT_EQ(b.device, -1);
  EXPECT_EQ(b.problem, "no CUDA device available to rank 0 (cudaGetDeviceCount: 0 devices)");
}

TEST(DeviceAssignment, TooFewDevicesForTheLocalRanksIsRefused) {
  // NCCL refuses two ranks on one GPU, so one device for two ranks is an error too.
  for (int devices = 1; devices < 4; ++devices) {
    const DeviceAssignment a = assign_device(2, 2, 4, devices);
    EXPECT_EQ(a.device, -1);
    EXPECT_EQ(a.problem, "rank 2: 4 ranks share this node but only " + std::to_string(devices) +
                             " CUDA device(s) are visible; one device per rank is needed (start at most " +
                             std::to_string(devices) + " ranks per node, or make more devices visible)");
  }
}

TEST(DeviceAssignment, AnInvalidLocalRankIsRefused) {
  EXPECT_EQ(assign_device(0, 2, 2, 4).device, -1);
  EXPECT_EQ(assign_device(0, -1, 2, 4).device, -1);
  EXPECT_EQ(assign_device(0, 0, 0, 4).problem, "rank 0: invalid node-local rank 0 of 0");
}

}  // namespace
}  // namespace shardtrain
