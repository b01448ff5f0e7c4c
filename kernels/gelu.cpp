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
#include <cstdint>
#include <string>
#include <vector>

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

// y'(x) in C: the factor the backward multiplies dy by (last), so that
// dx = narrow(widen(dy) * derivative(widen(x))).
template <class C>
SHARDTRAIN_ALWAYS_INLINE C derivative(C x_in) {
  C xi = x_in < -kDerivClip<C> ? -kDerivClip<C> : x_in;
  xi = xi > kDerivClip<C> ? kDerivClip<C> : xi;
  const C x2 = xi * xi;
  const C u = kSqrt2OverPi<C> * (xi + kCubic<C> * x2 * xi);
  const C du = kSqrt2OverPi<C> * (C(1) + C(3) * kCubic<C> * x2);
  const C s = C(1) / (C(1) + vec::exp_fast<C>(C(-2) * u));
  return s + C(2) * xi * s * (C(1) - s) * du;
}

template <class S>
SHARDTRAIN_TARGET_CLONES
void backward_span(const S* x, const S* dy, S* dx, std::int64_t n) {
  SHARDTRAIN_IVDEP
  for (std::int64_t i = 0; i < n; ++i)
    dx[i] = vec::narrow<S>(vec::widen(dy[i]) * derivative(vec::widen(x[i])));
}

// The 16-bit tables (T = f16 / bf16). A 16-bit x has 65536 bit patterns, so the
// forward is a table of the 16-bit results and the backward a table of the fp32
// factors derivative(widen(x)); both are computed once by the arithmetic above
// (forward_span itself; derivative() in a plain loop), so a lookup returns what the
// arithmetic returns, bit for bit (test GeluTables.*, every pattern). The lookup
// costs loads instead of one exp and one division a value; the tables are
// 128 KiB + 256 KiB per type, of which a run touches the few KiB its activations
// span. Built on first use, thread-safe (a function-local static), or ahead of
// the process measurement by gelu_prepare_tables.
template <class S>
struct HalfTables {
  std::vector<std::uint16_t> forward;  // result bits of forward(x) by x's bits
  std::vector<float> factor;           // derivative(widen(x)) by x's bits
};

template <class S>
const HalfTables<S>& half_tables() {
  static const HalfTables<S> tables = [] {
    constexpr std::int64_t kPatterns = 65536;
    std::vector<S> x(kPatterns), y(kPatterns);
    for (std::int64_t b = 0; b < kPatterns; ++b) x[b] = S::from_bits(static_cast<std::uint16_t>(b));
    forward_span(x.data(), y.data(), kPatterns);
    HalfTables<S> t;
    t.forward.resize(kPatterns);
    t.factor.resize(kPatterns);
    for (std::int64_t b = 0; b < kPatterns; ++b) {
      t.forward[b] = y[b].bits;
      t.factor[b] = derivative(vec::widen(x[b]));
    }
    return t;
  }();
  return tables;
}

template <class S>
void forward_table_span(const std::uint16_t* __restrict table, const S* x, S* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = S::from_bits(table[x[i].bits]);
}

template <class S>
SHARDTRAIN_TARGET_CLONES
void backward_table_span(const float* __restrict factor, const S* x, const S* dy, S* dx, std::int64_t n) {
  SHARDTRAIN_IVDEP
  for (std::int64_t i = 0; i < n; ++i) dx[i] = vec::narrow<S>(vec::widen(dy[i]) * factor[x[i].bits]);
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
void gelu_forward_on(GeluPath path, CView1<T> x, View1<T> y) {
  SHARDTRAIN_CHECK(x.extent(0) == y.extent(0), "gelu_forward: x has " +
                                                   std::to_string(x.extent(0)) + " elements, y " +
                                                   std::to_string(y.extent(0)));
  if constexpr (is_half_v<T>) half_tiles::check_host("gelu_forward");
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const T* xp = x.data();
  T* yp = y.data();
  if constexpr (is_half_v<T>) {
    if (path == GeluPath::table) {
      const std::uint16_t* table = half_tables<T>().forward.data();
      Kokkos::parallel_for(kLabelForward, range((n + kChunk - 1) / kChunk),
                           KOKKOS_LAMBDA(const std::int64_t chunk) {
                             const std::int64_t i0 = chunk * kChunk;
                             const std::int64_t len = (n - i0) < kChunk ? (n - i0) : kChunk;
                             forward_table_span(table, xp + i0, yp + i0, len);
                           });
      return;
    }
  }
  Kokkos::parallel_for(kLabelForward, range((n + kChunk - 1) / kChunk),
                       KOKKOS_LAMBDA(const std::int64_t chunk) {
                         const std::int64_t i0 = chunk * kChunk;
                         const std::int64_t len = (n - i0) < kChunk ? (n - i0) : kChunk;
                         forward_span(xp + i0, yp + i0, len);
                       });
}

template <class T>
void gelu_backward_on(GeluPath path, CView1<T> x, CView1<T> dy, View1<T> dx) {
  SHARDTRAIN_CHECK(x.extent(0) == dy.extent(0) && x.extent(0) == dx.extent(0),
                   "gelu_backward: x, dy, dx have " + std::to_string(x.extent(0)) + ", " +
                       std::to_string(dy.extent(0)) + ", " + std::to_string(dx.extent(0)) +
                       " elements");
  if constexpr (is_half_v<T>) half_tiles::check_host("gelu_backward");
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const T* xp = x.data();
  const T* dyp = dy.data();
  T* dxp = dx.data();
  if constexpr (is_half_v<T>) {
    if (path == GeluPath::table) {
      const float* factor = half_tables<T>().factor.data();
      Kokkos::parallel_for(kLabelBackward, range((n + kChunk - 1) / kChunk),
                           KOKKOS_LAMBDA(const std::int64_t chunk) {
                             const std::int64_t i0 = chunk * kChunk;
                             const std::int64_t len = (n - i0) < kChunk ? (n - i0) : kChunk;
                             backward_table_span(factor, xp + i0, dyp + i0, dxp + i0, len);
                           });
      return;
    }
  }
  Kokkos::parallel_for(kLabelBackward, range((n + kChunk - 1) / kChunk),
                       KOKKOS_LAMBDA(const std::int64_t chunk) {
                         const std::int64_t i0 = chunk * kChunk;
                         const std::int64_t len = (n - i0) < kChunk ? (n - i0) : kChunk;
                         backward_span(xp + i0, dyp + i0, dxp + i0, len);
                       });
}

template <class T>
void gelu_forward(CView1<T> x, View1<T> y) {
  gelu_forward_on<T>(GeluPath::table, x, y);
}

template <class T>
void gelu_backward(CView1<T> x, CView1<T> dy, View1<T> dx) {
  gelu_backward_on<T>(GeluPath::table, x, dy, dx);
}

template <class T>
const float* gelu_table_factors() {
  return half_tables<T>().factor.data();
}
template const float* gelu_table_factors<f16>();
template const float* gelu_table_factors<bf16>();

void gelu_prepare_tables(bool f16_tables, bool bf16_tables) {
  if (f16_tables) half_tables<f16>();
  if (bf16_tables) half_tables<bf16>();
}

#define SHARDTRAIN_INSTANTIATE_GELU_ON(T)                                      \
  template void gelu_forward_on<T>(GeluPath, CView1<T>, View1<T>);             \
  template void gelu_backward_on<T>(GeluPath, CView1<T>, CView1<T>, View1<T>);
SHARDTRAIN_INSTANTIATE_GELU_ON(float)
SHARDTRAIN_INSTANTIATE_GELU_ON(double)
SHARDTRAIN_INSTANTIATE_GELU_ON(f16)
SHARDTRAIN_INSTANTIATE_GELU_ON(bf16)
#undef SHARDTRAIN_INSTANTIATE_GELU_ON

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
