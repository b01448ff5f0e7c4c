// shardtrain/kernels/elementwise.cpp
// Owns the flat elementwise helpers of the residual stream: copy, accumulate, fill.
// Invariants: sizes must match exactly (a mismatch throws); y may be the same
// memory as x (partial overlap is not supported); work is split into fixed chunks
// of the index range, each a memcpy (copy) or a simple loop the compiler
// vectorises (fill stores a 16-bit type's bits member: GCC 12 stores the 16-bit
// structs one at a time, in copy too).
// T = f16 / bf16: copy and fill are the same code (16-bit values are moved, never
// converted, so they are exact); accumulate is one loop for every storage type
// (vec_math.hpp): y = narrow(widen(y) + widen(x)), the fp32 sum of the 16-bit inputs
// rounded once, without scratch. The accumulate loop is SHARDTRAIN_TARGET_CLONES
// (AVX-512 / AVX2 / baseline: the widening and the rounding vectorise); the host
// backend's VectorOps::accumulate (ZeRO's gradient buckets) calls it too.
#include "kernels/elementwise.hpp"

#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

const std::string kLabelCopy = "Elementwise::copy";
const std::string kLabelAccumulate = "Elementwise::accumulate";
const std::string kLabelFill = "Elementwise::fill";

constexpr std::int64_t kChunk = 8192;  // elements per work item

inline std::int64_t chunks(std::int64_t n) { return (n + kChunk - 1) / kChunk; }

// y[i] = narrow(widen(y[i]) + widen(x[i])); y may be x (same index read-then-write).
template <class S>
SHARDTRAIN_TARGET_CLONES
void accumulate_span(const S* x, S* y, std::int64_t n) {
  SHARDTRAIN_IVDEP
  for (std::int64_t i = 0; i < n; ++i) y[i] = vec::narrow<S>(vec::widen(y[i]) + vec::widen(x[i]));
}

void check_sizes(const char* op, std::size_t nx, std::size_t ny) {
  SHARDTRAIN_CHECK(nx == ny, std::string(op) + ": x has " + std::to_string(nx) +
                                 " elements, y has " + std::to_string(ny));
}

}  // namespace

template <class T>
void copy(CView1<T> x, View1<T> y) {
  check_sizes("copy", x.extent(0), y.extent(0));
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const T* xp = x.data();
  T* yp = y.data();
  if (n == 0 || xp == yp) return;
  Kokkos::parallel_for(kLabelCopy, range(chunks(n)), KOKKOS_LAMBDA(const std::int64_t c) {
    const std::int64_t i0 = c * kChunk;
    const std::int64_t i1 = (n - i0) < kChunk ? n : i0 + kChunk;
    // memcpy: GCC copies 16-bit structs one at a time in a plain loop.
    std::memcpy(yp + i0, xp + i0, static_cast<std::size_t>(i1 - i0) * sizeof(T));
  });
}

template <class T>
void accumulate(CView1<T> x, View1<T> y) {
  check_sizes("accumulate", x.extent(0), y.extent(0));
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const T* xp = x.data();
  T* yp = y.data();
  Kokkos::parallel_for(kLabelAccumulate, range(chunks(n)), KOKKOS_LAMBDA(const std::int64_t c) {
    const std::int64_t i0 = c * kChunk;
    const std::int64_t len = (n - i0) < kChunk ? (n - i0) : kChunk;
    accumulate_span(xp + i0, yp + i0, len);
  });
}

template <class T>
void fill(View1<T> y, T value) {
  const std::int64_t n = static_cast<std::int64_t>(y.extent(0));
  T* yp = y.data();
  Kokkos::parallel_for(kLabelFill, range(chunks(n)), KOKKOS_LAMBDA(const std::int64_t c) {
    const std::int64_t i0 = c * kChunk;
    const std::int64_t i1 = (n - i0) < kChunk ? n : i0 + kChunk;
    if constexpr (is_half_v<T>) {  // the bits member: GCC stores the structs one at a time
      const std::uint16_t bits = value.bits;
      for (std::int64_t i = i0; i < i1; ++i) yp[i].bits = bits;
    } else {
      for (std::int64_t i = i0; i < i1; ++i) yp[i] = value;
    }
  });
}

#define SHARDTRAIN_INSTANTIATE_ELEMENTWISE(T)          \
  template void copy<T>(CView1<T>, View1<T>);          \
  template void accumulate<T>(CView1<T>, View1<T>);    \
  template void fill<T>(View1<T>, T);
SHARDTRAIN_INSTANTIATE_ELEMENTWISE(float)
SHARDTRAIN_INSTANTIATE_ELEMENTWISE(double)
SHARDTRAIN_INSTANTIATE_ELEMENTWISE(f16)
SHARDTRAIN_INSTANTIATE_ELEMENTWISE(bf16)
#undef SHARDTRAIN_INSTANTIATE_ELEMENTWISE

}  // namespace shardtrain
