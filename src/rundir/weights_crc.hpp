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
// ranks by CRC.
#pragma once

#include <cstdint>

#include "parallel/communicator.hpp"
#include "parallel/model_state.hpp"

namespace shardtrain {

// `comm`: host memory (the run's MpiCommunicator). `step` (1-based) is for the
// message. Collective; the result is rank 0's.
template <class P>
std::uint32_t weights_crc(ModelState<P>& state, Communicator& comm, std::int64_t step);

}  // namespace shardtrain
