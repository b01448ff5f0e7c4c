// shardtrain/kernels/gelu.cpp
// Owns GELU with the tanh approximation (GPT-2, nn.GELU(approximate="tanh")).
// Evaluated through the identity 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)):
//   y  = x s,                        s = 1 / (1 + exp(-2u)),  u = k (x + 0.044715 x^3)
//   y' = s + 2 x s (1 - s) u',       u' = k (1 + 3 * 0.044715 x^2),  k = sqrt(2 / pi)
// (1 - tanh^2 = 4 s (1 - s)), so each element costs one exp and one division in
// both passes, and with vec::exp_fast<float> the float loops vectorise.
// Invariants: forward OVERWRITES y and y may alias x; backward OVERWRITES dx (dx
// may alias dy). Work is split into fixed chunks of the flat index range.
// One loop body per pass for every storage type S (vec_math.hpp): each element is
// widened to compute_t<S> in registers, run through the same operations in the
// same order, and rounded once on store. So T = f16 / bf16 gives the fp32 result on
// the 16-bit input rounded once, bit for bit, reading and writing 16-bit memory
// directly: no scratch (gelu_half_scratch_elems() == 0). Each element is read before
// its own index is written, so the aliasing rules above hold for 16 bits too.
#include "kernels/gelu.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/half_tiles.hpp"  // check_host
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

const std::string kLabelForward = "Gelu::forward";
const std::string kLabelBackward = "Gelu::backward";

constexpr std::int64_t kChunk = 2048;  // elements per work item

template <class T>
constexpr T kSqrt2OverPi = T(0.7978845608028654);
template <class T>
constexpr T kCubic = T(0.044715);

// No restrict: y may be x (same index read-then-write, no loop-carried dependence).
template <class S>
SHARDTRAIN_TARGET_CLONES
void forward_span(const S* x, S* y, std::int64_t n) {
  using C = compute_t<S>;
  SHARDTRAIN_IVDEP
  for (std::int64_t i = 0; i < n; ++i) {
    const C xi = vec::widen(x[i]);
    const C u = kSqrt2OverPi<C> * (xi + kCubic<C> * xi * xi * xi);
    y[i] = vec::narrow<S>(xi / (C(1) + vec::exp_fast<C>(C(-2) * u)));
  }
}

// Beyond +-kDerivClip, s is exactly 0 or 1 in T, so the derivative is exactly 0 or
// 1; clamping there changes no result but keeps x^3 from overflowing into inf * 0.
template <class T>
constexpr T kDerivClip = T(30);
template <>
constexpr float kDerivClip<float> = 12.0f;

template <class S>
SHARDTRAIN_TARGET_CLONES
void backward_span(const S* x, const S* dy, S* dx, std::int64_t n) {
  using C = compute_t<S>;
  SHARDTRAIN_IVDEP
  for (std::int64_t i = 0; i < n; ++i) {
    const C x_in = vec::widen(x[i]);
    C xi = x_in < -kDerivClip<C> ? -kDerivClip<C> : x_in;
    xi = xi > kDerivClip<C> ? kDerivClip<C> : xi;
    const C x2 = xi * xi;
    const C u = kSqrt2OverPi<C> * (xi + kCubic<C> * x2 * xi);
    const C du = kSqrt2OverPi<C> * (C(1) + C(3) * kCubic<C> * x2);
    const C s = C(1) / (C(1) + vec::exp_fast<C>(C(-2) * u));
    dx[i] = vec::narrow<S>(vec::widen(dy[i]) * (s + C(2) * xi * s * (C(1) - s) * du));
  }
}

// The erf form (gelu_erf_*): std::erf / std::exp in compute_t<S>, rounded once
// on store, as the tanh form; not vectorised (std::erf is a libm call), which
// costs little beside the GEMMs around it.
template <class T>
constexpr T kInvSqrt2 = T(0.7071067811865476);
template <class T>
constexpr T kInvSqrt2Pi = T(0.3989422804014327);

template <class S>
void erf_forward_span(const S* x, S* y, std::int64_t n) {
  using C = compute_t<S>;
  for (std::int64_t i = 0; i < n; ++i) {
    const C xi = vec::widen(x[i]);
    y[i] = vec::narrow<S>(C(0.5) * xi * (C(1) + std::erf(xi * kInvSqrt2<C>)));
  }
}

template <class S>
void erf_backward_span(const S* x, const S* dy, S* dx, std::int64_t n) {
  using C = compute_t<S>;
  for (std::int64_t i = 0; i < n; ++i) {
    const C xi = vec::widen(x[i]);
    const C cdf = C(0.5) * (C(1) + std::erf(xi * kInvSqrt2<C>));
    const C pdf = kInvSqrt2Pi<C> * std::exp(C(-0.5) * xi * xi);
    dx[i] = vec::narrow<S>(vec::widen(dy[i]) * (cdf + xi * pdf));
  }
}

}  // namespace

std::int64_t gelu_half_scratch_elems() { return 0; }

template <class T>
void gelu_erf_forward(CView1<T> x, View1<T> y) {
  SHARDTRAIN_CHECK(x.extent(0) == y.extent(0), "gelu_erf_forward: x has " + std::to_string(x.extent(0)) +
                                                   " elements, y " + std::to_string(y.extent(0)));
  if constexpr (is_half_v<T>) half_tiles::check_host("gelu_erf_forward");
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const T* xp = x.data();
  T* yp = y.data();
  Kokkos::parallel_for("GeluErf::forward", range((n + kChunk - 1) / kChunk), KOKKOS_LAMBDA(const std::int64_t chunk) {
    const std::int64_t i0 = chunk * kChunk;
    const std::int64_t len = (n - i0) < kChunk ? (n - i0) : kChunk;
    erf_forward_span(xp + i0, yp + i0, len);
  });
}

template <class T>
void gelu_erf_backward(CView1<T> x, CView1<T> dy, View1<T> dx) {
  SHARDTRAIN_CHECK(x.extent(0) == dy.extent(0) && x.extent(0) == dx.extent(0),
                   "gelu_erf_backward: x, dy, dx have " + std::to_string(x.extent(0)) + ", " +
                       std::to_string(dy.extent(0)) + ", " + std::to_string(dx.extent(0)) + " elements");
  if constexpr (is_half_v<T>) half_tiles::check_host("gelu_erf_backward");
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const T* xp = x.data();
  const T* dyp = dy.data();
  T* dxp = dx.data();
  Kokkos::parallel_for("GeluErf::backward", range((n + kChunk - 1) / kChunk), KOKKOS_LAMBDA(const std::int64_t chunk) {
    const std::int64_t i0 = chunk * kChunk;
    const std::int64_t len = (n - i0) < kChunk ? (n - i0) : kChunk;
    erf_backward_span(xp + i0, dyp + i0, dxp + i0, len);
  });
}

template <class T>
void gelu_forward(CView1<T> x, View1<T> y) {
  SHARDTRAIN_CHECK(x.extent(0) == y.extent(0), "gelu_forward: x has " +
                                                   std::to_string(x.extent(0)) + " elements, y " +
                                                   std::to_string(y.extent(0)));
  if constexpr (is_half_v<T>) half_tiles::check_host("gelu_forward");
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const T* xp = x.data();
  T* yp = y.data();
  Kokkos::parallel_for(kLabelForward, range((n + kChunk - 1) / kChunk),
                       KOKKOS_LAMBDA(const std::int64_t chunk) {
                         const std::int64_t i0 = chunk * kChunk;
                         const std::int64_t len = (n - i0) < kChunk ? (n - i0) : kChunk;
                         forward_span(xp + i0, yp + i0, len);
                       });
}

template <class T>
void gelu_backward(CView1<T> x, CView1<T> dy, View1<T> dx) {
  SHARDTRAIN_CHECK(x.extent(0) == dy.extent(0) && x.extent(0) == dx.extent(0),
                   "gelu_backward: x, dy, dx have " + std::to_string(x.extent(0)) + ", " +
                       std::to_string(dy.extent(0)) + ", " + std::to_string(dx.extent(0)) +
                       " elements");
  if constexpr (is_half_v<T>) half_tiles::check_host("gelu_backward");
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const T* xp = x.data();
  const T* dyp = dy.data();
  T* dxp = dx.data();
  Kokkos::parallel_for(kLabelBackward, range((n + kChunk - 1) / kChunk),
                       KOKKOS_LAMBDA(const std::int64_t chunk) {
                         const std::int64_t i0 = chunk * kChunk;
                         const std::int64_t len = (n - i0) < kChunk ? (n - i0) : kChunk;
                         backward_span(xp + i0, dyp + i0, dxp + i0, len);
                       });
}

template void gelu_forward<float>(CView1<float>, View1<float>);
template void gelu_forward<double>(CView1<double>, View1<double>);
template void gelu_backward<float>(CView1<float>, CView1<float>, View1<float>);
template void gelu_backward<double>(CView1<double>, CView1<double>, View1<double>);
template void gelu_forward<f16>(CView1<f16>, View1<f16>);
template void gelu_forward<bf16>(CView1<bf16>, View1<bf16>);
template void gelu_backward<f16>(CView1<f16>, CView1<f16>, View1<f16>);
template void gelu_backward<bf16>(CView1<bf16>, CView1<bf16>, View1<bf16>);
#define SHARDTRAIN_INSTANTIATE_GELU_ERF(T)                     \
  template void gelu_erf_forward<T>(CView1<T>, View1<T>); \
  template void gelu_erf_backward<T>(CView1<T>, CView1<T>, View1<T>);
SHARDTRAIN_INSTANTIATE_GELU_ERF(float)
SHARDTRAIN_INSTANTIATE_GELU_ERF(double)
SHARDTRAIN_INSTANTIATE_GELU_ERF(f16)
SHARDTRAIN_INSTANTIATE_GELU_ERF(bf16)
#undef SHARDTRAIN_INSTANTIATE_GELU_ERF

}  // namespace shardtrain
