// shardtrain/kernels/vec_math.hpp
// INTERNAL to kernels/*.cpp (not part of the kernel API; nothing outside kernels/
// should include it). Small inline row primitives written so that GCC/Clang
// vectorise them at -O2/-O3 without -ffast-math:
//  - sums and dot products use kLanes (16) independent partial sums combined in
//    a fixed tree, so the result is deterministic (same bits on every call and every
//    thread count) and more accurate than one serial accumulator;
//  - exp_fast<float> is a branch-free exp (range reduction + degree-7 Taylor
//    polynomial; max relative error 1.0e-7 on [-87, 88], tested; 0 below and
//    +inf above that range, NaN propagates) that vectorises, unlike the libm call;
//    exp_fast<double> is std::exp, so double results (used by the gradient
//    checks) stay at libm accuracy.
// No Kokkos, no allocation; callers pass raw pointers taken outside their lambdas.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/vectorize.hpp"  // SHARDTRAIN_TARGET_CLONES, SHARDTRAIN_ALWAYS_INLINE

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

// 16 lanes: one AVX-512 register of floats. With 8, GCC 12's AVX-512 clones turn
// the lane loop into in-order (scalar) reductions and run 2x slower than SSE2.
inline constexpr int kLanes = 16;

// Fixed halving tree: lane l + w is added to lane l for w = 8, 4, 2, 1.
template <class T>
SHARDTRAIN_ALWAYS_INLINE T combine_lanes(const T (&acc)[kLanes]) {
  T t[kLanes];
  for (int l = 0; l < kLanes; ++l) t[l] = acc[l];
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) t[l] += t[l + w];
  return t[0];
}

// sum_j p[j]
template <class T>
SHARDTRAIN_ALWAYS_INLINE T sum(const T* __restrict p, std::int64_t n) {
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
SHARDTRAIN_ALWAYS_INLINE T sum_sq_dev(const T* __restrict p, T c, std::int64_t n) {
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
SHARDTRAIN_ALWAYS_INLINE T dot(const T* __restrict a, const T* __restrict b, std::int64_t n) {
  T acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[j + l] * b[j + l];
  T tail = T(0);
  for (; j < n; ++j) tail += a[j] * b[j];
  return combine_lanes(acc) + tail;
}

// max_j p[j] (n >= 1). A NaN element is skipped here, but it then reappears
// through the callers' (x - max) arithmetic, so it is never lost. GCC does not
// vectorise scalar float max (NaN rules), so the GNU vector extension spells out
// the packed compare/select (maxps) on 16-byte vectors.
#if defined(__GNUC__)
template <class T>
struct Vec16Of;
template <>
struct Vec16Of<float> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct Vec16Of<double> {
  typedef double type __attribute__((vector_size(16)));
};

template <class T>
SHARDTRAIN_ALWAYS_INLINE T max(const T* __restrict p, std::int64_t n) {
  using V = typename Vec16Of<T>::type;
  constexpr int kWidth = 16 / sizeof(T);
  constexpr int kBlock = 4 * kWidth;  // four independent vectors
  T m = p[0];
  std::int64_t j = 0;
  if (n >= kBlock) {
    V acc[4];
    std::memcpy(acc, p, sizeof acc);
    for (j = kBlock; j + kBlock <= n; j += kBlock) {
      V x[4];
      std::memcpy(x, p + j, sizeof x);
      for (int k = 0; k < 4; ++k) acc[k] = x[k] > acc[k] ? x[k] : acc[k];
    }
    // Tree combine (a serial chain over the lanes costs ~60 cycles of latency).
    acc[0] = acc[1] > acc[0] ? acc[1] : acc[0];
    acc[2] = acc[3] > acc[2] ? acc[3] : acc[2];
    acc[0] = acc[2] > acc[0] ? acc[2] : acc[0];
    T lanes[kWidth];
    std::memcpy(lanes, &acc[0], sizeof lanes);
    for (int w = kWidth / 2; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) lanes[l] = lanes[l + w] > lanes[l] ? lanes[l + w] : lanes[l];
    m = lanes[0];
  }
  for (; j < n; ++j) m = p[j] > m ? p[j] : m;
  return m;
}
#else
template <class T>
inline T max(const T* p, std::int64_t n) {
  T m = p[0];
  for (std::int64_t j = 1; j < n; ++j) m = p[j] > m ? p[j] : m;
  return m;
}
#endif

// exp(x). float: vectorisable polynomial on [-87.3, 88.3]; below that range the
// result is 0 (no denormals), above it +inf; NaN propagates.
template <class T>
SHARDTRAIN_ALWAYS_INLINE T exp_fast(T x) {
  return std::exp(x);
}

template <>
SHARDTRAIN_ALWAYS_INLINE float exp_fast<float>(float x_in) {
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
