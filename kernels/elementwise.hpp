// shardtrain/kernels/elementwise.hpp
// Small elementwise helpers over flat views (residual stream bookkeeping).
// T = f16 / bf16: copy and fill move 16-bit values unchanged; accumulate adds in
// fp32 and rounds once per element. None of them uses 16-bit scratch.
#pragma once

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

template <class T> void copy(CView1<T> x, View1<T> y);        // y = x
template <class T> void accumulate(CView1<T> x, View1<T> y);  // y += x
template <class T> void fill(View1<T> y, T value);            // y = value

#define SHARDTRAIN_DECLARE_ELEMENTWISE(T)                   \
  extern template void copy<T>(CView1<T>, View1<T>);       \
  extern template void accumulate<T>(CView1<T>, View1<T>); \
  extern template void fill<T>(View1<T>, T);
SHARDTRAIN_DECLARE_ELEMENTWISE(float)
SHARDTRAIN_DECLARE_ELEMENTWISE(double)
SHARDTRAIN_DECLARE_ELEMENTWISE(f16)
SHARDTRAIN_DECLARE_ELEMENTWISE(bf16)
#undef SHARDTRAIN_DECLARE_ELEMENTWISE

// Floats of 16-bit scratch (half_scratch.hpp) copy, accumulate and fill need: 0
// (they convert element by element). Declared so a model can size the arena
// uniformly over every kernel it calls.
constexpr std::int64_t elementwise_half_scratch_elems() { return 0; }

}  // namespace shardtrain
