// shardtrain/kernels/gemm.hpp
// Owns the single entry point to dense matrix multiply: float (and bf16 on CPUs
// with native bf16 dot products) on oneDNN's matmul, double on OpenBLAS's
// cblas_dgemm (gemm.cpp). Invariant: A, B, C are row-major 2-D views (LayoutRight).
// Deterministic for a fixed thread count.
// Note: a LayoutRight view whose row stride exceeds its width (e.g. Kokkos::subview
// of a column range of a row-major matrix) is also fine: BLAS gets the row stride
// as its leading dimension. attention.cpp relies on this to address heads in place.
// T = f16 / bf16: C is computed in blocks (half_tiles.hpp): per block pair the
// operands are converted to fp32, one fp32 GEMM runs with alpha, beta as floats
// (C is read only when beta != 0), and the block of C is rounded back once.
#pragma once

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

enum class Trans { N, T };

// C = alpha * op(A) * op(B) + beta * C, with op(X) = X or X^T.
template <class T>
void gemm(Trans trans_a, Trans trans_b, T alpha, CView2<T> a, CView2<T> b, T beta, View2<T> c);

extern template void gemm<float>(Trans, Trans, float, CView2<float>, CView2<float>, float, View2<float>);
extern template void gemm<double>(Trans, Trans, double, CView2<double>, CView2<double>, double, View2<double>);
extern template void gemm<f16>(Trans, Trans, f16, CView2<f16>, CView2<f16>, f16, View2<f16>);
extern template void gemm<bf16>(Trans, Trans, bf16, CView2<bf16>, CView2<bf16>, bf16, View2<bf16>);

// Floats of 16-bit scratch (half_scratch.hpp) a gemm<f16/bf16> with C(m, n) and
// inner dimension k needs. float and double calls need none.
std::int64_t gemm_half_scratch_elems(std::int64_t m, std::int64_t n, std::int64_t k);

}  // namespace shardtrain
