// The weights CRC of metrics.csv over ModelState's fp32 weights (see weights_crc.hpp).
#include "rundir/weights_crc.hpp"

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

#include "core/error.hpp"
#include "io/crc32.hpp"

namespace shardtrain {
namespace {

constexpr std::size_t kCrcPiece = std::size_t{64} << 10;  // bytes a device thread hashes

// CRC-32 of `bytes` bytes at backend pointer p: a device hashes its copy in
// pieces and sends their CRCs (a GPT-2-sized model's master weights are 0.5 GB:
// copying them to the host for every metrics row cost more than the step on an
// H100); the host hashes its memory in place.
std::uint64_t crc_of(Backend& backend, const void* p, std::uint64_t bytes) {
  if (bytes == 0) return 0;
  const std::size_t n = static_cast<std::size_t>(bytes);
  std::vector<std::uint32_t> pieces((n + kCrcPiece - 1) / kCrcPiece);
  if (backend.crc32_pieces(p, n, kCrcPiece, pieces.data())) return crc32_join(pieces, kCrcPiece, n);
  return crc32_ieee(0, p, n);
}

// Every rank's CRC (parts[2 r]) compared: the ranks grouped by CRC; the
// smaller groups named first and the largest one (on a tie, rank 0's) last, as
// the replica the others left. Every rank sees the same parts, so every rank
// reaches the same verdict.
void group_replicas(const std::vector<std::int64_t>& parts, int n, ReplicaCheck& out) {
  out.compared = n > 1;
  std::vector<std::vector<int>> groups;  // ranks, by CRC, in order of first appearance
  for (int r = 0; r < n; ++r) {
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const std::vector<int>& ranks) { return parts[2 * ranks[0]] == parts[2 * r]; });
    if (g == groups.end()) groups.push_back({r});
    else g->push_back(r);
  }
  if (groups.size() <= 1) return;
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    return a.size() != b.size() ? a.size() < b.size() : a[0] > b[0];  // the agreed group last
  });
  auto names = [](const std::vector<int>& ranks) {
    std::string s = ranks.size() == 1 ? "rank " : "ranks ";
    for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
    return s;
  };
  for (std::size_t i = 0; i < groups.size(); ++i) {
    out.holders += fmt::format("{}{} {} weights_crc {:08x}", i ? ", " : "", names(groups[i]),
                               groups[i].size() == 1 ? "holds" : "hold",
                               static_cast<std::uint32_t>(parts[2 * groups[i][0]]));
    if (i + 1 < groups.size()) out.differing.insert(out.differing.end(), groups[i].begin(), groups[i].end());
  }
  std::sort(out.differing.begin(), out.differing.end());
}

// Every rank's (crc, bytes), all-reduced so that every rank holds all of them.
std::vector<std::int64_t> gather_parts(Communicator& comm, std::uint64_t crc, std::uint64_t bytes) {
  std::vector<std::int64_t> parts(2 * static_cast<std::size_t>(comm.size()), 0);
  parts[2 * comm.rank()] = static_cast<std::int64_t>(crc);
  parts[2 * comm.rank() + 1] = static_cast<std::int64_t>(bytes);
  comm.all_reduce(std::span<std::int64_t>(parts), ReduceOp::Sum);
  return parts;
}

}  // namespace

template <class P>
std::uint32_t weights_crc(ModelState<P>& state, Communicator& comm, std::int64_t step, ReplicaCheck* replicas) {
  const ShardView<P> owned = state.optimizer_view();
  const std::int64_t lo = owned.lo, hi = owned.hi;
  // Stage 0: every rank owns the whole vector and hashes its replica; rank 0's
  // is the value, the others' must equal it.
  const bool sharded = state.zero_stage() > 0;
  // Up to the end of the last tensor: the final padding depends on the rank count.
  const auto& last = state.layout().entries().back();
  const std::int64_t end = std::min(hi, last.offset + last.numel);
  const std::uint64_t bytes = end > lo ? static_cast<std::uint64_t>(end - lo) * sizeof(float) : 0;
  const std::uint64_t crc = crc_of(state.backend(), owned.master.data(), bytes);
  const int n = comm.size();
  const std::vector<std::int64_t> parts = gather_parts(comm, crc, bytes);
  if (!sharded) {
    ReplicaCheck local;
    ReplicaCheck& verdict = replicas ? *replicas : local;
    verdict = ReplicaCheck{};
    verdict.what = "the fp32 weights";
    group_replicas(parts, n, verdict);
    if (!verdict.agree() && !replicas)
      throw AgreedError(fmt::format(
          "step {}: the ranks' replicas of the weights differ at ZeRO stage 0 (every rank updates the whole "
          "vector from the same all-reduced gradient, so they must stay bitwise equal): {}",
          step, verdict.holders));
    return static_cast<std::uint32_t>(parts[0]);
  }
  uLong total = static_cast<uLong>(parts[0]);
  for (int r = 1; r < n; ++r)
    if (parts[2 * r + 1] > 0)
      total = crc32_combine(total, static_cast<uLong>(parts[2 * r]), static_cast<z_off_t>(parts[2 * r + 1]));
  return static_cast<std::uint32_t>(total);
}

template <class P>
ReplicaCheck check_replicas(ModelState<P>& state, Communicator& comm) {
  ReplicaCheck verdict;
  const int stage = state.zero_stage();
  if (stage >= 3) return verdict;
  const auto& last = state.layout().entries().back();
  const std::int64_t end = last.offset + last.numel;  // the padding depends on the rank count
  std::uint64_t crc = 0, bytes = 0;
  if (stage == 0) {
    bytes = static_cast<std::uint64_t>(end) * sizeof(float);
    crc = crc_of(state.backend(), state.optimizer_view().master.data(), bytes);
    verdict.what = "the fp32 weights";
  } else {
    bytes = static_cast<std::uint64_t>(end) * sizeof(P);
    crc = crc_of(state.backend(), state.params_at(0), bytes);
    verdict.what = "the parameters";
  }
  group_replicas(gather_parts(comm, crc, bytes), comm.size(), verdict);
  return verdict;
}

template std::uint32_t weights_crc<float>(ModelState<float>&, Communicator&, std::int64_t, ReplicaCheck*);
template std::uint32_t weights_crc<f16>(ModelState<f16>&, Communicator&, std::int64_t, ReplicaCheck*);
template std::uint32_t weights_crc<bf16>(ModelState<bf16>&, Communicator&, std::int64_t, ReplicaCheck*);
template ReplicaCheck check_replicas<float>(ModelState<float>&, Communicator&);
template ReplicaCheck check_replicas<f16>(ModelState<f16>&, Communicator&);
template ReplicaCheck check_replicas<bf16>(ModelState<bf16>&, Communicator&);

}  // namespace shardtrain
