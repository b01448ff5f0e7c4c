// Tests relu_forward / relu_backward: forward against x > 0 ? x : 0 with concrete
// values (negative, -0, +0, positive, NaN, inf) across several chunks; backward from
// the saved input and from the saved output give the same dx; float64 central-
// difference check of dx (inputs kept away from the kink at 0); in-place use;
// 16-bit types exact; size errors. The bit-level float / bf16 / f16 loops (every
// f16 and bf16 pattern, and float specials and random patterns) against the fp32
// comparison, at lengths around the vector widths and the chunk size (tails), in
// place and out of place: y and dx bit for bit what the widened fp32 ReLU gives
// (rounding a result back is exact; NaN keeps its bits).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/relu.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview1;
using test::view1;

TEST(Relu, ForwardAndBackwardConcreteValues) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> x = {-2.5, -0.0, 0.0, 1e-300, 3.25, -inf, inf,
                                 std::numeric_limits<double>::quiet_NaN()};
  std::vector<double> y(x.size(), 7.0), dx(x.size(), 7.0);
  const std::vector<double> dy = {1, 2, 3, 4, 5, 6, 7, 8};
  relu_forward<double>(cview1(x), view1(y));
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_FALSE(std::signbit(y[1]));  // -0 -> +0
  EXPECT_EQ(y[2], 0.0);
  EXPECT_EQ(y[3], 1e-300);
  EXPECT_EQ(y[4], 3.25);
  EXPECT_EQ(y[5], 0.0);
  EXPECT_EQ(y[6], inf);
  EXPECT_TRUE(std::isnan(y[7]));  // NaN reaches the loss scaler
  relu_backward<double>(cview1(x), cview1(dy), view1(dx));
  EXPECT_EQ(dx, (std::vector<double>{0, 0, 0, 4, 5, 0, 7, 0}));
}

TEST(Relu, ManyChunksSavedInputOrOutput) {
  const std::size_t n = 3 * 4096 + 123;
  const auto x = test::random_vector(n, 51, -2.0, 2.0);
  const auto dy = test::random_vector(n, 52);
  std::vector<double> y(n), dx_from_x(n), dx_from_y(n);
  relu_forward<double>(cview1(x), view1(y));
  relu_backward<double>(cview1(x), cview1(dy), view1(dx_from_x));
  relu_backward<double>(cview1(y), cview1(dy), view1(dx_from_y));
  std::size_t positive = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(y[i], x[i] > 0 ? x[i] : 0.0) << i;
    ASSERT_EQ(dx_from_x[i], x[i] > 0 ? dy[i] : 0.0) << i;
    positive += x[i] > 0;
  }
  EXPECT_EQ(dx_from_x, dx_from_y);
  EXPECT_GT(positive, n / 3);  // both branches exercised
  EXPECT_LT(positive, 2 * n / 3);
  // float, in place (y == x, dx == dy): same bits as out of place.
  auto xf = cast_vector<float>(x), dyf = cast_vector<float>(dy);
  std::vector<float> yf(n), dxf(n);
  relu_forward<float>(cview1(xf), view1(yf));
  relu_backward<float>(cview1(xf), cview1(dyf), view1(dxf));
  relu_backward<float>(cview1(xf), cview1(dyf), view1(dyf));
  relu_forward<float>(cview1(xf), view1(xf));
  EXPECT_EQ(xf, yf);
  EXPECT_EQ(dyf, dxf);
}

TEST(Relu, Gradient) {
  auto x = test::random_vector(41, 53, -1.0, 1.0);
  for (double& v : x) v += v >= 0 ? 0.01 : -0.01;  // |x| >= 0.01 >> step
  const auto r = test::random_vector(41, 54);
  std::vector<double> dx(41, 9.0);
  relu_backward<double>(cview1(x), cview1(r), view1(dx));
  auto loss = [&](std::span<const double> v) {
    std::vector<double> xv(v.begin(), v.end()), y(v.size());
    relu_forward<double>(cview1(xv), view1(y));
    return test::weighted_sum(y, r);
  };
  EXPECT_TRUE(test::gradient_ok("relu dx", test::gradcheck(loss, x, dx)));
}

template <class H>
void check_half() {
  const auto xd = test::random_vector(5000, 55, -3.0, 3.0), dyd = test::random_vector(5000, 56);
  std::vector<H> x(5000), dy(5000), y(5000), dx(5000);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = H(static_cast<float>(xd[i]));
    dy[i] = H(static_cast<float>(dyd[i]));
  }
  relu_forward<H>(cview1(x), view1(y));
  relu_backward<H>(cview1(y), cview1(dy), view1(dx));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float xi = to_float(x[i]);
    ASSERT_EQ(to_float(y[i]), xi > 0 ? xi : 0.0f) << type_name<H>() << " " << i;
    ASSERT_EQ(to_float(dx[i]), xi > 0 ? to_float(dy[i]) : 0.0f) << type_name<H>() << " " << i;
  }
}

TEST(Relu, HalfIsExact) {
  check_half<f16>();
  check_half<bf16>();
}

TEST(Relu, SizeMismatchThrows) {
  std::vector<double> x(4), y(5);
  EXPECT_THROW(relu_forward<double>(cview1(x), view1(y)), Error);
  EXPECT_THROW(relu_backward<double>(cview1(x), cview1(x), view1(y)), Error);
}

template <class T>
std::uint32_t bits_of(T v) {
  if constexpr (std::is_same_v<T, float>) return std::bit_cast<std::uint32_t>(v);
  else return v.bits;
}

// x and dy bit patterns -> relu_forward / relu_backward (saved = x) against the
// fp32 reference on the widened values, bit for bit, out of place and in place.
template <class T>
void check_bits_against_fp32(const std::vector<T>& x, const std::vector<T>& dy) {
  const std::size_t n = x.size();
  std::vector<T> y(n, T(5.0f)), dx(n, T(5.0f));
  relu_forward<T>(cview1(x), view1(y));
  relu_backward<T>(cview1(x), cview1(dy), view1(dx));
  for (std::size_t i = 0; i < n; ++i) {
    const float xi = to_float(x[i]);
    // NaN passes with its bits; otherwise x <= 0 -> +0, x -> x (T(fp32 result) is exact).
    const std::uint32_t want_y = std::isnan(xi) ? bits_of(x[i]) : bits_of(xi <= 0.0f ? T(0.0f) : T(xi));
    const std::uint32_t want_dx = xi > 0.0f ? bits_of(dy[i]) : bits_of(T(0.0f));
    ASSERT_EQ(bits_of(y[i]), want_y) << type_name<T>() << " n=" << n << " i=" << i << " x bits " << bits_of(x[i]);
    ASSERT_EQ(bits_of(dx[i]), want_dx) << type_name<T>() << " n=" << n << " i=" << i << " x bits " << bits_of(x[i]);
  }
  // In place: y aliasing x, dx aliasing dy.
  std::vector<T> xi = x, dyi = dy;
  relu_backward<T>(cview1(x), cview1(dyi), view1(dyi));
  relu_forward<T>(cview1(xi), view1(xi));
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits_of(xi[i]), bits_of(y[i])) << type_name<T>() << " in place, i=" << i;
    ASSERT_EQ(bits_of(dyi[i]), bits_of(dx[i])) << type_name<T>() << " in place, i=" << i;
  }
}

template <class H>
void check_every_pattern() {
  std::vector<H> x(0x10000), dy(0x10000);
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    x[b] = H::from_bits(static_cast<std::uint16_t>(b));
    dy[b] = H::from_bits(static_cast<std::uint16_t>(b * 7919u + 13u));
  }
  check_bits_against_fp32(x, dy);
}

TEST(Relu, EverySixteenBitPatternMatchesFp32) {
  check_every_pattern<bf16>();
  check_every_pattern<f16>();
}

TEST(Relu, TailsAndSpecialsMatchFp32) {
  std::mt19937 rng(77);
  const std::vector<std::uint32_t> special = {0u, 0x80000000u, 1u, 0x80000001u, 0x7F800000u, 0xFF800000u,
                                              0x7F800001u, 0xFFC00000u, 0x7FC00123u, 0x3F800000u, 0xBF800000u};
  for (std::size_t n : {0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 65, 8191, 8192, 8193, 2 * 8192 + 5}) {
    std::vector<float> x(n), dy(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(rng() % 3 ? rng() : special[rng() % special.size()]));
      dy[i] = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    }
    check_bits_against_fp32(x, dy);
    std::vector<bf16> xb(n), dyb(n);
    std::vector<f16> xh(n), dyh(n);
    for (std::size_t i = 0; i < n; ++i) {
      xb[i] = bf16::from_bits(static_cast<std::uint16_t>(rng()));
      dyb[i] = bf16::from_bits(static_cast<std::uint16_t>(rng()));
      xh[i] = f16::from_bits(static_cast<std::uint16_t>(rng()));
      dyh[i] = f16::from_bits(static_cast<std::uint16_t>(rng()));
    }
    check_bits_against_fp32(xb, dyb);
    check_bits_against_fp32(xh, dyh);
  }
}

}  // namespace
}  // namespace shardtrain
