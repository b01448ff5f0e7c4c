// shardtrain/kernels/vec_math.hpp
// INTERNAL to kernels/*.cpp (not part of the kernel API; nothing outside kernels/
// should include it). Small inline row primitives written so that GCC/Clang
// vectorise them at -O2/-O3 without -ffast-math:
//  - every primitive takes its operands in a STORAGE type S (float, double, f16,
//    bf16) and computes in compute_t<S> (core/half.hpp): widen(x) is the exact load
//    (16 bits -> fp32 is a bit shift for bf16), narrow<S>(c) the one rounding on
//    store (round to nearest even, half.hpp); both are the identity for float and
//    double. So one loop body is the fp32 kernel (S = float) and its direct 16-bit
//    path (S = f16 / bf16): the same fp32 operations in the same order, on values
//    widened in registers, with no fp32 copy of the operands in memory;
//  - sums and dot products use kLanes (16) independent partial sums combined in
//    a fixed tree, so the result is deterministic (same bits on every call and every
//    thread count) and more accurate than one serial accumulator; for a 16-bit S
//    they are the fp32 results on the widened values, bit for bit;
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
#include <type_traits>

#include "core/half.hpp"       // f16, bf16, compute_t
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

// Storage -> compute type, exact (identity for float and double).
template <class S>
SHARDTRAIN_ALWAYS_INLINE compute_t<S> widen(S x) {
  return static_cast<compute_t<S>>(x);
}

// Compute type -> storage, rounded once to nearest even (identity for float and
// double). The only rounding a 16-bit output gets.
template <class S>
SHARDTRAIN_ALWAYS_INLINE S narrow(compute_t<S> c) {
  return static_cast<S>(c);
}

// w[l] = widen(p[l]), l < kLanes: the bf16 lane loops below (widen_first<S>) widen
// a block into such an array first and then do the arithmetic on it. Written as one
// loop (acc[l] += widen(p[j + l])), GCC 12 builds the bf16 SLP group from the 16-bit
// loads (256 bits) and does all the fp32 arithmetic in 256-bit halves; this way it
// stays in 512-bit registers (cross entropy's forward: 1.7x faster). float keeps its
// plain loops (the same code as before), and so does f16, whose longer widening
// GCC then leaves scalar (2x slower). The same operations in the same order either
// way, so the same bits.
template <class S>
inline constexpr bool widen_first = std::is_same_v<std::remove_cv_t<S>, bf16>;

template <class S, class T = compute_t<S>>
SHARDTRAIN_ALWAYS_INLINE void widen_lanes(const S* __restrict p, T (&w)[kLanes]) {
  for (int l = 0; l < kLanes; ++l) w[l] = widen(p[l]);
}

// Fixed halving tree: lane l + w is added to lane l for w = 8, 4, 2, 1.
template <class T>
SHARDTRAIN_ALWAYS_INLINE T combine_lanes(const T (&acc)[kLanes]) {
  T t[kLanes];
  for (int l = 0; l < kLanes; ++l) t[l] = acc[l];
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) t[l] += t[l + w];
  return t[0];
}

#if defined(__GNUC__)
// float: the same tree on vector registers (the same adds in the same order, so the
// same bits). GCC 12 built the loop above through a stack array in the clones: a
// chain of store-to-load forwards per call, a third of a 64-wide softmax row's time.
template <>
SHARDTRAIN_ALWAYS_INLINE float combine_lanes<float>(const float (&acc)[kLanes]) {
  typedef float V8 __attribute__((vector_size(32)));
  typedef float V4 __attribute__((vector_size(16)));
  V8 lo, hi;
  std::memcpy(&lo, acc, sizeof lo);
  std::memcpy(&hi, acc + 8, sizeof hi);
  const V8 s8 = lo + hi;  // w = 8
  V4 a, b;
  std::memcpy(&a, &s8, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&s8) + sizeof a, sizeof b);
  const V4 s4 = a + b;  // w = 4
  const float s0 = s4[0] + s4[2], s1 = s4[1] + s4[3];  // w = 2
  return s0 + s1;  // w = 1
}
#endif

// sum_j p[j]
template <class S, class T = compute_t<S>>
SHARDTRAIN_ALWAYS_INLINE T sum(const S* __restrict p, std::int64_t n) {
  T acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    if constexpr (!widen_first<S>) {
      for (int l = 0; l < kLanes; ++l) acc[l] += widen(p[j + l]);
    } else {
      T w[kLanes];
      widen_lanes(p + j, w);
      for (int l = 0; l < kLanes; ++l) acc[l] += w[l];
    }
  }
  T tail = T(0);
  for (; j < n; ++j) tail += widen(p[j]);
  return combine_lanes(acc) + tail;
}

// sum_j (p[j] - c)^2
template <class S, class T = compute_t<S>>
SHARDTRAIN_ALWAYS_INLINE T sum_sq_dev(const S* __restrict p, T c, std::int64_t n) {
  T acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    if constexpr (!widen_first<S>) {
      for (int l = 0; l < kLanes; ++l) {
        const T d = widen(p[j + l]) - c;
        acc[l] += d * d;
      }
    } else {
      T w[kLanes];
      widen_lanes(p + j, w);
      for (int l = 0; l < kLanes; ++l) {
        const T d = w[l] - c;
        acc[l] += d * d;
      }
    }
  }
  T tail = T(0);
  for (; j < n; ++j) tail += (widen(p[j]) - c) * (widen(p[j]) - c);
  return combine_lanes(acc) + tail;
}

// sum_j a[j] * b[j]
template <class S, class T = compute_t<S>>
SHARDTRAIN_ALWAYS_INLINE T dot(const S* __restrict a, const S* __restrict b, std::int64_t n) {
  T acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    if constexpr (!widen_first<S>) {
      for (int l = 0; l < kLanes; ++l) acc[l] += widen(a[j + l]) * widen(b[j + l]);
    } else {
      T wa[kLanes], wb[kLanes];
      widen_lanes(a + j, wa);
      widen_lanes(b + j, wb);
      for (int l = 0; l < kLanes; ++l) acc[l] += wa[l] * wb[l];
    }
  }
  T tail = T(0);
  for (; j < n; ++j) tail += widen(a[j]) * widen(b[j]);
  return combine_lanes(acc) + tail;
}

// max_j p[j] (n >= 1), in compute_t<S>. A NaN element is skipped here, but it then
// reappears through the callers' (x - max) arithmetic, so it is never lost. GCC does
// not vectorise scalar float max (NaN rules), so the GNU vector extension spells out
// the packed compare/select (maxps) on 16-byte vectors. A 16-bit S is widened a
// block at a time (the compares are exact, so the result is the fp32 max of the
// widened values, bit for bit).
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

// x = the compute values of p[0, 4 * 16 / sizeof(compute_t<S>)).
template <class S, class V>
SHARDTRAIN_ALWAYS_INLINE void load_vectors(const S* __restrict p, V (&x)[4]) {
  using T = compute_t<S>;
  if constexpr (std::is_same_v<S, T>) {
    std::memcpy(x, p, sizeof x);
  } else {
    constexpr std::size_t kCount = 4 * sizeof(V) / sizeof(T);
    T t[kCount];
    for (std::size_t i = 0; i < kCount; ++i) t[i] = widen(p[i]);
    std::memcpy(x, t, sizeof x);
  }
}

template <class S, class T = compute_t<S>>
SHARDTRAIN_ALWAYS_INLINE T max(const S* __restrict p, std::int64_t n) {
  using V = typename Vec16Of<T>::type;
  constexpr int kWidth = 16 / sizeof(T);
  constexpr int kBlock = 4 * kWidth;  // four independent vectors
  T m = widen(p[0]);
  std::int64_t j = 0;
  if (n >= kBlock) {
    V acc[4];
    load_vectors(p, acc);
    for (j = kBlock; j + kBlock <= n; j += kBlock) {
      V x[4];
      load_vectors(p + j, x);
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
  for (; j < n; ++j) m = widen(p[j]) > m ? widen(p[j]) : m;
  return m;
}
#else
template <class S, class T = compute_t<S>>
inline T max(const S* p, std::int64_t n) {
  T m = widen(p[0]);
  for (std::int64_t j = 1; j < n; ++j) m = widen(p[j]) > m ? widen(p[j]) : m;
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
