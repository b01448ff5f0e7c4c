// shardtrain/rundir/weights_crc.hpp
// Owns the weights CRC of metrics.csv: CRC-32 of the fp32 weights (the master
// weights of a 16-bit model) of the whole flat vector up to the end of its last
// tensor, in layout order, so the value depends neither on the rank count nor
// on the ZeRO stage (the final padding does, and is left out). Every rank
// hashes ModelState::optimizer_view() (a device backend in 64 KiB pieces where
// the weights are, Backend::crc32_pieces, joined by io/crc32.hpp crc32_join;
// the host in place) and rank 0 chains the ranks' parts
// (crc32_combine). At stage 0 every rank owns the whole vector and hashes its
// replica; replicas that differ are an AgreedError on every rank naming the
// ranks by CRC, unless the caller takes the verdict (ReplicaCheck) to act on.
// Also owns the replica check of the numeric guard (session/numeric_guard.hpp):
// check_replicas compares, at stages 0-2, what every rank holds whole -- the
// fp32 weights at stage 0, the parameters (compute precision) at stages 1-2 --
// and names the ranks that differ from the majority.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/communicator.hpp"
#include "parallel/model_state.hpp"

namespace shardtrain {

// The verdict of a comparison of the ranks' replicas, the same on every rank.
struct ReplicaCheck {
  bool compared = false;      // false at stage 3 (no replica) or with one rank
  std::vector<int> differing; // the ranks outside the largest group of equal CRCs (on a tie, rank 0's group)
  std::string holders;        // "rank 2 holds weights_crc 1a2b3c4d, ranks 0, 1 hold 5e6f7a8b" (empty: agreed)
  std::string what;           // what was compared ("the fp32 weights", "the parameters")
  bool agree() const { return differing.empty(); }
};

// `comm`: host memory (the run's MpiCommunicator). `step` (1-based) is for the
// message. Collective; the result is rank 0's. At stage 0 with `replicas`
// given, the ranks' CRCs fill it instead of an AgreedError being thrown.
template <class P>
std::uint32_t weights_crc(ModelState<P>& state, Communicator& comm, std::int64_t step,
                          ReplicaCheck* replicas = nullptr);

// Compares the replicas every rank holds whole (stage 0: the fp32 weights;
// stages 1-2: the parameters, up to the end of the last tensor). Collective;
// every rank gets the same verdict. Stage 3: nothing compared.
template <class P>
ReplicaCheck check_replicas(ModelState<P>& state, Communicator& comm);

}  // namespace shardtrain
