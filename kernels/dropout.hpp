// shardtrain/kernels/dropout.hpp
// Inverted dropout with drop probability p over flat views (PyTorch nn.Dropout):
//   forward  y  = keep_i ? x  / (1 - p) : 0
//   backward dx = keep_i ? dy / (1 - p) : 0
// The mask is NOT stored: keep_i is a pure function of the counters
//   u_i = (hash64(seed, stream, offset + i) >> 11) * 2^-53   (core/rng.hpp; 53 bits, [0, 1))
//   keep_i = (u_i >= p)                                      (exact comparison)
// so backward regenerates the forward's mask from the same DropoutParams, and the
// mask depends only on (seed, stream, global element index): never on the thread
// count, the rank count or how the caller splits a tensor into calls (a call on
// elements [a, b) passes offset = a). The caller picks `stream` so that no two
// dropout sites or steps share one (e.g. a hash of step, micro-batch and layer).
// p = 0 and eval mode (training == false) are the identity (y is a bitwise copy of
// x); p = 1 drops everything (y = 0). Outputs are OVERWRITTEN; y may alias x and dx
// may alias dy.
// T = f16 / bf16: x / (1 - p) in fp32, rounded once per element; no scratch.
#pragma once

#include "cnn_shapes.hpp"
#include "core/half.hpp"
#include "types.hpp"

#include <cstdint>

namespace shardtrain {

// DropoutParams (p, seed, stream, offset, training) and the keep predicate
// dropout_keeps_bits (host and device code): kernels/cnn_shapes.hpp.

// The kept fraction is 1 - dropout_threshold(p) / 2^53: element i is kept when
// (hash64(seed, stream, offset + i) >> 11) >= dropout_threshold(p) = ceil(p * 2^53).
// Throws shardtrain::Error unless 0 <= p <= 1.
std::uint64_t dropout_threshold(double p);

// keep_i of the header comment (host; the kernels use the same expression).
bool dropout_keeps(const DropoutParams& params, std::uint64_t i);

template <class T>
void dropout_forward(const DropoutParams& params, CView1<T> x, View1<T> y);

template <class T>
void dropout_backward(const DropoutParams& params, CView1<T> dy, View1<T> dx);

#define SHARDTRAIN_DECLARE_DROPOUT(T)                                                    \
  extern template void dropout_forward<T>(const DropoutParams&, CView1<T>, View1<T>); \
  extern template void dropout_backward<T>(const DropoutParams&, CView1<T>, View1<T>);
SHARDTRAIN_DECLARE_DROPOUT(float)
SHARDTRAIN_DECLARE_DROPOUT(double)
SHARDTRAIN_DECLARE_DROPOUT(f16)
SHARDTRAIN_DECLARE_DROPOUT(bf16)
#undef SHARDTRAIN_DECLARE_DROPOUT

}  // namespace shardtrain
