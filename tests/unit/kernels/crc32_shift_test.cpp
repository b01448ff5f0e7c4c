// kernels/crc32_shift.hpp (the join of CRC-32s that the candidate weights-CRC
// kernel, kernels/cuda/crc32.cu, runs on a device) against zlib, the independent
// reference: the operators against crc32_combine64 at lengths up to past 2^32,
// joins of a buffer's split points against its whole crc32, and the candidate
// kernel's block, run here as the device runs it (thread t's sub-range CRC by
// zlib, the tree of join_node levels), against zlib's CRC of every piece, at
// aligned and unaligned piece sizes, with a short last piece and idle threads.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/crc32_shift.hpp"

namespace shardtrain {
namespace {

namespace cs = crc32_shift;

std::uint32_t zlib_crc(const unsigned char* p, std::size_t n) {
  std::uint32_t crc = 0;
  for (std::size_t done = 0; done < n;) {
    const std::size_t k = std::min<std::size_t>(n - done, std::size_t{1} << 30);
    crc = static_cast<std::uint32_t>(crc32(crc, p + done, static_cast<uInt>(k)));
    done += k;
  }
  return crc;
}

std::vector<unsigned char> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<unsigned char> v(n);
  for (auto& x : v) x = static_cast<unsigned char>(gen());
  return v;
}

TEST(Crc32Shift, MultiplyIsAFieldProductWithOneAsIdentity) {
  std::mt19937 gen(5);
  for (int i = 0; i < 200; ++i) {
    const std::uint32_t a = gen(), b = gen(), c = gen();
    EXPECT_EQ(cs::multiply(cs::kOne, a), a);
    EXPECT_EQ(cs::multiply(a, cs::kOne), a);
    EXPECT_EQ(cs::multiply(a, b), cs::multiply(b, a));
    EXPECT_EQ(cs::multiply(a, b ^ c), cs::multiply(a, b) ^ cs::multiply(a, c));
    EXPECT_EQ(cs::multiply(cs::multiply(a, b), c), cs::multiply(a, cs::multiply(b, c)));
  }
  EXPECT_EQ(cs::shift_operator(0), cs::kOne);
}

// join(crc(A), crc(B), shift_operator(|B|)) is zlib's crc32_combine64 for any
// CRCs, at lengths around the powers of two and past 2^32 bytes.
TEST(Crc32Shift, JoinIsZlibsCombineAtEveryLength) {
  std::mt19937 gen(11);
  std::vector<std::uint64_t> lengths = {0, 1, 2, 3, 15, 16, 17, 255, 256, 257, 4096, 65535, 65536, 65537,
                                        (1ull << 20) + 7, (1ull << 31) - 1, 1ull << 32, (1ull << 32) + 5,
                                        (1ull << 40) + 12345};
  for (int i = 0; i < 40; ++i) lengths.push_back(gen() % 5'000'000);
  for (const std::uint64_t n : lengths) {
    const std::uint32_t a = gen(), b = gen();
    const auto want = static_cast<std::uint32_t>(crc32_combine64(a, b, static_cast<z_off64_t>(n)));
    EXPECT_EQ(cs::join(a, b, cs::shift_operator(n)), want) << "length " << n;
    EXPECT_EQ(cs::shift_operator(n), static_cast<std::uint32_t>(crc32_combine_gen64(static_cast<z_off64_t>(n))))
        << "length " << n;
  }
}

TEST(Crc32Shift, JoinedSplitsAreTheWholeBuffersCrc) {
  const auto data = random_bytes(200'003, 3);
  std::mt19937 gen(4);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<std::size_t> cuts = {0, data.size()};
    for (int k = 0; k < trial % 7; ++k) cuts.push_back(gen() % (data.size() + 1));
    std::sort(cuts.begin(), cuts.end());
    std::uint32_t crc = 0;  // the CRC of no bytes
    for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
      const std::size_t len = cuts[k + 1] - cuts[k];
      crc = cs::join(crc, zlib_crc(data.data() + cuts[k], len), cs::shift_operator(len));
    }
    EXPECT_EQ(crc, zlib_crc(data.data(), data.size())) << "trial " << trial;
  }
}

TEST(Crc32Shift, JoinNodeTakesTheGivenOperatorOnlyForAWholeRightNode) {
  const std::uint32_t left = 0x12345678u, right = 0x9abcdef0u;
  EXPECT_EQ(cs::join_node(left, 0, 0, 256, cs::shift_operator(256)), left) << "empty right node";
  EXPECT_EQ(cs::join_node(left, right, 256, 256, cs::shift_operator(256)),
            cs::join(left, right, cs::shift_operator(256)));
  // A wrong operator for the whole length shows: the node used what it was given.
  EXPECT_NE(cs::join_node(left, right, 256, 256, cs::kOne), cs::join(left, right, cs::shift_operator(256)));
  // A short right node ignores the given operator.
  EXPECT_EQ(cs::join_node(left, right, 100, 256, cs::kOne), cs::join(left, right, cs::shift_operator(100)));
}

TEST(Crc32Shift, SubRangesAreWordsWhereThePieceIsAligned) {
  EXPECT_EQ(cs::sub_range_bytes(65536, true), 256u);
  EXPECT_EQ(cs::sub_range_bytes(64, true), 16u);
  EXPECT_EQ(cs::sub_range_bytes(4096 + 16, true), 32u);
  EXPECT_EQ(cs::sub_range_bytes(1000, false), 4u);
  EXPECT_EQ(cs::sub_range_bytes(1, false), 1u);
  for (const std::uint64_t piece : {16ull, 48ull, 4112ull, 65536ull, 1ull << 20, 100'000ull})
    EXPECT_GE(cs::sub_range_bytes(piece, true) * cs::kBlockThreads, piece) << piece;
}

// The candidate kernel's block for each piece of `bytes` bytes at `data`, as the
// device runs it: the level operators the host passes, thread t's sub-range CRC,
// the tree of join_node levels (each level reads the one before it).
std::vector<std::uint32_t> block_pieces(const unsigned char* data, std::size_t bytes, std::size_t piece,
                                        bool aligned16) {
  const std::uint64_t sub = cs::sub_range_bytes(piece, aligned16);
  std::uint32_t ops[cs::kBlockLevels];
  for (unsigned l = 0; l < cs::kBlockLevels; ++l) ops[l] = cs::shift_operator(sub << l);
  std::vector<std::uint32_t> out;
  for (std::size_t start = 0; start < bytes; start += piece) {
    const std::size_t end = std::min(start + piece, bytes);
    std::uint32_t crcs[cs::kBlockThreads];
    std::uint64_t lens[cs::kBlockThreads];
    for (unsigned t = 0; t < cs::kBlockThreads; ++t) {
      const std::size_t i = std::min<std::size_t>(start + t * sub, end), e = std::min<std::size_t>(i + sub, end);
      crcs[t] = zlib_crc(data + i, e - i);
      lens[t] = e - i;
    }
    for (unsigned l = 0; l < cs::kBlockLevels; ++l) {
      const unsigned s = 1u << l;
      for (unsigned t = 0; t < cs::kBlockThreads; t += 2 * s) {
        crcs[t] = cs::join_node(crcs[t], crcs[t + s], lens[t + s], sub << l, ops[l]);
        lens[t] += lens[t + s];
      }
    }
    EXPECT_EQ(lens[0], end - start);
    out.push_back(crcs[0]);
  }
  return out;
}

TEST(Crc32Shift, TheCandidateKernelsBlockIsEveryPiecesCrc) {
  const auto data = random_bytes((std::size_t{4} << 20) + 64, 9);
  struct Case {
    std::size_t bytes, piece;
    bool aligned16;
  };
  // The trainer's 64 KiB pieces (whole and with a short tail), pieces under 256
  // bytes (idle threads), unaligned pieces (byte-wise sub-ranges), a piece that
  // is not a multiple of 256 (the last thread short).
  const Case cases[] = {{std::size_t{4} << 20, 65536, true},     {(std::size_t{4} << 20) + 13, 65536, true},
                        {1, 64, true},                           {63, 64, true},
                        {65, 64, true},                          {100'003, 1000, false},
                        {100'000, 4096, true},                   {300'000, 65536 + 16, true},
                        {(std::size_t{1} << 20) + 1, 1 << 20, true}, {77'777, 77'777, false}};
  for (const Case& c : cases) {
    const std::vector<std::uint32_t> got = block_pieces(data.data(), c.bytes, c.piece, c.aligned16);
    ASSERT_EQ(got.size(), (c.bytes + c.piece - 1) / c.piece);
    for (std::size_t k = 0; k < got.size(); ++k) {
      const std::size_t start = k * c.piece, n = std::min(c.piece, c.bytes - start);
      ASSERT_EQ(got[k], zlib_crc(data.data() + start, n))
          << "piece " << k << " of " << c.piece << " bytes, " << c.bytes << " bytes in all";
    }
  }
}

}  // namespace
}  // namespace shardtrain
