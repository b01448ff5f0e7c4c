// shardtrain/kernels/relu.cpp
// Owns ReLU forward/backward (relu.hpp).
// Invariants: elementwise, each element read before it is written, so y may alias
// x and dx may alias dy; work is split into fixed chunks of the flat index range;
// results are copies of stored values or +0 (exact for every T).
// float, bf16, f16: the comparisons are done on the storage bits
// (kernels/float_bits.hpp), so one integer loop per direction serves the three
// types and vectorises in every target clone (AVX-512 / AVX2 / baseline): the
// 16-bit types move half the bytes of fp32 and never widen to fp32. x <= 0 is
// "the signed bits are at most those of -inf" (NaN passes, -0 becomes +0);
// x > 0 is "bits - 1 below the bits of +inf" as unsigned. double (the gradient
// checks) compares doubles.
#include "kernels/relu.hpp"

#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/float_bits.hpp"

namespace shardtrain {
namespace {

const std::string kLabelForward = "Relu::forward";
const std::string kLabelBackward = "Relu::backward";

constexpr std::int64_t kChunk = 8192;  // elements per work item

// No restrict: y may be x (same index read, then written).
template <class T>
SHARDTRAIN_TARGET_CLONES void forward_bits(const float_bits::signed_t<T>* x, float_bits::signed_t<T>* y,
                                           std::int64_t n) {
  using S = float_bits::signed_t<T>;
  SHARDTRAIN_BITS_IVDEP
  for (std::int64_t i = 0; i < n; ++i) {
    const S v = x[i];
    y[i] = float_bits::not_above_zero<T>(v) ? S(0) : v;
  }
}

template <class T>
SHARDTRAIN_TARGET_CLONES void backward_bits(const float_bits::signed_t<T>* saved, const float_bits::signed_t<T>* dy,
                                            float_bits::signed_t<T>* dx, std::int64_t n) {
  using S = float_bits::signed_t<T>;
  SHARDTRAIN_BITS_IVDEP
  for (std::int64_t i = 0; i < n; ++i) dx[i] = float_bits::positive<T>(saved[i]) ? dy[i] : S(0);
}

}  // namespace

template <class T>
void relu_forward(CView1<T> x, View1<T> y) {
  SHARDTRAIN_CHECK(x.extent(0) == y.extent(0), "relu_forward: x has " +
                                                   std::to_string(x.extent(0)) + " elements, y " +
                                                   std::to_string(y.extent(0)));
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const T* xp = x.data();
  T* yp = y.data();
  Kokkos::parallel_for(kLabelForward, range((n + kChunk - 1) / kChunk),
                       KOKKOS_LAMBDA(const std::int64_t chunk) {
                         const std::int64_t i0 = chunk * kChunk;
                         const std::int64_t i1 = (n - i0) < kChunk ? n : i0 + kChunk;
                         if constexpr (float_bits::has_traits_v<T>) {
                           forward_bits<T>(float_bits::bits(xp + i0), float_bits::bits(yp + i0), i1 - i0);
                         } else {
                           for (std::int64_t i = i0; i < i1; ++i) {
                             const T xi = xp[i];
                             // x <= 0 is false for NaN: NaN passes through.
                             yp[i] = xi <= T(0) ? T(0) : xi;
                           }
                         }
                       });
}

template <class T>
void relu_backward(CView1<T> saved, CView1<T> dy, View1<T> dx) {
  SHARDTRAIN_CHECK(saved.extent(0) == dy.extent(0) && saved.extent(0) == dx.extent(0),
                   "relu_backward: saved, dy, dx have " + std::to_string(saved.extent(0)) + ", " +
                       std::to_string(dy.extent(0)) + ", " + std::to_string(dx.extent(0)) +
                       " elements");
  const std::int64_t n = static_cast<std::int64_t>(saved.extent(0));
  const T* sp = saved.data();
  const T* dyp = dy.data();
  T* dxp = dx.data();
  Kokkos::parallel_for(kLabelBackward, range((n + kChunk - 1) / kChunk),
                       KOKKOS_LAMBDA(const std::int64_t chunk) {
                         const std::int64_t i0 = chunk * kChunk;
                         const std::int64_t i1 = (n - i0) < kChunk ? n : i0 + kChunk;
                         if constexpr (float_bits::has_traits_v<T>) {
                           backward_bits<T>(float_bits::bits(sp + i0), float_bits::bits(dyp + i0),
                                            float_bits::bits(dxp + i0), i1 - i0);
                         } else {
                           for (std::int64_t i = i0; i < i1; ++i) dxp[i] = sp[i] > T(0) ? dyp[i] : T(0);
                         }
                       });
}

#define SHARDTRAIN_INSTANTIATE_RELU(T)                 \
  template void relu_forward<T>(CView1<T>, View1<T>); \
  template void relu_backward<T>(CView1<T>, CView1<T>, View1<T>);
SHARDTRAIN_INSTANTIATE_RELU(float)
SHARDTRAIN_INSTANTIATE_RELU(double)
SHARDTRAIN_INSTANTIATE_RELU(f16)
SHARDTRAIN_INSTANTIATE_RELU(bf16)
#undef SHARDTRAIN_INSTANTIATE_RELU

}  // namespace shardtrain
