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
#include "kernels/dropout.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace shardtrain {
namespace {

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
  const std::uint64_t seed = prm.seed, stream = prm.stream, offset = prm.offset;
  Kokkos::parallel_for(kLabelApply, range(chunks), KOKKOS_LAMBDA(const std::int64_t c) {
    const std::int64_t i0 = c * kChunk;
    const std::int64_t i1 = (n - i0) < kChunk ? n : i0 + kChunk;
    const T zero = T(C(0));
    for (std::int64_t i = i0; i < i1; ++i) {
      const bool keep = dropout_keeps_bits(seed, stream, offset + static_cast<std::uint64_t>(i), threshold);
      outp[i] = keep ? T(static_cast<C>(ip[i]) * scale) : zero;
    }
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
