// shardtrain/tests/unit/kernels/kernel_test_util.hpp
// Helpers shared by the kernel tests: unmanaged views over std::vector storage,
// float<->double conversion and a max-error comparison with a stated tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iostream>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "gradcheck.hpp"
#include "kernels/types.hpp"

namespace shardtrain::test {

template <class T> View1<T> view1(std::vector<T>& v) { return View1<T>(v.data(), v.size()); }
template <class T> CView1<T> cview1(const std::vector<T>& v) { return CView1<T>(v.data(), v.size()); }
template <class T> View2<T> view2(std::vector<T>& v, std::size_t n0, std::size_t n1) {
  return View2<T>(v.data(), n0, n1);
}
template <class T> CView2<T> cview2(const std::vector<T>& v, std::size_t n0, std::size_t n1) {
  return CView2<T>(v.data(), n0, n1);
}
template <class T> View3<T> view3(std::vector<T>& v, std::size_t n0, std::size_t n1, std::size_t n2) {
  return View3<T>(v.data(), n0, n1, n2);
}
template <class T>
CView3<T> cview3(const std::vector<T>& v, std::size_t n0, std::size_t n1, std::size_t n2) {
  return CView3<T>(v.data(), n0, n1, n2);
}

template <class T>
View4<T> view4(std::vector<T>& v, std::size_t n0, std::size_t n1, std::size_t n2, std::size_t n3) {
  return View4<T>(v.data(), n0, n1, n2, n3);
}
template <class T>
CView4<T> cview4(const std::vector<T>& v, std::size_t n0, std::size_t n1, std::size_t n2,
                 std::size_t n3) {
  return CView4<T>(v.data(), n0, n1, n2, n3);
}

template <class To, class From>
std::vector<To> cast_vector(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// Largest |got - want| / (atol + rtol * |want|) over all entries: <= 1 means within
// tolerance. NaN in either input gives +inf, so a NaN can never pass.
template <class A, class B>
double tolerance_ratio(std::span<const A> got, std::span<const B> want, double atol, double rtol) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const double r = std::abs(g - w) / (atol + rtol * std::abs(w));
    if (!(r <= worst)) worst = std::isnan(r) ? std::numeric_limits<double>::infinity() : r;
  }
  return worst;
}
template <class A, class B>
double tolerance_ratio(const std::vector<A>& got, const std::vector<B>& want, double atol,
                       double rtol) {
  return tolerance_ratio(std::span<const A>(got), std::span<const B>(want), atol, rtol);
}

// Largest |got - want| / max_k |want_k| (max error relative to the data's scale).
template <class A, class B>
double max_scaled_error(const std::vector<A>& got, const std::vector<B>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double scale = 0.0, err = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::abs(double(want[i])));
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double e = std::abs(double(got[i]) - double(want[i]));
    if (!(e <= err)) err = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
  }
  return scale > 0.0 ? err / scale : err;
}

// Every gradient check in the kernel tests uses this bound (double precision).
inline constexpr double kGradTolerance = 1e-6;

// Prints the report (the measured errors are part of the test log) and checks both
// relative errors against kGradTolerance.
inline ::testing::AssertionResult gradient_ok(const std::string& label, const GradCheckReport& r) {
  std::cout << "[gradcheck] " << label << ": " << r.describe() << std::endl;
  if (r.count > 0 && r.max_rel_error <= kGradTolerance && r.norm_rel_error <= kGradTolerance)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << label << ": " << r.describe();
}

}  // namespace shardtrain::test
