// Tests max_pool2d_forward / max_pool2d_backward: output sizes; forward and argmax
// against a naive window scan (odd shape with overlapping 3x3/2 windows and a
// ragged edge, and the LeNet 2x2/2 shapes 6x28x28 and 16x10x10); the tie rule
// (first maximum in row-major window order) and NaN propagation; float64 central-
// difference check of dx (inputs spaced far apart, so no near-ties); dx
// OVERWRITTEN; overlapping windows sum their gradients; determinism; 16-bit types
// (exact); shape and argmax errors. Every implementation (pool_paths.hpp: the
// scalar scan, the GCC-vectorised 2x2 rows, the AVX-512 2x2 rows) on the same
// inputs, bit for bit: odd and short shapes (vector tails, the row and column no
// window covers), many ties, +-0, infinities, NaNs with payloads (signalling ones
// included) in x and dy, an argmax that points outside its window; the 2x2
// backward's 0 + dy on the bits against fp32 addition for every f16 / bf16 pattern.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <iostream>
#include <string>
#include <type_traits>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/float_bits.hpp"
#include "kernels/pool.hpp"
#include "kernels/pool_paths.hpp"
#include "kernels/relu.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview4;
using test::view4;

//                          N  C  H  W  k  s
const Pool2dShape kOverlap{3, 2, 7, 9, 3, 2};  // -> 3 x 4, windows overlap, last row/col unused
const Pool2dShape kLeNet1{2, 6, 28, 28, 2, 2};  // -> 14 x 14
const Pool2dShape kLeNet2{2, 16, 10, 10, 2, 2};  // -> 5 x 5

std::int64_t in_elems(const Pool2dShape& s) { return s.batch * s.channels * s.height * s.width; }
std::int64_t out_elems(const Pool2dShape& s) { return s.batch * s.channels * s.out_h() * s.out_w(); }

// Distinct values (a shuffled grid with spacing 2/n in (-1, 1)): no ties, and no two
// values closer than the finite-difference step.
std::vector<double> distinct_values(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), std::mt19937_64(seed));
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = -1.0 + 2.0 * (idx[i] + 0.5) / n;
  return v;
}

struct NaivePool {
  std::vector<double> y;
  std::vector<std::int32_t> argmax;
};

NaivePool naive_pool(const Pool2dShape& s, const std::vector<double>& x) {
  NaivePool r;
  const std::int64_t oh = s.out_h(), ow = s.out_w(), hw = s.height * s.width;
  for (std::int64_t plane = 0; plane < s.batch * s.channels; ++plane)
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j) {
        std::int64_t best = -1;
        for (std::int64_t p = 0; p < s.kernel; ++p)
          for (std::int64_t q = 0; q < s.kernel; ++q) {
            const std::int64_t idx = (i * s.stride + p) * s.width + j * s.stride + q;
            if (best < 0 || x[plane * hw + idx] > x[plane * hw + best]) best = idx;
          }
        r.y.push_back(x[plane * hw + best]);
        r.argmax.push_back(static_cast<std::int32_t>(best));
      }
  return r;
}

template <class T>
void run_forward(const Pool2dShape& s, const std::vector<T>& x, std::vector<T>& y,
                      std::vector<std::int32_t>& argmax) {
  y.assign(out_elems(s), T(std::numeric_limits<float>::quiet_NaN()));
  argmax.assign(out_elems(s), -5);
  max_pool2d_forward<T>(s, cview4(x, s.batch, s.channels, s.height, s.width),
                        view4(y, s.batch, s.channels, s.out_h(), s.out_w()),
                        view4(argmax, s.batch, s.channels, s.out_h(), s.out_w()));
}

template <class T>
std::vector<T> run_backward(const Pool2dShape& s, const std::vector<T>& dy,
                            const std::vector<std::int32_t>& argmax, T fill) {
  std::vector<T> dx(in_elems(s), fill);
  max_pool2d_backward<T>(s, cview4(dy, s.batch, s.channels, s.out_h(), s.out_w()),
                         cview4(argmax, s.batch, s.channels, s.out_h(), s.out_w()),
                         view4(dx, s.batch, s.channels, s.height, s.width));
  return dx;
}

TEST(MaxPool2d, OutputSizes) {
  EXPECT_EQ(kOverlap.out_h(), 3);
  EXPECT_EQ(kOverlap.out_w(), 4);
  EXPECT_EQ(kLeNet1.out_h(), 14);
  EXPECT_EQ(kLeNet2.out_w(), 5);
}

TEST(MaxPool2d, ForwardMatchesNaive) {
  for (const Pool2dShape& s : {kOverlap, kLeNet1, kLeNet2}) {
    const auto x = test::random_vector(in_elems(s), 3);
    const NaivePool ref = naive_pool(s, x);
    std::vector<double> y;
    std::vector<std::int32_t> am;
    run_forward<double>(s, x, y, am);
    EXPECT_EQ(y, ref.y);
    EXPECT_EQ(am, ref.argmax);
    const auto xf = cast_vector<float>(x);
    std::vector<float> yf;
    run_forward<float>(s, xf, yf, am);
    EXPECT_EQ(am, ref.argmax);  // float rounding keeps the order of these values
    EXPECT_EQ(yf, cast_vector<float>(ref.y));
  }
  // A concrete window: 2x2/2 over 4x4 = 0..15 row-major -> maxima 5, 7, 13, 15.
  const Pool2dShape s{1, 1, 4, 4, 2, 2};
  std::vector<double> x(16), y;
  std::iota(x.begin(), x.end(), 0.0);
  std::vector<std::int32_t> am;
  run_forward<double>(s, x, y, am);
  EXPECT_EQ(y, (std::vector<double>{5, 7, 13, 15}));
  EXPECT_EQ(am, (std::vector<std::int32_t>{5, 7, 13, 15}));
}

TEST(MaxPool2d, TiesPickFirstInRowMajorOrderAndNaNPropagates) {
  const Pool2dShape s{1, 1, 4, 4, 2, 2};
  // Window (0,0): all equal -> index 0. Window (0,1): max 3 at (0,3) and (1,2) -> (0,3)=3.
  // Window (1,0): max at (3,0) and (3,1) -> (3,0)=12. Window (1,1): NaN at (3,3) and max 9
  // elsewhere -> NaN wins.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> x = {1, 1, 2, 3,   //
                           1, 1, 3, 0,   //
                           0, 0, 9, 1,   //
                           5, 5, 2, nan};
  std::vector<double> y;
  std::vector<std::int32_t> am;
  run_forward<double>(s, x, y, am);
  EXPECT_EQ(am, (std::vector<std::int32_t>{0, 3, 12, 15}));
  EXPECT_EQ(y[0], 1.0);
  EXPECT_EQ(y[1], 3.0);
  EXPECT_EQ(y[2], 5.0);
  EXPECT_TRUE(std::isnan(y[3]));
  // NaN first in its window also wins against larger values after it.
  x[10] = nan;
  x[15] = 100.0;
  run_forward<double>(s, x, y, am);
  EXPECT_EQ(am[3], 10);
  EXPECT_TRUE(std::isnan(y[3]));
}

void check_gradient(const Pool2dShape& s, const char* label) {
  const auto x = distinct_values(in_elems(s), 17);
  const auto r = test::random_vector(out_elems(s), 18);
  std::vector<double> y;
  std::vector<std::int32_t> am;
  run_forward<double>(s, x, y, am);
  const auto dx = run_backward<double>(s, r, am, 77.0);
  auto loss = [&](std::span<const double> v) {
    std::vector<double> xv(v.begin(), v.end()), yv;
    std::vector<std::int32_t> a;
    run_forward<double>(s, xv, yv, a);
    return test::weighted_sum(yv, r);
  };
  EXPECT_TRUE(test::gradient_ok(label, test::gradcheck(loss, x, dx)));
}

TEST(MaxPool2d, GradientOverlappingWindows) { check_gradient(kOverlap, "maxpool 3x3/2 dx"); }
TEST(MaxPool2d, GradientLeNet) {
  Pool2dShape s = kLeNet2;
  s.batch = 1;
  check_gradient(s, "maxpool lenet 2x2/2 dx");
}

TEST(MaxPool2d, BackwardOverwritesAndSumsOverlaps) {
  // 1x1x3x3, kernel 2, stride 1: the centre (index 4) is in all four windows.
  const Pool2dShape s{1, 1, 3, 3, 2, 1};
  const std::vector<double> x = {0, 0, 0, 0, 9, 0, 0, 0, 0};
  std::vector<double> y;
  std::vector<std::int32_t> am;
  run_forward<double>(s, x, y, am);
  EXPECT_EQ(am, (std::vector<std::int32_t>{4, 4, 4, 4}));
  const std::vector<double> dy = {1, 2, 4, 8};
  const auto dx = run_backward<double>(s, dy, am, -3.0);
  EXPECT_EQ(dx, (std::vector<double>{0, 0, 0, 0, 15, 0, 0, 0, 0}));
}

TEST(MaxPool2d, DeterministicAndHalfExact) {
  const Pool2dShape s = kLeNet1;
  const auto xd = test::random_vector(in_elems(s), 9);
  const auto dyd = test::random_vector(out_elems(s), 10);
  const auto x = cast_vector<float>(xd), dy = cast_vector<float>(dyd);
  std::vector<float> y1, y2;
  std::vector<std::int32_t> a1, a2;
  run_forward<float>(s, x, y1, a1);
  run_forward<float>(s, x, y2, a2);
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(run_backward<float>(s, dy, a1, 1.0f), run_backward<float>(s, dy, a1, 2.0f));
  // 16-bit storage: non-overlapping windows, so forward and backward are exact.
  auto check16 = [&](auto tag) {
    using H = decltype(tag);
    std::vector<H> xh(x.size()), dyh(dy.size()), yh;
    for (std::size_t i = 0; i < x.size(); ++i) xh[i] = H(x[i]);
    for (std::size_t i = 0; i < dy.size(); ++i) dyh[i] = H(dy[i]);
    std::vector<float> xw(x.size()), yw;
    for (std::size_t i = 0; i < x.size(); ++i) xw[i] = to_float(xh[i]);
    std::vector<std::int32_t> ah, aw;
    run_forward<H>(s, xh, yh, ah);
    run_forward<float>(s, xw, yw, aw);
    EXPECT_EQ(ah, aw) << type_name<H>();
    for (std::size_t i = 0; i < yw.size(); ++i) ASSERT_EQ(to_float(yh[i]), yw[i]) << type_name<H>();
    const auto dxh = run_backward<H>(s, dyh, ah, H(5.0f));
    for (std::size_t i = 0; i < dxh.size(); ++i) {
      const auto it = std::find(ah.begin() + (i / 784) * 196, ah.begin() + (i / 784 + 1) * 196,
                                static_cast<std::int32_t>(i % 784));
      const float want = it == ah.begin() + (i / 784 + 1) * 196
                             ? 0.0f
                             : to_float(dyh[it - ah.begin()]);
      ASSERT_EQ(to_float(dxh[i]), want) << type_name<H>() << " " << i;
    }
  };
  check16(f16{});
  check16(bf16{});
}

TEST(MaxPool2d, ErrorsThrow) {
  const Pool2dShape s = kOverlap;
  std::vector<double> x(in_elems(s)), y(out_elems(s)), dx(in_elems(s));
  std::vector<std::int32_t> am(out_elems(s), 0);
  EXPECT_THROW(max_pool2d_forward<double>(s, cview4(x, 3, 2, 9, 7), view4(y, 3, 2, 3, 4),
                                          view4(am, 3, 2, 3, 4)),
               Error);
  Pool2dShape big = s;
  big.kernel = 8;  // larger than H = 7
  EXPECT_THROW(max_pool2d_check_shape(big), Error);
  am[5] = 63;  // H * W = 63: out of range
  EXPECT_THROW(run_backward<double>(s, y, am, 4.0), Error);
  am[5] = -1;
  EXPECT_THROW(run_backward<double>(s, y, am, 4.0), Error);
  am[5] = 62;
  EXPECT_NO_THROW(run_backward<double>(s, y, am, 4.0));
}

// --- every path, bit for bit -----------------------------------------------------------

template <class T>
std::uint32_t bits_of(T v) {
  if constexpr (std::is_same_v<T, float>) return std::bit_cast<std::uint32_t>(v);
  else return v.bits;
}

template <class T>
T from_bits(std::uint32_t b) {
  if constexpr (std::is_same_v<T, float>) return std::bit_cast<float>(b);
  else return T::from_bits(static_cast<std::uint16_t>(b));
}

// Values drawn from a small set (many ties, +-0, +-inf, NaNs of both signs with
// payloads, a signalling one among them) and, with probability 1/2, a random number.
template <class T>
std::vector<T> nasty_values(std::size_t n, std::uint64_t seed) {
  const bool wide = std::is_same_v<T, float>;
  const bool bf = std::is_same_v<T, bf16>;
  const std::uint32_t inf = wide ? 0x7F800000u : bf ? 0x7F80u : 0x7C00u;
  const std::uint32_t sign = wide ? 0x80000000u : 0x8000u;
  const std::uint32_t quiet = wide ? 0x00400000u : bf ? 0x40u : 0x200u;
  const std::vector<std::uint32_t> special = {0u, sign, inf, sign | inf, inf | quiet | 3u, sign | inf | quiet | 5u,
                                              inf | 1u /* signalling */, bits_of(T(1.0f)), bits_of(T(1.0f)),
                                              bits_of(T(-1.0f)), bits_of(T(0.5f)), bits_of(T(-0.5f))};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<T> v(n);
  for (auto& e : v) e = rng() % 2 ? T(u(rng)) : from_bits<T>(special[rng() % special.size()]);
  return v;
}

template <class T>
std::vector<std::uint32_t> all_bits(const std::vector<T>& v) {
  std::vector<std::uint32_t> b;
  for (const T& e : v) b.push_back(bits_of(e));
  return b;
}

struct PathRun {
  std::vector<std::uint32_t> y, dx, dx_elsewhere;
  std::vector<std::int32_t> argmax;
};

template <class T>
PathRun run_path(PoolPath path, const Pool2dShape& s, const std::vector<T>& x, const std::vector<T>& dy) {
  PathRun r;
  std::vector<T> y(out_elems(s), T(7.0f)), dx(in_elems(s), T(9.0f));
  r.argmax.assign(out_elems(s), -5);
  const auto n = s.batch, c = s.channels, oh = s.out_h(), ow = s.out_w();
  max_pool2d_forward_path<T>(path, s, cview4(x, n, c, s.height, s.width), view4(y, n, c, oh, ow),
                             view4(r.argmax, n, c, oh, ow));
  max_pool2d_backward_path<T>(path, s, cview4(dy, n, c, oh, ow), cview4(r.argmax, n, c, oh, ow),
                              view4(dx, n, c, s.height, s.width));
  r.y = all_bits(y);
  r.dx = all_bits(dx);
  // An argmax in range but outside its window (the last plane's first output
  // points at the plane's last element): still routed there, on every path.
  std::vector<std::int32_t> moved = r.argmax;
  moved[moved.size() - static_cast<std::size_t>(oh * ow)] = static_cast<std::int32_t>(s.height * s.width - 1);
  std::fill(dx.begin(), dx.end(), T(9.0f));
  max_pool2d_backward_path<T>(path, s, cview4(dy, n, c, oh, ow), cview4(moved, n, c, oh, ow),
                              view4(dx, n, c, s.height, s.width));
  r.dx_elsewhere = all_bits(dx);
  return r;
}

template <class T>
void check_paths_agree() {
  //                         N  C   H   W  k  s
  const Pool2dShape shapes[] = {{3, 5, 24, 24, 2, 2},   // MNIST conv 1: 12 outputs per row
                                {2, 7, 8, 8, 2, 2},     // MNIST conv 2: 4 per row
                                {2, 3, 9, 11, 2, 2},    // odd H and W: a row and a column in no window
                                {1, 2, 6, 71, 2, 2},    // 35 per row: two full vector steps and a tail
                                {1, 1, 2, 2, 2, 2},     // one output
                                {2, 2, 7, 9, 3, 2}};    // overlapping windows: every path is the scalar one
  for (const Pool2dShape& s : shapes) {
    const auto x = nasty_values<T>(static_cast<std::size_t>(in_elems(s)), 61);
    const auto dy = nasty_values<T>(static_cast<std::size_t>(out_elems(s)), 62);
    const PathRun ref = run_path<T>(PoolPath::Scalar, s, x, dy);
    // The scalar path against a naive float scan (first maximum / first NaN).
    for (std::int64_t plane = 0; plane < s.batch * s.channels; ++plane)
      for (std::int64_t i = 0; i < s.out_h(); ++i)
        for (std::int64_t j = 0; j < s.out_w(); ++j) {
          std::int64_t best = (i * s.stride) * s.width + j * s.stride;
          for (std::int64_t p = 0; p < s.kernel; ++p)
            for (std::int64_t q = 0; q < s.kernel; ++q) {
              const std::int64_t idx = (i * s.stride + p) * s.width + j * s.stride + q;
              const float v = to_float(x[plane * s.height * s.width + idx]);
              const float b = to_float(x[plane * s.height * s.width + best]);
              if (v > b || (std::isnan(v) && !std::isnan(b))) best = idx;
            }
          const std::size_t o = static_cast<std::size_t>((plane * s.out_h() + i) * s.out_w() + j);
          ASSERT_EQ(ref.argmax[o], best) << type_name<T>() << " plane " << plane << " output " << i << "," << j;
          ASSERT_EQ(ref.y[o], bits_of(x[plane * s.height * s.width + best])) << type_name<T>();
        }
    for (PoolPath path : {PoolPath::Vector, PoolPath::Avx512, PoolPath::Auto}) {
      const PathRun got = run_path<T>(path, s, x, dy);
      const char* name = path == PoolPath::Vector ? "vector" : path == PoolPath::Avx512 ? "avx512" : "auto";
      const std::string what = std::string(type_name<T>()) + " path " + name + " against scalar," +
                               " shape H=" + std::to_string(s.height) + " W=" + std::to_string(s.width);
      EXPECT_EQ(got.argmax, ref.argmax) << what;
      EXPECT_EQ(got.y, ref.y) << what;
      EXPECT_EQ(got.dx, ref.dx) << what;
      EXPECT_EQ(got.dx_elsewhere, ref.dx_elsewhere) << what;
    }
  }
}

TEST(MaxPool2dPaths, AgreeBitForBit) {
  // Says which paths really ran (Avx512 falls back to Vector without AVX-512F/BW).
  std::cout << "pool paths: scalar, vector (GCC target clones), avx512 "
            << (pool_avx512_available() ? "(available)" : "(NOT available: runs as vector)") << "\n";
  check_paths_agree<float>();
  check_paths_agree<bf16>();
  check_paths_agree<f16>();
}

TEST(MaxPool2dPaths, TiesAndNaNOnEveryPath) {
  // TiesPickFirstInRowMajorOrderAndNaNPropagates on the 2x2 paths of the 16/32-bit types.
  const Pool2dShape s{1, 1, 4, 4, 2, 2};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xf = {1, 1, 2, 3, 1, 1, 3, 0, 0, 0, 9, 1, 5, 5, 2, nan};
  auto run = [&](auto tag, PoolPath path, const std::vector<float>& src) {
    using T = decltype(tag);
    std::vector<T> x(src.size()), y(4);
    for (std::size_t i = 0; i < src.size(); ++i) x[i] = T(src[i]);
    std::vector<std::int32_t> am(4, -1);
    max_pool2d_forward_path<T>(path, s, cview4(x, 1, 1, 4, 4), view4(y, 1, 1, 2, 2), view4(am, 1, 1, 2, 2));
    EXPECT_TRUE(std::isnan(to_float(y[3])));
    return am;
  };
  for (PoolPath path : {PoolPath::Scalar, PoolPath::Vector, PoolPath::Avx512}) {
    EXPECT_EQ(run(float{}, path, xf), (std::vector<std::int32_t>{0, 3, 12, 15}));
    EXPECT_EQ(run(bf16{}, path, xf), (std::vector<std::int32_t>{0, 3, 12, 15}));
    EXPECT_EQ(run(f16{}, path, xf), (std::vector<std::int32_t>{0, 3, 12, 15}));
    std::vector<float> x2 = xf;
    x2[10] = nan;  // the first NaN wins against a larger value after it
    x2[15] = 100.0f;
    EXPECT_EQ(run(bf16{}, path, x2)[3], 10);
    EXPECT_EQ(run(float{}, path, x2)[3], 10);
  }
}

// model/cnn.cpp's stage order: pool -> relu, backward relu mask on the pooled
// gradient -> pool, against the textbook relu -> pool, bit for bit.
template <class T>
void check_relu_pool_commute(PoolPath path) {
  const Pool2dShape shapes[] = {{3, 4, 24, 24, 2, 2}, {2, 3, 9, 11, 2, 2}, {2, 2, 7, 9, 3, 2}, {1, 2, 6, 6, 3, 1}};
  int differ = 0;
  for (const Pool2dShape& s : shapes) {
    const auto n = s.batch, c = s.channels, h = s.height, w = s.width, oh = s.out_h(), ow = s.out_w();
    const auto x = nasty_values<T>(static_cast<std::size_t>(in_elems(s)), 71);
    const auto dy = nasty_values<T>(static_cast<std::size_t>(out_elems(s)), 72);
    // Textbook: r = relu(x); y = pool(r); dr = pool_backward(dy); dx = relu_backward(r, dr).
    std::vector<T> r(x.size()), ya(dy.size()), dxa(x.size(), T(3.0f));
    std::vector<std::int32_t> aa(dy.size());
    relu_forward<T>(test::cview1(x), test::view1(r));
    max_pool2d_forward_path<T>(path, s, cview4(r, n, c, h, w), view4(ya, n, c, oh, ow), view4(aa, n, c, oh, ow));
    max_pool2d_backward_path<T>(path, s, cview4(dy, n, c, oh, ow), cview4(aa, n, c, oh, ow), view4(dxa, n, c, h, w));
    relu_backward<T>(test::cview1(r), test::cview1(dxa), test::view1(dxa));
    // cnn.cpp: y = relu(pool(x)); g = relu_backward(y, dy); dx = pool_backward(g).
    std::vector<T> yb(dy.size()), g = dy, dxb(x.size(), T(4.0f));
    std::vector<std::int32_t> ab(dy.size());
    max_pool2d_forward_path<T>(path, s, cview4(x, n, c, h, w), view4(yb, n, c, oh, ow), view4(ab, n, c, oh, ow));
    relu_forward<T>(test::cview1(yb), test::view1(yb));
    relu_backward<T>(test::cview1(yb), test::cview1(g), test::view1(g));
    max_pool2d_backward_path<T>(path, s, cview4(g, n, c, oh, ow), cview4(ab, n, c, oh, ow), view4(dxb, n, c, h, w));
    const std::string what = std::string(type_name<T>()) + " kernel " + std::to_string(s.kernel) + " stride " +
                             std::to_string(s.stride) + " H=" + std::to_string(h) + " W=" + std::to_string(w);
    EXPECT_EQ(all_bits(ya), all_bits(yb)) << what;
    EXPECT_EQ(all_bits(dxa), all_bits(dxb)) << what;
    differ += aa != ab;
  }
  // The data must have windows with nothing above 0 (where the stored argmax differs).
  EXPECT_GT(differ, 0) << type_name<T>();
}

TEST(MaxPool2dPaths, ReluAfterPoolGivesTheSameBits) {
  for (PoolPath path : {PoolPath::Scalar, PoolPath::Vector, PoolPath::Avx512}) {
    check_relu_pool_commute<float>(path);
    check_relu_pool_commute<bf16>(path);
    check_relu_pool_commute<f16>(path);
  }
}

// float_bits::zero_plus (the 2x2 backward's 0 + dy on the bits) against the fp32
// addition and rounding the scalar backward does, for every 16-bit pattern.
template <class T>
void check_zero_plus_exhaustive() {
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const T x = T::from_bits(static_cast<std::uint16_t>(b));
    const T want = T(0.0f + to_float(x));
    const auto got = static_cast<std::uint16_t>(float_bits::zero_plus<T>(static_cast<std::int16_t>(b)));
    ASSERT_EQ(got, want.bits) << type_name<T>() << " bits 0x" << std::hex << b;
  }
}

TEST(MaxPool2dPaths, ZeroPlusMatchesFp32Addition) {
  check_zero_plus_exhaustive<bf16>();
  check_zero_plus_exhaustive<f16>();
  std::mt19937 rng(5);
  std::vector<std::uint32_t> patterns = {0u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7F800001u, 0xFFC00001u,
                                         0x00000001u, 0x80000001u, 0x7F7FFFFFu};
  for (int i = 0; i < 100000; ++i) patterns.push_back(rng());
  for (const std::uint32_t b : patterns) {
    const std::uint32_t want = std::bit_cast<std::uint32_t>(0.0f + std::bit_cast<float>(b));
    ASSERT_EQ(static_cast<std::uint32_t>(float_bits::zero_plus<float>(static_cast<std::int32_t>(b))), want)
        << std::hex << b;
  }
}

}  // namespace
}  // namespace shardtrain
