// Tests dropout_forward / dropout_backward (inverted dropout, mask regenerated from
// counters): kept fraction on 1e5 elements within 5 sigma of 1 - p for several p;
// kept values are exactly x / (1 - p) and dropped ones exactly 0; the mask equals
// dropout_keeps() element by element and is independent of how the call is split
// (offsets), while another stream / seed gives an independent mask; backward drops
// exactly the forward's elements; float64 central-difference check of dx; p = 0
// and eval mode are bitwise copies, p = 1 gives zeros; 16-bit types; bad p throws.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/dropout.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview1;
using test::view1;

constexpr std::size_t kN = 100000;

template <class T>
std::vector<T> forward(const DropoutParams& prm, const std::vector<T>& x) {
  std::vector<T> y(x.size(), T(std::numeric_limits<float>::quiet_NaN()));
  dropout_forward<T>(prm, cview1(x), view1(y));
  return y;
}

TEST(Dropout, KeptFractionAndScaledValues) {
  // Strictly positive inputs, so y == 0 means "dropped".
  const auto x = test::random_vector(kN, 61, 0.5, 2.0);
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    const DropoutParams prm{p, 1234, 7, 0, true};
    const auto y = forward<double>(prm, x);
    const double scale = 1.0 / (1.0 - p);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < kN; ++i) {
      const bool keep = dropout_keeps(prm, i);
      ASSERT_EQ(y[i], keep ? x[i] * scale : 0.0) << "p=" << p << " i=" << i;
      kept += keep;
    }
    const double frac = static_cast<double>(kept) / kN;
    const double sigma = std::sqrt(p * (1.0 - p) / kN);
    std::cout << "[dropout] p=" << p << " kept fraction " << frac << " (expected " << 1.0 - p
              << ", sigma " << sigma << ")" << std::endl;
    EXPECT_NEAR(frac, 1.0 - p, 5.0 * sigma) << "p=" << p;
  }
}

TEST(Dropout, MaskDependsOnlyOnCounters) {
  const auto x = test::random_vector(kN, 62, 0.5, 2.0);
  const DropoutParams prm{0.4, 99, 3, 0, true};
  const auto whole = forward<double>(prm, x);
  // The same elements in three calls of uneven sizes, each with offset = its first index.
  std::vector<double> split(kN);
  const std::size_t cuts[] = {0, 777, 54321, kN};
  for (int c = 0; c < 3; ++c) {
    const std::vector<double> part(x.begin() + cuts[c], x.begin() + cuts[c + 1]);
    DropoutParams sub = prm;
    sub.offset = cuts[c];
    const auto y = forward<double>(sub, part);
    std::copy(y.begin(), y.end(), split.begin() + cuts[c]);
  }
  EXPECT_EQ(split, whole);
  // A shifted offset is a different mask; so is another stream or seed. Two
  // independent masks with p = 0.4 agree on about 0.4^2 + 0.6^2 = 52% of elements.
  auto agreement = [&](DropoutParams other) {
    const auto y = forward<double>(other, x);
    std::size_t same = 0;
    for (std::size_t i = 0; i < kN; ++i) same += (y[i] == 0.0) == (whole[i] == 0.0);
    return static_cast<double>(same) / kN;
  };
  DropoutParams shifted = prm, stream = prm, seed = prm;
  shifted.offset = 1;
  stream.stream = 4;
  seed.seed = 100;
  for (const DropoutParams& o : {shifted, stream, seed}) EXPECT_NEAR(agreement(o), 0.52, 0.01);
  EXPECT_EQ(agreement(prm), 1.0);
}

TEST(Dropout, BackwardRegeneratesTheMask) {
  const auto x = test::random_vector(kN, 63, 0.5, 2.0);
  const auto dy = test::random_vector(kN, 64, 0.5, 2.0);
  const DropoutParams prm{0.25, 5, 6, 1000, true};
  const auto y = forward<double>(prm, x);
  std::vector<double> dx(kN, -1.0);
  dropout_backward<double>(prm, cview1(dy), view1(dx));
  for (std::size_t i = 0; i < kN; ++i) {
    ASSERT_EQ(dx[i] == 0.0, y[i] == 0.0) << i;
    ASSERT_EQ(dx[i], y[i] == 0.0 ? 0.0 : dy[i] * (1.0 / 0.75)) << i;
  }
  // In place (dx == dy) gives the same bits.
  std::vector<double> inplace = dy;
  dropout_backward<double>(prm, cview1(inplace), view1(inplace));
  EXPECT_EQ(inplace, dx);
}

TEST(Dropout, Gradient) {
  const auto x = test::random_vector(53, 65);
  const auto r = test::random_vector(53, 66);
  const DropoutParams prm{0.3, 8, 9, 17, true};
  std::vector<double> dx(53, 4.0);
  dropout_backward<double>(prm, cview1(r), view1(dx));
  auto loss = [&](std::span<const double> v) {
    return test::weighted_sum(forward<double>(prm, std::vector<double>(v.begin(), v.end())), r);
  };
  std::size_t dropped = 0;
  for (double g : dx) dropped += g == 0.0;
  EXPECT_GT(dropped, 5u);  // the check covers dropped and kept elements
  EXPECT_LT(dropped, 30u);
  EXPECT_TRUE(test::gradient_ok("dropout dx", test::gradcheck(loss, x, dx)));
}

TEST(Dropout, IdentityCasesAndAllDropped) {
  auto x = test::random_vector(9000, 67);
  x[3] = std::numeric_limits<double>::quiet_NaN();
  const auto xf = cast_vector<float>(x);
  auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same_bits(forward<float>({0.0, 1, 2, 0, true}, xf), xf));   // p = 0
  EXPECT_TRUE(same_bits(forward<float>({0.5, 1, 2, 0, false}, xf), xf));  // eval mode
  std::vector<float> dx(xf.size());
  dropout_backward<float>({0.5, 1, 2, 0, false}, cview1(xf), view1(dx));
  EXPECT_TRUE(same_bits(dx, xf));
  auto inf = xf;
  inf[0] = std::numeric_limits<float>::infinity();
  for (float v : forward<float>({1.0, 1, 2, 0, true}, inf)) ASSERT_EQ(v, 0.0f);  // p = 1
  EXPECT_EQ(dropout_threshold(0.0), 0u);
  EXPECT_EQ(dropout_threshold(1.0), std::uint64_t{1} << 53);
  EXPECT_EQ(dropout_threshold(0.5), std::uint64_t{1} << 52);
}

template <class H>
void check_half() {
  const auto xd = test::random_vector(20000, 68);
  std::vector<H> x(xd.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = H(static_cast<float>(xd[i]));
  const DropoutParams prm{0.3, 11, 12, 0, true};
  const auto y = forward<H>(prm, x);
  const float scale = static_cast<float>(1.0 / 0.7);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float want = dropout_keeps(prm, i) ? to_float(H(to_float(x[i]) * scale)) : 0.0f;
    ASSERT_EQ(to_float(y[i]), want) << type_name<H>() << " " << i;  // fp32 math, rounded once
  }
}

TEST(Dropout, HalfRoundsOnce) {
  check_half<f16>();
  check_half<bf16>();
}

TEST(Dropout, ErrorsThrow) {
  std::vector<double> x(4), y(5);
  EXPECT_THROW(dropout_forward<double>({0.5, 1, 2, 0, true}, cview1(x), view1(y)), Error);
  EXPECT_THROW(dropout_forward<double>({-0.1, 1, 2, 0, true}, cview1(x), view1(x)), Error);
  EXPECT_THROW(dropout_backward<double>({1.5, 1, 2, 0, true}, cview1(x), view1(x)), Error);
  EXPECT_THROW(dropout_threshold(std::numeric_limits<double>::quiet_NaN()), Error);
}

}  // namespace
}  // namespace shardtrain
