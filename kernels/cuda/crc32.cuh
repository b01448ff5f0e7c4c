// shardtrain/kernels/cuda/crc32.cuh
// CRC-32 (IEEE 802.3, reflected: zlib's crc32) of device memory, piece by piece:
// thread i hashes bytes [i * piece, min((i + 1) * piece, bytes)) and writes that
// piece's CRC to out[i]. The host joins the pieces (io/crc32.hpp crc32_join), so a
// CRC of the weights moves 4 bytes per piece to the host instead of the weights.
// Each thread runs the byte-wise table (in shared memory) over 16-byte loads when
// the piece starts 16-byte aligned, byte loads otherwise.
// candidate (train.device_kernels = "candidate", not yet run on a device): the
// same out[i], by a block of 256 threads per piece, each hashing 1/256 of it
// (256 bytes of a 64 KiB piece instead of one thread's 64 KiB chain of table
// look-ups), joined in the block (kernels/crc32_shift.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {

// out: ceil(bytes / piece) device uint32s; piece > 0. Nothing is launched when bytes == 0.
void crc32_pieces(const void* p, std::size_t bytes, std::size_t piece, std::uint32_t* out, cudaStream_t stream,
                  bool candidate = false);

}  // namespace shardtrain::cuda
