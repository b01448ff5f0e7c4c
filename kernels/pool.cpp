// shardtrain/kernels/pool.cpp
// Owns max pooling forward/backward (pool.hpp) and the choice between its
// implementations (pool_paths.hpp).
// Invariants:
//  - forward: per output the window is scanned row-major and an element replaces
//    the running maximum only when it is strictly greater, or NaN while the
//    maximum is not: first maximum / first NaN wins. y gets the stored value
//    itself (exact for every T, NaN payloads included), argmax its in-plane index.
//  - backward: every argmax is checked to lie in [0, H*W) first (Reduce
//    "MaxPool::check_argmax"; nothing is written when one does not), then per
//    (n, c) plane (parallel) each dx element gets +0 plus the dy routed to it,
//    added in row-major output order in compute_t<T>, each addition rounded once
//    to T; no atomics, deterministic for any thread count.
// Paths (pool_paths.hpp; the same bits, tested against each other):
//  - Scalar ("MaxPool::forward", "MaxPool::backward"): the window scan above
//    in compute_t<T> and a backward that zeroes the plane and scatters dy. Every
//    shape, and the only path of double (the gradient checks); overlapping
//    windows (stride < kernel) sum here.
//  - 2x2 windows with stride 2 for float, bf16, f16 ("MaxPool::forward_two_by_two",
//    "MaxPool::backward_two_by_two", one call per plane): the comparisons on the storage
//    bits (kernels/float_bits.hpp: a key above the best's is exactly "greater,
//    or NaN over a number"), the winner's bits and offset selected without
//    branches; backward writes each input of a window once (0 + dy at the
//    argmax, +0 elsewhere) and zeroes the row and column no window covers (odd H
//    or W): no zeroing pass, no scatter. Vector: the row loops below, which GCC
//    vectorises in each target clone; Avx512: pool_avx512.cpp's intrinsics
//    (masked, so short rows stay vectorised). Backward needs every argmax inside
//    its own window (what forward writes); a plane with one that is not is
//    redone by the Scalar backward, which routes it wherever it points.
#include "kernels/pool.hpp"

#include <climits>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/float_bits.hpp"
#include "kernels/pool_paths.hpp"

namespace shardtrain {
namespace {

const std::string kLabelForward = "MaxPool::forward";
const std::string kLabelForward2x2 = "MaxPool::forward_two_by_two";
const std::string kLabelCheck = "MaxPool::check_argmax";
const std::string kLabelBackward = "MaxPool::backward";
const std::string kLabelBackward2x2 = "MaxPool::backward_two_by_two";

constexpr std::int64_t kCheckChunk = 16384;  // argmax entries per work item of the check

std::string shape_text(const Pool2dShape& s) {
  return "max_pool2d shape N=" + std::to_string(s.batch) + " C=" + std::to_string(s.channels) +
         " H=" + std::to_string(s.height) + " W=" + std::to_string(s.width) +
         " kernel=" + std::to_string(s.kernel) + " stride=" + std::to_string(s.stride);
}

// The path that runs a call asked to run on `path` (pool_paths.hpp).
template <class T>
PoolPath resolve(PoolPath path, const Pool2dShape& s) {
  if (!float_bits::has_traits_v<T> || s.kernel != 2 || s.stride != 2 || path == PoolPath::Scalar)
    return PoolPath::Scalar;
  if (path == PoolPath::Vector || !pool_avx512_available()) return PoolPath::Vector;
  return PoolPath::Avx512;
}

// --- Vector: 2x2 / stride 2 row loops on the storage bits -----------------------------

// One (n, c) plane: x (h, w) -> y, argmax (oh, ow). All in-plane indices fit int32.
template <class T>
SHARDTRAIN_TARGET_CLONES void forward_plane_2x2(const float_bits::signed_t<T>* __restrict x,
                                                float_bits::signed_t<T>* __restrict y,
                                                std::int32_t* __restrict argmax, std::int32_t w, std::int32_t oh,
                                                std::int32_t ow) {
  using S = float_bits::signed_t<T>;
  for (std::int32_t i = 0; i < oh; ++i) {
    const S* r0 = x + 2 * i * w;
    const S* r1 = r0 + w;
    S* yr = y + i * ow;
    std::int32_t* ar = argmax + i * ow;
    const std::int32_t base = 2 * i * w;
    for (std::int32_t j = 0; j < ow; ++j) {
      const std::int32_t sa = r0[2 * j], sb = r0[2 * j + 1], sc = r1[2 * j], sd = r1[2 * j + 1];
      const std::int32_t kb = float_bits::order_key<T>(sb), kc = float_bits::order_key<T>(sc),
                         kd = float_bits::order_key<T>(sd);
      std::int32_t best = sa, key = float_bits::order_key<T>(sa), off = 0;
      bool take = kb > key;
      best = take ? sb : best;
      key = take ? kb : key;
      off = take ? 1 : off;
      take = kc > key;
      best = take ? sc : best;
      key = take ? kc : key;
      off = take ? w : off;
      take = kd > key;
      best = take ? sd : best;
      off = take ? w + 1 : off;
      yr[j] = static_cast<S>(best);
      ar[j] = base + 2 * j + off;
    }
  }
}

// One plane: dx (h, w) from dy, argmax (oh, ow); false when an argmax is not in
// its own window (the plane is then partly written).
template <class T>
SHARDTRAIN_TARGET_CLONES bool backward_plane_2x2(const float_bits::signed_t<T>* __restrict dy,
                                                 const std::int32_t* __restrict argmax,
                                                 float_bits::signed_t<T>* __restrict dx, std::int32_t h,
                                                 std::int32_t w, std::int32_t oh, std::int32_t ow) {
  using S = float_bits::signed_t<T>;
  std::int32_t outside = 0;
  for (std::int32_t i = 0; i < oh; ++i) {
    const S* g = dy + i * ow;
    const std::int32_t* a = argmax + i * ow;
    S* d0 = dx + 2 * i * w;
    S* d1 = d0 + w;
    const std::int32_t base = 2 * i * w;
    for (std::int32_t j = 0; j < ow; ++j) {
      const std::int32_t rel = a[j] - (base + 2 * j);
      const std::int32_t v = float_bits::zero_plus<T>(g[j]);
      outside |= (rel != 0) & (rel != 1) & (rel != w) & (rel != w + 1);
      d0[2 * j] = static_cast<S>(rel == 0 ? v : 0);
      d0[2 * j + 1] = static_cast<S>(rel == 1 ? v : 0);
      d1[2 * j] = static_cast<S>(rel == w ? v : 0);
      d1[2 * j + 1] = static_cast<S>(rel == w + 1 ? v : 0);
    }
    for (std::int32_t q = 2 * ow; q < w; ++q) d0[q] = d1[q] = 0;  // odd W: no window holds the last column
  }
  for (std::int32_t e = 2 * oh * w; e < h * w; ++e) dx[e] = 0;  // odd H: nor the last row
  return outside == 0;
}

// Entries of a[0, n) outside [0, plane_in).
SHARDTRAIN_TARGET_CLONES std::int64_t count_outside(const std::int32_t* __restrict a, std::int64_t n,
                                                    std::int32_t plane_in) {
  std::int32_t bad = 0;
  for (std::int64_t e = 0; e < n; ++e)
    bad += static_cast<std::uint32_t>(a[e]) >= static_cast<std::uint32_t>(plane_in) ? 1 : 0;
  return bad;
}

// --- Scalar -----------------------------------------------------------------------------

// One plane: dx = 0, then dx[argmax] += dy in row-major output order.
template <class T>
void scatter_plane(const T* g, const std::int32_t* a, T* dst, std::int64_t plane_in, std::int64_t plane_out) {
  using C = compute_t<T>;
  for (std::int64_t e = 0; e < plane_in; ++e) dst[e] = T(C(0));
  for (std::int64_t e = 0; e < plane_out; ++e) dst[a[e]] = T(static_cast<C>(dst[a[e]]) + static_cast<C>(g[e]));
}

}  // namespace

void max_pool2d_check_shape(const Pool2dShape& s) {
  SHARDTRAIN_CHECK(s.batch >= 0 && s.channels >= 1 && s.kernel >= 1 && s.stride >= 1 &&
                       s.height >= s.kernel && s.width >= s.kernel &&
                       s.height * s.width <= static_cast<std::int64_t>(INT32_MAX),
                   "invalid " + shape_text(s));
}

template <class T>
void max_pool2d_forward_path(PoolPath path, const Pool2dShape& s, CView4<T> x, View4<T> y,
                             View4<std::int32_t> argmax) {
  max_pool2d_check_shape(s);
  const std::int64_t oh = s.out_h(), ow = s.out_w();
  SHARDTRAIN_CHECK(extents_are(x, s.batch, s.channels, s.height, s.width) &&
                       extents_are(y, s.batch, s.channels, oh, ow) &&
                       extents_are(argmax, s.batch, s.channels, oh, ow),
                   "max_pool2d_forward: views do not match " + shape_text(s));
  const std::int64_t h = s.height, w = s.width, k = s.kernel, stride = s.stride;
  const T* xp = x.data();
  T* yp = y.data();
  std::int32_t* ap = argmax.data();
  const PoolPath use = resolve<T>(path, s);
  if constexpr (float_bits::has_traits_v<T>) {
    if (use != PoolPath::Scalar) {
      const bool avx512 = use == PoolPath::Avx512;
      const auto w32 = static_cast<std::int32_t>(w), oh32 = static_cast<std::int32_t>(oh),
                 ow32 = static_cast<std::int32_t>(ow);
      Kokkos::parallel_for(kLabelForward2x2, range(s.batch * s.channels), KOKKOS_LAMBDA(const std::int64_t plane) {
        const T* src = xp + plane * h * w;
        T* dst = yp + plane * oh * ow;
        std::int32_t* at = ap + plane * oh * ow;
        if (avx512) pool_avx512::forward_plane_2x2<T>(src, dst, at, w32, oh32, ow32);
        else forward_plane_2x2<T>(float_bits::bits(src), float_bits::bits(dst), at, w32, oh32, ow32);
      });
      return;
    }
  }
  using C = compute_t<T>;
  Kokkos::parallel_for(kLabelForward, range(s.batch * s.channels * oh),
                       KOKKOS_LAMBDA(const std::int64_t r) {
                         const std::int64_t plane = r / oh, i = r % oh;
                         const T* src = xp + plane * h * w;
                         for (std::int64_t j = 0; j < ow; ++j) {
                           std::int64_t best = (i * stride) * w + j * stride;
                           C best_v = static_cast<C>(src[best]);
                           for (std::int64_t p = 0; p < k; ++p)
                             for (std::int64_t q = 0; q < k; ++q) {
                               const std::int64_t idx = (i * stride + p) * w + j * stride + q;
                               const C v = static_cast<C>(src[idx]);
                               if (v > best_v || (v != v && best_v == best_v)) {
                                 best_v = v;
                                 best = idx;
                               }
                             }
                           yp[r * ow + j] = src[best];
                           ap[r * ow + j] = static_cast<std::int32_t>(best);
                         }
                       });
}

template <class T>
void max_pool2d_backward_path(PoolPath path, const Pool2dShape& s, CView4<T> dy, CView4<std::int32_t> argmax,
                              View4<T> dx) {
  max_pool2d_check_shape(s);
  const std::int64_t oh = s.out_h(), ow = s.out_w();
  SHARDTRAIN_CHECK(extents_are(dx, s.batch, s.channels, s.height, s.width) &&
                       extents_are(dy, s.batch, s.channels, oh, ow) &&
                       extents_are(argmax, s.batch, s.channels, oh, ow),
                   "max_pool2d_backward: views do not match " + shape_text(s));
  const std::int64_t plane_in = s.height * s.width, plane_out = oh * ow;
  const std::int32_t* ap = argmax.data();
  const auto entries = static_cast<std::int64_t>(argmax.size());
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      kLabelCheck, range((entries + kCheckChunk - 1) / kCheckChunk),
      KOKKOS_LAMBDA(const std::int64_t chunk, std::int64_t& count) {
        const std::int64_t e0 = chunk * kCheckChunk;
        const std::int64_t n = entries - e0 < kCheckChunk ? entries - e0 : kCheckChunk;
        count += count_outside(ap + e0, n, static_cast<std::int32_t>(plane_in));
      },
      bad);
  SHARDTRAIN_CHECK(bad == 0, "max_pool2d_backward: " + std::to_string(bad) +
                                 " argmax indices outside [0, " + std::to_string(plane_in) +
                                 ") for " + shape_text(s));
  const T* dyp = dy.data();
  T* dxp = dx.data();
  const PoolPath use = resolve<T>(path, s);
  if constexpr (float_bits::has_traits_v<T>) {
    if (use != PoolPath::Scalar) {
      const bool avx512 = use == PoolPath::Avx512;
      const auto h32 = static_cast<std::int32_t>(s.height), w32 = static_cast<std::int32_t>(s.width),
                 oh32 = static_cast<std::int32_t>(oh), ow32 = static_cast<std::int32_t>(ow);
      Kokkos::parallel_for(kLabelBackward2x2, range(s.batch * s.channels), KOKKOS_LAMBDA(const std::int64_t plane) {
        const T* g = dyp + plane * plane_out;
        const std::int32_t* a = ap + plane * plane_out;
        T* dst = dxp + plane * plane_in;
        const bool done = avx512 ? pool_avx512::backward_plane_2x2<T>(g, a, dst, h32, w32, oh32, ow32)
                                 : backward_plane_2x2<T>(float_bits::bits(g), a, float_bits::bits(dst), h32, w32,
                                                         oh32, ow32);
        if (!done) scatter_plane(g, a, dst, plane_in, plane_out);
      });
      return;
    }
  }
  Kokkos::parallel_for(kLabelBackward, range(s.batch * s.channels), KOKKOS_LAMBDA(const std::int64_t plane) {
    scatter_plane(dyp + plane * plane_out, ap + plane * plane_out, dxp + plane * plane_in, plane_in, plane_out);
  });
}

template <class T>
void max_pool2d_forward(const Pool2dShape& s, CView4<T> x, View4<T> y, View4<std::int32_t> argmax) {
  max_pool2d_forward_path<T>(PoolPath::Auto, s, x, y, argmax);
}

template <class T>
void max_pool2d_backward(const Pool2dShape& s, CView4<T> dy, CView4<std::int32_t> argmax, View4<T> dx) {
  max_pool2d_backward_path<T>(PoolPath::Auto, s, dy, argmax, dx);
}

#define SHARDTRAIN_INSTANTIATE_POOL(T)                                                                    \
  template void max_pool2d_forward<T>(const Pool2dShape&, CView4<T>, View4<T>, View4<std::int32_t>);     \
  template void max_pool2d_backward<T>(const Pool2dShape&, CView4<T>, CView4<std::int32_t>, View4<T>);   \
  template void max_pool2d_forward_path<T>(PoolPath, const Pool2dShape&, CView4<T>, View4<T>,            \
                                           View4<std::int32_t>);                                         \
  template void max_pool2d_backward_path<T>(PoolPath, const Pool2dShape&, CView4<T>, CView4<std::int32_t>, \
                                            View4<T>);
SHARDTRAIN_INSTANTIATE_POOL(float)
SHARDTRAIN_INSTANTIATE_POOL(double)
SHARDTRAIN_INSTANTIATE_POOL(f16)
SHARDTRAIN_INSTANTIATE_POOL(bf16)
#undef SHARDTRAIN_INSTANTIATE_POOL

}  // namespace shardtrain
