// Tests copy / accumulate / fill over several chunks (float and double), in place
// (y == x), and size errors.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/elementwise.hpp"

namespace shardtrain {
namespace {

using test::cview1;
using test::view1;

template <class T>
void check_all() {
  const std::size_t n = 20000;  // > 2 chunks of 8192, with a partial last chunk
  const auto xd = test::random_vector(n, 1), yd = test::random_vector(n, 2);
  const auto x = test::cast_vector<T>(xd), y0 = test::cast_vector<T>(yd);

  std::vector<T> y = y0;
  copy<T>(cview1(x), view1(y));
  EXPECT_EQ(y, x);

  y = y0;
  accumulate<T>(cview1(x), view1(y));
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], T(y0[i] + x[i])) << i;

  std::vector<T> self = x;
  accumulate<T>(cview1(self), view1(self));  // y += y
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(self[i], T(2) * x[i]) << i;
  copy<T>(cview1(self), view1(self));  // no-op
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(self[i], T(2) * x[i]) << i;

  fill<T>(view1(y), T(0.25));
  for (T v : y) ASSERT_EQ(v, T(0.25));

  std::vector<T> empty;
  EXPECT_NO_THROW(fill<T>(view1(empty), T(1)));
  std::vector<T> shorter(n - 1);
  EXPECT_THROW(copy<T>(cview1(x), view1(shorter)), Error);
  EXPECT_THROW(accumulate<T>(cview1(x), view1(shorter)), Error);
}

TEST(Elementwise, Double) { check_all<double>(); }
TEST(Elementwise, Float) { check_all<float>(); }

}  // namespace
}  // namespace shardtrain
