// Ranks to GPUs (see device_assignment.hpp).
#include "parallel/device_assignment.hpp"

#include <cstdint>
#include <cstring>

#include "core/error.hpp"
#include "core/mpi_check.hpp"
#include "core/text.hpp"

namespace shardtrain {

namespace {

// The device node-local rank j would take, ignoring collisions with other
// views: its place among the ranks with the same view, or -1 (with `why`).
constexpr const char* kShareHint =
    "; or let ranks share a device with parallel.share_device = true and parallel.device_collectives = \"mpi\"";

int choice(int j, const std::vector<VisibleDevices>& node, bool share, std::string* why) {
  const VisibleDevices& me = node[static_cast<std::size_t>(j)];
  const std::string who = "rank " + std::to_string(me.rank);
  if (!me.error.empty()) {
    if (why) *why = "no CUDA device available to " + who + " (cudaGetDeviceCount: " + me.error + ")";
    return -1;
  }
  if (me.uuids.empty()) {
    if (why) *why = "no CUDA device available to " + who + " (cudaGetDeviceCount: 0 devices)";
    return -1;
  }
  int place = 0, sharing = 0;
  std::vector<int> sharers;
  for (std::size_t k = 0; k < node.size(); ++k) {
    if (!node[k].error.empty() || node[k].uuids != me.uuids) continue;
    if (static_cast<int>(k) < j) ++place;
    ++sharing;
    sharers.push_back(node[k].rank);
  }
  const int devices = static_cast<int>(me.uuids.size());
  if (share) return place % devices;
  if (sharing > devices) {
    if (why) {
      std::string ranks;
      for (int r : sharers) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      *why = who + ": " + std::to_string(sharing) + " ranks on this node (" + ranks + ") see the same " +
             std::to_string(devices) + " CUDA device(s) (" + join(me.uuids, ", ") +
             "); one device per rank is needed (start at most " + std::to_string(devices) +
             " ranks per node, give each task its own GPU with srun --gpus-per-task=1, or make more devices "
             "visible)" + std::string(kShareHint);
    }
    return -1;
  }
  return place;
}

}  // namespace

DeviceAssignment assign_device(int local_rank, const std::vector<VisibleDevices>& node, bool share) {
  DeviceAssignment a;
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= node.size()) {
    a.problem = "invalid node-local rank " + std::to_string(local_rank) + " of " + std::to_string(node.size());
    return a;
  }
  const int mine = choice(local_rank, node, share, &a.problem);
  if (mine < 0) return a;
  const VisibleDevices& me = node[static_cast<std::size_t>(local_rank)];
  const std::string& uuid = me.uuids[static_cast<std::size_t>(mine)];
  // Another view can contain the same physical device (overlapping
  // CUDA_VISIBLE_DEVICES): refuse when another rank would take it too.
  std::string others;
  for (std::size_t k = 0; k < node.size(); ++k) {
    if (static_cast<int>(k) == local_rank) continue;
    const int theirs = choice(static_cast<int>(k), node, share, nullptr);
    if (theirs >= 0 && node[k].uuids[static_cast<std::size_t>(theirs)] == uuid) {
      others += (others.empty() ? "" : ", ") + std::to_string(node[k].rank);
      ++a.sharers;
    }
  }
  if (share) {
    a.device = mine;
    return a;
  }
  if (!others.empty()) {
    a.problem = "rank " + std::to_string(me.rank) + ": CUDA device " + uuid + " (its visible device " +
                std::to_string(mine) + ") would also be used by rank(s) " + others +
                " on this node; NCCL needs one device per rank (give the ranks disjoint CUDA_VISIBLE_DEVICES, "
                "or one GPU per task with srun --gpus-per-task=1)" + std::string(kShareHint);
    a.sharers = 1;
    return a;
  }
  a.device = mine;
  return a;
}

namespace {

void put_int(std::string& out, std::int32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_str(std::string& out, const std::string& s) {
  put_int(out, static_cast<std::int32_t>(s.size()));
  out += s;
}
std::int32_t get_int(const char*& p) {
  std::int32_t v = 0;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}
std::string get_str(const char*& p) {
  const std::int32_t n = get_int(p);
  std::string s(p, static_cast<std::size_t>(n));
  p += n;
  return s;
}

}  // namespace

DeviceAssignment assign_node_device(MPI_Comm comm, const VisibleDevices& mine, bool share) {
  int rank = 0;
  SHARDTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_Comm node_comm = MPI_COMM_NULL;
  SHARDTRAIN_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_comm));
  int local_rank = 0, local_size = 1;
  SHARDTRAIN_MPI_CHECK(MPI_Comm_rank(node_comm, &local_rank));
  SHARDTRAIN_MPI_CHECK(MPI_Comm_size(node_comm, &local_size));

  std::string packed;
  put_int(packed, mine.rank);
  put_str(packed, mine.error);
  put_int(packed, static_cast<std::int32_t>(mine.uuids.size()));
  for (const auto& u : mine.uuids) put_str(packed, u);

  const int length = static_cast<int>(packed.size());
  std::vector<int> lengths(static_cast<std::size_t>(local_size)), offsets(static_cast<std::size_t>(local_size));
  SHARDTRAIN_MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, node_comm));
  int total = 0;
  for (int j = 0; j < local_size; ++j) {
    offsets[static_cast<std::size_t>(j)] = total;
    total += lengths[static_cast<std::size_t>(j)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  SHARDTRAIN_MPI_CHECK(MPI_Allgatherv(packed.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                                      MPI_CHAR, node_comm));
  SHARDTRAIN_MPI_CHECK(MPI_Comm_free(&node_comm));

  std::vector<VisibleDevices> node(static_cast<std::size_t>(local_size));
  for (int j = 0; j < local_size; ++j) {
    const char* p = all.data() + offsets[static_cast<std::size_t>(j)];
    VisibleDevices& v = node[static_cast<std::size_t>(j)];
    v.rank = get_int(p);
    v.error = get_str(p);
    const std::int32_t n = get_int(p);
    for (std::int32_t k = 0; k < n; ++k) v.uuids.push_back(get_str(p));
  }
  return assign_device(local_rank, node, share);
}

}  // namespace shardtrain
