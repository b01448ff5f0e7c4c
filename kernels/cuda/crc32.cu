// shardtrain/kernels/cuda/crc32.cu
// Piecewise CRC-32 of device memory (see crc32.cuh).
#include "kernels/cuda/crc32.cuh"

#include <string>

#include "core/error.hpp"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 128;

__device__ inline std::uint32_t crc_byte(const std::uint32_t* table, std::uint32_t crc, unsigned byte) {
  return table[(crc ^ byte) & 0xFFu] ^ (crc >> 8);
}

__global__ void crc32_pieces_kernel(const unsigned char* __restrict__ p, std::size_t bytes, std::size_t piece,
                                    std::size_t pieces, bool aligned, std::uint32_t* __restrict__ out) {
  __shared__ std::uint32_t table[256];
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  __syncthreads();
  const std::size_t idx = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= pieces) return;
  std::size_t i = idx * piece;
  const std::size_t end = i + piece < bytes ? i + piece : bytes;
  std::uint32_t crc = 0xFFFFFFFFu;
  if (aligned) {  // p + i is 16-byte aligned: whole 16-byte words, then the bytes left
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
  out[idx] = crc ^ 0xFFFFFFFFu;
}

}  // namespace

void crc32_pieces(const void* p, std::size_t bytes, std::size_t piece, std::uint32_t* out, cudaStream_t stream) {
  SHARDTRAIN_CHECK(piece > 0, "cuda::crc32_pieces: piece size must be positive");
  if (bytes == 0) return;
  const std::size_t pieces = (bytes + piece - 1) / piece;
  const bool aligned = reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && piece % 16 == 0;
  crc32_pieces_kernel<<<blocks_for(static_cast<std::int64_t>(pieces), kThreads), kThreads, 0, stream>>>(
      static_cast<const unsigned char*>(p), bytes, piece, pieces, aligned, out);
  check_launch("cuda::crc32_pieces");
}

}  // namespace shardtrain::cuda
