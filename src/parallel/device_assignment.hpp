// shardtrain/parallel/device_assignment.hpp
// Owns the rule that maps MPI ranks to GPUs. Host logic, no CUDA: the NCCL
// communicator gathers what each rank sees and asks it before touching a
// device; the unit and MPI tests check every case without a GPU.
//
// The rule: the ranks of one node (MPI_Comm_split_type SHARED) that see the
// SAME devices (the same UUIDs in the same order) share them out in node-local
// rank order: the k-th such rank takes its k-th visible device. This covers
//  - mpirun, or srun without GPU binding: every rank sees all of the node's
//    GPUs, so rank k takes device k (the node-local rank);
//  - srun --gpus-per-task=1 (jobs/train.sbatch): every rank sees exactly its own
//    GPU, so each takes its device 0;
//  - srun --gpu-bind=closest (or map_gpu/mask_gpu): the ranks near one socket
//    see that socket's GPUs and share those.
// Invariants: a rank gets a device only if (1) it sees at least one, (2) no more
// ranks share its view than the view has devices, and (3) no other rank of the
// node ends up on the same physical device (same UUID; NCCL refuses two ranks
// on one GPU). Every refusal is one message naming the global rank, what it
// sees and what to change (and names parallel.share_device); every rank of a
// node computes the whole node's assignment from the same gathered data, so all
// of them agree on it.
// Sharing (parallel.share_device = true, only with parallel.device_collectives =
// "mpi": NCCL refuses two ranks on one GPU): invariants (2) and (3) are lifted;
// the k-th rank of a view takes device k mod (devices in the view), and the
// assignment says how many ranks of the node are on that physical device
// (`sharers`), which the memory plan multiplies. Not sharing stays the default.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace shardtrain {

struct DeviceAssignment {
  int device = -1;        // the CUDA device index for this rank (in its own visible order), or -1
  std::string problem;    // empty when device >= 0
  int sharers = 1;        // ranks of the node on this physical device, this one included
};

// What one rank sees of the node's devices.
struct VisibleDevices {
  int rank = -1;                   // global rank (for messages)
  std::vector<std::string> uuids;  // visible devices in CUDA's order (CUDA_VISIBLE_DEVICES applied)
  std::string error;               // cudaGetDeviceCount's failure text; empty when it succeeded
};

// Pure: the device of node-local rank `local_rank`, given what every rank of the
// node sees (`node[j]` is node-local rank j). `share`: ranks may share a device.
DeviceAssignment assign_device(int local_rank, const std::vector<VisibleDevices>& node, bool share = false);

// Collective over `comm`: gathers `mine` from every rank of this rank's node
// (MPI_Comm_split_type SHARED, ordered by rank in `comm`) and applies
// assign_device. Local: a refusal is returned, not agreed on; the caller agrees.
DeviceAssignment assign_node_device(MPI_Comm comm, const VisibleDevices& mine, bool share = false);

}  // namespace shardtrain
