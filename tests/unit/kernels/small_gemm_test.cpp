// Tests shardtrain::small_gemm (kernels/small_gemm.hpp): every supported path
// (AVX-512, AVX2, portable) against a naive long-double product on shapes with row
// and column tails (m not a multiple of the 4-row tile, n not a multiple of the
// vector), strided and transposed A, row-strided B and C; all paths bitwise equal
// to the portable fma chain; columns of C outside n and rows outside m untouched;
// k == 0; negative sizes refused. small_gemm_bf16 (vdpbf16ps): the portable emulation
// against a long-double product, the AVX512-BF16 path (where the CPU has it) bitwise
// equal to the emulation, with normal and with subnormal-range operands (flushing);
// bf16_pair_pack's words; odd k refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/small_gemm.hpp"

namespace shardtrain {
namespace {

const SmallGemmIsa kAll[] = {SmallGemmIsa::portable, SmallGemmIsa::avx2, SmallGemmIsa::avx512};

std::string isa_name(SmallGemmIsa isa) {
  return isa == SmallGemmIsa::avx512 ? "avx512" : isa == SmallGemmIsa::avx2 ? "avx2" : "portable";
}

struct Case {
  std::int64_t m, n, k;
  bool a_transposed;  // A(i, p) read from a (k x m) row-major array
};

template <class T>
void check_case(const Case& cs, std::uint64_t seed) {
  const std::int64_t m = cs.m, n = cs.n, k = cs.k;
  const std::int64_t lda = (cs.a_transposed ? m : k) + 3, ldb = n + 5, ldc = n + 7;
  const std::int64_t a_rs = cs.a_transposed ? 1 : lda, a_cs = cs.a_transposed ? lda : 1;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> a((cs.a_transposed ? k : m) * lda + 1), b(k * ldb + 1);
  for (auto& x : a) x = static_cast<T>(u(rng));
  for (auto& x : b) x = static_cast<T>(u(rng));
  const T alpha = static_cast<T>(0.375);
  const T sentinel = static_cast<T>(-1234.5);
  std::vector<T> ref_bits;
  for (SmallGemmIsa isa : kAll) {
    if (!small_gemm_supported(isa)) continue;
    std::vector<T> c((m + 1) * ldc, sentinel);
    small_gemm_on<T>(isa, m, n, k, alpha, a.data(), a_rs, a_cs, b.data(), ldb, c.data(), ldc);
    const std::string where = isa_name(isa) + " m" + std::to_string(m) + " n" + std::to_string(n) +
                              " k" + std::to_string(k) + (cs.a_transposed ? " A^T" : "");
    for (std::int64_t i = 0; i <= m; ++i)
      for (std::int64_t j = 0; j < ldc; ++j) {
        const T got = c[i * ldc + j];
        if (i == m || j >= n) {
          ASSERT_EQ(got, sentinel) << where << ": wrote outside C at (" << i << "," << j << ")";
          continue;
        }
        long double s = 0.0L;
        for (std::int64_t p = 0; p < k; ++p)
          s += (long double)a[i * a_rs + p * a_cs] * (long double)b[p * ldb + j];
        const double want = static_cast<double>(s * alpha);
        const double tol = (sizeof(T) == 4 ? 1e-5 : 1e-13) * (1.0 + static_cast<double>(k));
        ASSERT_NEAR(static_cast<double>(got), want, tol) << where << " at (" << i << "," << j << ")";
      }
    if (ref_bits.empty()) {
      ref_bits = c;  // portable runs first
    } else {
      ASSERT_EQ(std::memcmp(ref_bits.data(), c.data(), c.size() * sizeof(T)), 0)
          << where << ": bits differ from the portable fma chain";
    }
  }
}

const Case kCases[] = {
    {1, 1, 1, false},   {4, 16, 8, false},    {5, 17, 3, false},   {3, 7, 64, true},
    {7, 33, 64, false}, {64, 64, 64, false},  {13, 65, 31, true},  {128, 128, 64, false},
    {9, 100, 2, true},  {2, 129, 17, false},  {4, 48, 130, true},  {11, 8, 5, false},
};

TEST(SmallGemm, FloatAllPathsAgainstNaiveAndEachOther) {
  std::uint64_t seed = 1;
  for (const Case& c : kCases) check_case<float>(c, seed++);
}

TEST(SmallGemm, DoubleAllPathsAgainstNaiveAndEachOther) {
  std::uint64_t seed = 100;
  for (const Case& c : kCases) check_case<double>(c, seed++);
}

TEST(SmallGemm, KZeroWritesZeros) {
  for (SmallGemmIsa isa : kAll) {
    if (!small_gemm_supported(isa)) continue;
    std::vector<float> c(3 * 20, 7.0f);
    small_gemm_on<float>(isa, 3, 20, 0, 1.0f, nullptr, 0, 0, nullptr, 20, c.data(), 20);
    for (float x : c) ASSERT_EQ(x, 0.0f) << isa_name(isa);
  }
}

TEST(SmallGemm, PicksASupportedPathAndRefusesBadInput) {
  EXPECT_TRUE(small_gemm_supported(small_gemm_isa()));
  EXPECT_TRUE(small_gemm_supported(SmallGemmIsa::portable));
  float x = 0.0f;
  EXPECT_THROW(small_gemm<float>(-1, 1, 1, 1.0f, &x, 1, 1, &x, 1, &x, 1), Error);
}

// --- bf16 products on vdpbf16ps ----------------------------------------------------

std::uint16_t bf16_bits_of(double x) { return bf16(static_cast<float>(x)).bits; }

// A (m x k, row stride a_rs = k + 2) and B (k x n) as bf16, B stored transposed (n x k,
// row stride k + 4) and packed with bf16_pair_pack; C checked against a long-double
// product (emulation) and bitwise (AVX512-BF16 path against the emulation), sentinels
// outside C untouched. scale multiplies every operand (tiny: subnormal products and sums).
void check_bf16_case(std::int64_t m, std::int64_t n, std::int64_t k, std::uint64_t seed, double scale) {
  const std::int64_t a_rs = k + 2, ldt = k + 4, ldb = n + 3, ldc = n + 7;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<bf16> a(m * a_rs + 1), bt(n * ldt + 1);
  for (auto& x : a) x.bits = bf16_bits_of(u(rng) * scale);
  for (auto& x : bt) x.bits = bf16_bits_of(u(rng) * scale);
  std::vector<std::uint32_t> bp(k / 2 * ldb + 1, 0xdeadbeefu);
  bf16_pair_pack(bt.data(), n, k, ldt, bp.data(), ldb);
  for (std::int64_t q = 0; q < k / 2; ++q)
    for (std::int64_t j = 0; j < n; ++j)
      ASSERT_EQ(bp[q * ldb + j], std::uint32_t(bt[j * ldt + 2 * q].bits) | std::uint32_t(bt[j * ldt + 2 * q + 1].bits) << 16)
          << "pack (" << q << "," << j << ")";
  const float alpha = 0.375f, sentinel = -1234.5f;
  const std::string where = "m" + std::to_string(m) + " n" + std::to_string(n) + " k" + std::to_string(k) +
                            (scale < 1e-10 ? " tiny" : "");
  std::vector<float> emu((m + 1) * ldc, sentinel);
  small_gemm_bf16_portable(m, n, k, alpha, a.data(), a_rs, bp.data(), ldb, emu.data(), ldc);
  for (std::int64_t i = 0; i <= m; ++i)
    for (std::int64_t j = 0; j < ldc; ++j) {
      const float got = emu[i * ldc + j];
      if (i == m || j >= n) {
        ASSERT_EQ(got, sentinel) << where << ": wrote outside C at (" << i << "," << j << ")";
        continue;
      }
      if (scale < 1e-10) continue;  // flushed: checked bitwise against the instruction below
      long double s = 0.0L;
      for (std::int64_t p = 0; p < k; ++p)
        s += (long double)static_cast<float>(a[i * a_rs + p]) * (long double)static_cast<float>(bt[j * ldt + p]);
      ASSERT_NEAR(static_cast<double>(got), static_cast<double>(s * alpha), 1e-6 * (1.0 + k)) << where;
    }
  if (!small_gemm_bf16_native()) return;
  std::vector<float> c((m + 1) * ldc, sentinel);
  small_gemm_bf16(m, n, k, alpha, a.data(), a_rs, bp.data(), ldb, c.data(), ldc);
  ASSERT_EQ(std::memcmp(emu.data(), c.data(), c.size() * sizeof(float)), 0)
      << where << ": vdpbf16ps's bits differ from the emulation";
}

TEST(SmallGemmBf16, EmulationAgainstNaiveAndInstructionBitwise) {
  const std::int64_t shapes[][3] = {{1, 1, 2},  {4, 16, 8},    {5, 17, 2},   {3, 7, 64},  {7, 33, 64},
                                    {64, 64, 32}, {13, 65, 30}, {128, 128, 64}, {2, 129, 18}, {4, 48, 130}};
  std::uint64_t seed = 500;
  for (const auto& sh : shapes) {
    check_bf16_case(sh[0], sh[1], sh[2], seed++, 1.0);
    check_bf16_case(sh[0], sh[1], sh[2], seed++, 3e-20);  // products and sums below FLT_MIN
  }
}

TEST(SmallGemmBf16, KZeroWritesZerosAndOddKIsRefused) {
  std::vector<float> c(3 * 20, 7.0f);
  small_gemm_bf16_portable(3, 20, 0, 1.0f, nullptr, 0, nullptr, 20, c.data(), 20);
  for (float x : c) ASSERT_EQ(x, 0.0f);
  bf16 a[4];
  std::uint32_t b[4] = {};
  EXPECT_THROW(small_gemm_bf16_portable(1, 1, 3, 1.0f, a, 4, b, 1, c.data(), 1), Error);
  EXPECT_THROW(bf16_pair_pack(a, 1, 3, 4, b, 1), Error);
  if (small_gemm_bf16_native()) {
    std::fill(c.begin(), c.end(), 7.0f);
    small_gemm_bf16(3, 20, 0, 1.0f, nullptr, 0, nullptr, 20, c.data(), 20);
    for (float x : c) ASSERT_EQ(x, 0.0f);
    EXPECT_THROW(small_gemm_bf16(1, 1, 3, 1.0f, a, 4, b, 1, c.data(), 1), Error);
  } else {
    EXPECT_THROW(small_gemm_bf16(1, 1, 2, 1.0f, a, 4, b, 1, c.data(), 1), Error);
  }
}

}  // namespace
}  // namespace shardtrain
