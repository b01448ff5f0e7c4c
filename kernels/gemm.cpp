// shardtrain/kernels/gemm.cpp
// Owns the dense matrix multiply entry point and the only BLAS call of the
// kernels (cblas_dgemm, for double).
// Invariants:
//  - float: one oneDNN matmul (dnnl_matmul.hpp: a primitive per shape, cached;
//    transposes and leading dimensions are strides, never copies).
//  - bf16 on a CPU with native bf16 dot products (cpu_bf16_native()): one oneDNN
//    matmul on the bf16 operands as stored, fp32 accumulation, beta * C added in
//    fp32 and C rounded once. No conversion pass and no scratch.
//  - double: OpenBLAS's cblas_dgemm, row-major, on the LayoutRight host Views
//    of types.hpp (oneDNN has no f64 matmul; double runs only in the gradient
//    checks). Called directly rather than through KokkosKernels' KokkosBlas::gemm
//    (which reached the same dgemm_), so a user's own Kokkos without KokkosKernels
//    builds the trainer (issue 36).
//  - Row-strided LayoutRight views (stride(0) > extent(1), from subviews) are
//    passed through with the stride as the leading dimension.
//  - Shapes are checked on every call (cheap) and a mismatch throws shardtrain::Error.
//  - Degenerate shapes follow BLAS semantics: K == 0 gives C = beta * C,
//    M == 0 or N == 0 does nothing.
//  - f16, and bf16 on CPUs without native bf16 (half_tiles.hpp): C is computed in
//    blocks of kGemmRows x kGemmCols; per block pair the rows of op(A) and columns
//    of op(B) are converted to fp32 in their stored orientation (A once per row
//    block; B once per block pair, or once per call when one column block covers
//    C), C is loaded only when beta != 0, gemm<float> runs on the block with alpha
//    and beta as floats (so the same semantics apply), and the block of C is
//    rounded back once. Scratch: gemm_half_scratch_elems.
#include "kernels/gemm.hpp"

#include <cblas.h>

#include <climits>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/cpu_compute.hpp"
#include "kernels/dnnl_matmul.hpp"
#include "kernels/dnnl_context.hpp"
#include "kernels/half_tiles.hpp"

namespace shardtrain {
namespace {

// BLAS's leading dimension of a LayoutRight view: its row stride, at least
// max(1, columns) as BLAS requires (a view with one row or no columns may report less).
template <class V>
std::size_t row_stride(const V& v) {
  const std::size_t cols = v.extent(1) > 0 ? v.extent(1) : 1;
  return v.stride(0) > cols ? v.stride(0) : cols;
}

const std::string kLabelScale = "Gemm::scale_c";

std::string shape_message(Trans ta, Trans tb, std::size_t a0, std::size_t a1, std::size_t b0,
                          std::size_t b1, std::size_t c0, std::size_t c1) {
  return std::string("gemm ") + (ta == Trans::N ? "N" : "T") + (tb == Trans::N ? "N" : "T") +
         ": A(" + std::to_string(a0) + "," + std::to_string(a1) + ") B(" + std::to_string(b0) +
         "," + std::to_string(b1) + ") C(" + std::to_string(c0) + "," + std::to_string(c1) + ")";
}

// C = alpha op(A) op(B) + beta C on oneDNN (shapes checked, m, n, k > 0). T: float or bf16.
template <class T>
void gemm_dnnl(Trans ta, Trans tb, float alpha, CView2<T> a, CView2<T> b, float beta, View2<T> c) {
  MatmulShape s;
  s.m = static_cast<std::int64_t>(c.extent(0));
  s.n = static_cast<std::int64_t>(c.extent(1));
  s.k = static_cast<std::int64_t>(ta == Trans::N ? a.extent(1) : a.extent(0));
  s.trans_a = ta == Trans::T;
  s.trans_b = tb == Trans::T;
  s.lda = static_cast<std::int64_t>(a.stride(0));
  s.ldb = static_cast<std::int64_t>(b.stride(0));
  s.ldc = static_cast<std::int64_t>(c.stride(0));
  s.ab = s.c = dnnl_type<T>();
  s.alpha = alpha;
  s.beta = beta;
  dnnl_matmul(s, a.data(), b.data(), nullptr, c.data(), "gemm");
}

// Block geometry of the 16-bit path: `rows` rows of C (of op(A)) by `cols` columns
// of C (of op(B)), each operand block with the whole inner dimension k.
struct HalfGemmBlocks {
  std::int64_t rows, cols, k;
  std::int64_t elems() const { return (rows + cols) * k + rows * cols; }
};

HalfGemmBlocks half_gemm_blocks(std::int64_t m, std::int64_t n, std::int64_t k) {
  return {half_tiles::min(m, half_tiles::kGemmRows), half_tiles::min(n, half_tiles::kGemmCols), k};
}

// C = alpha op(A) op(B) + beta C for 16-bit storage (shapes already checked, m, n > 0).
template <class H>
void gemm_half(Trans ta, Trans tb, float alpha, CView2<H> a, CView2<H> b, float beta,
               View2<H> c) {
  using namespace half_tiles;
  check_host("gemm");
  const std::int64_t m = static_cast<std::int64_t>(c.extent(0));
  const std::int64_t n = static_cast<std::int64_t>(c.extent(1));
  const std::int64_t k = static_cast<std::int64_t>(ta == Trans::N ? a.extent(1) : a.extent(0));
  const std::int64_t lda = static_cast<std::int64_t>(a.stride(0));
  const std::int64_t ldb = static_cast<std::int64_t>(b.stride(0));
  const std::int64_t ldc = static_cast<std::int64_t>(c.stride(0));
  const HalfGemmBlocks blk = half_gemm_blocks(m, n, k);
  Scratch scratch(blk.elems(), "gemm");
  float* at = scratch.take(blk.rows * k);
  float* bt = scratch.take(blk.cols * k);
  float* ct = scratch.take(blk.rows * blk.cols);
  const bool one_col_block = n <= blk.cols;
  for (std::int64_t i0 = 0; i0 < m; i0 += blk.rows) {
    const std::int64_t nr = min(blk.rows, m - i0);
    // Rows [i0, i0 + nr) of op(A): rows of A (N) or columns of A (T), kept as stored.
    if (ta == Trans::N) load_block(a.data() + i0 * lda, lda, nr, k, at);
    else load_block(a.data() + i0, lda, k, nr, at);
    const CView2<float> av = ta == Trans::N ? CView2<float>(at, nr, k) : CView2<float>(at, k, nr);
    for (std::int64_t j0 = 0; j0 < n; j0 += blk.cols) {
      const std::int64_t nc = min(blk.cols, n - j0);
      // Columns [j0, j0 + nc) of op(B): columns of B (N) or rows of B (T).
      if (i0 == 0 || !one_col_block) {
        if (tb == Trans::N) load_block(b.data() + j0, ldb, k, nc, bt);
        else load_block(b.data() + j0 * ldb, ldb, nc, k, bt);
      }
      const CView2<float> bv =
          tb == Trans::N ? CView2<float>(bt, k, nc) : CView2<float>(bt, nc, k);
      H* cb = c.data() + i0 * ldc + j0;
      if (beta != 0.0f) load_block(cb, ldc, nr, nc, ct);  // beta == 0: C is not read
      gemm<float>(ta, tb, alpha, av, bv, beta, View2<float>(ct, nr, nc));
      store_block(ct, nr, nc, cb, ldc);
    }
  }
}

}  // namespace

std::int64_t gemm_half_scratch_elems(std::int64_t m, std::int64_t n, std::int64_t k) {
  if (m <= 0 || n <= 0) return 0;
  return half_gemm_blocks(m, n, k).elems();
}

template <class T>
void gemm(Trans trans_a, Trans trans_b, T alpha, CView2<T> a, CView2<T> b, T beta, View2<T> c) {
  const std::size_t m = c.extent(0);
  const std::size_t n = c.extent(1);
  const std::size_t k = trans_a == Trans::N ? a.extent(1) : a.extent(0);
  const std::size_t a_rows = trans_a == Trans::N ? a.extent(0) : a.extent(1);
  const std::size_t b_rows = trans_b == Trans::N ? b.extent(0) : b.extent(1);
  const std::size_t b_cols = trans_b == Trans::N ? b.extent(1) : b.extent(0);
  SHARDTRAIN_CHECK(a_rows == m && b_rows == k && b_cols == n,
                   shape_message(trans_a, trans_b, a.extent(0), a.extent(1), b.extent(0),
                                 b.extent(1), m, n));
  // BLAS takes int dimensions and leading dimensions.
  SHARDTRAIN_CHECK(a.span() <= static_cast<std::size_t>(INT_MAX) &&
                       b.span() <= static_cast<std::size_t>(INT_MAX) &&
                       c.span() <= static_cast<std::size_t>(INT_MAX),
                   "gemm operand larger than INT_MAX elements");
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    if (k != 0 && cpu_bf16_native())
      return gemm_dnnl<bf16>(trans_a, trans_b, to_float(alpha), a, b, to_float(beta), c);
  }
  if constexpr (is_half_v<T>) {
    gemm_half(trans_a, trans_b, to_float(alpha), a, b, to_float(beta), c);
  } else {
    if (k == 0) {
      // op(A) op(B) is an empty sum: C = beta * C (beta == 0 clears NaNs, as BLAS does).
      T* cp = c.data();
      const std::int64_t cols = static_cast<std::int64_t>(n);
      const std::int64_t ld = static_cast<std::int64_t>(c.stride(0));
      Kokkos::parallel_for(kLabelScale, range(static_cast<std::int64_t>(m)),
                           KOKKOS_LAMBDA(const std::int64_t i) {
                             T* row = cp + i * ld;
                             for (std::int64_t j = 0; j < cols; ++j)
                               row[j] = beta == T(0) ? T(0) : beta * row[j];
                           });
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      gemm_dnnl<float>(trans_a, trans_b, alpha, a, b, beta, c);
    } else {
      cblas_dgemm(CblasRowMajor, trans_a == Trans::N ? CblasNoTrans : CblasTrans,
                  trans_b == Trans::N ? CblasNoTrans : CblasTrans, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), alpha, a.data(), static_cast<int>(row_stride(a)), b.data(),
                  static_cast<int>(row_stride(b)), beta, c.data(), static_cast<int>(row_stride(c)));
    }
  }
}

template void gemm<float>(Trans, Trans, float, CView2<float>, CView2<float>, float, View2<float>);
template void gemm<double>(Trans, Trans, double, CView2<double>, CView2<double>, double,
                           View2<double>);
template void gemm<f16>(Trans, Trans, f16, CView2<f16>, CView2<f16>, f16, View2<f16>);
template void gemm<bf16>(Trans, Trans, bf16, CView2<bf16>, CView2<bf16>, bf16, View2<bf16>);

}  // namespace shardtrain
