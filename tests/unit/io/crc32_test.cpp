// io/crc32.hpp against zlib's crc32, the independent reference: every length
// 0..300 at every start alignment 0..15 (the SIMD kernel's head and tail
// paths), long random buffers, and chaining across arbitrary split points.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
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
