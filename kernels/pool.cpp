// shardtrain/kernels/pool.cpp
// Owns max pooling forward/backward (pool.hpp).
// Invariants:
//  - forward: parallel over output rows (n, c, i); per output the window is scanned
//    row-major and an element replaces the running maximum only when it is strictly
//    greater, or NaN while the maximum is not: first maximum / first NaN wins. y gets
//    the stored value itself (exact for every T), argmax its in-plane index.
//  - backward: argmax is validated first (Reduce "MaxPool::check_argmax"), then per
//    (n, c) plane (parallel) dx is zeroed and dy added at argmax in row-major output
//    order: no atomics, deterministic for any thread count.
//  - Comparisons and sums are done in compute_t<T> (fp32 for f16 / bf16).
#include "kernels/pool.hpp"

#include <climits>
#include <string>

#include "core/error.hpp"

namespace shardtrain {
namespace {

const std::string kLabelForward = "MaxPool::forward";
const std::string kLabelCheck = "MaxPool::check_argmax";
const std::string kLabelBackward = "MaxPool::backward";

std::string shape_text(const Pool2dShape& s) {
  return "max_pool2d shape N=" + std::to_string(s.batch) + " C=" + std::to_string(s.channels) +
         " H=" + std::to_string(s.height) + " W=" + std::to_string(s.width) +
         " kernel=" + std::to_string(s.kernel) + " stride=" + std::to_string(s.stride);
}

}  // namespace

void max_pool2d_check_shape(const Pool2dShape& s) {
  SHARDTRAIN_CHECK(s.batch >= 0 && s.channels >= 1 && s.kernel >= 1 && s.stride >= 1 &&
                       s.height >= s.kernel && s.width >= s.kernel &&
                       s.height * s.width <= static_cast<std::int64_t>(INT32_MAX),
                   "invalid " + shape_text(s));
}

template <class T>
void max_pool2d_forward(const Pool2dShape& s, CView4<T> x, View4<T> y,
                        View4<std::int32_t> argmax) {
  max_pool2d_check_shape(s);
  const std::int64_t oh = s.out_h(), ow = s.out_w();
  SHARDTRAIN_CHECK(extents_are(x, s.batch, s.channels, s.height, s.width) &&
                       extents_are(y, s.batch, s.channels, oh, ow) &&
                       extents_are(argmax, s.batch, s.channels, oh, ow),
                   "max_pool2d_forward: views do not match " + shape_text(s));
  using C = compute_t<T>;
  const std::int64_t h = s.height, w = s.width, k = s.kernel, stride = s.stride;
  const T* xp = x.data();
  T* yp = y.data();
  std::int32_t* ap = argmax.data();
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
void max_pool2d_backward(const Pool2dShape& s, CView4<T> dy, CView4<std::int32_t> argmax,
                         View4<T> dx) {
  max_pool2d_check_shape(s);
  const std::int64_t oh = s.out_h(), ow = s.out_w();
  SHARDTRAIN_CHECK(extents_are(dx, s.batch, s.channels, s.height, s.width) &&
                       extents_are(dy, s.batch, s.channels, oh, ow) &&
                       extents_are(argmax, s.batch, s.channels, oh, ow),
                   "max_pool2d_backward: views do not match " + shape_text(s));
  const std::int64_t plane_in = s.height * s.width, plane_out = oh * ow;
  const std::int32_t* ap = argmax.data();
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      kLabelCheck, range(static_cast<std::int64_t>(argmax.size())),
      KOKKOS_LAMBDA(const std::int64_t e, std::int64_t& count) {
        count += (ap[e] < 0 || ap[e] >= plane_in) ? 1 : 0;
      },
      bad);
  SHARDTRAIN_CHECK(bad == 0, "max_pool2d_backward: " + std::to_string(bad) +
                                 " argmax indices outside [0, " + std::to_string(plane_in) +
                                 ") for " + shape_text(s));
  using C = compute_t<T>;
  const T* dyp = dy.data();
  T* dxp = dx.data();
  Kokkos::parallel_for(kLabelBackward, range(s.batch * s.channels),
                       KOKKOS_LAMBDA(const std::int64_t plane) {
                         T* dst = dxp + plane * plane_in;
                         for (std::int64_t e = 0; e < plane_in; ++e) dst[e] = T(C(0));
                         const T* g = dyp + plane * plane_out;
                         const std::int32_t* a = ap + plane * plane_out;
                         for (std::int64_t e = 0; e < plane_out; ++e)
                           dst[a[e]] = T(static_cast<C>(dst[a[e]]) + static_cast<C>(g[e]));
                       });
}

#define SHARDTRAIN_INSTANTIATE_POOL(T)                                                       \
  template void max_pool2d_forward<T>(const Pool2dShape&, CView4<T>, View4<T>,              \
                                      View4<std::int32_t>);                                 \
  template void max_pool2d_backward<T>(const Pool2dShape&, CView4<T>, CView4<std::int32_t>, \
                                       View4<T>);
SHARDTRAIN_INSTANTIATE_POOL(float)
SHARDTRAIN_INSTANTIATE_POOL(double)
SHARDTRAIN_INSTANTIATE_POOL(f16)
SHARDTRAIN_INSTANTIATE_POOL(bf16)
#undef SHARDTRAIN_INSTANTIATE_POOL

}  // namespace shardtrain
