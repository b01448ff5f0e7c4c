// Tests kernels/adamw.hpp: the vectorised AdamW update gives, bit for bit, the
// scalar loop it replaced (fp32, and f16/bf16 with fp32 master weights), at
// lengths with and without a SIMD tail; sum_of_squares against a long double
// sum, its determinism, and the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/adamw.hpp"

namespace shardtrain {
namespace {

using test::cview1;
using test::view1;

AdamWCoeffs coeffs(bool decay) {
  AdamWCoeffs c;
  c.beta1 = 0.9f;
  c.beta2 = 0.95f;
  const double t = 7.0, lr = 3e-3;
  c.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(0.95, t)));
  c.step_size = static_cast<float>(lr) / static_cast<float>(1.0 - std::pow(0.9, t));
  c.eps = 1e-8f;
  c.decay = decay ? static_cast<float>(1.0 - lr * 0.1) : 1.0f;
  c.grad_scale = 0.37f;
  return c;
}

// The scalar loop of backend/host_backend.cpp before the kernel (the reference bits).
template <class P>
void reference(const AdamWCoeffs& c, std::vector<P>& params, const std::vector<P>& grads, std::vector<float>& w,
               std::vector<float>& m, std::vector<float>& v) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float g = static_cast<float>(grads[i]) * c.grad_scale;
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    const float denom = std::sqrt(v[i]) / c.bc2_sqrt + c.eps;
    w[i] = w[i] * c.decay - c.step_size * m[i] / denom;
    params[i] = P(w[i]);
  }
}

struct State {
  std::vector<float> w, m, v, g;
};

State random_state(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  State s;
  for (std::size_t i = 0; i < n; ++i) {
    s.w.push_back(0.02f * normal(rng));
    s.m.push_back(1e-3f * normal(rng));
    s.v.push_back(1e-6f * std::abs(normal(rng)));
    s.g.push_back(std::ldexp(normal(rng), static_cast<int>(i % 13) - 6));  // a range of magnitudes
  }
  return s;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const std::size_t kLengths[] = {0, 1, 15, 16, 17, 31, 1000, 4099};

TEST(AdamWKernel, Fp32MatchesTheScalarLoopBitwise) {
  for (bool decay : {false, true})
    for (std::size_t n : kLengths) {
      const AdamWCoeffs c = coeffs(decay);
      State s = random_state(n, static_cast<unsigned>(n) + 11);
      std::vector<float> w = s.w, m = s.m, v = s.v;
      std::vector<float> rw = s.w, rm = s.m, rv = s.v, rp = s.w;
      adamw_update<float>(c, view1(w), cview1(s.g), View1<float>(), view1(m), view1(v));
      reference<float>(c, rp, s.g, rw, rm, rv);
      EXPECT_TRUE(same_bits(w, rw)) << "weights, n " << n << " decay " << decay;
      EXPECT_TRUE(same_bits(m, rm)) << "exp_avg, n " << n;
      EXPECT_TRUE(same_bits(v, rv)) << "exp_avg_sq, n " << n;
      if (n > 0) {
        EXPECT_NE(w[0], s.w[0]) << "the update moved nothing";
      }
    }
}

template <class P>
void check_master(unsigned seed) {
  for (std::size_t n : kLengths) {
    const AdamWCoeffs c = coeffs(true);
    State s = random_state(n, seed + static_cast<unsigned>(n));
    std::vector<P> grads(s.g.begin(), s.g.end()), params(s.w.begin(), s.w.end());
    std::vector<float> w = s.w, m = s.m, v = s.v;
    std::vector<P> rparams = params;
    std::vector<float> rw = s.w, rm = s.m, rv = s.v;
    adamw_update<P>(c, view1(params), cview1(grads), view1(w), view1(m), view1(v));
    reference<P>(c, rparams, grads, rw, rm, rv);
    EXPECT_TRUE(same_bits(w, rw)) << "master, n " << n;
    EXPECT_TRUE(same_bits(m, rm)) << "exp_avg, n " << n;
    EXPECT_TRUE(same_bits(v, rv)) << "exp_avg_sq, n " << n;
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(params[i].bits, rparams[i].bits) << "params[" << i << "], n " << n;
  }
}

TEST(AdamWKernel, F16WithMasterMatchesTheScalarLoopBitwise) { check_master<f16>(101); }
TEST(AdamWKernel, Bf16WithMasterMatchesTheScalarLoopBitwise) { check_master<bf16>(202); }

TEST(AdamWKernel, RefusesMismatchedRanges) {
  std::vector<float> p(8, 0.0f), g(8, 0.0f), m(8, 0.0f), v(8, 0.0f), shortv(7, 0.0f);
  const AdamWCoeffs c = coeffs(false);
  EXPECT_THROW(adamw_update<float>(c, view1(p), cview1(g), View1<float>(), view1(m), view1(shortv)), Error);
  EXPECT_THROW(adamw_update<float>(c, view1(p), cview1(g), view1(m), view1(m), view1(v)), Error);  // fp32 + master
  std::vector<f16> hp(8), hg(8);
  EXPECT_THROW(adamw_update<f16>(c, view1(hp), cview1(hg), View1<float>(), view1(m), view1(v)), Error);
}

TEST(SumOfSquares, MatchesALongDoubleSumAndIsDeterministic) {
  for (std::size_t n : kLengths) {
    const State s = random_state(n, 7 + static_cast<unsigned>(n));
    long double want = 0.0L;
    for (float x : s.g) want += static_cast<long double>(x) * x;
    const double got = sum_of_squares<float>(cview1(s.g));
    EXPECT_NEAR(got, static_cast<double>(want), 1e-14 * static_cast<double>(want) + 1e-300) << "n " << n;
    EXPECT_EQ(got, sum_of_squares<float>(cview1(s.g))) << "two calls differ, n " << n;
    const std::vector<bf16> h(s.g.begin(), s.g.end());
    long double want_h = 0.0L;
    for (bf16 x : h) want_h += static_cast<long double>(static_cast<float>(x)) * static_cast<float>(x);
    EXPECT_NEAR(sum_of_squares<bf16>(cview1(h)), static_cast<double>(want_h), 1e-14 * static_cast<double>(want_h) + 1e-300);
  }
  const std::vector<double> d = {3.0, 4.0};
  EXPECT_EQ(sum_of_squares<double>(cview1(d)), 25.0);
}

}  // namespace
}  // namespace shardtrain
