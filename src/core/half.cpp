// shardtrain/core/half.cpp
// Owns the bulk helpers of half.hpp over host arrays: float <-> f16/bf16
// conversion and the inf/NaN scans. They live in a .cpp (not the header) so that
// they are compiled once, with the kernels' floating-point flags (set on this file
// in src/core/CMakeLists.txt; -fno-trapping-math lets GCC vectorise the select chains) and as x86-64-v4/v3/baseline clones: each loop
// is the scalar conversion of half.hpp, so every clone gives the same bits.
// Invariants: the scans return the FIRST non-finite index (blocks are checked
// with an OR-reduction, then the hit block is scanned in order); n == 0 is valid.
#include "core/half.hpp"

#include "core/vectorize.hpp"

namespace shardtrain {
namespace {

// Elements per block of the inf/NaN scans: large enough to vectorise the
// reduction, small enough that an early hit costs little.
constexpr std::size_t kScanBlock = 512;

SHARDTRAIN_ALWAYS_INLINE std::uint32_t raw_bits(f16 x) { return x.bits; }
SHARDTRAIN_ALWAYS_INLINE std::uint32_t raw_bits(bf16 x) { return x.bits; }
SHARDTRAIN_ALWAYS_INLINE std::uint32_t raw_bits(float x) { return half_detail::bits_of(x); }

// Inf or NaN <=> exponent field all ones (kExpMask: that field of T's bits).
template <std::uint32_t kExpMask, class T>
SHARDTRAIN_ALWAYS_INLINE std::ptrdiff_t first_all_ones(const T* __restrict x, std::size_t n) {
  for (std::size_t i = 0; i < n; i += kScanBlock) {
    const std::size_t end = n - i < kScanBlock ? n : i + kScanBlock;
    unsigned hit = 0;
    for (std::size_t j = i; j < end; ++j) hit |= (raw_bits(x[j]) & kExpMask) == kExpMask;
    if (hit) {
      for (std::size_t j = i; j < end; ++j)
        if ((raw_bits(x[j]) & kExpMask) == kExpMask) return static_cast<std::ptrdiff_t>(j);
    }
  }
  return -1;
}

// One element by half.hpp's scalar conversions, for convert_block.
SHARDTRAIN_ALWAYS_INLINE void convert_one(float x, f16& h) { h.bits = half_detail::f16_bits_from_float(x); }
SHARDTRAIN_ALWAYS_INLINE void convert_one(float x, bf16& h) { h.bits = half_detail::bf16_bits_from_float(x); }
SHARDTRAIN_ALWAYS_INLINE void convert_one(f16 h, float& x) { x = half_detail::float_from_f16_bits(h.bits); }
SHARDTRAIN_ALWAYS_INLINE void convert_one(bf16 h, float& x) { x = half_detail::float_from_bf16_bits(h.bits); }

// out[r * ld_out + j] = in[r * ld_in + j] converted: convert_rows' loop, inlined into
// each of its clones.
template <class In, class Out>
SHARDTRAIN_ALWAYS_INLINE void convert_block(const In* __restrict in, std::size_t ld_in, Out* __restrict out,
                                            std::size_t ld_out, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < cols; ++j) convert_one(in[r * ld_in + j], out[r * ld_out + j]);
}

}  // namespace

SHARDTRAIN_TARGET_CLONES
void convert(const float* __restrict in, f16* __restrict out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i].bits = half_detail::f16_bits_from_float(in[i]);
}

SHARDTRAIN_TARGET_CLONES
void convert(const float* __restrict in, bf16* __restrict out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i].bits = half_detail::bf16_bits_from_float(in[i]);
}

SHARDTRAIN_TARGET_CLONES
void convert(const f16* __restrict in, float* __restrict out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = half_detail::float_from_f16_bits(in[i].bits);
}

SHARDTRAIN_TARGET_CLONES
void convert(const bf16* __restrict in, float* __restrict out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = half_detail::float_from_bf16_bits(in[i].bits);
}

SHARDTRAIN_TARGET_CLONES
void convert_rows(const float* __restrict in, std::size_t ld_in, f16* __restrict out, std::size_t ld_out,
                  std::size_t rows, std::size_t cols) {
  convert_block(in, ld_in, out, ld_out, rows, cols);
}

SHARDTRAIN_TARGET_CLONES
void convert_rows(const float* __restrict in, std::size_t ld_in, bf16* __restrict out, std::size_t ld_out,
                  std::size_t rows, std::size_t cols) {
  convert_block(in, ld_in, out, ld_out, rows, cols);
}

SHARDTRAIN_TARGET_CLONES
void convert_rows(const f16* __restrict in, std::size_t ld_in, float* __restrict out, std::size_t ld_out,
                  std::size_t rows, std::size_t cols) {
  convert_block(in, ld_in, out, ld_out, rows, cols);
}

SHARDTRAIN_TARGET_CLONES
void convert_rows(const bf16* __restrict in, std::size_t ld_in, float* __restrict out, std::size_t ld_out,
                  std::size_t rows, std::size_t cols) {
  convert_block(in, ld_in, out, ld_out, rows, cols);
}

SHARDTRAIN_TARGET_CLONES
std::ptrdiff_t first_non_finite(const f16* x, std::size_t n) {
  return first_all_ones<0x7C00u>(x, n);
}

SHARDTRAIN_TARGET_CLONES
std::ptrdiff_t first_non_finite(const bf16* x, std::size_t n) {
  return first_all_ones<0x7F80u>(x, n);
}

SHARDTRAIN_TARGET_CLONES
std::ptrdiff_t first_non_finite(const float* x, std::size_t n) {
  return first_all_ones<0x7F800000u>(x, n);
}

bool all_finite(const f16* x, std::size_t n) { return first_non_finite(x, n) < 0; }
bool all_finite(const bf16* x, std::size_t n) { return first_non_finite(x, n) < 0; }
bool all_finite(const float* x, std::size_t n) { return first_non_finite(x, n) < 0; }

}  // namespace shardtrain
