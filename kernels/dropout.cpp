// shardtrain/kernels/dropout.cpp
// Owns inverted dropout (dropout.hpp). Forward and backward are the same kernel
// (out = keep ? in * scale : 0), so backward regenerates exactly the forward mask.
// Invariants:
//  - keep_i depends only on (seed, stream, offset + i) through core/rng.hpp's
//    hash64 and an integer threshold: no floating point in the mask, no state;
//  - scale = 1 / (1 - p) is computed once in double and used in compute_t<T>
//    (a dropped element is written as 0, never as in * 0, so p = 1 gives zeros
//    even for inf inputs);
//  - p = 0 or eval mode: a bitwise copy ("Dropout::identity");
//  - work is split into fixed chunks of the flat index range; each element is read
//    before it is written, so out may alias in.
//  - the chunk loop is one target-cloned function (AVX-512 / AVX2 / baseline,
//    core/vectorize.hpp) with the counter hash's first two rounds, which depend
//    only on (seed, stream), taken out of it: keep_i is mix64(key ^ (offset + i))
//    with key = mix64(mix64(seed) ^ stream), hash64's own expression, so the mask
//    is bit for bit dropout_keeps_bits' (tested element by element), and GCC
//    vectorises the 64-bit multiplies (AVX-512DQ vpmullq in the AVX-512 clone).
#include "kernels/dropout.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/vectorize.hpp"

namespace shardtrain {
namespace {

// out[i] = keep_i ? in[i] * scale : 0 for i in [0, n), keep_i from counter
// first + i of the stream whose hash key is `key`. No restrict: out may be in.
template <class T>
SHARDTRAIN_TARGET_CLONES void apply_span(const T* in, T* out, std::int64_t n, std::uint64_t key, std::uint64_t first,
                                         std::uint64_t threshold, compute_t<T> scale) {
  using C = compute_t<T>;
  const T zero = T(C(0));
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC ivdep
#endif
  for (std::int64_t i = 0; i < n; ++i) {
    const bool keep = (mix64(key ^ (first + static_cast<std::uint64_t>(i))) >> 11) >= threshold;
    out[i] = keep ? T(static_cast<C>(in[i]) * scale) : zero;
  }
}

const std::string kLabelApply = "Dropout::apply_mask";
const std::string kLabelIdentity = "Dropout::identity";

constexpr std::int64_t kChunk = 4096;  // elements per work item

// out = keep ? in * scale : 0 (the forward and the backward pass).
template <class T>
void apply(const char* op, const DropoutParams& prm, CView1<T> in, View1<T> out) {
  SHARDTRAIN_CHECK(in.extent(0) == out.extent(0),
                   std::string(op) + ": input has " + std::to_string(in.extent(0)) +
                       " elements, output " + std::to_string(out.extent(0)));
  const std::uint64_t threshold = dropout_threshold(prm.p);  // checks p
  const std::int64_t n = static_cast<std::int64_t>(in.extent(0));
  const T* ip = in.data();
  T* outp = out.data();
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  if (!prm.training || threshold == 0) {
    if (ip == outp) return;
    Kokkos::parallel_for(kLabelIdentity, range(chunks), KOKKOS_LAMBDA(const std::int64_t c) {
      const std::int64_t i0 = c * kChunk;
      const std::int64_t i1 = (n - i0) < kChunk ? n : i0 + kChunk;
      for (std::int64_t i = i0; i < i1; ++i) outp[i] = ip[i];
    });
    return;
  }
  using C = compute_t<T>;
  const C scale = static_cast<C>(prm.p < 1.0 ? 1.0 / (1.0 - prm.p) : 0.0);
  // hash64(seed, stream, index) = mix64(key ^ index) (core/rng.hpp).
  const std::uint64_t key = mix64(mix64(prm.seed) ^ prm.stream), offset = prm.offset;
  Kokkos::parallel_for(kLabelApply, range(chunks), KOKKOS_LAMBDA(const std::int64_t c) {
    const std::int64_t i0 = c * kChunk;
    const std::int64_t i1 = (n - i0) < kChunk ? n : i0 + kChunk;
    apply_span<T>(ip + i0, outp + i0, i1 - i0, key, offset + static_cast<std::uint64_t>(i0), threshold, scale);
  });
}

}  // namespace

std::uint64_t dropout_threshold(double p) {
  SHARDTRAIN_CHECK(p >= 0.0 && p <= 1.0,
                   "dropout: probability " + std::to_string(p) + " is outside [0, 1]");
  // p * 2^53 is exact (a power-of-two scaling), so keep <=> u >= p exactly.
  return dropout_threshold_bits(p);
}

bool dropout_keeps(const DropoutParams& params, std::uint64_t i) {
  if (!params.training) return true;
  return dropout_keeps_bits(params.seed, params.stream, params.offset + i, dropout_threshold(params.p));
}

template <class T>
void dropout_forward(const DropoutParams& params, CView1<T> x, View1<T> y) {
  apply<T>("dropout_forward", params, x, y);
}

template <class T>
void dropout_backward(const DropoutParams& params, CView1<T> dy, View1<T> dx) {
  apply<T>("dropout_backward", params, dy, dx);
}

#define SHARDTRAIN_INSTANTIATE_DROPOUT(T)                                         \
  template void dropout_forward<T>(const DropoutParams&, CView1<T>, View1<T>); \
  template void dropout_backward<T>(const DropoutParams&, CView1<T>, View1<T>);
SHARDTRAIN_INSTANTIATE_DROPOUT(float)
SHARDTRAIN_INSTANTIATE_DROPOUT(double)
SHARDTRAIN_INSTANTIATE_DROPOUT(f16)
SHARDTRAIN_INSTANTIATE_DROPOUT(bf16)
#undef SHARDTRAIN_INSTANTIATE_DROPOUT

}  // namespace shardtrain
