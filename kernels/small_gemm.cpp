// shardtrain/kernels/small_gemm.cpp
// Owns small_gemm (see small_gemm.hpp): the portable std::fma loops, and the AVX2 and
// AVX-512 paths, each the driver of small_gemm_tile.inc compiled inside its own
// `#pragma GCC target` region over that set's vector traits. The path is picked once
// from the CPU (__builtin_cpu_supports). Every path forms each C element as the same
// fma chain over p in order, so all paths give the same bits. small_gemm_bf16: the
// vdpbf16ps tiles (same driver shape) and their scalar emulation; bf16_pair_pack's
// 16 x 16 word transposes.
#include "kernels/small_gemm.hpp"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SHARDTRAIN_SMALL_GEMM_X86 1
#include <immintrin.h>
#else
#define SHARDTRAIN_SMALL_GEMM_X86 0
#endif

namespace shardtrain {
namespace {

constexpr std::int64_t kTileRows = 4;

template <class T>
void portable(std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
              std::int64_t a_rs, std::int64_t a_cs, const T* b, std::int64_t ldb, T* c,
              std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      T acc = T(0);
      for (std::int64_t p = 0; p < k; ++p) acc = std::fma(a[i * a_rs + p * a_cs], b[p * ldb + j], acc);
      c[i * ldc + j] = alpha * acc;
    }
}

}  // namespace

#if SHARDTRAIN_SMALL_GEMM_X86
namespace small_gemm_avx512 {
#pragma GCC push_options
#pragma GCC target("avx512f")
struct F {
  using T = float;
  using R = __m512;
  static constexpr int L = 16;
  static R zero() { return _mm512_setzero_ps(); }
  static R set1(T x) { return _mm512_set1_ps(x); }
  static R load(const T* p) { return _mm512_loadu_ps(p); }
  static R load_n(const T* p, int n) { return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1u), p); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static void store(T* p, R r) { _mm512_storeu_ps(p, r); }
  static void store_n(T* p, R r, int n) { _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1u), r); }
};
struct D {
  using T = double;
  using R = __m512d;
  static constexpr int L = 8;
  static R zero() { return _mm512_setzero_pd(); }
  static R set1(T x) { return _mm512_set1_pd(x); }
  static R load(const T* p) { return _mm512_loadu_pd(p); }
  static R load_n(const T* p, int n) { return _mm512_maskz_loadu_pd(__mmask8((1u << n) - 1u), p); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_pd(a, b, c); }
  static R mul(R a, R b) { return _mm512_mul_pd(a, b); }
  static void store(T* p, R r) { _mm512_storeu_pd(p, r); }
  static void store_n(T* p, R r, int n) { _mm512_mask_storeu_pd(p, __mmask8((1u << n) - 1u), r); }
};
#include "kernels/small_gemm_tile.inc"
#pragma GCC pop_options
}  // namespace small_gemm_avx512

// vdpbf16ps tiles (small_gemm_bf16): MR rows x NV vectors of 16 fp32 columns, the
// last vector `last` (1..16) lanes wide; kq = k / 2 pair steps.
namespace small_gemm_bf16dot {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16")
template <int MR, int NV>
inline void tile(std::int64_t kq, const std::uint16_t* a, std::int64_t a_rs, const std::uint32_t* b,
                 std::int64_t ldb, float* c, std::int64_t ldc, int last, float alpha) {
  const __mmask16 lm = __mmask16((1u << last) - 1u);
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (std::int64_t q = 0; q < kq; ++q) {
    const std::uint32_t* bq = b + q * ldb;
    __m512i bv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_si512(bq + v * 16);
    bv[NV - 1] = _mm512_maskz_loadu_epi32(lm, bq + (NV - 1) * 16);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      std::uint32_t pair;
      std::memcpy(&pair, a + r * a_rs + 2 * q, sizeof pair);
      const __m512i ar = _mm512_set1_epi32(static_cast<int>(pair));
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)ar, (__m512bh)bv[v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < NV - 1; ++v) _mm512_storeu_ps(c + r * ldc + v * 16, _mm512_mul_ps(acc[r][v], al));
    _mm512_mask_storeu_ps(c + r * ldc + (NV - 1) * 16, lm, _mm512_mul_ps(acc[r][NV - 1], al));
  }
}

template <int MR>
inline void tile_nv(int nv, std::int64_t kq, const std::uint16_t* a, std::int64_t a_rs,
                    const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc, int last,
                    float alpha) {
  switch (nv) {
    case 1: tile<MR, 1>(kq, a, a_rs, b, ldb, c, ldc, last, alpha); break;
    case 2: tile<MR, 2>(kq, a, a_rs, b, ldb, c, ldc, last, alpha); break;
    case 3: tile<MR, 3>(kq, a, a_rs, b, ldb, c, ldc, last, alpha); break;
    default: tile<MR, 4>(kq, a, a_rs, b, ldb, c, ldc, last, alpha); break;
  }
}

// Columns outermost, as small_gemm's run: a (k/2 x 64) panel of pairs stays in L1.
void run(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const std::uint16_t* a,
         std::int64_t a_rs, const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc) {
  constexpr std::int64_t L = 16, kCols = 4 * L;
  const std::int64_t kq = k / 2;
  for (std::int64_t j0 = 0; j0 < n; j0 += kCols) {
    const std::int64_t nc = n - j0 < kCols ? n - j0 : kCols;
    const int nv = static_cast<int>((nc + L - 1) / L);
    const int last = static_cast<int>(nc - (nv - 1) * L);
    for (std::int64_t i0 = 0; i0 < m; i0 += kTileRows) {
      const std::uint16_t* ai = a + i0 * a_rs;
      float* ci = c + i0 * ldc + j0;
      switch (m - i0 < kTileRows ? m - i0 : kTileRows) {
        case 1: tile_nv<1>(nv, kq, ai, a_rs, b + j0, ldb, ci, ldc, last, alpha); break;
        case 2: tile_nv<2>(nv, kq, ai, a_rs, b + j0, ldb, ci, ldc, last, alpha); break;
        case 3: tile_nv<3>(nv, kq, ai, a_rs, b + j0, ldb, ci, ldc, last, alpha); break;
        default: tile_nv<4>(nv, kq, ai, a_rs, b + j0, ldb, ci, ldc, last, alpha); break;
      }
    }
  }
}
// dst[q * ldd + j] = word (j, q) of src (32-bit words, row stride ld words) for a
// 16 x 16 block: 16 row loads, a register transpose (32- and 64-bit unpacks, then
// two rounds of 128-bit lane shuffles), 16 row stores. (GCC 12's unpack intrinsics
// start from _mm512_undefined_epi32 and warn -Wuninitialized on it: GCC bug 105593.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
void transpose16x16(const std::uint32_t* src, std::int64_t ld, std::uint32_t* dst, std::int64_t ldd) {
  __m512i r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * ld);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // r[4g + c], 128-bit lane L: column 4L + c of rows 4g .. 4g + 3.
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    r[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i u0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), u1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
    const __m512i u2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88),
                  u3 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
    _mm512_storeu_si512(dst + c * ldd, _mm512_shuffle_i32x4(u0, u2, 0x88));
    _mm512_storeu_si512(dst + (8 + c) * ldd, _mm512_shuffle_i32x4(u0, u2, 0xdd));
    _mm512_storeu_si512(dst + (4 + c) * ldd, _mm512_shuffle_i32x4(u1, u3, 0x88));
    _mm512_storeu_si512(dst + (12 + c) * ldd, _mm512_shuffle_i32x4(u1, u3, 0xdd));
  }
}
#pragma GCC diagnostic pop
#pragma GCC pop_options
}  // namespace small_gemm_bf16dot

namespace small_gemm_avx2 {
#pragma GCC push_options
#pragma GCC target("avx2,fma")
struct F {
  using T = float;
  using R = __m256;
  static constexpr int L = 8;
  static __m256i mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static R zero() { return _mm256_setzero_ps(); }
  static R set1(T x) { return _mm256_set1_ps(x); }
  static R load(const T* p) { return _mm256_loadu_ps(p); }
  static R load_n(const T* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static void store(T* p, R r) { _mm256_storeu_ps(p, r); }
  static void store_n(T* p, R r, int n) { _mm256_maskstore_ps(p, mask(n), r); }
};
struct D {
  using T = double;
  using R = __m256d;
  static constexpr int L = 4;
  static __m256i mask(int n) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
  }
  static R zero() { return _mm256_setzero_pd(); }
  static R set1(T x) { return _mm256_set1_pd(x); }
  static R load(const T* p) { return _mm256_loadu_pd(p); }
  static R load_n(const T* p, int n) { return _mm256_maskload_pd(p, mask(n)); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_pd(a, b, c); }
  static R mul(R a, R b) { return _mm256_mul_pd(a, b); }
  static void store(T* p, R r) { _mm256_storeu_pd(p, r); }
  static void store_n(T* p, R r, int n) { _mm256_maskstore_pd(p, mask(n), r); }
};
#include "kernels/small_gemm_tile.inc"
#pragma GCC pop_options
}  // namespace small_gemm_avx2
#endif

bool small_gemm_supported(SmallGemmIsa isa) {
  switch (isa) {
    case SmallGemmIsa::portable: return true;
#if SHARDTRAIN_SMALL_GEMM_X86
    case SmallGemmIsa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SmallGemmIsa::avx512: return __builtin_cpu_supports("avx512f");
#endif
    default: return false;
  }
}

SmallGemmIsa small_gemm_isa() {
  static const SmallGemmIsa isa = small_gemm_supported(SmallGemmIsa::avx512) ? SmallGemmIsa::avx512
                                  : small_gemm_supported(SmallGemmIsa::avx2) ? SmallGemmIsa::avx2
                                                                             : SmallGemmIsa::portable;
  return isa;
}

namespace {

// The path `isa` (supported, sizes checked) on the operands.
template <class T>
void dispatch(SmallGemmIsa isa, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
              std::int64_t a_rs, std::int64_t a_cs, const T* b, std::int64_t ldb, T* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
#if SHARDTRAIN_SMALL_GEMM_X86
  constexpr bool is_float = std::is_same_v<T, float>;
  if (isa == SmallGemmIsa::avx512) {
    using V = std::conditional_t<is_float, small_gemm_avx512::F, small_gemm_avx512::D>;
    small_gemm_avx512::run<V>(m, n, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc);
    return;
  }
  if (isa == SmallGemmIsa::avx2) {
    using V = std::conditional_t<is_float, small_gemm_avx2::F, small_gemm_avx2::D>;
    small_gemm_avx2::run<V>(m, n, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc);
    return;
  }
#endif
  portable(m, n, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc);
}

}  // namespace

template <class T>
void small_gemm_on(SmallGemmIsa isa, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                   const T* a, std::int64_t a_rs, std::int64_t a_cs, const T* b, std::int64_t ldb,
                   T* c, std::int64_t ldc) {
  SHARDTRAIN_CHECK(small_gemm_supported(isa), "small_gemm: instruction set " +
                                                  std::to_string(static_cast<int>(isa)) +
                                                  " is not supported on this CPU");
  SHARDTRAIN_CHECK(m >= 0 && n >= 0 && k >= 0, "small_gemm: negative size");
  dispatch(isa, m, n, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc);
}

// The hot entry (thousands of calls a step): the path was checked once, when picked.
template <class T>
void small_gemm(std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                std::int64_t a_rs, std::int64_t a_cs, const T* b, std::int64_t ldb, T* c,
                std::int64_t ldc) {
  SHARDTRAIN_CHECK(m >= 0 && n >= 0 && k >= 0, "small_gemm: negative size");
  dispatch(small_gemm_isa(), m, n, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc);
}

bool small_gemm_bf16_native() {
#if SHARDTRAIN_SMALL_GEMM_X86
  static const bool native = small_gemm_supported(SmallGemmIsa::avx512) && __builtin_cpu_supports("avx512bf16");
  return native;
#else
  return false;
#endif
}

namespace {

void check_bf16_sizes(std::int64_t m, std::int64_t n, std::int64_t k) {
  SHARDTRAIN_CHECK(m >= 0 && n >= 0 && k >= 0, "small_gemm_bf16: negative size");
  SHARDTRAIN_CHECK(k % 2 == 0, "small_gemm_bf16: k = " + std::to_string(k) + " is odd (pairs)");
}

// vdpbf16ps's input and result treatment: a subnormal is a zero of its sign.
float flush(float x) { return std::fabs(x) < FLT_MIN ? std::copysign(0.0f, x) : x; }
float from_bits16(std::uint32_t b16) {
  float f;
  const std::uint32_t u = b16 << 16;
  std::memcpy(&f, &u, sizeof f);
  return flush(f);
}

}  // namespace

void small_gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                     std::int64_t a_rs, const std::uint32_t* bp, std::int64_t ldb, float* c,
                     std::int64_t ldc) {
  check_bf16_sizes(m, n, k);
  SHARDTRAIN_CHECK(small_gemm_bf16_native(), "small_gemm_bf16: this CPU has no AVX512-BF16");
  if (m == 0 || n == 0) return;
#if SHARDTRAIN_SMALL_GEMM_X86
  small_gemm_bf16dot::run(m, n, k, alpha, reinterpret_cast<const std::uint16_t*>(a), a_rs, bp, ldb, c, ldc);
#endif
}

void small_gemm_bf16_portable(std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                              const bf16* a, std::int64_t a_rs, const std::uint32_t* bp,
                              std::int64_t ldb, float* c, std::int64_t ldc) {
  check_bf16_sizes(m, n, k);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (std::int64_t q = 0; q < k / 2; ++q) {
        const std::uint32_t w = bp[q * ldb + j];
        const float a0 = from_bits16(a[i * a_rs + 2 * q].bits), a1 = from_bits16(a[i * a_rs + 2 * q + 1].bits);
        acc = flush(std::fma(a1, from_bits16(w >> 16), acc));
        acc = flush(std::fma(a0, from_bits16(w & 0xffffu), acc));
      }
      c[i * ldc + j] = alpha * acc;
    }
}

void bf16_pair_pack(const bf16* src, std::int64_t n, std::int64_t k, std::int64_t ld,
                    std::uint32_t* dst, std::int64_t ldd) {
  SHARDTRAIN_CHECK(n >= 0 && k >= 0 && k % 2 == 0, "bf16_pair_pack: k = " + std::to_string(k) +
                                                       " must be even and n >= 0");
  // Whole 16 x 16 blocks of words on AVX-512 (src rows whose stride is a whole number
  // of words), the rest one word at a time; the same words either way.
  std::int64_t n16 = 0, q16 = 0;
#if SHARDTRAIN_SMALL_GEMM_X86
  if (small_gemm_supported(SmallGemmIsa::avx512) && ld % 2 == 0) {
    n16 = n / 16 * 16, q16 = k / 2 / 16 * 16;
    const auto* words = reinterpret_cast<const std::uint32_t*>(src);
    for (std::int64_t j0 = 0; j0 < n16; j0 += 16)
      for (std::int64_t q0 = 0; q0 < q16; q0 += 16)
        small_gemm_bf16dot::transpose16x16(words + j0 * (ld / 2) + q0, ld / 2, dst + q0 * ldd + j0, ldd);
  }
#endif
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t q = j < n16 ? q16 : 0; q < k / 2; ++q)
      std::memcpy(dst + q * ldd + j, src + j * ld + 2 * q, 4);
}

template void small_gemm<float>(std::int64_t, std::int64_t, std::int64_t, float, const float*,
                                std::int64_t, std::int64_t, const float*, std::int64_t, float*,
                                std::int64_t);
template void small_gemm<double>(std::int64_t, std::int64_t, std::int64_t, double, const double*,
                                 std::int64_t, std::int64_t, const double*, std::int64_t, double*,
                                 std::int64_t);
template void small_gemm_on<float>(SmallGemmIsa, std::int64_t, std::int64_t, std::int64_t, float,
                                   const float*, std::int64_t, std::int64_t, const float*,
                                   std::int64_t, float*, std::int64_t);
template void small_gemm_on<double>(SmallGemmIsa, std::int64_t, std::int64_t, std::int64_t, double,
                                    const double*, std::int64_t, std::int64_t, const double*,
                                    std::int64_t, double*, std::int64_t);

}  // namespace shardtrain
