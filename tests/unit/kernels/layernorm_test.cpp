// Tests layernorm_forward / layernorm_backward: forward (y, mean, rstd) against a
// naive two-pass reference in double and float; float64 central-difference checks
// of dx, dw, db; the ACCUMULATE convention of dx, dw, db; shape errors.
// C = 67 exercises the 8-lane sums' tail and two column blocks of the dw/db reduction.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/layernorm.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview1;
using test::cview2;
using test::view1;
using test::view2;

constexpr double kEps = 1e-5;

struct Ref {
  std::vector<double> y, mean, rstd;
};

Ref naive_layernorm(const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& b, int n, int c) {
  Ref r{std::vector<double>(n * c), std::vector<double>(n), std::vector<double>(n)};
  for (int i = 0; i < n; ++i) {
    long double s = 0.0L;
    for (int j = 0; j < c; ++j) s += x[i * c + j];
    const long double mu = s / c;
    long double v = 0.0L;
    for (int j = 0; j < c; ++j) v += (x[i * c + j] - mu) * (x[i * c + j] - mu);
    const long double rs = 1.0L / std::sqrt(v / c + kEps);
    for (int j = 0; j < c; ++j) r.y[i * c + j] = static_cast<double>((x[i * c + j] - mu) * rs * w[j] + b[j]);
    r.mean[i] = static_cast<double>(mu);
    r.rstd[i] = static_cast<double>(rs);
  }
  return r;
}

struct Data {
  int n, c;
  std::vector<double> x, w, b, r;
  Data(int n_, int c_)
      : n(n_), c(c_),
        x(test::random_vector(n_ * c_, 21, -2.0, 3.0)),  // non-zero mean
        w(test::random_vector(c_, 22, 0.5, 1.5)),
        b(test::random_vector(c_, 23)),
        r(test::random_vector(n_ * c_, 24)) {}
};

template <class T>
Ref run_forward(const Data& d) {
  auto x = cast_vector<T>(d.x), w = cast_vector<T>(d.w), b = cast_vector<T>(d.b);
  std::vector<T> y(d.n * d.c), mean(d.n), rstd(d.n);
  layernorm_forward<T>(cview2(x, d.n, d.c), cview1(w), cview1(b), view2(y, d.n, d.c), view1(mean),
                       view1(rstd), T(kEps));
  return {cast_vector<double>(y), cast_vector<double>(mean), cast_vector<double>(rstd)};
}

TEST(LayerNorm, ForwardMatchesNaive) {
  for (int c : {7, 67}) {
    const Data d(5, c);
    const Ref ref = naive_layernorm(d.x, d.w, d.b, d.n, d.c);
    const Ref got = run_forward<double>(d);
    EXPECT_LE(test::tolerance_ratio(got.y, ref.y, 1e-14, 1e-13), 1.0) << "C=" << c;
    EXPECT_LE(test::tolerance_ratio(got.mean, ref.mean, 1e-15, 1e-14), 1.0);
    EXPECT_LE(test::tolerance_ratio(got.rstd, ref.rstd, 0.0, 1e-14), 1.0);
    const Ref gotf = run_forward<float>(d);
    EXPECT_LE(test::tolerance_ratio(gotf.y, ref.y, 2e-6, 2e-6), 1.0) << "C=" << c;
    EXPECT_LE(test::tolerance_ratio(gotf.mean, ref.mean, 1e-6, 1e-6), 1.0);
    EXPECT_LE(test::tolerance_ratio(gotf.rstd, ref.rstd, 0.0, 2e-6), 1.0);
  }
}

// Large common offset: the two-pass variance must not cancel catastrophically.
TEST(LayerNorm, ForwardFloatLargeOffset) {
  Data d(3, 64);
  for (double& v : d.x) v += 1000.0;
  const Ref ref = naive_layernorm(d.x, d.w, d.b, d.n, d.c);
  const Ref gotf = run_forward<float>(d);
  // Inputs are rounded to float at 1000 (ulp 6e-5) relative to a spread of ~1.4.
  EXPECT_LE(test::tolerance_ratio(gotf.y, ref.y, 2e-4, 2e-4), 1.0);
}

void check_gradients(int n, int c) {
  const Data d(n, c);
  auto loss_of = [&](const std::vector<double>& x, const std::vector<double>& w,
                     const std::vector<double>& b) {
    std::vector<double> y(n * c), mean(n), rstd(n);
    layernorm_forward<double>(cview2(x, n, c), cview1(w), cview1(b), view2(y, n, c), view1(mean),
                              view1(rstd), kEps);
    return test::weighted_sum(y, d.r);
  };
  const Ref fwd = run_forward<double>(d);
  std::vector<double> dx(n * c, 0.0), dw(c, 0.0), db(c, 0.0);
  layernorm_backward<double>(cview2(d.x, n, c), cview1(d.w), cview1(fwd.mean), cview1(fwd.rstd),
                             cview2(d.r, n, c), view2(dx, n, c), view1(dw), view1(db));
  const std::string l = "layernorm C=" + std::to_string(c);
  auto vec = [](std::span<const double> v) { return std::vector<double>(v.begin(), v.end()); };
  EXPECT_TRUE(test::gradient_ok(l + " dx", test::gradcheck([&](std::span<const double> v) {
    return loss_of(vec(v), d.w, d.b);
  }, d.x, dx)));
  EXPECT_TRUE(test::gradient_ok(l + " dw", test::gradcheck([&](std::span<const double> v) {
    return loss_of(d.x, vec(v), d.b);
  }, d.w, dw)));
  EXPECT_TRUE(test::gradient_ok(l + " db", test::gradcheck([&](std::span<const double> v) {
    return loss_of(d.x, d.w, vec(v));
  }, d.b, db)));
}

TEST(LayerNorm, GradientsSmall) { check_gradients(4, 7); }
TEST(LayerNorm, GradientsTwoColumnBlocks) { check_gradients(3, 67); }

TEST(LayerNorm, BackwardAccumulatesDxDwDb) {
  const int n = 4, c = 9;
  const Data d(n, c);
  const Ref fwd = run_forward<double>(d);
  auto backward = [&](std::vector<double>& dx, std::vector<double>& dw, std::vector<double>& db) {
    layernorm_backward<double>(cview2(d.x, n, c), cview1(d.w), cview1(fwd.mean), cview1(fwd.rstd),
                               cview2(d.r, n, c), view2(dx, n, c), view1(dw), view1(db));
  };
  std::vector<double> dx1(n * c, 0.0), dw1(c, 0.0), db1(c, 0.0);
  backward(dx1, dw1, db1);
  std::vector<double> dx2(n * c, 0.0), dw2(c, 0.0), db2(c, 0.0);
  backward(dx2, dw2, db2);
  backward(dx2, dw2, db2);
  for (int i = 0; i < n * c; ++i) EXPECT_DOUBLE_EQ(dx2[i], 2.0 * dx1[i]);
  for (int j = 0; j < c; ++j) EXPECT_DOUBLE_EQ(dw2[j], 2.0 * dw1[j]);
  for (int j = 0; j < c; ++j) EXPECT_DOUBLE_EQ(db2[j], 2.0 * db1[j]);
  // dx += folds a residual gradient in: start from a non-zero dx.
  const auto residual = test::random_vector(n * c, 99);
  std::vector<double> dx3 = residual, dw3(c, 0.0), db3(c, 0.0);
  backward(dx3, dw3, db3);
  for (int i = 0; i < n * c; ++i) EXPECT_NEAR(dx3[i], residual[i] + dx1[i], 1e-14);
}

TEST(LayerNorm, FloatBackwardMatchesDouble) {
  const int n = 6, c = 67;
  const Data d(n, c);
  const Ref fwd = run_forward<double>(d);
  std::vector<double> dx(n * c, 0.0), dw(c, 0.0), db(c, 0.0);
  layernorm_backward<double>(cview2(d.x, n, c), cview1(d.w), cview1(fwd.mean), cview1(fwd.rstd),
                             cview2(d.r, n, c), view2(dx, n, c), view1(dw), view1(db));
  auto x = cast_vector<float>(d.x), w = cast_vector<float>(d.w), r = cast_vector<float>(d.r);
  auto mean = cast_vector<float>(fwd.mean), rstd = cast_vector<float>(fwd.rstd);
  std::vector<float> dxf(n * c, 0.0f), dwf(c, 0.0f), dbf(c, 0.0f);
  layernorm_backward<float>(cview2(x, n, c), cview1(w), cview1(mean), cview1(rstd),
                            cview2(r, n, c), view2(dxf, n, c), view1(dwf), view1(dbf));
  EXPECT_LE(test::max_scaled_error(dxf, dx), 2e-6);
  EXPECT_LE(test::max_scaled_error(dwf, dw), 2e-6);
  EXPECT_LE(test::max_scaled_error(dbf, db), 2e-6);
}

// 16-bit rows are widened once into fp32 row buffers up to a width (kernels/
// layernorm.cpp kRowMax, 4096) and read straight from 16-bit memory beyond it; both
// must give the fp32 kernel's results on the widened inputs, rounded once, bit for
// bit (half_tiles_test checks the narrow shapes): widths at, below and above it.
template <class H>
void check_wide_rows(int c) {
  SCOPED_TRACE(c);
  const int n = 3;
  const Data d(n, c);
  std::vector<H> x(n * c), w(c), b(c), r(n * c), dx(n * c), dw(c), db(c), y(n * c), mean(n), rstd(n);
  std::vector<float> xf(n * c), wf(c), bf(c), rf(n * c), dxf(n * c), dwf(c), dbf(c), yf(n * c), meanf(n), rstdf(n);
  for (int i = 0; i < n * c; ++i) {
    x[i] = H(static_cast<float>(d.x[i]));
    r[i] = H(static_cast<float>(d.r[i]));
    dx[i] = H(0.25f * static_cast<float>(d.r[(i * 7) % (n * c)]));  // dx accumulates: start non-zero
    xf[i] = to_float(x[i]);
    rf[i] = to_float(r[i]);
    dxf[i] = to_float(dx[i]);
  }
  for (int j = 0; j < c; ++j) {
    w[j] = H(static_cast<float>(d.w[j]));
    b[j] = H(static_cast<float>(d.b[j]));
    dw[j] = db[j] = H(0.0f);
    wf[j] = to_float(w[j]);
    bf[j] = to_float(b[j]);
    dwf[j] = dbf[j] = 0.0f;
  }
  layernorm_forward<H>(cview2(x, n, c), cview1(w), cview1(b), view2(y, n, c), view1(mean), view1(rstd), H(1e-5f));
  layernorm_forward<float>(cview2(xf, n, c), cview1(wf), cview1(bf), view2(yf, n, c), view1(meanf), view1(rstdf),
                           to_float(H(1e-5f)));
  for (int i = 0; i < n * c; ++i) ASSERT_EQ(y[i].bits, H(yf[i]).bits) << "y " << i;
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(mean[i].bits, H(meanf[i]).bits) << "mean " << i;
    ASSERT_EQ(rstd[i].bits, H(rstdf[i]).bits) << "rstd " << i;
  }
  // The backward on the 16-bit statistics (what a run saves), in both.
  for (int i = 0; i < n; ++i) {
    meanf[i] = to_float(mean[i]);
    rstdf[i] = to_float(rstd[i]);
  }
  layernorm_backward<H>(cview2(x, n, c), cview1(w), cview1(mean), cview1(rstd), cview2(r, n, c), view2(dx, n, c),
                        view1(dw), view1(db));
  layernorm_backward<float>(cview2(xf, n, c), cview1(wf), cview1(meanf), cview1(rstdf), cview2(rf, n, c),
                            view2(dxf, n, c), view1(dwf), view1(dbf));
  for (int i = 0; i < n * c; ++i) ASSERT_EQ(dx[i].bits, H(dxf[i]).bits) << "dx " << i;
  for (int j = 0; j < c; ++j) {
    ASSERT_EQ(dw[j].bits, H(dwf[j]).bits) << "dw " << j;
    ASSERT_EQ(db[j].bits, H(dbf[j]).bits) << "db " << j;
  }
}

TEST(LayerNorm, SixteenBitWideRowsAreFp32RoundedOnce) {
  for (int c : {4095, 4096, 4097, 5000 + 3}) {
    check_wide_rows<bf16>(c);
    check_wide_rows<f16>(c);
  }
}

TEST(LayerNorm, ShapeMismatchThrows) {
  const Data d(3, 5);
  std::vector<double> y(15), mean(3), rstd(2), w4(4);
  EXPECT_THROW(layernorm_forward<double>(cview2(d.x, 3, 5), cview1(d.w), cview1(d.b),
                                         view2(y, 3, 5), view1(mean), view1(rstd), kEps),
               Error);
  std::vector<double> rstd3(3);
  EXPECT_THROW(layernorm_forward<double>(cview2(d.x, 3, 5), cview1(w4), cview1(d.b),
                                         view2(y, 3, 5), view1(mean), view1(rstd3), kEps),
               Error);
}

}  // namespace
}  // namespace shardtrain
