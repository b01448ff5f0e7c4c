// shardtrain/kernels/linear.hpp
// Fully connected layer in PyTorch nn.Linear layout: weight w is (out M, in K).
// Gradient convention (as in llm.c): parameter gradients dw, db are ACCUMULATED
// (+=, so micro-batches add up); the input gradient dx is OVERWRITTEN.
// T = f16 / bf16: same conventions; the products run as fp32 GEMMs on converted
// blocks of x and w (half_tiles.hpp), y (when accumulating), dw and db are added to
// in fp32 and every output element is rounded once per call.
#pragma once

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

// y(N,M) = x(N,K) · w(M,K)^T + b(M)            when accumulate == false
// y(N,M) += x(N,K) · w(M,K)^T + b(M)           when accumulate == true (fused residual add)
// b may be an empty view (size 0): no bias.
template <class T>
void linear_forward(CView2<T> x, CView2<T> w, CView1<T> b, View2<T> y, bool accumulate = false);

// dx(N,K)  = dy(N,M) · w(M,K)       (skipped when dx is empty)
// dw(M,K) += dy(N,M)^T · x(N,K)      when accumulate == true
// db(M)   += sum over rows of dy    (skipped when db is empty)
// accumulate == false OVERWRITES dw and db instead (dw = dy^T x, db = column sums;
// N == 0 writes zeros; NaNs in them do not propagate). A caller whose dw and db hold
// zeros gets the bits of accumulating into them (0 + s == s), without reading them:
// oneDNN's accumulating matmul costs 3-7% more than the overwriting one on the GPT's
// backward-weights shapes (benchmarks.md, issue 33).
template <class T>
void linear_backward(CView2<T> x, CView2<T> w, CView2<T> dy, View2<T> dx, View2<T> dw, View1<T> db,
                     bool accumulate = true);

#define SHARDTRAIN_DECLARE_LINEAR(T)                                                           \
  extern template void linear_forward<T>(CView2<T>, CView2<T>, CView1<T>, View2<T>, bool);     \
  extern template void linear_backward<T>(CView2<T>, CView2<T>, CView2<T>, View2<T>, View2<T>, \
                                          View1<T>, bool);
SHARDTRAIN_DECLARE_LINEAR(float)
SHARDTRAIN_DECLARE_LINEAR(double)
SHARDTRAIN_DECLARE_LINEAR(f16)
SHARDTRAIN_DECLARE_LINEAR(bf16)
#undef SHARDTRAIN_DECLARE_LINEAR

// Floats of 16-bit scratch (half_scratch.hpp) that linear_forward and
// linear_backward with T = f16 / bf16 need for x(n, k) and w(m, k). Bounded by the
// blocks: a larger n needs no more. float and double calls need none.
std::int64_t linear_half_scratch_elems(std::int64_t n, std::int64_t k, std::int64_t m);

}  // namespace shardtrain
