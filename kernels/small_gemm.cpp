// shardtrain/kernels/small_gemm.cpp
// Owns small_gemm (see small_gemm.hpp): the portable std::fma loops, and the AVX2 and
// AVX-512 paths, each the driver of small_gemm_tile.inc compiled inside its own
// `#pragma GCC target` region over that set's vector traits. The path is picked once
// from the CPU (__builtin_cpu_supports). Every path forms each C element as the same
// fma chain over p in order, so all paths give the same bits.
#include "kernels/small_gemm.hpp"

#include <cmath>
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
