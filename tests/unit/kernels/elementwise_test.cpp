// Tests copy / accumulate / fill over several chunks (float and double), in place
// (y == x), and size errors.
#include <gtest/gtest.h>

#include <cstdint>
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

// 16-bit copy and fill move bits (copy: every pattern, NaN payloads included, over
// several chunks with a partial last one; fill: the value's bits everywhere, and
// nothing past the end).
template <class H>
void check_half_copy_fill() {
  const std::size_t n = 3 * 65536 + 17;
  std::vector<H> x(n), y(n + 1, H::from_bits(0x1234));
  for (std::size_t i = 0; i < n; ++i) x[i] = H::from_bits(static_cast<std::uint16_t>((i * 40503u + 7u) & 0xFFFFu));
  copy<H>(cview1(x), View1<H>(y.data(), n));
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(y[i].bits, x[i].bits) << i;
  ASSERT_EQ(y[n].bits, 0x1234);
  fill<H>(View1<H>(y.data(), n), H::from_bits(0x7FC1));  // a NaN pattern: bits, not a value
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(y[i].bits, 0x7FC1) << i;
  ASSERT_EQ(y[n].bits, 0x1234);
}

TEST(Elementwise, SixteenBitCopyAndFillMoveBits) {
  check_half_copy_fill<f16>();
  check_half_copy_fill<bf16>();
}

TEST(Elementwise, Double) { check_all<double>(); }
TEST(Elementwise, Float) { check_all<float>(); }

}  // namespace
}  // namespace shardtrain
