// shardtrain/kernels/gemm.hpp
// Owns the single entry point to dense matrix multiply. On host views it goes
// through KokkosBlas::gemm, which calls OpenBLAS sgemm_/dgemm_ for LayoutRight
// views; kept in one translation unit because KokkosKernels headers are costly.
// Invariant: A, B, C are contiguous row-major 2-D views (never LayoutStride,
// which would fall back to a ~2 GFLOP/s loop). Deterministic for a fixed thread count.
// Note: a LayoutRight view whose row stride exceeds its width (e.g. Kokkos::subview
// of a column range of a row-major matrix) is also fine: BLAS gets the row stride
// as its leading dimension. attention.cpp relies on this to address heads in place.
#pragma once

#include "types.hpp"

namespace shardtrain {

enum class Trans { N, T };

// C = alpha * op(A) * op(B) + beta * C, with op(X) = X or X^T.
template <class T>
void gemm(Trans trans_a, Trans trans_b, T alpha, CView2<T> a, CView2<T> b, T beta, View2<T> c);

extern template void gemm<float>(Trans, Trans, float, CView2<float>, CView2<float>, float, View2<float>);
extern template void gemm<double>(Trans, Trans, double, CView2<double>, CView2<double>, double, View2<double>);

}  // namespace shardtrain
