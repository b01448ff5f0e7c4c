// shardtrain/kernels/small_gemm.hpp
// Owns a register-blocked GEMM for the small operands of attention (one head's
// (T, hd) and (T, T) blocks), where OpenBLAS's per-call packing and small-matrix
// path cost more than the arithmetic. No packing, no allocation:
//   C (m x n, row stride ldc) = alpha * A B, overwritten,
//   A(i, p) = a[i * a_rs + p * a_cs]   (any strides: one element is broadcast at a time,
//                                        so A^T is the same call with the strides swapped),
//   B (k x n) row-major with row stride ldb (each row's n elements contiguous).
// Every C element is ONE fused multiply-add chain over p = 0, 1, ..., k - 1 starting
// from +0, then multiplied by alpha: c = alpha * fma(a_{k-1}, b_{k-1}, ... fma(a_0, b_0, 0)).
// The AVX-512, AVX2 (+FMA) and portable (std::fma) paths all evaluate exactly that,
// so their results are bitwise equal on every machine (unit test), and they do not
// depend on m, n or the tiling. Tiles are 4 rows x up to 4 vectors; the last vector
// of a row uses masked loads and stores, so n needs no padding.
#pragma once

#include <cstdint>

#include "core/half.hpp"

namespace shardtrain {

enum class SmallGemmIsa { portable, avx2, avx512 };

// Whether this CPU (and build) can run `isa`; portable always can.
bool small_gemm_supported(SmallGemmIsa isa);

// The path small_gemm uses here: the widest supported one, picked once.
SmallGemmIsa small_gemm_isa();

// T = float or double. m, n, k >= 0; k == 0 writes zeros.
template <class T>
void small_gemm(std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                std::int64_t a_rs, std::int64_t a_cs, const T* b, std::int64_t ldb, T* c,
                std::int64_t ldc);

// The same on a named path (tests); throws if !small_gemm_supported(isa).
template <class T>
void small_gemm_on(SmallGemmIsa isa, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                   const T* a, std::int64_t a_rs, std::int64_t a_cs, const T* b, std::int64_t ldb,
                   T* c, std::int64_t ldc);

// --- bf16 products on the dot-product instruction (attention's bf16 path) ----------
// C (m x n fp32, row stride ldc) = alpha * A B for bf16 A and B, k even:
//   A(i, p) = a[i * a_rs + p]   (each row's k elements contiguous, so A(i, 2q) and
//                                A(i, 2q + 1) are one 32-bit pair),
//   B in pairs ("VNNI" layout): the 32-bit word bp[q * ldb + j] holds B(2q, j) in its
//                                low and B(2q + 1, j) in its high half (bf16_pair_pack).
// Every C element is vdpbf16ps's chain (Intel SDM; measured bit for bit on an AMD
// Zen 4 as well): acc = +0; for q = 0, 1, ..., k/2 - 1:
//   acc = fl(acc + A(i, 2q+1) B(2q+1, j)); acc = fl(acc + A(i, 2q) B(2q, j)),
// each a fused multiply-add (the bf16 product is exact and never underflows), rounded
// to nearest even, with subnormal inputs and results flushed to zero; then
// c = alpha * acc (fp32, rounded). The AVX512-BF16 path and the portable emulation
// give the same bits (test); the sums differ from small_gemm<float>'s single fma
// chain on the widened operands only by that rounding order and flushing.
// Tiles and masking as small_gemm's; n needs no padding.

// Whether this CPU (and build) has vdpbf16ps (AVX512-BF16); decided once.
bool small_gemm_bf16_native();

// On the AVX512-BF16 path; throws if !small_gemm_bf16_native(). m, n >= 0, k >= 0 even.
void small_gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                     std::int64_t a_rs, const std::uint32_t* bp, std::int64_t ldb, float* c,
                     std::int64_t ldc);

// The portable emulation of the same arithmetic (tests; any CPU).
void small_gemm_bf16_portable(std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                              const bf16* a, std::int64_t a_rs, const std::uint32_t* bp,
                              std::int64_t ldb, float* c, std::int64_t ldc);

// B's pairs from a bf16 matrix stored transposed: src (n x k) row-major with row
// stride ld, B(p, j) = src[j * ld + p] (K for the scores Q K^T, V for dY V^T), k even:
// dst[q * ldd + j] = the 32-bit pair (src[j * ld + 2q], src[j * ld + 2q + 1]) for
// j < n, q < k/2 (a transpose of 32-bit words; the bits are moved, not converted).
void bf16_pair_pack(const bf16* src, std::int64_t n, std::int64_t k, std::int64_t ld,
                    std::uint32_t* dst, std::int64_t ldd);

}  // namespace shardtrain
