// shardtrain/kernels/crc32_shift.hpp
// Joining the CRC-32s (IEEE 802.3, reflected: zlib's crc32) of consecutive byte
// ranges, as SHARDTRAIN_HOST_DEVICE functions: the candidate piece kernel of
// kernels/cuda/crc32.cu joins its threads' sub-range CRCs with them, and a host
// test (kernels_crc32_shift_test) checks them against zlib (crc32, crc32_combine64).
//
// zlib's algorithm (crc32.c since 1.2.12: multmodp, x2nmodp): over GF(2),
//   crc(A B) = (x^(8 |B|) mod P) * crc(A) + crc(B),
// for CRCs with zlib's pre- and post-conditioning (they cancel). Polynomials are
// in reflected bit order: bit 31 is x^0, P = 0xEDB88320.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace shardtrain::crc32_shift {

inline constexpr std::uint32_t kPoly = 0xEDB88320u;
inline constexpr std::uint32_t kOne = 0x80000000u;  // x^0

// a * b mod P.
SHARDTRAIN_HOST_DEVICE constexpr std::uint32_t multiply(std::uint32_t a, std::uint32_t b) {
  std::uint32_t p = 0;
  for (std::uint32_t m = kOne; m != 0; m >>= 1) {
    if (a & m) p ^= b;
    b = (b & 1u) ? (b >> 1) ^ kPoly : b >> 1;  // b * x
  }
  return p;
}

// x^(8 bytes) mod P: the operator that carries a CRC past `bytes` more bytes.
SHARDTRAIN_HOST_DEVICE constexpr std::uint32_t shift_operator(std::uint64_t bytes) {
  std::uint32_t p = kOne;
  std::uint32_t square = kOne >> 8;  // x^8, then x^16, x^32, ...: x^(8 2^k)
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1u) p = multiply(square, p);
    square = multiply(square, square);
  }
  return p;
}

// crc(A B) from crc(A), crc(B) and the operator of B's length (shift_operator(|B|)).
SHARDTRAIN_HOST_DEVICE constexpr std::uint32_t join(std::uint32_t crc_a, std::uint32_t crc_b, std::uint32_t op_b) {
  return multiply(op_b, crc_a) ^ crc_b;
}

// The candidate kernel's shape: a block of 2^kBlockLevels threads a piece, thread
// t hashing the piece's bytes [t sub, (t + 1) sub), joined in kBlockLevels levels
// (at level l, node t joins node t + 2^l, whose whole length is sub 2^l).
inline constexpr unsigned kBlockLevels = 8;
inline constexpr unsigned kBlockThreads = 1u << kBlockLevels;
// sub for a piece of `piece` bytes: a multiple of 16 where the piece starts
// 16-byte aligned and is a multiple of 16 long (every sub-range starts aligned
// then), so that the threads read 16-byte words.
SHARDTRAIN_HOST_DEVICE constexpr std::uint64_t sub_range_bytes(std::uint64_t piece, bool aligned16) {
  const std::uint64_t sub = (piece + kBlockThreads - 1) / kBlockThreads;
  return aligned16 ? (sub + 15) / 16 * 16 : sub;
}

// One node of a piece's join tree (the candidate kernel's, kernels/cuda/crc32.cu):
// the left node's CRC joined with the right node's of `right_bytes` bytes. The
// right node usually covers `full_bytes` (all its sub-ranges whole), whose
// operator the caller computed once (`full_op`); a shorter one (the piece's
// tail) computes its own, an empty one leaves the left CRC as it is.
SHARDTRAIN_HOST_DEVICE constexpr std::uint32_t join_node(std::uint32_t left, std::uint32_t right,
                                                         std::uint64_t right_bytes, std::uint64_t full_bytes,
                                                         std::uint32_t full_op) {
  if (right_bytes == 0) return left;
  return join(left, right, right_bytes == full_bytes ? full_op : shift_operator(right_bytes));
}

}  // namespace shardtrain::crc32_shift
