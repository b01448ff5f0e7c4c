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

}  // namespace shardtrain
