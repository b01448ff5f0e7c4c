// Tests shardtrain::gemm: all four transpose combinations on non-square shapes
// against a naive triple loop (double and float), row-strided LayoutRight
// operands (as attention uses them), K == 0, shape errors, and that the call is
// served by the BLAS TPL (KokkosBlas pushes a "[TPL_BLAS,...]" profiling region).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "gradcheck.hpp"
#include "kernel_test_util.hpp"
#include "kernels/gemm.hpp"
#include "kernels/dnnl_matmul.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;

// C(m,n) = alpha op(A) op(B) + beta C, everything row-major with the given row strides.
void naive_gemm(Trans ta, Trans tb, int m, int n, int k, double alpha, const std::vector<double>& a,
                int lda, const std::vector<double>& b, int ldb, double beta, std::vector<double>& c,
                int ldc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      long double s = 0.0L;
      for (int p = 0; p < k; ++p) {
        const double av = ta == Trans::N ? a[i * lda + p] : a[p * lda + i];
        const double bv = tb == Trans::N ? b[p * ldb + j] : b[j * ldb + p];
        s += static_cast<long double>(av) * bv;
      }
      c[i * ldc + j] = static_cast<double>(alpha * static_cast<double>(s) + beta * c[i * ldc + j]);
    }
}

struct Case {
  Trans ta, tb;
  int m, n, k;
};

std::string name(const Case& c) {
  return std::string(c.ta == Trans::N ? "N" : "T") + (c.tb == Trans::N ? "N" : "T") + " m=" +
         std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (Trans ta : {Trans::N, Trans::T})
    for (Trans tb : {Trans::N, Trans::T}) {
      cases.push_back({ta, tb, 7, 5, 3});
      cases.push_back({ta, tb, 37, 29, 41});
      cases.push_back({ta, tb, 1, 13, 6});
    }
  return cases;
}

// Runs one case through shardtrain::gemm<T>; returns max |C - C_ref| / max |C_ref|.
template <class T>
double run_case(const Case& cs, std::uint64_t seed) {
  const int a0 = cs.ta == Trans::N ? cs.m : cs.k, a1 = cs.ta == Trans::N ? cs.k : cs.m;
  const int b0 = cs.tb == Trans::N ? cs.k : cs.n, b1 = cs.tb == Trans::N ? cs.n : cs.k;
  const auto a = test::random_vector(a0 * a1, seed);
  const auto b = test::random_vector(b0 * b1, seed + 1);
  const auto c = test::random_vector(cs.m * cs.n, seed + 2);
  const double alpha = 1.5, beta = -0.5;
  auto at = cast_vector<T>(a), bt = cast_vector<T>(b), ct = cast_vector<T>(c);
  // The reference works on the T-rounded inputs, so only the product's rounding differs.
  auto c_ref = cast_vector<double>(ct);
  naive_gemm(cs.ta, cs.tb, cs.m, cs.n, cs.k, alpha, cast_vector<double>(at), a1,
             cast_vector<double>(bt), b1, beta, c_ref, cs.n);
  gemm<T>(cs.ta, cs.tb, T(alpha), test::cview2(at, a0, a1), test::cview2(bt, b0, b1), T(beta),
          test::view2(ct, cs.m, cs.n));
  return test::max_scaled_error(ct, c_ref);
}

TEST(Gemm, AllTransposeCombinationsDouble) {
  std::uint64_t seed = 100;
  for (const Case& cs : all_cases()) {
    const double err = run_case<double>(cs, seed += 10);
    EXPECT_LE(err, 1e-13) << name(cs);
  }
}

TEST(Gemm, AllTransposeCombinationsFloat) {
  std::uint64_t seed = 200;
  for (const Case& cs : all_cases()) {
    const double err = run_case<float>(cs, seed += 10);
    EXPECT_LE(err, 2e-6) << name(cs);  // float accumulation over k <= 41 terms of size <= 1
  }
}

// Operands that are column blocks of wider row-major matrices (row stride > cols),
// exactly how attention addresses heads inside qkv / out.
TEST(Gemm, RowStridedLayoutRightOperands) {
  const int m = 6, n = 4, k = 5, lda = 11, ldb = 9, ldc = 13;
  const auto a = test::random_vector(m * lda, 1);
  const auto b = test::random_vector(n * ldb, 2);  // B is used transposed: (n, k) block
  auto c = test::random_vector(m * ldc, 3);
  auto c_ref = c;
  // Reference on the blocks starting at column offsets 2 (A), 3 (B), 4 (C).
  std::vector<double> a_blk(m * k), b_blk(n * k), c_blk(m * n);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p) a_blk[i * k + p] = a[i * lda + 2 + p];
  for (int j = 0; j < n; ++j)
    for (int p = 0; p < k; ++p) b_blk[j * k + p] = b[j * ldb + 3 + p];
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) c_blk[i * n + j] = c[i * ldc + 4 + j];
  naive_gemm(Trans::N, Trans::T, m, n, k, 0.75, a_blk, k, b_blk, k, 0.25, c_blk, n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) c_ref[i * ldc + 4 + j] = c_blk[i * n + j];

  CView2<double> av = Kokkos::subview(test::cview2(a, m, lda), Kokkos::ALL, Kokkos::make_pair(2, 2 + k));
  CView2<double> bv = Kokkos::subview(test::cview2(b, n, ldb), Kokkos::ALL, Kokkos::make_pair(3, 3 + k));
  View2<double> cv = Kokkos::subview(test::view2(c, m, ldc), Kokkos::ALL, Kokkos::make_pair(4, 4 + n));
  ASSERT_EQ(av.stride(0), static_cast<std::size_t>(lda));
  gemm<double>(Trans::N, Trans::T, 0.75, av, bv, 0.25, cv);
  // Entries outside the C block must be untouched, inside it must match.
  EXPECT_LE(test::max_scaled_error(c, c_ref), 1e-14);
}

TEST(Gemm, EmptyInnerDimensionScalesByBeta) {
  std::vector<double> a(4 * 0), b(0 * 3);
  std::vector<double> c = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  gemm<double>(Trans::N, Trans::N, 2.0, CView2<double>(a.data(), 4, 0),
               CView2<double>(b.data(), 0, 3), 0.5, test::view2(c, 4, 3));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(c[i], 0.5 * (i + 1));
  std::vector<double> cn(12, std::nan(""));
  gemm<double>(Trans::N, Trans::N, 2.0, CView2<double>(a.data(), 4, 0),
               CView2<double>(b.data(), 0, 3), 0.0, test::view2(cn, 4, 3));
  for (double v : cn) EXPECT_EQ(v, 0.0);
}

TEST(Gemm, BetaZeroIgnoresGarbageInC) {
  const auto a = test::random_vector(3 * 4, 7), b = test::random_vector(4 * 2, 8);
  std::vector<double> c(3 * 2, std::nan("")), c_ref(3 * 2, 0.0);
  naive_gemm(Trans::N, Trans::N, 3, 2, 4, 1.0, a, 4, b, 2, 0.0, c_ref, 2);
  gemm<double>(Trans::N, Trans::N, 1.0, test::cview2(a, 3, 4), test::cview2(b, 4, 2), 0.0,
               test::view2(c, 3, 2));
  EXPECT_LE(test::max_scaled_error(c, c_ref), 1e-15);
}

TEST(Gemm, ShapeMismatchThrows) {
  std::vector<double> a(6), b(6), c(4);
  // A(2,3) B(2,3) with NN: inner dims 3 vs 2.
  EXPECT_THROW(gemm<double>(Trans::N, Trans::N, 1.0, test::cview2(a, 2, 3), test::cview2(b, 2, 3),
                            0.0, test::view2(c, 2, 2)),
               Error);
  // NT is valid: (2,3) x (3,2) -> (2,2).
  EXPECT_NO_THROW(gemm<double>(Trans::N, Trans::T, 1.0, test::cview2(a, 2, 3),
                               test::cview2(b, 2, 3), 0.0, test::view2(c, 2, 2)));
  // Wrong C shape.
  EXPECT_THROW(gemm<double>(Trans::N, Trans::T, 1.0, test::cview2(a, 2, 3), test::cview2(b, 2, 3),
                            0.0, test::view2(c, 4, 1)),
               Error);
}

// double reaches OpenBLAS's cblas_dgemm directly (no KokkosKernels, so no Kokkos
// profiling region at all), float runs on oneDNN; both give exact sums of ones
// for every transpose and a row-strided C (a column range of a wider matrix).
std::vector<std::string>* g_regions = nullptr;
void record_region(const char* name) {
  if (g_regions) g_regions->push_back(name);
}

TEST(Gemm, DoubleOnCblasFloatOnOneDnn) {
  std::vector<std::string> regions;
  g_regions = &regions;
  const auto saved = Kokkos::Tools::Experimental::get_callbacks();
  Kokkos::Tools::Experimental::set_push_region_callback(record_region);
  std::vector<float> af(64 * 32, 1.0f), bf(32 * 16, 1.0f), cf(64 * 16);
  std::vector<double> ad(64 * 32, 1.0), bd(32 * 16, 1.0), cd(64 * 24, -1.0);
  const std::size_t primitives = dnnl_matmul_cache_size();
  for (Trans ta : {Trans::N, Trans::T})
    for (Trans tb : {Trans::N, Trans::T}) {
      const int a0 = ta == Trans::N ? 64 : 32, a1 = ta == Trans::N ? 32 : 64;
      const int b0 = tb == Trans::N ? 32 : 16, b1 = tb == Trans::N ? 16 : 32;
      gemm<float>(ta, tb, 1.0f, test::cview2(af, a0, a1), test::cview2(bf, b0, b1), 0.0f, test::view2(cf, 64, 16));
      // C: columns [4, 20) of a (64, 24) matrix, row stride 24.
      View2<double> c = Kokkos::subview(test::view2(cd, 64, 24), Kokkos::ALL, Kokkos::make_pair(4, 20));
      gemm<double>(ta, tb, 2.0, test::cview2(ad, a0, a1), test::cview2(bd, b0, b1), 0.0, c);
      for (int i = 0; i < 64; ++i)
        for (int j = 0; j < 24; ++j)
          ASSERT_EQ(cd[i * 24 + j], j >= 4 && j < 20 ? 64.0 : -1.0) << i << "," << j;
      EXPECT_EQ(cf[0], 32.0f);
    }
  Kokkos::Tools::Experimental::set_callbacks(saved);
  g_regions = nullptr;
  EXPECT_TRUE(regions.empty()) << regions.front();
  // Four float shapes (N/T x N/T) -> four primitives; repeating one adds none.
  EXPECT_EQ(dnnl_matmul_cache_size(), primitives + 4);
  gemm<float>(Trans::N, Trans::N, 1.0f, test::cview2(af, 64, 32), test::cview2(bf, 32, 16), 0.0f,
              test::view2(cf, 64, 16));
  EXPECT_EQ(dnnl_matmul_cache_size(), primitives + 4);
}

}  // namespace
}  // namespace shardtrain
