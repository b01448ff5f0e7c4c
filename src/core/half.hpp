// shardtrain/core/half.hpp
// Owns the 16-bit floating-point storage types of mixed precision: f16 (IEEE 754
// binary16) and bf16 (bfloat16). Parameters, activations and gradients may be
// STORED in 16 bits; all arithmetic is done in compute_t<T> (fp32) after
// conversion, so these types have no arithmetic operators.
//
// Invariants (every one is checked exhaustively or on 1e6 random inputs by
// tests/unit/core/half_test.cpp):
//  - Bit layouts. f16: sign(1) exponent(5, bias 15) mantissa(10). bf16: the top
//    16 bits of an IEEE binary32 float, sign(1) exponent(8, bias 127) mantissa(7).
//  - float -> 16 bits rounds to nearest, ties to even, for every float. The
//    f16 subnormal range rounds with one float add, so it assumes the default
//    round-to-nearest FP mode (nothing in shardtrain changes it).
//  - f16: |x| >= 65520 (= 65504 + half an ulp) rounds to +-inf, as IEEE requires;
//    results in the subnormal range (|x| < 2^-14) are exact-rounded subnormals,
//    never flushed; |x| <= 2^-25 gives +-0 (the sign of zero is kept).
//  - bf16: |x| >= 0x1.ffp+127 (bf16 max + half an ulp) rounds to +-inf; float
//    subnormals round like any other value (the conversion is integer-only).
//  - NaN stays NaN: float -> 16 bits keeps the sign and the top payload bits and
//    sets the quiet bit (f16: sign | 0x7E00 | mantissa >> 13; bf16: bits >> 16 |
//    0x0040); the f16 result is bit-identical to GCC's _Float16 and x86 F16C. f16 -> float is
//    exact and quiets a signalling NaN (as F16C does); bf16 -> float is the plain
//    bit widening (bits << 16), exact for every pattern including NaNs.
//  - The conversions are branch-free bit manipulation plus at most one exact
//    float add or multiply: no tables, no libm, no _Float16 (so nvcc and any host
//    compiler see the same code), constexpr, and usable inside Kokkos lambdas and
//    CUDA code on host or device (SHARDTRAIN_HOST_DEVICE). The only float operations are exact
//    or round a value once in round-to-nearest, so flush-to-zero modes (CUDA
//    -ftz, x86 DAZ/FTZ) do not change any result.
//
// Generic code: static_cast<compute_t<T>>(x) loads and static_cast<T>(c) stores
// for T in {f16, bf16, float, double}; to_float(x) / from_float<T>(c) are the
// same conversions as free functions (also defined for float, as identities).
//
// The bulk helpers (convert, all_finite, first_non_finite) take HOST pointers;
// they are defined in half.cpp, vectorised for x86-64-v4/v3/baseline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/host_device.hpp"  // SHARDTRAIN_HOST_DEVICE: callable from device code too

namespace shardtrain {

namespace half_detail {

// __builtin_bit_cast (GCC >= 11, Clang >= 9, nvcc) is constexpr and, unlike
// std::bit_cast, callable from device code without --expt-relaxed-constexpr.
SHARDTRAIN_HOST_DEVICE constexpr std::uint32_t bits_of(float x) {
  return __builtin_bit_cast(std::uint32_t, x);
}
SHARDTRAIN_HOST_DEVICE constexpr float float_of(std::uint32_t b) {
  return __builtin_bit_cast(float, b);
}

// float -> binary16 bits, round to nearest even. Written as selects between
// candidates that are all computed, so loops over it vectorise.
SHARDTRAIN_HOST_DEVICE constexpr std::uint16_t f16_bits_from_float(float x) {
  const std::uint32_t w = bits_of(x);
  const std::uint32_t sign = (w >> 16) & 0x8000u;
  const std::uint32_t a = w & 0x7FFFFFFFu;  // |x|
  // Normal result (|x| >= 2^-14): rebias the exponent (127 - 15 = 112), then add
  // just under half an ulp plus the kept lsb and truncate: round to nearest even.
  // A carry out of the mantissa correctly bumps the exponent.
  const std::uint32_t normal = (a - 0x38000000u + 0x0FFFu + ((a >> 13) & 1u)) >> 13;
  // Subnormal result (|x| < 2^-14): 0.5f has an ulp of 2^-24, the f16 subnormal
  // step, so 0.5f + |x| rounds |x| to the nearest multiple of 2^-24 (ties to even)
  // and its low mantissa bits are that multiple (1024 = 2^-14, the smallest
  // normal, when it rounds up). Exact otherwise, and never touches a float subnormal
  // except as an operand that only decides the rounding (<= 2^-25: result 0).
  const std::uint32_t subnormal = bits_of(float_of(a) + 0.5f) - 0x3F000000u;
  const std::uint32_t nan = 0x7E00u | ((a >> 13) & 0x03FFu);
  std::uint32_t h = a < 0x38800000u ? subnormal : normal;
  h = a >= 0x477FF000u ? 0x7C00u : h;  // >= 65520 (and inf) -> inf
  h = a > 0x7F800000u ? nan : h;
  return static_cast<std::uint16_t>(sign | h);
}

// binary16 bits -> float, exact.
SHARDTRAIN_HOST_DEVICE constexpr float float_from_f16_bits(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t a = h & 0x7FFFu;
  const std::uint32_t normal = (a << 13) + 0x38000000u;  // exponent + 112
  const std::uint32_t inf_nan = (a << 13) | 0x7F800000u | (a > 0x7C00u ? 0x00400000u : 0u);
  const std::uint32_t subnormal = bits_of(static_cast<float>(static_cast<std::int32_t>(a)) *
                                          0x1p-24f);  // a * 2^-24, exact and normal in float
  std::uint32_t r = a < 0x0400u ? subnormal : normal;
  r = a >= 0x7C00u ? inf_nan : r;
  return float_of(sign | r);
}

// float -> bfloat16 bits, round to nearest even; NaN -> quiet NaN.
// A NaN first gets its low 16 bits cleared and the quiet bit set, so the one
// rounding expression below returns (bits >> 16) | 0x0040 for it (the add cannot
// carry out of the cleared half). The same result for every float as selecting
// between a rounded and a NaN candidate (checked over all 2^32 inputs), but one
// select on the INPUT bits: with a select on the output, GCC 12 computed the
// producer of x twice in vectorised loops that round in registers (a second
// division per element in gelu).
SHARDTRAIN_HOST_DEVICE constexpr std::uint16_t bf16_bits_from_float(float x) {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t w = (b & 0x7FFFFFFFu) > 0x7F800000u ? (b | 0x00400000u) & 0xFFFF0000u : b;
  return static_cast<std::uint16_t>((w + 0x7FFFu + ((w >> 16) & 1u)) >> 16);
}

SHARDTRAIN_HOST_DEVICE constexpr float float_from_bf16_bits(std::uint16_t b) {
  return float_of(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace half_detail

// IEEE 754 binary16. Default-constructs to +0; `bits` is the raw pattern.
struct f16 {
  std::uint16_t bits = 0;

  f16() = default;
  SHARDTRAIN_HOST_DEVICE explicit constexpr f16(float x)
      : bits(half_detail::f16_bits_from_float(x)) {}
  SHARDTRAIN_HOST_DEVICE explicit constexpr operator float() const {
    return half_detail::float_from_f16_bits(bits);
  }
  SHARDTRAIN_HOST_DEVICE static constexpr f16 from_bits(std::uint16_t b) {
    f16 h;
    h.bits = b;
    return h;
  }
};

// bfloat16 (top half of a binary32). Default-constructs to +0.
struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  SHARDTRAIN_HOST_DEVICE explicit constexpr bf16(float x)
      : bits(half_detail::bf16_bits_from_float(x)) {}
  SHARDTRAIN_HOST_DEVICE explicit constexpr operator float() const {
    return half_detail::float_from_bf16_bits(bits);
  }
  SHARDTRAIN_HOST_DEVICE static constexpr bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(f16) == 2 && alignof(f16) == 2 && std::is_trivially_copyable_v<f16> &&
              std::is_standard_layout_v<f16>);
static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2 && std::is_trivially_copyable_v<bf16> &&
              std::is_standard_layout_v<bf16>);

// --- Type traits ------------------------------------------------------------

template <class T>
inline constexpr bool is_half_v =
    std::is_same_v<std::remove_cv_t<T>, f16> || std::is_same_v<std::remove_cv_t<T>, bf16>;

// The type arithmetic on a stored T is done in. Undefined for other types.
template <class T> struct compute_type;
template <> struct compute_type<f16> { using type = float; };
template <> struct compute_type<bf16> { using type = float; };
template <> struct compute_type<float> { using type = float; };
template <> struct compute_type<double> { using type = double; };
template <class T> using compute_t = typename compute_type<std::remove_cv_t<T>>::type;

// --- Scalar conversions -----------------------------------------------------

SHARDTRAIN_HOST_DEVICE constexpr float to_float(f16 x) {
  return half_detail::float_from_f16_bits(x.bits);
}
SHARDTRAIN_HOST_DEVICE constexpr float to_float(bf16 x) {
  return half_detail::float_from_bf16_bits(x.bits);
}
SHARDTRAIN_HOST_DEVICE constexpr float to_float(float x) { return x; }

// from_float<T>(x) for T in {f16, bf16, float}.
template <class T>
SHARDTRAIN_HOST_DEVICE constexpr T from_float(float x) {
  static_assert(is_half_v<T> || std::is_same_v<T, float>, "from_float<T>: T is f16, bf16 or float");
  return T(x);
}

// --- Limits (as float) --------------------------------------------------------

// Largest finite value: 65504 (f16), 0x1.fep+127 (bf16), FLT_MAX (float).
template <class T>
constexpr float max_finite() {
  if constexpr (std::is_same_v<T, f16>) return 65504.0f;
  else if constexpr (std::is_same_v<T, bf16>) return half_detail::float_of(0x7F7F0000u);
  else {
    static_assert(std::is_same_v<T, float>, "max_finite<T>: T is f16, bf16 or float");
    return half_detail::float_of(0x7F7FFFFFu);
  }
}

// Distance from 1 to the next value: 2^-10 (f16), 2^-7 (bf16), 2^-23 (float).
template <class T>
constexpr float epsilon() {
  if constexpr (std::is_same_v<T, f16>) return 0x1p-10f;
  else if constexpr (std::is_same_v<T, bf16>) return 0x1p-7f;
  else {
    static_assert(std::is_same_v<T, float>, "epsilon<T>: T is f16, bf16 or float");
    return 0x1p-23f;
  }
}

// "fp16", "bf16", "fp32", "fp64": for messages and config echo.
template <class T>
constexpr const char* type_name() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, f16>) return "fp16";
  else if constexpr (std::is_same_v<U, bf16>) return "bf16";
  else if constexpr (std::is_same_v<U, float>) return "fp32";
  else {
    static_assert(std::is_same_v<U, double>, "type_name<T>: T is f16, bf16, float or double");
    return "fp64";
  }
}

// --- Bulk helpers (host memory; half.cpp) ------------------------------------

// out[i] = in[i] converted, i < n. in and out must not overlap.
void convert(const float* in, f16* out, std::size_t n);
void convert(const float* in, bf16* out, std::size_t n);
void convert(const f16* in, float* out, std::size_t n);
void convert(const bf16* in, float* out, std::size_t n);

// The same over a (rows x cols) block of row-major matrices: out[r * ld_out + j] =
// in[r * ld_in + j] converted, r < rows, j < cols; one call where a loop of
// per-row converts would pay the call and the vector tail on every short row.
void convert_rows(const float* in, std::size_t ld_in, f16* out, std::size_t ld_out, std::size_t rows,
                  std::size_t cols);
void convert_rows(const float* in, std::size_t ld_in, bf16* out, std::size_t ld_out, std::size_t rows,
                  std::size_t cols);
void convert_rows(const f16* in, std::size_t ld_in, float* out, std::size_t ld_out, std::size_t rows,
                  std::size_t cols);
void convert_rows(const bf16* in, std::size_t ld_in, float* out, std::size_t ld_out, std::size_t rows,
                  std::size_t cols);

// Index of the first inf or NaN in x[0, n), or -1 when every element is finite.
std::ptrdiff_t first_non_finite(const f16* x, std::size_t n);
std::ptrdiff_t first_non_finite(const bf16* x, std::size_t n);
std::ptrdiff_t first_non_finite(const float* x, std::size_t n);

// True when no element of x[0, n) is inf or NaN (true for n == 0).
bool all_finite(const f16* x, std::size_t n);
bool all_finite(const bf16* x, std::size_t n);
bool all_finite(const float* x, std::size_t n);

}  // namespace shardtrain
