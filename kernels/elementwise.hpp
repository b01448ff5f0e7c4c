// shardtrain/kernels/elementwise.hpp
// Small elementwise helpers over flat views (residual stream bookkeeping).
#pragma once

#include "types.hpp"

namespace shardtrain {

template <class T> void copy(CView1<T> x, View1<T> y);        // y = x
template <class T> void accumulate(CView1<T> x, View1<T> y);  // y += x
template <class T> void fill(View1<T> y, T value);            // y = value

}  // namespace shardtrain
