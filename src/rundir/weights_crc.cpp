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

}  // namespace

template <class P>
std::uint32_t weights_crc(ModelState<P>& state, Communicator& comm, std::int64_t step) {
  const ShardView<P> owned = state.optimizer_view();
  const std::int64_t lo = owned.lo, hi = owned.hi;
  // Stage 0: every rank owns the whole vector and hashes its replica; rank 0's
  // is the value, the others' must equal it.
  const bool sharded = state.zero_stage() > 0;
  std::uint64_t crc = 0, bytes = 0;
  // Up to the end of the last tensor: the final padding depends on the rank count.
  const auto& last = state.layout().entries().back();
  const std::int64_t end = std::min(hi, last.offset + last.numel);
  if (end > lo) {
    bytes = static_cast<std::uint64_t>(end - lo) * sizeof(float);
    // A device hashes its copy in pieces and sends their CRCs (a GPT-2-sized model's
    // master weights are 0.5 GB: copying them to the host for every metrics row cost
    // more than the step on an H100); the host hashes its memory in place.
    const std::size_t n = static_cast<std::size_t>(bytes);
    std::vector<std::uint32_t> pieces((n + kCrcPiece - 1) / kCrcPiece);
    if (state.backend().crc32_pieces(owned.master.data(), n, kCrcPiece, pieces.data()))
      crc = crc32_join(pieces, kCrcPiece, n);
    else
      crc = crc32_ieee(0, owned.master.data(), n);
  }
  const int n = comm.size();
  std::vector<std::int64_t> parts(2 * static_cast<std::size_t>(n), 0);
  parts[2 * comm.rank()] = static_cast<std::int64_t>(crc);
  parts[2 * comm.rank() + 1] = static_cast<std::int64_t>(bytes);
  comm.all_reduce(std::span<std::int64_t>(parts), ReduceOp::Sum);
  if (!sharded) {
    // Every rank sees the same parts, so every rank reaches the same verdict.
    // The ranks are grouped by CRC; the message names the smaller groups first
    // and the largest one (on a tie, rank 0's) last, as the replica the others
    // left.
    std::vector<std::vector<int>> groups;  // ranks, by CRC, in order of first appearance
    for (int r = 0; r < n; ++r) {
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const std::vector<int>& ranks) { return parts[2 * ranks[0]] == parts[2 * r]; });
      if (g == groups.end()) groups.push_back({r});
      else g->push_back(r);
    }
    if (groups.size() > 1) {
      std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
        return a.size() != b.size() ? a.size() < b.size() : a[0] > b[0];  // the agreed group last
      });
      auto names = [](const std::vector<int>& ranks) {
        std::string s = ranks.size() == 1 ? "rank " : "ranks ";
        for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
        return s;
      };
      std::string holders;
      for (std::size_t i = 0; i < groups.size(); ++i)
        holders += fmt::format("{}{} {} weights_crc {:08x}", i ? ", " : "", names(groups[i]),
                               groups[i].size() == 1 ? "holds" : "hold",
                               static_cast<std::uint32_t>(parts[2 * groups[i][0]]));
      throw AgreedError(fmt::format(
          "step {}: the ranks' replicas of the weights differ at ZeRO stage 0 (every rank updates the whole "
          "vector from the same all-reduced gradient, so they must stay bitwise equal): {}",
          step, holders));
    }
    return static_cast<std::uint32_t>(parts[0]);
  }
  uLong total = static_cast<uLong>(parts[0]);
  for (int r = 1; r < n; ++r)
    if (parts[2 * r + 1] > 0)
      total = crc32_combine(total, static_cast<uLong>(parts[2 * r]), static_cast<z_off_t>(parts[2 * r + 1]));
  return static_cast<std::uint32_t>(total);
}

template std::uint32_t weights_crc<float>(ModelState<float>&, Communicator&, std::int64_t);
template std::uint32_t weights_crc<f16>(ModelState<f16>&, Communicator&, std::int64_t);
template std::uint32_t weights_crc<bf16>(ModelState<bf16>&, Communicator&, std::int64_t);

}  // namespace shardtrain
