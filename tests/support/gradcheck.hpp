// shardtrain/tests/support/gradcheck.hpp
// Reusable finite-difference gradient check (header-only, no Kokkos), for kernel
// tests now and model tests later.
//
// Given loss(x) -> double over a flat vector of double inputs and an analytic
// gradient g_a, it forms the float64 central difference
//     g_n[i] = (loss(x + h e_i) - loss(x - h e_i)) / (2h)
// and reports two relative errors:
//  - max_rel_error  = max_i |g_a[i] - g_n[i]| / max(|g_a[i]|, |g_n[i]|, floor),
//                     floor = floor_fraction * max_k max(|g_a[k]|, |g_n[k]|)
//                     (the floor keeps entries that are ~0 by chance from turning
//                     round-off noise into a huge "relative" error);
//  - norm_rel_error = ||g_a - g_n||_2 / max(||g_a||_2, ||g_n||_2).
// Both are 0 when both gradients are exactly 0.
//
// Typical use: loss = sum(out * R) with R fixed random weights (weighted_sum below,
// accumulated in long double so the loss itself adds little round-off), analytic
// gradient = the kernel's backward called with dout = R.
// With h = 1e-5 the truncation error is O(h^2 f''') ~ 1e-10 and the round-off
// O(eps |loss| / h) ~ 1e-11 |loss|, so correct double kernels land near 1e-9.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace shardtrain::test {

struct GradCheckOptions {
  double step = 1e-5;            // h of the central difference (absolute)
  double floor_fraction = 1e-3;  // elementwise denominator floor, relative to the largest entry
};

struct GradCheckReport {
  double max_rel_error = 0.0;
  double norm_rel_error = 0.0;
  std::size_t count = 0;
  std::size_t worst_index = 0;
  double worst_analytic = 0.0;
  double worst_numeric = 0.0;

  std::string describe() const {
    std::ostringstream os;
    os.precision(3);
    os << "n=" << count << " max_rel_error=" << max_rel_error
       << " norm_rel_error=" << norm_rel_error << " worst[" << worst_index
       << "]: analytic=" << worst_analytic << " numeric=" << worst_numeric;
    return os.str();
  }
};

using LossFn = std::function<double(std::span<const double>)>;

// Central differences of `loss` at `x`; x is perturbed in place and restored exactly.
inline std::vector<double> numeric_gradient(const LossFn& loss, std::vector<double>& x,
                                            double step) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + step;
    const double up = loss(x);
    x[i] = xi - step;
    const double down = loss(x);
    x[i] = xi;
    g[i] = (up - down) / (2.0 * step);
  }
  return g;
}

inline GradCheckReport compare_gradients(std::span<const double> analytic,
                                         std::span<const double> numeric,
                                         double floor_fraction) {
  GradCheckReport r;
  r.count = analytic.size();
  if (analytic.size() != numeric.size()) {
    r.max_rel_error = r.norm_rel_error = INFINITY;
    return r;
  }
  double scale = 0.0, diff2 = 0.0, a2 = 0.0, n2 = 0.0;
  for (std::size_t i = 0; i < analytic.size(); ++i) {
    scale = std::max({scale, std::abs(analytic[i]), std::abs(numeric[i])});
    const double d = analytic[i] - numeric[i];
    diff2 += d * d;
    a2 += analytic[i] * analytic[i];
    n2 += numeric[i] * numeric[i];
  }
  const double floor = floor_fraction * scale;
  for (std::size_t i = 0; i < analytic.size(); ++i) {
    const double denom = std::max({std::abs(analytic[i]), std::abs(numeric[i]), floor});
    const double d = std::abs(analytic[i] - numeric[i]);
    // NaN anywhere must fail the check, so test with !(e <= max) rather than e > max.
    const double e = denom > 0.0 ? d / denom : (d == 0.0 ? 0.0 : INFINITY);
    if (!(e <= r.max_rel_error)) {
      r.max_rel_error = e;
      r.worst_index = i;
      r.worst_analytic = analytic[i];
      r.worst_numeric = numeric[i];
    }
  }
  const double norm = std::sqrt(std::max(a2, n2));
  r.norm_rel_error = norm > 0.0 ? std::sqrt(diff2) / norm : (diff2 == 0.0 ? 0.0 : INFINITY);
  return r;
}

// Checks `analytic` against central differences of `loss` at `x`.
inline GradCheckReport gradcheck(const LossFn& loss, std::vector<double> x,
                                 std::span<const double> analytic,
                                 const GradCheckOptions& opt = {}) {
  if (analytic.size() != x.size()) {
    GradCheckReport r;
    r.count = x.size();
    r.max_rel_error = r.norm_rel_error = INFINITY;
    return r;
  }
  const std::vector<double> numeric = numeric_gradient(loss, x, opt.step);
  return compare_gradients(analytic, numeric, opt.floor_fraction);
}

// Checks `analytic` against central differences of `loss` at `x`, at the entries
// `at` only (each index < x.size()): for inputs too large for a central difference
// per entry, the caller names the entries where errors live (block and length
// boundaries) and a spread of the rest. The report's count and worst_index refer to
// `at`'s positions.
inline GradCheckReport gradcheck_at(const LossFn& loss, std::vector<double> x,
                                    std::span<const double> analytic,
                                    std::span<const std::size_t> at,
                                    const GradCheckOptions& opt = {}) {
  std::vector<double> a, numeric;
  a.reserve(at.size());
  numeric.reserve(at.size());
  for (const std::size_t i : at) {
    if (i >= x.size() || analytic.size() != x.size()) {
      GradCheckReport r;
      r.count = at.size();
      r.max_rel_error = r.norm_rel_error = INFINITY;
      return r;
    }
    const double xi = x[i];
    x[i] = xi + opt.step;
    const double up = loss(x);
    x[i] = xi - opt.step;
    const double down = loss(x);
    x[i] = xi;
    numeric.push_back((up - down) / (2.0 * opt.step));
    a.push_back(analytic[i]);
  }
  return compare_gradients(a, numeric, opt.floor_fraction);
}

// sum_i out[i] * weights[i], accumulated in long double.
inline double weighted_sum(std::span<const double> out, std::span<const double> weights) {
  long double s = 0.0L;
  const std::size_t n = std::min(out.size(), weights.size());
  for (std::size_t i = 0; i < n; ++i)
    s += static_cast<long double>(out[i]) * static_cast<long double>(weights[i]);
  return static_cast<double>(s);
}

// Deterministic uniform(lo, hi) values.
inline std::vector<double> random_vector(std::size_t n, std::uint64_t seed, double lo = -1.0,
                                         double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

}  // namespace shardtrain::test
