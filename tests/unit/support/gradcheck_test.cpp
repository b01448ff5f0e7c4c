// Tests the gradient-check harness itself: it must accept a correct gradient and
// reject a slightly wrong one, a NaN, or a size mismatch (so kernel tests can fail).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.hpp"

namespace shardtrain::test {
namespace {

// f(x) = sum_i c_i sin(x_i) + (sum_i x_i)^2 / 2
double f(std::span<const double> x, const std::vector<double>& c) {
  double s = 0.0, lin = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    s += c[i] * std::sin(x[i]);
    lin += x[i];
  }
  return s + 0.5 * lin * lin;
}

std::vector<double> grad_f(const std::vector<double>& x, const std::vector<double>& c) {
  double lin = 0.0;
  for (double v : x) lin += v;
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) g[i] = c[i] * std::cos(x[i]) + lin;
  return g;
}

TEST(GradCheck, AcceptsCorrectGradient) {
  const auto x = random_vector(20, 1), c = random_vector(20, 2);
  const auto r = gradcheck([&](std::span<const double> v) { return f(v, c); }, x, grad_f(x, c));
  EXPECT_LE(r.max_rel_error, 1e-8) << r.describe();
  EXPECT_LE(r.norm_rel_error, 1e-8) << r.describe();
}

TEST(GradCheck, RejectsSlightlyWrongGradient) {
  const auto x = random_vector(20, 1), c = random_vector(20, 2);
  auto g = grad_f(x, c);
  g[7] *= 1.0 + 1e-5;
  const auto r = gradcheck([&](std::span<const double> v) { return f(v, c); }, x, g);
  EXPECT_GT(r.max_rel_error, 1e-6) << r.describe();
  EXPECT_EQ(r.worst_index, 7u);
}

TEST(GradCheck, RejectsNanAndSizeMismatch) {
  const auto x = random_vector(5, 1), c = random_vector(5, 2);
  auto g = grad_f(x, c);
  g[2] = std::nan("");
  auto loss = [&](std::span<const double> v) { return f(v, c); };
  EXPECT_FALSE(gradcheck(loss, x, g).max_rel_error <= 1e-6);
  EXPECT_FALSE(gradcheck(loss, x, std::vector<double>(4, 0.0)).max_rel_error <= 1e-6);
}

TEST(GradCheck, ExactZerosCompareEqual) {
  const std::vector<double> a = {0.0, 1.0, 0.0}, n = {0.0, 1.0, 0.0};
  const auto r = compare_gradients(a, n, 1e-3);
  EXPECT_EQ(r.max_rel_error, 0.0);
  EXPECT_EQ(r.norm_rel_error, 0.0);
}

}  // namespace
}  // namespace shardtrain::test
