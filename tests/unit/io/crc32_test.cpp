// io/crc32.hpp against zlib's crc32, the independent reference: every length
// 0..300 at every start alignment 0..15 (the SIMD kernel's head and tail
// paths), long random buffers, and chaining across arbitrary split points.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <random>
#include <vector>

#include "io/crc32.hpp"

namespace {

std::uint32_t zlib_crc(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  return static_cast<std::uint32_t>(crc32(crc, p, static_cast<uInt>(n)));
}

std::vector<unsigned char> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<unsigned char> v(n);
  for (auto& x : v) x = static_cast<unsigned char>(gen());
  return v;
}

}  // namespace

TEST(Crc32, ShortLengthsAtEveryAlignment) {
  const auto data = random_bytes(400, 1);
  for (std::size_t start = 0; start < 16; ++start)
    for (std::size_t n = 0; n <= 300; ++n)
      ASSERT_EQ(shardtrain::crc32_ieee(0, data.data() + start, n), zlib_crc(0, data.data() + start, n))
          << "start " << start << " length " << n;
}

TEST(Crc32, LongBuffersAndChaining) {
  const auto data = random_bytes(5'000'017, 2);
  const std::uint32_t whole = zlib_crc(0, data.data(), data.size());
  EXPECT_EQ(shardtrain::crc32_ieee(0, data.data(), data.size()), whole);
  std::mt19937 gen(3);
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t cut = std::uniform_int_distribution<std::size_t>(0, data.size())(gen);
    const std::uint32_t head = shardtrain::crc32_ieee(0, data.data(), cut);
    EXPECT_EQ(head, zlib_crc(0, data.data(), cut)) << "cut " << cut;
    EXPECT_EQ(shardtrain::crc32_ieee(head, data.data() + cut, data.size() - cut), whole) << "cut " << cut;
  }
  // A known value: the CRC-32 check value of "123456789".
  const char* check = "123456789";
  EXPECT_EQ(shardtrain::crc32_ieee(0, check, 9), 0xCBF43926u);
}

// crc32_join (a device's piece CRCs, Backend::crc32_pieces, made into one): pieces
// hashed here, joined, against zlib over the whole buffer; lengths around piece
// boundaries, one piece, none, and a count that does not match the length.
TEST(Crc32, JoinOfPiecesIsTheWholeBuffersCrc) {
  const auto data = random_bytes(300'007, 4);
  for (const std::size_t piece : {std::size_t{1}, std::size_t{16}, std::size_t{1000}, std::size_t{65536}})
    for (const std::size_t bytes : {std::size_t{0}, std::size_t{1}, piece - 1, piece, piece + 1, 3 * piece,
                                    3 * piece + 7, data.size()}) {
      if (bytes > data.size()) continue;
      std::vector<std::uint32_t> crcs;
      for (std::size_t lo = 0; lo < bytes; lo += piece)
        crcs.push_back(shardtrain::crc32_ieee(0, data.data() + lo, std::min(piece, bytes - lo)));
      EXPECT_EQ(shardtrain::crc32_join(crcs, piece, bytes), zlib_crc(0, data.data(), bytes))
          << "piece " << piece << " bytes " << bytes;
    }
  const std::vector<std::uint32_t> two{1u, 2u};
  EXPECT_THROW(shardtrain::crc32_join(two, 16, 40), std::exception) << "3 pieces of 16 for 40 bytes, 2 given";
  EXPECT_THROW(shardtrain::crc32_join(two, 0, 40), std::exception);
}
