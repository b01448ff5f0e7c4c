// shardtrain/kernels/float_bits.hpp
// INTERNAL to kernels/*.cpp (not part of the kernel API): the storage bits of
// float, bf16 and f16 as integers, for the branch-free loops of relu.cpp and
// pool.cpp. Comparisons on the bits are exact IEEE comparisons (no rounding, no
// DAZ/FTZ effect, NaN payloads copied untouched), and the same integer loop
// serves the three storage types, which GCC vectorises in every target clone
// (16-bit types then move half the bytes of fp32).
// What the bits give (sign-magnitude encodings):
//  - |x| bits   a = bits & kAbsMask; x is NaN exactly when a > kInfBits;
//  - x > 0      exactly when bits - 1 < kInfBits as unsigned (+0, negatives
//               and NaNs fail; +inf passes);
//  - x <= 0     (not NaN) exactly when the signed bits are <= kNegInf, the
//               signed pattern of -inf (-0 and every negative number lie
//               below it, negative NaNs above it);
//  - order_key  an int32 that orders non-NaN values as IEEE does (-0 == +0)
//               and puts every NaN above every number: "take v when
//               key(v) > key(best)" is "v > best, or v is NaN and best is not".
//  - zero_plus  the bits of T(0 + x) computed in fp32 (what an accumulator
//               that starts at +0 holds after adding x once: -0 becomes +0, a
//               NaN gets its quiet bit, every other value is kept).
// Pointers are cast to may_alias integer types, so reading a float through an
// int32 pointer is not an aliasing violation.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/half.hpp"
#include "core/vectorize.hpp"  // SHARDTRAIN_TARGET_CLONES, SHARDTRAIN_ALWAYS_INLINE

// An elementwise loop whose output may alias an input at the same index.
#if defined(__GNUC__) && !defined(__clang__)
#define SHARDTRAIN_BITS_IVDEP _Pragma("GCC ivdep")
#else
#define SHARDTRAIN_BITS_IVDEP
#endif

namespace shardtrain::float_bits {

using alias_i16 = std::int16_t __attribute__((__may_alias__));
using alias_i32 = std::int32_t __attribute__((__may_alias__));

template <class T>
struct Traits;
template <>
struct Traits<float> {
  using Signed = alias_i32;
  using Unsigned = std::uint32_t;
  static constexpr std::int32_t kAbsMask = 0x7FFFFFFF;
  static constexpr std::int32_t kInfBits = 0x7F800000;
  static constexpr std::int32_t kNegInf = static_cast<std::int32_t>(0xFF800000u);
  static constexpr std::int32_t kQuietBit = 0x00400000;
};
template <>
struct Traits<bf16> {
  using Signed = alias_i16;
  using Unsigned = std::uint16_t;
  static constexpr std::int32_t kAbsMask = 0x7FFF;
  static constexpr std::int32_t kInfBits = 0x7F80;
  static constexpr std::int32_t kNegInf = static_cast<std::int16_t>(0xFF80u);
  static constexpr std::int32_t kQuietBit = 0x0040;
};
template <>
struct Traits<f16> {
  using Signed = alias_i16;
  using Unsigned = std::uint16_t;
  static constexpr std::int32_t kAbsMask = 0x7FFF;
  static constexpr std::int32_t kInfBits = 0x7C00;
  static constexpr std::int32_t kNegInf = static_cast<std::int16_t>(0xFC00u);
  static constexpr std::int32_t kQuietBit = 0x0200;
};

template <class T>
inline constexpr bool has_traits_v =
    std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

template <class T>
using signed_t = typename Traits<T>::Signed;

template <class T>
const signed_t<T>* bits(const T* p) {
  return reinterpret_cast<const signed_t<T>*>(p);
}
template <class T>
signed_t<T>* bits(T* p) {
  return reinterpret_cast<signed_t<T>*>(p);
}

// s: the stored bits sign-extended to int32.
template <class T>
SHARDTRAIN_ALWAYS_INLINE bool positive(std::int32_t s) {
  using U = typename Traits<T>::Unsigned;
  return static_cast<U>(static_cast<U>(s) - U(1)) < static_cast<U>(Traits<T>::kInfBits);
}

template <class T>
SHARDTRAIN_ALWAYS_INLINE bool not_above_zero(std::int32_t s) {
  return s <= Traits<T>::kNegInf;
}

template <class T>
SHARDTRAIN_ALWAYS_INLINE std::int32_t order_key(std::int32_t s) {
  const std::int32_t a = s & Traits<T>::kAbsMask;
  const std::int32_t signed_mag = s < 0 ? -a : a;
  return a > Traits<T>::kInfBits ? std::int32_t{0x7FFFFFFF} : signed_mag;
}

// Bits (sign-extended to int32) of T(0.0f + float(x)) for x given by its bits s,
// on the bits: a NaN gets its quiet bit (x86 adds keep the NaN operand's payload
// and quiet it; the f16/bf16 -> float -> f16/bf16 round trip keeps payload and
// quiet bit), -0 becomes +0 (+0 + -0 is +0 under round to nearest), every other
// value is exact. The unit tests check it against the fp32 addition for every
// f16 and bf16 pattern.
template <class T>
SHARDTRAIN_ALWAYS_INLINE std::int32_t zero_plus(std::int32_t s) {
  const std::int32_t a = s & Traits<T>::kAbsMask;
  const std::int32_t kept = a == 0 ? 0 : s;
  return a > Traits<T>::kInfBits ? (s | Traits<T>::kQuietBit) : kept;
}

}  // namespace shardtrain::float_bits
