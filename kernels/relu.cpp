// shardtrain/kernels/relu.cpp
// Owns ReLU forward/backward (relu.hpp).
// Invariants: elementwise, each element read before it is written, so y may alias
// x and dx may alias dy; work is split into fixed chunks of the flat index range;
// comparisons in compute_t<T>, results copied as stored values (exact for every T).
#include "kernels/relu.hpp"

#include <string>

#include "core/error.hpp"

namespace shardtrain {
namespace {

const std::string kLabelForward = "Relu::forward";
const std::string kLabelBackward = "Relu::backward";

constexpr std::int64_t kChunk = 4096;  // elements per work item

}  // namespace

template <class T>
void relu_forward(CView1<T> x, View1<T> y) {
  SHARDTRAIN_CHECK(x.extent(0) == y.extent(0), "relu_forward: x has " +
                                                   std::to_string(x.extent(0)) + " elements, y " +
                                                   std::to_string(y.extent(0)));
  using C = compute_t<T>;
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const T* xp = x.data();
  T* yp = y.data();
  Kokkos::parallel_for(kLabelForward, range((n + kChunk - 1) / kChunk),
                       KOKKOS_LAMBDA(const std::int64_t chunk) {
                         const std::int64_t i0 = chunk * kChunk;
                         const std::int64_t i1 = (n - i0) < kChunk ? n : i0 + kChunk;
                         const T zero = T(C(0));
                         for (std::int64_t i = i0; i < i1; ++i) {
                           const T xi = xp[i];
                           // x <= 0 is false for NaN: NaN passes through.
                           yp[i] = static_cast<C>(xi) <= C(0) ? zero : xi;
                         }
                       });
}

template <class T>
void relu_backward(CView1<T> saved, CView1<T> dy, View1<T> dx) {
  SHARDTRAIN_CHECK(saved.extent(0) == dy.extent(0) && saved.extent(0) == dx.extent(0),
                   "relu_backward: saved, dy, dx have " + std::to_string(saved.extent(0)) + ", " +
                       std::to_string(dy.extent(0)) + ", " + std::to_string(dx.extent(0)) +
                       " elements");
  using C = compute_t<T>;
  const std::int64_t n = static_cast<std::int64_t>(saved.extent(0));
  const T* sp = saved.data();
  const T* dyp = dy.data();
  T* dxp = dx.data();
  Kokkos::parallel_for(kLabelBackward, range((n + kChunk - 1) / kChunk),
                       KOKKOS_LAMBDA(const std::int64_t chunk) {
                         const std::int64_t i0 = chunk * kChunk;
                         const std::int64_t i1 = (n - i0) < kChunk ? n : i0 + kChunk;
                         const T zero = T(C(0));
                         for (std::int64_t i = i0; i < i1; ++i)
                           dxp[i] = static_cast<C>(sp[i]) > C(0) ? dyp[i] : zero;
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
