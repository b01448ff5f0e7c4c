// shardtrain/kernels/gemm.cpp
// Owns the only call into KokkosKernels (KokkosBlas::gemm); no other file includes
// KokkosKernels headers, so their compile cost is paid once.
// Invariants:
//  - A, B, C are the LayoutRight, Unmanaged, host Views of types.hpp. That exact
//    type triple is what KokkosKernels' TPL specialisation matches, so the call
//    lands in OpenBLAS sgemm_/dgemm_ (checked at compile time below; a
//    LayoutStride view would silently fall back to a ~2 GFLOP/s loop).
//  - Row-strided LayoutRight views (stride(0) > extent(1), from subviews) are
//    passed through with the stride as BLAS's leading dimension.
//  - Shapes are checked on every call (cheap) and a mismatch throws shardtrain::Error.
//  - Degenerate shapes follow BLAS semantics: K == 0 gives C = beta * C (KokkosBlas
//    itself would return without touching C), M == 0 or N == 0 does nothing.
#include "kernels/gemm.hpp"

#include <KokkosBlas3_gemm.hpp>

#include <climits>
#include <string>

#include "core/error.hpp"

namespace shardtrain {
namespace {

// The View types KokkosBlas::gemm normalises its arguments to (KokkosBlas3_gemm.hpp).
template <class T>
using BlasA = Kokkos::View<const T**, Kokkos::LayoutRight, typename CView2<T>::device_type,
                           Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T>
using BlasC = Kokkos::View<T**, Kokkos::LayoutRight, typename View2<T>::device_type,
                           Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS) && !defined(KOKKOS_ENABLE_CUDA)
static_assert(KokkosBlas::Impl::gemm_tpl_spec_avail<BlasA<float>, BlasA<float>, BlasC<float>>::value,
              "shardtrain::gemm<float> would not reach the BLAS TPL");
static_assert(
    KokkosBlas::Impl::gemm_tpl_spec_avail<BlasA<double>, BlasA<double>, BlasC<double>>::value,
    "shardtrain::gemm<double> would not reach the BLAS TPL");
#endif

const std::string kLabelScale = "Gemm::scale_c";

std::string shape_message(Trans ta, Trans tb, std::size_t a0, std::size_t a1, std::size_t b0,
                          std::size_t b1, std::size_t c0, std::size_t c1) {
  return std::string("gemm ") + (ta == Trans::N ? "N" : "T") + (tb == Trans::N ? "N" : "T") +
         ": A(" + std::to_string(a0) + "," + std::to_string(a1) + ") B(" + std::to_string(b0) +
         "," + std::to_string(b1) + ") C(" + std::to_string(c0) + "," + std::to_string(c1) + ")";
}

}  // namespace

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
  KokkosBlas::gemm(trans_a == Trans::N ? "N" : "T", trans_b == Trans::N ? "N" : "T", alpha, a, b,
                   beta, c);
}

template void gemm<float>(Trans, Trans, float, CView2<float>, CView2<float>, float, View2<float>);
template void gemm<double>(Trans, Trans, double, CView2<double>, CView2<double>, double,
                           View2<double>);

}  // namespace shardtrain
