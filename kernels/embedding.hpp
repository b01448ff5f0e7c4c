// shardtrain/kernels/embedding.hpp
// Token + learned position embedding: out(b,t,:) = wte(tokens(b,t),:) + wpe(t,:).
// backward ACCUMULATES into dwte and dwpe (+=). Deterministic: each output
// element is summed over (b,t) in a fixed order, no atomics.
// Token ids must lie in [0, V); the caller validates data before it gets here.
// T = f16 / bf16: sums in fp32, each output element rounded once per call (bit for
// bit the fp32 kernel's results on the same 16-bit inputs, rounded): out and dwpe
// directly in registers, dwte through fp32 accumulator rows in the scratch arena
// (see embedding.cpp).
#pragma once

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

template <class T>
void embedding_forward(CView2<TokenIndex> tokens, CView2<T> wte, CView2<T> wpe, View3<T> out);

template <class T>
void embedding_backward(CView2<TokenIndex> tokens, CView3<T> dout, View2<T> dwte, View2<T> dwpe);

#define SHARDTRAIN_DECLARE_EMBEDDING(T)                                                          \
  extern template void embedding_forward<T>(CView2<TokenIndex>, CView2<T>, CView2<T>, View3<T>); \
  extern template void embedding_backward<T>(CView2<TokenIndex>, CView3<T>, View2<T>, View2<T>);
SHARDTRAIN_DECLARE_EMBEDDING(float)
SHARDTRAIN_DECLARE_EMBEDDING(double)
SHARDTRAIN_DECLARE_EMBEDDING(f16)
SHARDTRAIN_DECLARE_EMBEDDING(bf16)
#undef SHARDTRAIN_DECLARE_EMBEDDING

// Floats of 16-bit scratch (half_scratch.hpp) that embedding_backward with T = f16 /
// bf16 needs for wte(vocab, c), any batch and sequence length: the fp32 accumulators
// of dwte. embedding_forward and float / double calls need none.
std::int64_t embedding_half_scratch_elems(std::int64_t vocab, std::int64_t c);

}  // namespace shardtrain
