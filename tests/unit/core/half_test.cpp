// Tests core/half.hpp bit for bit: every f16 and bf16 pattern decodes to the
// IEEE value (computed independently with ldexp) and encodes back to itself;
// float -> f16/bf16 rounds to nearest even with IEEE overflow on 1e6 seeded
// random floats (whole range, subnormal f16 range, ties, near 65504/65520,
// underflow, signed zeros, NaN) checked against the neighbouring values in
// double; the f16 encoder matches GCC's _Float16; the bulk helpers (vectorised
// clones) match the scalar conversions and find inf/NaN at known indices.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/half.hpp"
#include "kernels/types.hpp"

namespace shardtrain {
namespace {

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
float from_bits(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// --- Independent decoders (double, via ldexp). `unbounded` treats the all-ones
// exponent as one more binade, the value just past the largest finite number,
// so the largest finite value has an upper neighbour for the rounding check.
double f16_magnitude(std::uint32_t m, bool unbounded = false) {
  const int e = static_cast<int>(m >> 10) & 31;
  const int f = static_cast<int>(m & 1023);
  if (e == 31 && !unbounded)
    return f == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return std::ldexp(static_cast<double>(f), -24);     // 2^-14 * f / 1024
  return std::ldexp(1.0 + f / 1024.0, e - 15);                     // 2^(e-15) * (1 + f/1024)
}
double bf16_magnitude(std::uint32_t m, bool unbounded = false) {
  const int e = static_cast<int>(m >> 7) & 255;
  const int f = static_cast<int>(m & 127);
  if (e == 255 && !unbounded)
    return f == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return std::ldexp(static_cast<double>(f), -133);    // 2^-126 * f / 128
  return std::ldexp(1.0 + f / 128.0, e - 127);
}
double f16_value(std::uint32_t h) { return (h & 0x8000u ? -1.0 : 1.0) * f16_magnitude(h & 0x7FFFu); }
double bf16_value(std::uint32_t h) { return (h & 0x8000u ? -1.0 : 1.0) * bf16_magnitude(h & 0x7FFFu); }

// Round-to-nearest thresholds: largest finite + half an ulp.
const double kF16Overflow = 65520.0;
const double kBf16Overflow = std::ldexp(511.0, 119);  // 0x1.ffp+127

// --- Compile-time checks (a failure stops the build) -------------------------
static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2);
static_assert(std::is_trivially_copyable_v<f16> && std::is_trivially_copyable_v<bf16>);
static_assert(f16().bits == 0 && bf16().bits == 0);
static_assert(f16(1.0f).bits == 0x3C00 && f16(-2.0f).bits == 0xC000 && f16(65504.0f).bits == 0x7BFF);
static_assert(bf16(1.0f).bits == 0x3F80 && bf16(-2.0f).bits == 0xC000);
static_assert(to_float(f16::from_bits(0x3555)) == 0x1.554p-2f);
static_assert(std::is_same_v<compute_t<f16>, float> && std::is_same_v<compute_t<bf16>, float> &&
              std::is_same_v<compute_t<float>, float> && std::is_same_v<compute_t<double>, double> &&
              std::is_same_v<compute_t<const f16>, float>);
static_assert(is_half_v<f16> && is_half_v<bf16> && is_half_v<const f16> && !is_half_v<float> &&
              !is_half_v<double> && !is_half_v<std::uint16_t>);

TEST(Half, LimitsAndNames) {
  EXPECT_EQ(max_finite<f16>(), 65504.0f);
  EXPECT_EQ(max_finite<f16>(), to_float(f16::from_bits(0x7BFF)));
  EXPECT_EQ(max_finite<bf16>(), to_float(bf16::from_bits(0x7F7F)));
  EXPECT_EQ(static_cast<double>(max_finite<bf16>()), std::ldexp(255.0, 120));
  EXPECT_EQ(max_finite<float>(), std::numeric_limits<float>::max());
  EXPECT_EQ(epsilon<f16>(), to_float(f16::from_bits(0x3C01)) - 1.0f);
  EXPECT_EQ(epsilon<f16>(), std::ldexp(1.0f, -10));
  EXPECT_EQ(epsilon<bf16>(), to_float(bf16::from_bits(0x3F81)) - 1.0f);
  EXPECT_EQ(epsilon<bf16>(), std::ldexp(1.0f, -7));
  EXPECT_EQ(epsilon<float>(), std::numeric_limits<float>::epsilon());
  EXPECT_EQ(std::string(type_name<f16>()), "fp16");
  EXPECT_EQ(std::string(type_name<bf16>()), "bf16");
  EXPECT_EQ(std::string(type_name<float>()), "fp32");
  EXPECT_EQ(std::string(type_name<double>()), "fp64");
}

TEST(Half, MembersAndFreeFunctionsAgree) {
  const float xs[] = {0.0f, -0.0f, 1.0f / 3.0f, -65519.0f, 70000.0f, 1e-6f, 3e38f};
  for (float x : xs) {
    EXPECT_EQ(f16(x).bits, from_float<f16>(x).bits) << x;
    EXPECT_EQ(bf16(x).bits, from_float<bf16>(x).bits) << x;
    EXPECT_EQ(bits(static_cast<float>(f16(x))), bits(to_float(f16(x)))) << x;
    EXPECT_EQ(bits(static_cast<float>(bf16(x))), bits(to_float(bf16(x)))) << x;
    EXPECT_EQ(bits(from_float<float>(x)), bits(x));
    EXPECT_EQ(bits(to_float(x)), bits(x));
  }
  std::vector<f16> v(3, f16(5.0f));
  v.resize(5);  // value-initialised tail is +0
  EXPECT_EQ(v[4].bits, 0u);
  EXPECT_EQ(v[0].bits, 0x4500u);
}

// --- Exhaustive decode / round trip -------------------------------------------

TEST(Half, F16AllPatterns) {
  int failures = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const f16 h = f16::from_bits(static_cast<std::uint16_t>(b));
    const float got = to_float(h);
    const double want = f16_value(b);
    const bool nan = (b & 0x7C00u) == 0x7C00u && (b & 0x03FFu) != 0;
    if (nan) {
      // Quiet NaN, same sign and payload (as F16C's vcvtph2ps).
      const std::uint32_t want_bits = ((b & 0x8000u) << 16) | 0x7FC00000u | ((b & 0x03FFu) << 13);
      if (bits(got) != want_bits && ++failures <= 10)
        ADD_FAILURE() << std::hex << "f16 " << b << " -> " << bits(got) << ", want NaN " << want_bits;
      const f16 back(got);
      if (!((back.bits & 0x7C00u) == 0x7C00u && (back.bits & 0x03FFu) != 0) ||
          back.bits != (b | 0x0200u)) {
        if (++failures <= 10) ADD_FAILURE() << std::hex << "f16 NaN " << b << " -> " << back.bits;
      }
      continue;
    }
    // Exact value, and the sign of zero (compare the float bits of the double).
    if (bits(got) != bits(static_cast<float>(want)) || static_cast<double>(got) != want) {
      if (++failures <= 10)
        ADD_FAILURE() << std::hex << "f16 " << b << " -> " << got << ", want " << want;
    }
    if (f16(got).bits != b && ++failures <= 10)
      ADD_FAILURE() << std::hex << "f16 " << b << " round trip -> " << f16(got).bits;
  }
  EXPECT_EQ(failures, 0);
}

TEST(Half, Bf16AllPatterns) {
  int failures = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const bf16 h = bf16::from_bits(static_cast<std::uint16_t>(b));
    const float got = to_float(h);
    if (bits(got) != (b << 16) && ++failures <= 10)
      ADD_FAILURE() << std::hex << "bf16 " << b << " -> " << bits(got) << " (not bits << 16)";
    const bool nan = (b & 0x7F80u) == 0x7F80u && (b & 0x007Fu) != 0;
    if (nan) {
      const bf16 back(got);
      if (back.bits != (b | 0x0040u) && ++failures <= 10)
        ADD_FAILURE() << std::hex << "bf16 NaN " << b << " -> " << back.bits << " (want quiet NaN)";
      continue;
    }
    const double want = bf16_value(b);
    if ((static_cast<double>(got) != want || std::signbit(got) != ((b & 0x8000u) != 0)) &&
        ++failures <= 10)
      ADD_FAILURE() << std::hex << "bf16 " << b << " -> " << got << ", want " << want;
    if (bf16(got).bits != b && ++failures <= 10)
      ADD_FAILURE() << std::hex << "bf16 " << b << " round trip -> " << bf16(got).bits;
  }
  EXPECT_EQ(failures, 0);
}

// --- Rounding on random floats ------------------------------------------------

// 1e6 float bit patterns from a fixed seed, weighted towards the places where
// rounding goes wrong, plus a list of hand-picked edge values.
std::vector<float> random_floats() {
  std::mt19937_64 rng(20240611);
  std::vector<float> xs;
  xs.reserve(1000000);
  auto u32 = [&] { return static_cast<std::uint32_t>(rng()); };
  auto sign = [&] { return (u32() & 1u) << 31; };
  auto with_exp = [&](std::uint32_t lo, std::uint32_t hi) {  // biased exponent in [lo, hi]
    const std::uint32_t e = lo + u32() % (hi - lo + 1);
    return sign() | (e << 23) | (u32() & 0x7FFFFFu);
  };
  const std::uint32_t edges[] = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu,            // zeros, float subnormals
      0x33000000u, 0x33000001u, 0x32FFFFFFu, 0xB3000000u,            // 2^-25: tie -> 0
      0x33800000u, 0x33C00000u, 0x34200000u,                         // 2^-24, 1.5*2^-24 tie -> 2*2^-24, 2.5 -> 2
      0x387FC000u, 0x387FE000u, 0x387FFFFFu, 0x38800000u,            // around 2^-14
      0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x477FEFFFu, 0xC77FF000u,  // 65504, <65520, 65520
      0x47800000u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F7F7FFFu, 0x7F7F8000u,  // 65536, FLT_MAX, bf16 edges
      0x7F7EFFFFu, 0x7F7E8000u,                                      // bf16 tie below max -> even
      0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u,  // inf, NaN (quiet/signalling)
      0x7FBFFFFFu, 0xFF802000u, 0x7FFFFFFFu, 0x3F800000u, 0x3F801000u, 0x3F803000u, 0x3F808000u,
      0x3F818000u};
  for (std::uint32_t b : edges) xs.push_back(from_bits(b));
  while (xs.size() < 1000000) {
    const std::uint32_t kind = u32() % 12;
    std::uint32_t b = 0;
    if (kind < 2) b = u32();                                   // anywhere, incl. inf/NaN
    else if (kind < 5) b = with_exp(100, 143);                 // the f16 range (2^-27 .. 2^17)
    else if (kind < 6) b = sign() | (0x477FE000u - (1u << 14) + u32() % (3u << 14));  // near 65504/65520
    else if (kind < 7) b = (with_exp(100, 142) & ~0x1FFFu) | 0x1000u;  // f16-normal ties
    else if (kind < 8) {  // ties at the f16 subnormal step 2^-24: (k + 1/2) 2^-24, up to 2^-13
      const std::uint32_t k = u32() % 2048;
      b = sign() | bits(std::ldexp(static_cast<float>(2 * k + 1), -25));
    } else if (kind < 9) b = (u32() & ~0xFFFFu) | 0x8000u;       // bf16 ties (any exponent)
    else if (kind < 10) b = with_exp(0, 112);                  // tiny: f16 underflow
    else if (kind < 11) b = sign() | (0x7F7F8000u - (1u << 17) + u32() % (1u << 18));  // bf16 max
    else b = sign() | (u32() % (1u << 17));                    // float subnormals: bf16 underflow
    xs.push_back(from_bits(b));
  }
  return xs;
}

const std::vector<float>& random_set() {
  static const std::vector<float> xs = random_floats();
  return xs;
}

struct RoundingStats {
  long ties = 0, overflows = 0, subnormals = 0, underflows = 0, nans = 0;
};

// Checks that the 16-bit pattern h is float x rounded to nearest even.
template <class Magnitude>
bool check_rounding(float x, std::uint32_t h, Magnitude magnitude, std::uint32_t inf_bits,
                    std::uint32_t min_normal, double overflow, RoundingStats& st, std::string& why) {
  const std::uint32_t mh = h & 0x7FFFu;
  if (std::isnan(x)) {
    ++st.nans;
    if (mh > inf_bits) return true;
    why = "NaN input gave a non-NaN";
    return false;
  }
  if (((h & 0x8000u) != 0) != std::signbit(x)) {
    why = "sign differs";
    return false;
  }
  const double ax = std::fabs(static_cast<double>(x));
  if (mh == inf_bits || ax >= overflow) {
    ++st.overflows;
    if (mh == inf_bits && ax >= overflow) return true;
    why = mh == inf_bits ? "overflowed below the threshold" : "did not overflow at/above the threshold";
    return false;
  }
  if (mh > inf_bits) {
    why = "finite input gave NaN";
    return false;
  }
  if (mh < min_normal && mh != 0) ++st.subnormals;
  if (mh == 0 && ax != 0.0) ++st.underflows;
  const double r = magnitude(mh, false);
  const double d = std::fabs(ax - r);  // exact: both are floats near each other
  const double d_next = std::fabs(ax - magnitude(mh + 1, true));
  const double d_prev = mh > 0 ? std::fabs(ax - magnitude(mh - 1, false)) : d_next + 1.0;
  if (d > d_prev || d > d_next) {
    why = "not the nearest value";
    return false;
  }
  if (d == d_prev || d == d_next) {
    ++st.ties;
    if (mh & 1u) {
      why = "tie not rounded to even";
      return false;
    }
  }
  return true;
}

TEST(Half, F16RoundsToNearestEven) {
  const auto& xs = random_set();
  RoundingStats st;
  int failures = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (float x : xs) {
    const std::uint32_t h = f16(x).bits;
    std::string why;
    if (!check_rounding(x, h, f16_magnitude, 0x7C00u, 0x0400u, kF16Overflow, st, why) &&
        ++failures <= 10)
      ADD_FAILURE() << "f16(" << std::hexfloat << x << ") = 0x" << std::hex << h << ": " << why;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[f16] " << xs.size() << " floats checked in " << s << " s: ties " << st.ties
            << ", overflows " << st.overflows << ", subnormal results " << st.subnormals
            << ", underflows to 0 " << st.underflows << ", NaN " << st.nans << std::endl;
  EXPECT_EQ(failures, 0);
  // The set must actually exercise each case (else the test proves little).
  EXPECT_GT(st.ties, 50000);
  EXPECT_GT(st.overflows, 50000);
  EXPECT_GT(st.subnormals, 50000);
  EXPECT_GT(st.underflows, 50000);
  EXPECT_GT(st.nans, 100);
}

TEST(Half, Bf16RoundsToNearestEven) {
  const auto& xs = random_set();
  RoundingStats st;
  int failures = 0;
  for (float x : xs) {
    const std::uint32_t h = bf16(x).bits;
    std::string why;
    if (!check_rounding(x, h, bf16_magnitude, 0x7F80u, 0x0080u, kBf16Overflow, st, why) &&
        ++failures <= 10)
      ADD_FAILURE() << "bf16(" << std::hexfloat << x << ") = 0x" << std::hex << h << ": " << why;
    if (std::isnan(x) && h != ((bits(x) >> 16) | 0x0040u) && ++failures <= 10)
      ADD_FAILURE() << "bf16(NaN 0x" << std::hex << bits(x) << ") = 0x" << h << ", want quiet NaN";
  }
  std::cout << "[bf16] ties " << st.ties << ", overflows " << st.overflows << ", subnormal results "
            << st.subnormals << ", underflows to 0 " << st.underflows << ", NaN " << st.nans
            << std::endl;
  EXPECT_EQ(failures, 0);
  EXPECT_GT(st.ties, 50000);
  EXPECT_GT(st.overflows, 5000);
  EXPECT_GT(st.subnormals, 20000);
  EXPECT_GT(st.underflows, 20000);
  EXPECT_GT(st.nans, 100);
}

// GCC's _Float16 (libgcc soft-float or F16C) is an independent IEEE conversion.
TEST(Half, F16MatchesCompilerFloat16) {
#if defined(__FLT16_MAX__)
  int failures = 0;
  for (float x : random_set()) {
    const _Float16 ref = static_cast<_Float16>(x);
    std::uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, sizeof ref_bits);
    if (f16(x).bits != ref_bits && ++failures <= 10)
      ADD_FAILURE() << "f16(" << std::hexfloat << x << ") = 0x" << std::hex << f16(x).bits
                    << ", _Float16 gives 0x" << ref_bits;
  }
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto b16 = static_cast<std::uint16_t>(b);
    _Float16 ref;
    std::memcpy(&ref, &b16, sizeof ref);
    const float want = static_cast<float>(ref);
    if (bits(to_float(f16::from_bits(b16))) != bits(want) && ++failures <= 10)
      ADD_FAILURE() << std::hex << "to_float(0x" << b << ") = " << bits(to_float(f16::from_bits(b16)))
                    << ", _Float16 gives " << bits(want);
  }
  EXPECT_EQ(failures, 0);
#else
  GTEST_SKIP() << "this compiler has no _Float16; the exhaustive and rounding tests still ran";
#endif
}

// --- Bulk helpers -------------------------------------------------------------

TEST(Half, BulkConvertMatchesScalar) {
  const auto& xs = random_set();
  const std::size_t n = xs.size() - 3;  // not a multiple of any vector width
  std::vector<f16> h(n);
  std::vector<bf16> b(n);
  convert(xs.data(), h.data(), n);
  convert(xs.data(), b.data(), n);
  int failures = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (h[i].bits != f16(xs[i]).bits && ++failures <= 10)
      ADD_FAILURE() << "bulk f16 differs at " << i << " x=" << std::hexfloat << xs[i];
    if (b[i].bits != bf16(xs[i]).bits && ++failures <= 10)
      ADD_FAILURE() << "bulk bf16 differs at " << i << " x=" << std::hexfloat << xs[i];
  }
  // Every 16-bit pattern through the bulk decoders.
  std::vector<f16> all_h(65536);
  std::vector<bf16> all_b(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) {
    all_h[i] = f16::from_bits(static_cast<std::uint16_t>(i));
    all_b[i] = bf16::from_bits(static_cast<std::uint16_t>(i));
  }
  std::vector<float> fh(65536), fb(65536);
  convert(all_h.data(), fh.data(), all_h.size());
  convert(all_b.data(), fb.data(), all_b.size());
  for (std::size_t i = 0; i < 65536; ++i) {
    if (bits(fh[i]) != bits(to_float(all_h[i])) && ++failures <= 10)
      ADD_FAILURE() << std::hex << "bulk f16 -> float differs for 0x" << i;
    if (bits(fb[i]) != bits(to_float(all_b[i])) && ++failures <= 10)
      ADD_FAILURE() << std::hex << "bulk bf16 -> float differs for 0x" << i;
  }
  EXPECT_EQ(failures, 0);
  convert(xs.data(), h.data(), 0);  // n == 0 touches nothing
  convert(static_cast<const float*>(nullptr), static_cast<f16*>(nullptr), 0);
}

// convert_rows: a strided (rows x cols) block, both directions, equal to the
// scalar conversion at every element it writes; the gaps between rows (the
// leading dimension beyond cols) keep their sentinel.
template <class H>
void check_convert_rows(const char* what) {
  SCOPED_TRACE(what);
  const auto& xs = random_set();
  const std::size_t rows = 37, cols = 21, ld_in = 29, ld_out = 53;  // no vector width divides them
  ASSERT_GE(xs.size(), rows * ld_in);
  const H sentinel = H::from_bits(0x1234);
  std::vector<H> out(rows * ld_out, sentinel);
  convert_rows(xs.data(), ld_in, out.data(), ld_out, rows, cols);
  std::vector<float> back(rows * ld_in, -7.0f);
  convert_rows(out.data(), ld_out, back.data(), ld_in, rows, cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < ld_out; ++j) {
      const H want = j < cols ? H(xs[r * ld_in + j]) : sentinel;
      ASSERT_EQ(out[r * ld_out + j].bits, want.bits) << "row " << r << " col " << j;
      if (j < ld_in)
        ASSERT_EQ(bits(back[r * ld_in + j]), bits(j < cols ? to_float(want) : -7.0f)) << "row " << r << " col " << j;
    }
  convert_rows(xs.data(), ld_in, out.data(), ld_out, 0, cols);  // no rows: nothing touched
  convert_rows(xs.data(), ld_in, out.data(), ld_out, rows, 0);
  for (std::size_t r = 0; r < rows; ++r) ASSERT_EQ(out[r * ld_out + cols].bits, sentinel.bits);
}

TEST(Half, ConvertRowsMatchesScalar) {
  check_convert_rows<f16>("f16");
  check_convert_rows<bf16>("bf16");
}

template <class T>
void check_scan(T finite_value, T inf, T nan, const char* what) {
  SCOPED_TRACE(what);
  const std::size_t n = 2000;  // several 512-element blocks plus a tail
  std::vector<T> x(n, finite_value);
  EXPECT_EQ(first_non_finite(x.data(), n), -1);
  EXPECT_TRUE(all_finite(x.data(), n));
  EXPECT_EQ(first_non_finite(x.data(), 0), -1);
  EXPECT_TRUE(all_finite(x.data(), 0));
  for (std::size_t at : {std::size_t{0}, std::size_t{1}, std::size_t{511}, std::size_t{512},
                         std::size_t{1234}, n - 1}) {
    for (T bad : {inf, nan}) {
      std::vector<T> y = x;
      y[at] = bad;
      EXPECT_EQ(first_non_finite(y.data(), n), static_cast<std::ptrdiff_t>(at)) << "at " << at;
      EXPECT_FALSE(all_finite(y.data(), n)) << "at " << at;
      EXPECT_EQ(first_non_finite(y.data(), at), -1) << "prefix before " << at;
      if (at + 300 < n) {  // a later second hit does not change the answer
        y[at + 300] = nan;
        EXPECT_EQ(first_non_finite(y.data(), n), static_cast<std::ptrdiff_t>(at));
      }
    }
  }
}

TEST(Half, FirstNonFiniteAndAllFinite) {
  check_scan(f16(65504.0f), f16::from_bits(0xFC00), f16::from_bits(0x7C01), "f16");
  check_scan(bf16(-3e38f), bf16::from_bits(0x7F80), bf16::from_bits(0xFFC1), "bf16");
  check_scan(std::numeric_limits<float>::max(), -std::numeric_limits<float>::infinity(),
             from_bits(0x7F800001u), "float");
  // Large finite values, subnormals and -0 are finite.
  std::vector<f16> h = {f16(-65504.0f), f16::from_bits(0x0001), f16::from_bits(0x8000),
                        f16::from_bits(0x7BFF), f16(70000.0f)};
  EXPECT_EQ(first_non_finite(h.data(), h.size()), 4);  // 70000 rounds to inf
  EXPECT_TRUE(all_finite(h.data(), 4));
}

// The conversions work inside a Kokkos lambda (host execution space here).
TEST(Half, UsableInKokkosLambda) {
  std::vector<float> in = {1.0f, -0.5f, 65520.0f, 1e-8f, 3.0f};
  std::vector<f16> out(in.size());
  std::vector<float> back(in.size());
  const View1<const float> vin(in.data(), in.size());
  const View1<f16> vout(out.data(), out.size());
  const View1<float> vback(back.data(), back.size());
  Kokkos::parallel_for(
      "HalfTest::round_trip", range(static_cast<std::int64_t>(in.size())),
      KOKKOS_LAMBDA(const std::int64_t i) {
        vout(i) = f16(vin(i));
        vback(i) = static_cast<compute_t<f16>>(vout(i));
      });
  Kokkos::fence();
  EXPECT_EQ(out[0].bits, 0x3C00u);
  EXPECT_EQ(out[1].bits, 0xB800u);
  EXPECT_EQ(out[2].bits, 0x7C00u);
  EXPECT_EQ(out[3].bits, 0x0000u);
  EXPECT_EQ(back[4], 3.0f);
  EXPECT_TRUE(std::isinf(back[2]));
}

}  // namespace
}  // namespace shardtrain
