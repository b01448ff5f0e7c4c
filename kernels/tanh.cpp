// shardtrain/kernels/tanh.cpp
// Owns tanh (tanh.hpp): std::tanh in compute_t<S> (fp32 for f16 / bf16, so a
// 16-bit result is the fp32 one rounded once), backward from the saved output.
// Invariants: forward OVERWRITES y (y may alias x); backward OVERWRITES dx (dx
// may alias dy); each element is read before its own index is written. Work is
// split into fixed chunks of the flat index range.
#include "kernels/tanh.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/half_tiles.hpp"  // check_host
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

constexpr std::int64_t kChunk = 4096;  // elements per work item

template <class S>
void forward_span(const S* x, S* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = vec::narrow<S>(std::tanh(vec::widen(x[i])));
}

template <class S>
void backward_span(const S* y, const S* dy, S* dx, std::int64_t n) {
  using C = compute_t<S>;
  for (std::int64_t i = 0; i < n; ++i) {
    const C yi = vec::widen(y[i]);
    dx[i] = vec::narrow<S>(vec::widen(dy[i]) * (C(1) - yi * yi));
  }
}

}  // namespace

template <class T>
void tanh_forward(CView1<T> x, View1<T> y) {
  SHARDTRAIN_CHECK(x.extent(0) == y.extent(0), "tanh_forward: x has " + std::to_string(x.extent(0)) +
                                                   " elements, y " + std::to_string(y.extent(0)));
  if constexpr (is_half_v<T>) half_tiles::check_host("tanh_forward");
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const T* xp = x.data();
  T* yp = y.data();
  Kokkos::parallel_for("Tanh::forward", range((n + kChunk - 1) / kChunk), KOKKOS_LAMBDA(const std::int64_t chunk) {
    const std::int64_t i0 = chunk * kChunk;
    const std::int64_t len = (n - i0) < kChunk ? (n - i0) : kChunk;
    forward_span(xp + i0, yp + i0, len);
  });
}

template <class T>
void tanh_backward(CView1<T> y, CView1<T> dy, View1<T> dx) {
  SHARDTRAIN_CHECK(y.extent(0) == dy.extent(0) && y.extent(0) == dx.extent(0),
                   "tanh_backward: y, dy, dx have " + std::to_string(y.extent(0)) + ", " +
                       std::to_string(dy.extent(0)) + ", " + std::to_string(dx.extent(0)) + " elements");
  if constexpr (is_half_v<T>) half_tiles::check_host("tanh_backward");
  const std::int64_t n = static_cast<std::int64_t>(y.extent(0));
  const T* yp = y.data();
  const T* dyp = dy.data();
  T* dxp = dx.data();
  Kokkos::parallel_for("Tanh::backward", range((n + kChunk - 1) / kChunk), KOKKOS_LAMBDA(const std::int64_t chunk) {
    const std::int64_t i0 = chunk * kChunk;
    const std::int64_t len = (n - i0) < kChunk ? (n - i0) : kChunk;
    backward_span(yp + i0, dyp + i0, dxp + i0, len);
  });
}

#define SHARDTRAIN_INSTANTIATE_TANH(T)                 \
  template void tanh_forward<T>(CView1<T>, View1<T>); \
  template void tanh_backward<T>(CView1<T>, CView1<T>, View1<T>);
SHARDTRAIN_INSTANTIATE_TANH(float)
SHARDTRAIN_INSTANTIATE_TANH(double)
SHARDTRAIN_INSTANTIATE_TANH(f16)
SHARDTRAIN_INSTANTIATE_TANH(bf16)
#undef SHARDTRAIN_INSTANTIATE_TANH

}  // namespace shardtrain
