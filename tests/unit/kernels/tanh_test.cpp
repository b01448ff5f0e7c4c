// Tests tanh_forward / tanh_backward (kernels/tanh.hpp): forward against std::tanh
// in long double and backward dy (1 - y^2) from the saved output, in double and
// float, across several chunks; float64 central-difference check of dx; in place
// (y == x, dx == dy); f16 / bf16 as the fp32 result rounded once; size errors.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/tanh.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview1;
using test::view1;

TEST(Tanh, ForwardAndBackwardMatchFormula) {
  const std::size_t n = 3 * 4096 + 77;
  const auto x = test::random_vector(n, 71, -6.0, 6.0);
  const auto dy = test::random_vector(n, 72);
  std::vector<double> y(n), dx(n);
  tanh_forward<double>(cview1(x), view1(y));
  tanh_backward<double>(cview1(y), cview1(dy), view1(dx));
  const auto xf = cast_vector<float>(x), dyf = cast_vector<float>(dy);
  std::vector<float> yf(n), dxf(n);
  tanh_forward<float>(cview1(xf), view1(yf));
  tanh_backward<float>(cview1(yf), cview1(dyf), view1(dxf));
  for (std::size_t i = 0; i < n; ++i) {
    const long double t = std::tanh(static_cast<long double>(x[i]));
    ASSERT_NEAR(y[i], static_cast<double>(t), 1e-15) << x[i];
    ASSERT_NEAR(dx[i], static_cast<double>(dy[i] * (1.0L - t * t)), 1e-14) << x[i];
    ASSERT_NEAR(yf[i], std::tanh(static_cast<double>(xf[i])), 1e-6) << x[i];
    ASSERT_NEAR(dxf[i], static_cast<double>(dyf[i]) * (1.0 - std::tanh(static_cast<double>(xf[i])) *
                                                                 std::tanh(static_cast<double>(xf[i]))),
                1e-6)
        << x[i];
  }
  // In place: y over x, then dx over dy, the same bits.
  auto xi = xf, dyi = dyf;
  tanh_forward<float>(cview1(xi), view1(xi));
  tanh_backward<float>(cview1(xi), cview1(dyi), view1(dyi));
  EXPECT_EQ(xi, yf);
  EXPECT_EQ(dyi, dxf);
}

TEST(Tanh, Gradient) {
  const auto x = test::random_vector(47, 73, -2.5, 2.5);
  const auto r = test::random_vector(47, 74);
  std::vector<double> y(47), dx(47, 9.0);
  tanh_forward<double>(cview1(x), view1(y));
  tanh_backward<double>(cview1(y), cview1(r), view1(dx));
  auto loss = [&](std::span<const double> v) {
    std::vector<double> xv(v.begin(), v.end()), yv(v.size());
    tanh_forward<double>(cview1(xv), view1(yv));
    return test::weighted_sum(yv, r);
  };
  EXPECT_TRUE(test::gradient_ok("tanh dx", test::gradcheck(loss, x, dx)));
}

template <class H>
void check_half() {
  const auto xd = test::random_vector(5000, 75, -4.0, 4.0), dyd = test::random_vector(5000, 76);
  std::vector<H> x(5000), dy(5000), y(5000), dx(5000);
  std::vector<float> xf(5000), dyf(5000), yf(5000), dxf(5000);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = H(static_cast<float>(xd[i]));
    dy[i] = H(static_cast<float>(dyd[i]));
    xf[i] = to_float(x[i]);
    dyf[i] = to_float(dy[i]);
  }
  tanh_forward<H>(cview1(x), view1(y));
  for (std::size_t i = 0; i < x.size(); ++i) yf[i] = to_float(y[i]);  // backward reads the stored output
  tanh_backward<H>(cview1(y), cview1(dy), view1(dx));
  std::vector<float> yff(5000);
  tanh_forward<float>(cview1(xf), view1(yff));
  tanh_backward<float>(cview1(yf), cview1(dyf), view1(dxf));
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(to_float(y[i]), to_float(H(yff[i]))) << i;
    ASSERT_EQ(to_float(dx[i]), to_float(H(dxf[i]))) << i;
  }
}

TEST(Tanh, SixteenBitIsFp32RoundedOnce) {
  check_half<f16>();
  check_half<bf16>();
}

TEST(Tanh, SizeMismatchThrows) {
  std::vector<double> x(4), y(5);
  EXPECT_THROW(tanh_forward<double>(cview1(x), view1(y)), Error);
  EXPECT_THROW(tanh_backward<double>(cview1(x), cview1(x), view1(y)), Error);
}

}  // namespace
}  // namespace shardtrain
