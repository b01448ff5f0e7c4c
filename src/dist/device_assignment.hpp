// shardtrain/dist/device_assignment.hpp
// Owns the rule that maps MPI ranks to GPUs: one device per node-local rank
// (local rank from MPI_Comm_split_type(SHARED)), device index = local rank.
// Pure host logic, no CUDA: the NCCL communicator asks it before touching a
// device, and the unit tests check every case without a GPU.
// Invariants: a rank gets a device only when the node has at least as many
// visible devices as local ranks (NCCL refuses two ranks on one device); every
// refusal is one message naming the rank, the counts and what to change.
#pragma once

#include <string>

namespace shardtrain {

struct DeviceAssignment {
  int device = -1;        // the CUDA device index for this rank, or -1
  std::string problem;    // empty when device >= 0
};

// rank: the global rank (for the message); local_rank / local_size: this rank's
// place among the ranks on its node; devices: what cudaGetDeviceCount found;
// count_error: its error text when it failed (then `devices` is ignored).
DeviceAssignment assign_device(int rank, int local_rank, int local_size, int devices,
                               const std::string& count_error = {});

}  // namespace shardtrain
