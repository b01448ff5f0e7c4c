// Tests seq_mean_pool_forward / seq_mean_pool_backward: forward against a direct
// reference (lengths mixed incl. 1 and T, and no lengths), length 1 is a bitwise
// copy of position 0, a float64 central-difference check of dx, dx OVERWRITTEN
// (zeros at padded positions), the 16-bit paths against fp32, and errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/seq_pool.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview1;

constexpr int B = 3, T = 5, C = 4;
const std::vector<std::int32_t> kLengths{1, 5, 3};

template <class V>
std::vector<V> pool(const std::vector<V>& x, const std::vector<std::int32_t>& len) {
  std::vector<V> y(B * C, V(-1.0f));
  seq_mean_pool_forward<V>(test::cview3(x, B, T, C), cview1(len), test::view2(y, B, C));
  return y;
}

template <class V>
std::vector<V> pool_back(const std::vector<V>& dy, const std::vector<std::int32_t>& len, V prefill) {
  std::vector<V> dx(B * T * C, prefill);
  seq_mean_pool_backward<V>(test::cview2(dy, B, C), cview1(len), test::view3(dx, B, T, C));
  return dx;
}

TEST(SeqMeanPool, ForwardMatchesReference) {
  const auto x = test::random_vector(B * T * C, 1);
  for (const auto& len : {kLengths, std::vector<std::int32_t>{}}) {
    const auto y = pool(x, len);
    for (int b = 0; b < B; ++b)
      for (int c = 0; c < C; ++c) {
        const int n = len.empty() ? T : len[b];
        long double s = 0;
        for (int t = 0; t < n; ++t) s += x[(b * T + t) * C + c];
        EXPECT_NEAR(y[b * C + c], double(s / n), 1e-15);
      }
  }
  const auto y = pool(x, kLengths);
  for (int c = 0; c < C; ++c) EXPECT_EQ(y[c], x[c]);  // length 1: position 0, bitwise
}

TEST(SeqMeanPool, GradientAndOverwrite) {
  const auto x = test::random_vector(B * T * C, 2);
  const auto r = test::random_vector(B * C, 3);
  const auto dx = pool_back(r, kLengths, std::numeric_limits<double>::quiet_NaN());
  auto loss = [&](std::span<const double> v) {
    return test::weighted_sum(pool<double>({v.begin(), v.end()}, kLengths), r);
  };
  EXPECT_TRUE(test::gradient_ok("seq_mean_pool B3 T5 C4 lengths 1,5,3 dx", test::gradcheck(loss, x, dx)));
  EXPECT_EQ(dx, pool_back(r, kLengths, 1e30));
  for (int t = 1; t < T; ++t)
    for (int c = 0; c < C; ++c) EXPECT_EQ(dx[t * C + c], 0.0);
}

TEST(SeqMeanPool, SixteenBitMatchesFloat) {
  const auto xf = cast_vector<float>(test::random_vector(B * T * C, 4));
  const auto yf = pool(xf, kLengths);
  EXPECT_LE(test::max_scaled_error(cast_vector<float>(pool(cast_vector<bf16>(xf), kLengths)), yf), 1e-2);
  EXPECT_LE(test::max_scaled_error(cast_vector<float>(pool(cast_vector<f16>(xf), kLengths)), yf), 2e-3);
  const auto dyf = cast_vector<float>(test::random_vector(B * C, 5));
  const auto dxf = pool_back(dyf, kLengths, 0.0f);
  EXPECT_LE(test::max_scaled_error(cast_vector<float>(pool_back(cast_vector<bf16>(dyf), kLengths, bf16(0.0f))), dxf),
            1e-2);
}

TEST(SeqMeanPool, Errors) {
  const auto x = test::random_vector(B * T * C, 6);
  EXPECT_THROW(pool(x, {0, 5, 3}), Error);
  EXPECT_THROW(pool(x, {1, 6, 3}), Error);
  EXPECT_THROW(pool(x, {1, 2}), Error);
}

}  // namespace
}  // namespace shardtrain
