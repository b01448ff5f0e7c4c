// shardtrain/kernels/embedding.hpp
// Token + learned position embedding: out(b,t,:) = wte(tokens(b,t),:) + wpe(t,:).
// backward ACCUMULATES into dwte and dwpe (+=). Deterministic: each output
// element is summed over (b,t) in a fixed order, no atomics.
// Token ids must lie in [0, V); the caller validates data before it gets here.
#pragma once

#include "types.hpp"

namespace shardtrain {

template <class T>
void embedding_forward(CView2<TokenIndex> tokens, CView2<T> wte, CView2<T> wpe, View3<T> out);

template <class T>
void embedding_backward(CView2<TokenIndex> tokens, CView3<T> dout, View2<T> dwte, View2<T> dwpe);

}  // namespace shardtrain
