// Tests gelu_forward / gelu_backward against the tanh formula of gelu.hpp (evaluated
// naively in long double), in double and float (the float path uses the vectorised
// exp), across several chunks; float64 central-difference check of dx; in-place
// forward (y == x) and backward (dx == dy); extreme inputs; size errors. The 16-bit
// tables (GeluTables.*) against the arithmetic on every 16-bit pattern, and as the
// fp32 kernel rounded once.
// gelu_erf_*: forward and dx against the erf formula in long double (double, float,
// f16 / bf16 as the fp32 result rounded once), a float64 central-difference check
// of dx, in place, size errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <span>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/gelu.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview1;
using test::view1;

long double naive_gelu(long double x) {
  const long double k = std::sqrt(2.0L / 3.14159265358979323846264338327950288L);
  return 0.5L * x * (1.0L + std::tanh(k * (x + 0.044715L * x * x * x)));
}

long double naive_gelu_grad(long double x) {
  const long double k = std::sqrt(2.0L / 3.14159265358979323846264338327950288L);
  const long double t = std::tanh(k * (x + 0.044715L * x * x * x));
  return 0.5L * (1.0L + t) + 0.5L * x * (1.0L - t * t) * k * (1.0L + 3.0L * 0.044715L * x * x);
}

// Inputs spanning [-10, 10] densely plus the chunk boundary (n > 2 chunks of 2048).
std::vector<double> inputs() {
  std::vector<double> x;
  const int n = 5001;
  for (int i = 0; i < n; ++i) x.push_back(-10.0 + 20.0 * i / (n - 1));
  return x;
}

TEST(Gelu, ForwardMatchesTanhFormula) {
  const auto x = inputs();
  std::vector<double> ref(x.size()), ref_grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    ref[i] = static_cast<double>(naive_gelu(x[i]));
    ref_grad[i] = static_cast<double>(naive_gelu_grad(x[i]));
  }
  std::vector<double> y(x.size()), dx(x.size());
  const std::vector<double> ones(x.size(), 1.0);
  gelu_forward<double>(cview1(x), view1(y));
  gelu_backward<double>(cview1(x), cview1(ones), view1(dx));
  EXPECT_LE(test::tolerance_ratio(y, ref, 1e-15, 1e-14), 1.0);
  EXPECT_LE(test::tolerance_ratio(dx, ref_grad, 1e-15, 1e-14), 1.0);

  // float: compare against the reference at the float-rounded input, so only the
  // kernel's own error is measured.
  auto xf = cast_vector<float>(x);
  std::vector<double> ref_f(x.size()), ref_grad_f(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    ref_f[i] = static_cast<double>(naive_gelu(xf[i]));
    ref_grad_f[i] = static_cast<double>(naive_gelu_grad(xf[i]));
  }
  std::vector<float> yf(x.size()), dxf(x.size());
  const std::vector<float> onesf(x.size(), 1.0f);
  gelu_forward<float>(cview1(xf), view1(yf));
  gelu_backward<float>(cview1(xf), cview1(onesf), view1(dxf));
  // ~1 float ulp of the inputs' scale: 1e-6 absolute + 2e-6 relative.
  EXPECT_LE(test::tolerance_ratio(yf, ref_f, 1e-6, 2e-6), 1.0);
  EXPECT_LE(test::tolerance_ratio(dxf, ref_grad_f, 1e-6, 2e-6), 1.0);
}

TEST(Gelu, Gradient) {
  const auto x = test::random_vector(37, 31, -4.0, 4.0);
  const auto r = test::random_vector(37, 32);
  std::vector<double> dx(37, 55.0);
  gelu_backward<double>(cview1(x), cview1(r), view1(dx));
  auto loss = [&](std::span<const double> v) {
    std::vector<double> xv(v.begin(), v.end()), y(v.size());
    gelu_forward<double>(cview1(xv), view1(y));
    return test::weighted_sum(y, r);
  };
  EXPECT_TRUE(test::gradient_ok("gelu dx", test::gradcheck(loss, x, dx)));
}

TEST(Gelu, InPlace) {
  const auto x = test::random_vector(3000, 33, -5.0, 5.0);
  const auto dy = test::random_vector(3000, 34);
  for (int pass = 0; pass < 2; ++pass) {
    // Same bits in place and out of place, for both element types.
    std::vector<double> y(x.size()), yin = x, dx(x.size()), dxin = dy;
    gelu_forward<double>(cview1(x), view1(y));
    gelu_forward<double>(cview1(yin), view1(yin));
    EXPECT_EQ(y, yin);
    gelu_backward<double>(cview1(x), cview1(dy), view1(dx));
    gelu_backward<double>(cview1(x), cview1(dxin), view1(dxin));
    EXPECT_EQ(dx, dxin);
    auto xf = cast_vector<float>(x), dyf = cast_vector<float>(dy);
    std::vector<float> yf(x.size()), yfin = xf, dxf(x.size()), dxfin = dyf;
    gelu_forward<float>(cview1(xf), view1(yf));
    gelu_forward<float>(cview1(yfin), view1(yfin));
    EXPECT_EQ(yf, yfin);
    gelu_backward<float>(cview1(xf), cview1(dyf), view1(dxf));
    gelu_backward<float>(cview1(xf), cview1(dxfin), view1(dxfin));
    EXPECT_EQ(dxf, dxfin);
  }
}

TEST(Gelu, ExtremeInputsStayFinite) {
  for (float v : {-1e30f, -1000.0f, -30.0f, 30.0f, 1000.0f, 1e30f}) {
    std::vector<float> x = {v}, y(1), dx(1), one = {1.0f};
    gelu_forward<float>(cview1(x), view1(y));
    gelu_backward<float>(cview1(x), cview1(one), view1(dx));
    const float y_expect = v > 0 ? v : 0.0f;
    EXPECT_NEAR(y[0], y_expect, 1e-30f + 1e-6f * std::abs(y_expect)) << v;
    EXPECT_NEAR(dx[0], v > 0 ? 1.0f : 0.0f, 1e-6f) << v;
    std::vector<double> xd = {double(v)}, yd(1), dxd(1), oned = {1.0};
    gelu_forward<double>(cview1(xd), view1(yd));
    gelu_backward<double>(cview1(xd), cview1(oned), view1(dxd));
    EXPECT_NEAR(yd[0], v > 0 ? double(v) : 0.0, 1e-300 + 1e-15 * std::abs(double(v))) << v;
    EXPECT_NEAR(dxd[0], v > 0 ? 1.0 : 0.0, 1e-15) << v;
  }
  std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN()}, y(1), dx(1), one = {1.0f};
  gelu_forward<float>(cview1(nan), view1(y));
  gelu_backward<float>(cview1(nan), cview1(one), view1(dx));
  EXPECT_TRUE(std::isnan(y[0]));  // NaN must reach the loss scaler's overflow check
  EXPECT_TRUE(std::isnan(dx[0]));
}

TEST(Gelu, SizeMismatchThrows) {
  std::vector<double> x(4), y(5);
  EXPECT_THROW(gelu_forward<double>(cview1(x), view1(y)), Error);
  EXPECT_THROW(gelu_backward<double>(cview1(x), cview1(x), view1(y)), Error);
}

long double naive_gelu_erf(long double x) { return 0.5L * x * (1.0L + std::erf(x / std::sqrt(2.0L))); }

long double naive_gelu_erf_grad(long double x) {
  const long double pi = 3.14159265358979323846264338327950288L;
  return 0.5L * (1.0L + std::erf(x / std::sqrt(2.0L))) + x * std::exp(-0.5L * x * x) / std::sqrt(2.0L * pi);
}

// The 16-bit tables (GeluPath::table, gelu_forward / gelu_backward's path for f16
// and bf16) against the arithmetic they are built from, on every one of the 65536
// x patterns (NaNs, infinities, subnormals included), bit for bit; the backward
// with three dy patterns per x (a stride through all 65536, so every dy pattern
// occurs, specials included). Then in place, and across chunk boundaries.
template <class H>
void check_tables() {
  constexpr std::size_t kPatterns = 65536;
  std::vector<H> x(kPatterns), y_table(kPatterns), y_arith(kPatterns), dy(kPatterns), dx_table(kPatterns),
      dx_arith(kPatterns);
  for (std::size_t b = 0; b < kPatterns; ++b) x[b] = H::from_bits(static_cast<std::uint16_t>(b));
  gelu_forward_on<H>(GeluPath::table, cview1(x), view1(y_table));
  gelu_forward_on<H>(GeluPath::arithmetic, cview1(x), view1(y_arith));
  for (std::size_t b = 0; b < kPatterns; ++b) ASSERT_EQ(y_table[b].bits, y_arith[b].bits) << "x bits " << b;
  // Each backward factor is the fp32 kernel's y'(x) on the widened x, bit for bit
  // (the fp32 backward with dy = 1 returns the factor itself, 1 * f being exact).
  std::vector<float> xf(kPatterns), ones(kPatterns, 1.0f), factor_f32(kPatterns);
  for (std::size_t b = 0; b < kPatterns; ++b) xf[b] = to_float(x[b]);
  gelu_backward<float>(cview1(xf), cview1(ones), view1(factor_f32));
  const float* factors = gelu_table_factors<H>();
  for (std::size_t b = 0; b < kPatterns; ++b)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(factors[b]), std::bit_cast<std::uint32_t>(factor_f32[b])) << "x bits " << b;
  // The default entry point is the table.
  std::vector<H> y_default(kPatterns);
  gelu_forward<H>(cview1(x), view1(y_default));
  for (std::size_t b = 0; b < kPatterns; ++b) ASSERT_EQ(y_default[b].bits, y_table[b].bits) << "x bits " << b;
  for (std::uint32_t stride : {1u, 40503u, 7919u}) {
    for (std::size_t b = 0; b < kPatterns; ++b)
      dy[b] = H::from_bits(static_cast<std::uint16_t>((b * stride + 12345u) & 0xFFFFu));
    gelu_backward_on<H>(GeluPath::table, cview1(x), cview1(dy), view1(dx_table));
    gelu_backward_on<H>(GeluPath::arithmetic, cview1(x), cview1(dy), view1(dx_arith));
    for (std::size_t b = 0; b < kPatterns; ++b)
      ASSERT_EQ(dx_table[b].bits, dx_arith[b].bits) << "x bits " << b << ", dy bits " << dy[b].bits;
    std::vector<H> dx_default(kPatterns);
    gelu_backward<H>(cview1(x), cview1(dy), view1(dx_default));
    for (std::size_t b = 0; b < kPatterns; ++b) ASSERT_EQ(dx_default[b].bits, dx_table[b].bits) << b;
  }
  // In place: y over x, dx over dy.
  std::vector<H> in_place = x;
  gelu_forward_on<H>(GeluPath::table, cview1(in_place), view1(in_place));
  for (std::size_t b = 0; b < kPatterns; ++b) ASSERT_EQ(in_place[b].bits, y_table[b].bits) << b;
  std::vector<H> dy_in_place = dy;
  gelu_backward_on<H>(GeluPath::table, cview1(x), cview1(dy_in_place), view1(dy_in_place));
  for (std::size_t b = 0; b < kPatterns; ++b) ASSERT_EQ(dy_in_place[b].bits, dx_table[b].bits) << b;
}

TEST(GeluTables, EveryPatternMatchesTheArithmetic) {
  check_tables<bf16>();
  check_tables<f16>();
}

TEST(GeluTables, SixteenBitIsFp32RoundedOnce) {
  // The tables' results are the fp32 kernel's on the widened inputs, rounded once.
  std::vector<double> xd = inputs();
  std::vector<float> xf = cast_vector<float>(xd), yf(xf.size()), dyf(xf.size()), dxf(xf.size());
  for (std::size_t i = 0; i < xf.size(); ++i) {
    xf[i] = to_float(bf16(xf[i]));
    dyf[i] = to_float(bf16(0.01f * static_cast<float>(i % 17) - 0.08f));
  }
  std::vector<bf16> x(xf.size()), y(xf.size()), dy(xf.size()), dx(xf.size());
  for (std::size_t i = 0; i < xf.size(); ++i) {
    x[i] = bf16(xf[i]);
    dy[i] = bf16(dyf[i]);
  }
  gelu_forward<float>(cview1(xf), view1(yf));
  gelu_backward<float>(cview1(xf), cview1(dyf), view1(dxf));
  gelu_forward<bf16>(cview1(x), view1(y));
  gelu_backward<bf16>(cview1(x), cview1(dy), view1(dx));
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i].bits, bf16(yf[i]).bits) << i;
    ASSERT_EQ(dx[i].bits, bf16(dxf[i]).bits) << i;
  }
}

TEST(GeluErf, ForwardAndBackwardMatchErfFormula) {
  const auto x = inputs();
  const auto dy = test::random_vector(x.size(), 61);
  std::vector<double> y(x.size()), dx(x.size());
  gelu_erf_forward<double>(cview1(x), view1(y));
  gelu_erf_backward<double>(cview1(x), cview1(dy), view1(dx));
  const auto xf = cast_vector<float>(x), dyf = cast_vector<float>(dy);
  std::vector<float> yf(x.size()), dxf(x.size());
  gelu_erf_forward<float>(cview1(xf), view1(yf));
  gelu_erf_backward<float>(cview1(xf), cview1(dyf), view1(dxf));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const long double want = naive_gelu_erf(x[i]), want_dx = dy[i] * naive_gelu_erf_grad(x[i]);
    ASSERT_NEAR(y[i], static_cast<double>(want), 1e-14) << x[i];
    ASSERT_NEAR(dx[i], static_cast<double>(want_dx), 1e-14) << x[i];
    ASSERT_NEAR(yf[i], static_cast<double>(naive_gelu_erf(xf[i])), 2e-6 * (1.0 + std::fabs(x[i]))) << x[i];
    ASSERT_NEAR(dxf[i], static_cast<double>(dyf[i] * naive_gelu_erf_grad(xf[i])), 2e-6) << x[i];
  }
  // The tanh form differs by up to ~1e-3 around |x| ~ 2: the two are not confused.
  std::vector<double> y_tanh(x.size());
  gelu_forward<double>(cview1(x), view1(y_tanh));
  double max_diff = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) max_diff = std::max(max_diff, std::fabs(y[i] - y_tanh[i]));
  EXPECT_GT(max_diff, 1e-4);
}

TEST(GeluErf, Gradient) {
  auto x = test::random_vector(53, 62, -4.0, 4.0);
  const auto r = test::random_vector(53, 63);
  std::vector<double> dx(53, 9.0);
  gelu_erf_backward<double>(cview1(x), cview1(r), view1(dx));
  auto loss = [&](std::span<const double> v) {
    std::vector<double> xv(v.begin(), v.end()), y(v.size());
    gelu_erf_forward<double>(cview1(xv), view1(y));
    return test::weighted_sum(y, r);
  };
  EXPECT_TRUE(test::gradient_ok("gelu_erf dx", test::gradcheck(loss, x, dx)));
}

template <class H>
void check_erf_half() {
  const auto xd = test::random_vector(3000, 64, -5.0, 5.0), dyd = test::random_vector(3000, 65);
  std::vector<H> x(3000), dy(3000), y(3000), dx(3000);
  std::vector<float> xf(3000), dyf(3000), yf(3000), dxf(3000);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = H(static_cast<float>(xd[i]));
    dy[i] = H(static_cast<float>(dyd[i]));
    xf[i] = to_float(x[i]);
    dyf[i] = to_float(dy[i]);
  }
  gelu_erf_forward<H>(cview1(x), view1(y));
  gelu_erf_backward<H>(cview1(x), cview1(dy), view1(dx));
  gelu_erf_forward<float>(cview1(xf), view1(yf));
  gelu_erf_backward<float>(cview1(xf), cview1(dyf), view1(dxf));
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(to_float(y[i]), to_float(H(yf[i]))) << i;  // the fp32 result rounded once
    ASSERT_EQ(to_float(dx[i]), to_float(H(dxf[i]))) << i;
  }
  // In place: y over x, dx over dy.
  gelu_erf_forward<H>(cview1(x), view1(x));
  gelu_erf_backward<H>(cview1(y), cview1(dy), view1(dy));
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(to_float(x[i]), to_float(y[i])) << i;
}

TEST(GeluErf, SixteenBitIsFp32RoundedOnceAndInPlace) {
  check_erf_half<f16>();
  check_erf_half<bf16>();
}

TEST(GeluErf, SizeMismatchThrows) {
  std::vector<double> x(4), y(5);
  EXPECT_THROW(gelu_erf_forward<double>(cview1(x), view1(y)), Error);
  EXPECT_THROW(gelu_erf_backward<double>(cview1(x), cview1(x), view1(y)), Error);
}

}  // namespace
}  // namespace shardtrain
