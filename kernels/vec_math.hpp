// shardtrain/kernels/vec_math.hpp
// INTERNAL to kernels/*.cpp (not part of the kernel API; nothing outside kernels/
// should include it). Small inline row primitives written so that GCC/Clang
// vectorise them at -O2/-O3 without -ffast-math:
//  - sums and dot products use kLanes independent partial sums combined in a
//    fixed tree, so the result is deterministic (same bits on every call and every
//    thread count) and more accurate than one serial accumulator;
//  - exp_fast<float> is a branch-free exp (range reduction + degree-7 Taylor
//    polynomial, max error ~2 ulp on the clamped range) that vectorises, unlike
//    the libm call; exp_fast<double> is std::exp, so double results (used by the
//    gradient checks) stay at libm accuracy.
// No Kokkos, no allocation; callers pass raw pointers taken outside their lambdas.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

// Tells the compiler that a loop carries no dependence through memory. Used on
// elementwise loops whose output may alias an input at the SAME index (in-place
// ops), where `restrict` would be a lie but vectorisation is still correct.
#if defined(__clang__)
#define SHARDTRAIN_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define SHARDTRAIN_IVDEP _Pragma("GCC ivdep")
#else
#define SHARDTRAIN_IVDEP
#endif

namespace shardtrain::vec {

inline constexpr int kLanes = 8;

template <class T>
inline T combine_lanes(const T (&acc)[kLanes]) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// sum_j p[j]
template <class T>
inline T sum(const T* __restrict p, std::int64_t n) {
  T acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += p[j + l];
  T tail = T(0);
  for (; j < n; ++j) tail += p[j];
  return combine_lanes(acc) + tail;
}

// sum_j (p[j] - c)^2
template <class T>
inline T sum_sq_dev(const T* __restrict p, T c, std::int64_t n) {
  T acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const T d = p[j + l] - c;
      acc[l] += d * d;
    }
  T tail = T(0);
  for (; j < n; ++j) tail += (p[j] - c) * (p[j] - c);
  return combine_lanes(acc) + tail;
}

// sum_j a[j] * b[j]
template <class T>
inline T dot(const T* __restrict a, const T* __restrict b, std::int64_t n) {
  T acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[j + l] * b[j + l];
  T tail = T(0);
  for (; j < n; ++j) tail += a[j] * b[j];
  return combine_lanes(acc) + tail;
}

// max_j p[j] (n >= 1). NaN handling: a NaN element may or may not win, but it
// then reappears through the callers' (x - max) arithmetic, so it is never lost.
template <class T>
inline T max(const T* __restrict p, std::int64_t n) {
  T acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = p[0];
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = p[j + l] > acc[l] ? p[j + l] : acc[l];
  T m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  for (; j < n; ++j) m = p[j] > m ? p[j] : m;
  return m;
}

// exp(x). float: vectorisable polynomial on [-87.3, 88.3]; below that range the
// result is 0 (no denormals), above it +inf; NaN propagates.
template <class T>
inline T exp_fast(T x) {
  return std::exp(x);
}

template <>
inline float exp_fast<float>(float x_in) {
  constexpr float kLo = -87.3f, kHi = 88.3f;
  float x = x_in < kLo ? kLo : x_in;
  x = x > kHi ? kHi : x;
  // n = round(x / ln 2) via the 1.5 * 2^23 trick; its low mantissa bits are n.
  constexpr float kShift = 12582912.0f;
  const float t = x * 1.44269504088896341f + kShift;
  const float n = t - kShift;
  const std::int32_t ni = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(kShift);
  // r = x - n ln 2 in two steps (Cody-Waite): ln2_hi has few bits, so n * ln2_hi is exact.
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187e-6f;
  // exp(r), |r| <= 0.347: Taylor to degree 7 (truncation < 6e-9 relative).
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n by building the exponent field; the clamp keeps n in [-126, 127].
  float y = p * std::bit_cast<float>((ni + 127) << 23);
  y = x_in > kHi ? std::numeric_limits<float>::infinity() : y;
  return x_in < kLo ? 0.0f : y;
}

}  // namespace shardtrain::vec
