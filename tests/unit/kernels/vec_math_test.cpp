// Tests the internal row primitives of kernels/vec_math.hpp: exp_fast<float>
// accuracy (vs double exp) and limits, and the fixed-lane sum / dot / max against
// long double references for every length from 0 to 70 (all tail lengths); the float
// lane tree (vector registers) bit for bit the scalar halving tree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <vector>

#include "gradcheck.hpp"
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

TEST(VecMath, ExpFastFloatAccuracy) {
  double worst = 0.0;
  float worst_x = 0.0f;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = static_cast<float>(-87.0 + 175.0 * i / 2000000.0);  // [-87, 88]
    const double want = std::exp(static_cast<double>(x));
    const double err = std::abs(static_cast<double>(vec::exp_fast<float>(x)) - want) / want;
    if (!(err <= worst)) {
      worst = err;
      worst_x = x;
    }
  }
  std::cout << "[exp_fast] max relative error " << worst << " at x=" << worst_x << std::endl;
  EXPECT_LE(worst, 4.0 * std::numeric_limits<float>::epsilon()) << "at x=" << worst_x;
}

TEST(VecMath, ExpFastFloatLimits) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(vec::exp_fast<float>(-inf), 0.0f);
  EXPECT_EQ(vec::exp_fast<float>(-100.0f), 0.0f);
  EXPECT_EQ(vec::exp_fast<float>(inf), inf);
  EXPECT_EQ(vec::exp_fast<float>(100.0f), inf);
  EXPECT_EQ(vec::exp_fast<float>(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(vec::exp_fast<float>(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(vec::exp_fast<double>(-inf), 0.0);  // double is std::exp
}

TEST(VecMath, LaneReductionsAllLengths) {
  const auto a = test::random_vector(70, 1, -2.0, 3.0), b = test::random_vector(70, 2);
  for (int n = 0; n <= 70; ++n) {
    long double s = 0.0L, d = 0.0L, sq = 0.0L;
    for (int j = 0; j < n; ++j) {
      s += a[j];
      d += static_cast<long double>(a[j]) * b[j];
      sq += (static_cast<long double>(a[j]) - 0.25L) * (a[j] - 0.25L);
    }
    EXPECT_NEAR(vec::sum(a.data(), n), static_cast<double>(s), 1e-14) << n;
    EXPECT_NEAR(vec::dot(a.data(), b.data(), n), static_cast<double>(d), 1e-14) << n;
    EXPECT_NEAR(vec::sum_sq_dev(a.data(), 0.25, n), static_cast<double>(sq), 1e-13) << n;
    if (n > 0) {
      double m = a[0];
      for (int j = 1; j < n; ++j) m = std::max(m, a[j]);
      EXPECT_EQ(vec::max(a.data(), n), m) << n;
      const std::vector<float> af(a.begin(), a.begin() + n);
      EXPECT_EQ(vec::max(af.data(), n), *std::max_element(af.begin(), af.end())) << n;
    }
  }
}

// combine_lanes<float> (vector registers) is the generic halving tree, bit for bit:
// lane l + w added to lane l for w = 8, 4, 2, 1, here spelled out in scalars on
// lanes whose magnitudes differ (so another order rounds differently; planted: the
// w = 2 step as (s4[0] + s4[1]) + (s4[2] + s4[3]) -> caught).
TEST(VecMath, FloatLaneTreeIsTheHalvingTree) {
  int orders_differ = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const auto r = test::random_vector(vec::kLanes, seed, -1.0, 1.0);
    float acc[vec::kLanes], t[vec::kLanes];
    for (int l = 0; l < vec::kLanes; ++l) acc[l] = t[l] = std::ldexp(static_cast<float>(r[l]), (l * 5) % 17 - 8);
    for (int w = vec::kLanes / 2; w >= 1; w /= 2) {
      volatile float* vt = t;  // scalar adds in this order, whatever the optimiser does
      for (int l = 0; l < w; ++l) vt[l] = vt[l] + vt[l + w];
    }
    const float got = vec::combine_lanes(acc);
    ASSERT_EQ(std::memcmp(&got, &t[0], sizeof got), 0) << "seed " << seed << ": " << got << " vs " << t[0];
    float serial = 0.0f;
    for (float x : acc) serial += x;
    orders_differ += serial != got ? 1 : 0;
  }
  EXPECT_GT(orders_differ, 0) << "the lanes never round differently in another order: the test cannot fail";
}

}  // namespace
}  // namespace shardtrain
