// One GPU per node-local rank (see device_assignment.hpp).
#include "dist/device_assignment.hpp"

namespace shardtrain {

DeviceAssignment assign_device(int rank, int local_rank, int local_size, int devices,
                               const std::string& count_error) {
  DeviceAssignment a;
  const std::string who = "rank " + std::to_string(rank);
  if (!count_error.empty()) {
    a.problem = "no CUDA device available to " + who + " (cudaGetDeviceCount: " + count_error + ")";
  } else if (devices <= 0) {
    a.problem = "no CUDA device available to " + who + " (cudaGetDeviceCount: 0 devices)";
  } else if (local_rank < 0 || local_size < 1 || local_rank >= local_size) {
    a.problem = who + ": invalid node-local rank " + std::to_string(local_rank) + " of " + std::to_string(local_size);
  } else if (devices < local_size) {
    a.problem = who + ": " + std::to_string(local_size) + " ranks share this node but only " +
                std::to_string(devices) + " CUDA device(s) are visible; one device per rank is needed "
                "(start at most " + std::to_string(devices) + " ranks per node, or make more devices visible)";
  } else {
    a.device = local_rank;
  }
  return a;
}

}  // namespace shardtrain
