// shardtrain/kernels/cuda/crc32.cu
// Piecewise CRC-32 of device memory (see crc32.cuh).
#include "kernels/cuda/crc32.cuh"

#include <limits>
#include <string>

#include "core/error.hpp"
#include "kernels/crc32_shift.hpp"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 128;

__device__ inline std::uint32_t crc_byte(const std::uint32_t* table, std::uint32_t crc, unsigned byte) {
  return table[(crc ^ byte) & 0xFFu] ^ (crc >> 8);
}

// The byte-wise table (zlib's, reflected) into shared memory; the caller syncs.
__device__ inline void fill_table(std::uint32_t* table) {
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
}

// The CRC (zlib's conditioning) of p[i, end): 16-byte words while `aligned`
// (p + i is 16-byte aligned), then bytes.
__device__ inline std::uint32_t crc_range(const std::uint32_t* table, const unsigned char* __restrict__ p,
                                          std::size_t i, std::size_t end, bool aligned) {
  std::uint32_t crc = 0xFFFFFFFFu;
  if (aligned) {
    for (; i + 16 <= end; i += 16) {
      const uint4 w = *reinterpret_cast<const uint4*>(p + i);
      const std::uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int b = 0; b < 4; ++b) crc = crc_byte(table, crc, (words[k] >> (8 * b)) & 0xFFu);  // little-endian
    }
  }
  for (; i < end; ++i) crc = crc_byte(table, crc, p[i]);
  return crc ^ 0xFFFFFFFFu;
}

// The candidate (train.device_kernels = "candidate"): a block of kPieceThreads
// threads per piece, thread t hashing the piece's bytes [t sub, (t + 1) sub),
// then the block joining its threads' CRCs in a tree of kPieceLevels levels
// (kernels/crc32_shift.hpp: the shape, join_node; level l's whole right node is
// sub 2^l bytes, whose operator the host passes in `ops`).
constexpr unsigned kPieceLevels = crc32_shift::kBlockLevels;
constexpr unsigned kPieceThreads = crc32_shift::kBlockThreads;
struct LevelOps {
  std::uint32_t op[kPieceLevels];
};

__global__ void __launch_bounds__(kPieceThreads)
    crc32_pieces_joined_kernel(const unsigned char* __restrict__ p, std::size_t bytes, std::size_t piece,
                               std::size_t sub, bool aligned, LevelOps ops, std::uint32_t* __restrict__ out) {
  __shared__ std::uint32_t table[256];
  __shared__ std::uint32_t crcs[kPieceThreads];
  __shared__ std::size_t lens[kPieceThreads];
  fill_table(table);
  __syncthreads();
  const unsigned t = threadIdx.x;
  const std::size_t start = static_cast<std::size_t>(blockIdx.x) * piece;
  const std::size_t end = start + piece < bytes ? start + piece : bytes;
  std::size_t i = start + static_cast<std::size_t>(t) * sub;
  if (i > end) i = end;
  const std::size_t e = i + sub < end ? i + sub : end;
  crcs[t] = crc_range(table, p, i, e, aligned);  // 0 for an empty range
  lens[t] = e - i;
  __syncthreads();
  for (unsigned l = 0; l < kPieceLevels; ++l) {
    const unsigned s = 1u << l;
    if (t % (2 * s) == 0) {
      crcs[t] = crc32_shift::join_node(crcs[t], crcs[t + s], lens[t + s], sub << l, ops.op[l]);
      lens[t] += lens[t + s];
    }
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = crcs[0];
}

__global__ void crc32_pieces_kernel(const unsigned char* __restrict__ p, std::size_t bytes, std::size_t piece,
                                    std::size_t pieces, bool aligned, std::uint32_t* __restrict__ out) {
  __shared__ std::uint32_t table[256];
  fill_table(table);
  __syncthreads();
  const std::size_t idx = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= pieces) return;
  const std::size_t i = idx * piece;
  out[idx] = crc_range(table, p, i, i + piece < bytes ? i + piece : bytes, aligned);
}

}  // namespace

void crc32_pieces(const void* p, std::size_t bytes, std::size_t piece, std::uint32_t* out, cudaStream_t stream,
                  bool candidate) {
  SHARDTRAIN_CHECK(piece > 0, "cuda::crc32_pieces: piece size must be positive");
  if (bytes == 0) return;
  const std::size_t pieces = (bytes + piece - 1) / piece;
  const bool aligned16 = reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && piece % 16 == 0;
  if (!candidate) {
    crc32_pieces_kernel<<<blocks_for(static_cast<std::int64_t>(pieces), kThreads), kThreads, 0, stream>>>(
        static_cast<const unsigned char*>(p), bytes, piece, pieces, aligned16, out);
    check_launch("cuda::crc32_pieces");
    return;
  }
  SHARDTRAIN_CHECK(pieces <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
                   "cuda::crc32_pieces: " + std::to_string(pieces) + " pieces of " + std::to_string(piece) +
                       " bytes: more than a grid holds");
  const auto sub = static_cast<std::size_t>(crc32_shift::sub_range_bytes(piece, aligned16));
  LevelOps ops{};
  for (unsigned l = 0; l < kPieceLevels; ++l) ops.op[l] = crc32_shift::shift_operator(static_cast<std::uint64_t>(sub) << l);
  crc32_pieces_joined_kernel<<<static_cast<unsigned>(pieces), kPieceThreads, 0, stream>>>(
      static_cast<const unsigned char*>(p), bytes, piece, sub, aligned16, ops, out);
  check_launch("cuda::crc32_pieces (candidate)");
}

}  // namespace shardtrain::cuda
