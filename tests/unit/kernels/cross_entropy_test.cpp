// Tests cross_entropy_forward / cross_entropy_backward: losses against a naive
// log-sum-exp (double and float, including large logits that would overflow a
// plain exp); an ignored target gives loss 0 and a zero gradient row; float64
// central-difference check of dlogits for loss = scale * sum(losses); in-place
// backward (dlogits == logits) gives the same bits as out of place; bad targets throw.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/cross_entropy.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview1;
using test::cview2;
using test::view1;
using test::view2;

constexpr int kN = 5;
const std::vector<TokenIndex> kTargets = {3, -1, 0, 10, 3};  // row 1 ignored

std::vector<double> naive_losses(const std::vector<double>& x, const std::vector<TokenIndex>& tgt,
                                 int v) {
  std::vector<double> l(tgt.size());
  for (std::size_t i = 0; i < tgt.size(); ++i) {
    if (tgt[i] < 0) {
      l[i] = 0.0;
      continue;
    }
    long double m = -INFINITY;
    for (int j = 0; j < v; ++j) m = std::max<long double>(m, x[i * v + j]);
    long double z = 0.0L;
    for (int j = 0; j < v; ++j) z += std::exp((long double)x[i * v + j] - m);
    l[i] = static_cast<double>(m + std::log(z) - x[i * v + tgt[i]]);
  }
  return l;
}

template <class T>
std::vector<T> run_forward(const std::vector<T>& x, int v) {
  std::vector<T> l(kN, T(-1));
  cross_entropy_forward<T>(cview2(x, kN, v), cview1(kTargets), view1(l));
  return l;
}

TEST(CrossEntropy, ForwardMatchesNaive) {
  for (int v : {11, 67}) {
    for (double spread : {1.0, 60.0}) {  // 60: exp(logit) overflows float without the max shift
      const auto x = test::random_vector(kN * v, 90 + v, -spread, spread);
      const auto ref = naive_losses(x, kTargets, v);
      const auto got = run_forward<double>(x, v);
      EXPECT_LE(test::tolerance_ratio(got, ref, 1e-14, 1e-14), 1.0) << "V=" << v;
      EXPECT_EQ(got[1], 0.0);
      const auto xf = cast_vector<float>(x);
      const auto reff = naive_losses(cast_vector<double>(xf), kTargets, v);
      const auto gotf = run_forward<float>(xf, v);
      // Float error ~ a few ulp of the largest logit involved.
      EXPECT_LE(test::tolerance_ratio(gotf, reff, 1e-6 * spread, 1e-6), 1.0) << "V=" << v;
      EXPECT_EQ(gotf[1], 0.0f);
    }
  }
}

TEST(CrossEntropy, Gradient) {
  const int v = 11;
  const double scale = 0.37;
  const auto x = test::random_vector(kN * v, 95, -3.0, 3.0);
  std::vector<double> dl(kN * v, 42.0);
  cross_entropy_backward<double>(cview2(x, kN, v), cview1(kTargets), scale, view2(dl, kN, v));
  auto loss = [&](std::span<const double> p) {
    const auto l = run_forward<double>(std::vector<double>(p.begin(), p.end()), v);
    long double s = 0.0L;
    for (double e : l) s += e;
    return scale * static_cast<double>(s);
  };
  EXPECT_TRUE(test::gradient_ok("cross_entropy dlogits", test::gradcheck(loss, x, dl)));
  for (int j = 0; j < v; ++j) EXPECT_EQ(dl[1 * v + j], 0.0);  // ignored row
}

TEST(CrossEntropy, InPlaceBackwardMatchesOutOfPlace) {
  for (int v : {11, 67}) {
    const auto x = test::random_vector(kN * v, 96, -5.0, 5.0);
    std::vector<double> dl(kN * v), inplace = x;
    cross_entropy_backward<double>(cview2(x, kN, v), cview1(kTargets), 0.5, view2(dl, kN, v));
    cross_entropy_backward<double>(cview2(inplace, kN, v), cview1(kTargets), 0.5,
                                   view2(inplace, kN, v));
    EXPECT_EQ(dl, inplace);
    const auto xf = cast_vector<float>(x);
    std::vector<float> dlf(kN * v), inplacef = xf;
    cross_entropy_backward<float>(cview2(xf, kN, v), cview1(kTargets), 0.5f, view2(dlf, kN, v));
    cross_entropy_backward<float>(cview2(inplacef, kN, v), cview1(kTargets), 0.5f,
                                  view2(inplacef, kN, v));
    EXPECT_EQ(dlf, inplacef);
    // float gradient vs double: rows sum to ~0, entries within a few ulp of scale.
    EXPECT_LE(test::tolerance_ratio(dlf, dl, 1e-7, 1e-6), 1.0);
  }
}

TEST(CrossEntropy, BadTargetThrows) {
  const int v = 11;
  const auto x = test::random_vector(kN * v, 97);
  std::vector<TokenIndex> bad = kTargets;
  bad[2] = v;
  std::vector<double> l(kN), dl(kN * v);
  EXPECT_THROW(cross_entropy_forward<double>(cview2(x, kN, v), cview1(bad), view1(l)), Error);
  EXPECT_THROW(cross_entropy_backward<double>(cview2(x, kN, v), cview1(bad), 1.0, view2(dl, kN, v)),
               Error);
  std::vector<double> l_short(kN - 1);
  EXPECT_THROW(cross_entropy_forward<double>(cview2(x, kN, v), cview1(kTargets), view1(l_short)),
               Error);
}

}  // namespace
}  // namespace shardtrain
