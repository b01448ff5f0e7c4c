// shardtrain/kernels/pool_avx512.cpp
// Owns the AVX-512 row kernels of 2x2 / stride 2 max pooling (pool_paths.hpp,
// PoolPath::Avx512) for float, bf16 and f16, and the CPU check that allows them.
// Invariants:
//  - Same results as the scalar window scan, bit for bit (tested on every path):
//    the work is on the storage bits, widened to int32 lanes (16-bit types are
//    sign-extended), through kernels/float_bits.hpp's order keys, so a
//    comparison is IEEE's (NaN above every number, -0 == +0) and y receives the
//    stored bits (NaN payloads included). Ties keep the earlier element: an
//    element replaces the running best only when its key is strictly greater,
//    in row-major window order (top-left, top-right, bottom-left, bottom-right).
//  - 16 outputs per step; a row's last step masks its loads and stores, so no
//    element outside the plane's rows is read or written and short rows
//    (ow < 16) cost one step.
//  - Backward writes every element of the plane exactly once (0 + dy at the
//    argmax, +0 elsewhere; the column and row no window covers are zeroed) and
//    reports an argmax outside its own window instead of writing through it.
//  - Compiled with function target attributes, not global flags: nothing here
//    runs unless pool_avx512_available() (AVX-512F and AVX-512BW). On other
//    compilers or CPUs the functions exist and throw.
#include "kernels/pool_paths.hpp"

#include <type_traits>

#include "core/error.hpp"
#include "kernels/float_bits.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define SHARDTRAIN_POOL_HAS_AVX512 1
#include <immintrin.h>
// GCC 12 reports its own headers' _mm256_undefined_* (`__Y = __Y`) as "may be
// used uninitialized" once a cast or an extension is inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#else
#define SHARDTRAIN_POOL_HAS_AVX512 0
#endif

namespace shardtrain {

#if SHARDTRAIN_POOL_HAS_AVX512

bool pool_avx512_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return ok;
}

namespace pool_avx512 {
namespace {

#define SHARDTRAIN_AVX512 __attribute__((target("avx512f,avx512bw"), always_inline)) inline

using float_bits::Traits;

template <class T>
constexpr bool kWide = std::is_same_v<T, float>;  // 32-bit storage

SHARDTRAIN_AVX512 __mmask16 mask16(std::int32_t n) {  // the first n of 16 lanes, 0 <= n <= 16
  return static_cast<__mmask16>(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
}

// Order keys of 16 int32 lanes of bits (float_bits::order_key).
template <class T>
SHARDTRAIN_AVX512 __m512i keys(__m512i s) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i a = _mm512_and_si512(s, _mm512_set1_epi32(Traits<T>::kAbsMask));
  const __m512i k = _mm512_mask_sub_epi32(a, _mm512_cmplt_epi32_mask(s, zero), zero, a);
  return _mm512_mask_mov_epi32(k, _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(Traits<T>::kInfBits)),
                               _mm512_set1_epi32(0x7FFFFFFF));
}

// float_bits::zero_plus on 16 int32 lanes.
template <class T>
SHARDTRAIN_AVX512 __m512i zero_plus(__m512i s) {
  const __m512i a = _mm512_and_si512(s, _mm512_set1_epi32(Traits<T>::kAbsMask));
  const __m512i kept = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(a, a), s);
  return _mm512_mask_or_epi32(kept, _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(Traits<T>::kInfBits)), s,
                              _mm512_set1_epi32(Traits<T>::kQuietBit));
}

// The first n (<= 32) elements at p, as int32 lanes: even (elements 0, 2, .., 30)
// and odd (1, 3, .., 31). Lanes past n are 0.
template <class T>
SHARDTRAIN_AVX512 void load_pairs(const T* p, std::int32_t n, __m512i& even, __m512i& odd) {
  if constexpr (kWide<T>) {
    const __m512i lo = _mm512_maskz_loadu_epi32(mask16(n), p);
    const __m512i hi = _mm512_maskz_loadu_epi32(mask16(n > 16 ? n - 16 : 0), p + 16);
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    even = _mm512_permutex2var_epi32(lo, ie, hi);
    odd = _mm512_permutex2var_epi32(lo, _mm512_add_epi32(ie, _mm512_set1_epi32(1)), hi);
  } else {
    const __mmask32 m = n >= 32 ? 0xFFFFFFFFu : (1u << n) - 1u;
    const __m512i v = _mm512_maskz_loadu_epi16(m, p);
    const __m512i idx = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,  //
                                         30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i d = _mm512_permutexvar_epi16(idx, v);  // evens in the low half, odds in the high
    even = _mm512_cvtepi16_epi32(_mm512_castsi512_si256(d));
    odd = _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(d, 1));
  }
}

// The first n (<= 16) of 16 int32 lanes (16-bit types: truncated) at p.
template <class T>
SHARDTRAIN_AVX512 __m512i load16(const T* p, std::int32_t n) {
  if constexpr (kWide<T>) return _mm512_maskz_loadu_epi32(mask16(n), p);
  else return _mm512_cvtepi16_epi32(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(mask16(n), p)));
}

template <class T>
SHARDTRAIN_AVX512 void store16(T* p, std::int32_t n, __m512i v) {
  if constexpr (kWide<T>) _mm512_mask_storeu_epi32(p, mask16(n), v);
  else _mm512_mask_cvtepi32_storeu_epi16(p, mask16(n), v);
}

// Stores even[0], odd[0], even[1], odd[1], .. : the first n (<= 32) of them at p.
template <class T>
SHARDTRAIN_AVX512 void store_pairs(T* p, std::int32_t n, __m512i even, __m512i odd) {
  if constexpr (kWide<T>) {
    const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ih = _mm512_add_epi32(il, _mm512_set1_epi32(8));
    _mm512_mask_storeu_epi32(p, mask16(n), _mm512_permutex2var_epi32(even, il, odd));
    _mm512_mask_storeu_epi32(p + 16, mask16(n > 16 ? n - 16 : 0),
                             _mm512_permutex2var_epi32(even, ih, odd));
  } else {
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(even)),
                                         _mm512_cvtepi32_epi16(odd), 1);
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,  //
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __mmask32 m = n >= 32 ? 0xFFFFFFFFu : (1u << n) - 1u;
    _mm512_mask_storeu_epi16(p, m, _mm512_permutexvar_epi16(idx, z));
  }
}

// Lanes 0, 2, 4, .., 30.
SHARDTRAIN_AVX512 __m512i even_offsets() {
  return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}

template <class T>
__attribute__((target("avx512f,avx512bw"))) void forward_impl(const T* x, T* y, std::int32_t* argmax, std::int32_t w,
                                                               std::int32_t oh, std::int32_t ow) {
  const __m512i one = _mm512_set1_epi32(1), wv = _mm512_set1_epi32(w), w1 = _mm512_set1_epi32(w + 1);
  const __m512i lane2 = even_offsets();
  for (std::int32_t i = 0; i < oh; ++i) {
    const T* r0 = x + 2 * i * w;
    const T* r1 = r0 + w;
    for (std::int32_t j0 = 0; j0 < ow; j0 += 16) {
      const std::int32_t n = ow - j0 < 16 ? ow - j0 : 16;
      __m512i sa, sb, sc, sd;
      load_pairs(r0 + 2 * j0, 2 * n, sa, sb);
      load_pairs(r1 + 2 * j0, 2 * n, sc, sd);
      __m512i best = sa, key = keys<T>(sa), off = _mm512_setzero_si512();
      const __m512i kb = keys<T>(sb), kc = keys<T>(sc), kd = keys<T>(sd);
      __mmask16 take = _mm512_cmpgt_epi32_mask(kb, key);
      best = _mm512_mask_mov_epi32(best, take, sb);
      key = _mm512_mask_mov_epi32(key, take, kb);
      off = _mm512_mask_mov_epi32(off, take, one);
      take = _mm512_cmpgt_epi32_mask(kc, key);
      best = _mm512_mask_mov_epi32(best, take, sc);
      key = _mm512_mask_mov_epi32(key, take, kc);
      off = _mm512_mask_mov_epi32(off, take, wv);
      take = _mm512_cmpgt_epi32_mask(kd, key);
      best = _mm512_mask_mov_epi32(best, take, sd);
      off = _mm512_mask_mov_epi32(off, take, w1);
      const __m512i at = _mm512_add_epi32(_mm512_add_epi32(_mm512_set1_epi32(2 * i * w + 2 * j0), lane2), off);
      store16(y + i * ow + j0, n, best);
      _mm512_mask_storeu_epi32(argmax + i * ow + j0, mask16(n), at);
    }
  }
}

template <class T>
__attribute__((target("avx512f,avx512bw"))) bool backward_impl(const T* dy, const std::int32_t* argmax, T* dx,
                                                                std::int32_t h, std::int32_t w, std::int32_t oh,
                                                                std::int32_t ow) {
  const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1), wv = _mm512_set1_epi32(w),
                w1 = _mm512_set1_epi32(w + 1);
  const __m512i lane2 = even_offsets();
  bool inside = true;
  for (std::int32_t i = 0; i < oh; ++i) {
    T* d0 = dx + 2 * i * w;
    T* d1 = d0 + w;
    for (std::int32_t j0 = 0; j0 < ow; j0 += 16) {
      const std::int32_t n = ow - j0 < 16 ? ow - j0 : 16;
      const __mmask16 m = mask16(n);
      const __m512i g = zero_plus<T>(load16(dy + i * ow + j0, n));
      const __m512i at = _mm512_maskz_loadu_epi32(m, argmax + i * ow + j0);
      const __m512i rel = _mm512_sub_epi32(at, _mm512_add_epi32(_mm512_set1_epi32(2 * i * w + 2 * j0), lane2));
      const __mmask16 ka = _mm512_cmpeq_epi32_mask(rel, zero), kb = _mm512_cmpeq_epi32_mask(rel, one),
                      kc = _mm512_cmpeq_epi32_mask(rel, wv), kd = _mm512_cmpeq_epi32_mask(rel, w1);
      inside = inside && static_cast<__mmask16>(ka | kb | kc | kd) == m;
      store_pairs(d0 + 2 * j0, 2 * n, _mm512_maskz_mov_epi32(ka, g), _mm512_maskz_mov_epi32(kb, g));
      store_pairs(d1 + 2 * j0, 2 * n, _mm512_maskz_mov_epi32(kc, g), _mm512_maskz_mov_epi32(kd, g));
    }
    for (std::int32_t q = 2 * ow; q < w; ++q) d0[q] = d1[q] = T();  // odd W: the column no window holds
  }
  for (std::int32_t e = 2 * oh * w; e < h * w; ++e) dx[e] = T();  // odd H: the row no window holds
  return inside;
}

#undef SHARDTRAIN_AVX512

}  // namespace

template <class T>
void forward_plane_2x2(const T* x, T* y, std::int32_t* argmax, std::int32_t w, std::int32_t oh, std::int32_t ow) {
  forward_impl<T>(x, y, argmax, w, oh, ow);
}

template <class T>
bool backward_plane_2x2(const T* dy, const std::int32_t* argmax, T* dx, std::int32_t h, std::int32_t w,
                        std::int32_t oh, std::int32_t ow) {
  return backward_impl<T>(dy, argmax, dx, h, w, oh, ow);
}

}  // namespace pool_avx512

#else  // no AVX-512 intrinsics on this compiler/target

bool pool_avx512_available() { return false; }

namespace pool_avx512 {
template <class T>
void forward_plane_2x2(const T*, T*, std::int32_t*, std::int32_t, std::int32_t, std::int32_t) {
  throw Error("max_pool2d: the AVX-512 path is not built for this target");
}
template <class T>
bool backward_plane_2x2(const T*, const std::int32_t*, T*, std::int32_t, std::int32_t, std::int32_t, std::int32_t) {
  throw Error("max_pool2d: the AVX-512 path is not built for this target");
}
}  // namespace pool_avx512

#endif

namespace pool_avx512 {
#define SHARDTRAIN_INSTANTIATE_POOL_AVX512(T)                                                                \
  template void forward_plane_2x2<T>(const T*, T*, std::int32_t*, std::int32_t, std::int32_t, std::int32_t); \
  template bool backward_plane_2x2<T>(const T*, const std::int32_t*, T*, std::int32_t, std::int32_t,         \
                                      std::int32_t, std::int32_t);
SHARDTRAIN_INSTANTIATE_POOL_AVX512(float)
SHARDTRAIN_INSTANTIATE_POOL_AVX512(bf16)
SHARDTRAIN_INSTANTIATE_POOL_AVX512(f16)
#undef SHARDTRAIN_INSTANTIATE_POOL_AVX512
}  // namespace pool_avx512

}  // namespace shardtrain
