// Tests linear_forward / linear_backward: forward (with and without bias, overwrite
// and accumulate) against a naive loop in double and float; float64 central-
// difference checks of dx, dw, db (bias, no bias, accumulate forward); the
// conventions dx OVERWRITTEN, dw/db ACCUMULATED, empty dx/db skipped; shape errors;
// accumulate == false: dw/db overwritten (NaNs there do not propagate), bit for bit
// what accumulating into zeros gives, for every storage type and path.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/half_scratch.hpp"
#include "kernels/linear.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview1;
using test::cview2;
using test::view1;
using test::view2;

constexpr int kN = 6, kK = 5, kM = 4;  // rows, in, out (all different)

// y = y0 (if given) + x w^T + b (if given)
std::vector<double> naive_linear(const std::vector<double>& x, const std::vector<double>& w,
                                 const std::vector<double>& b, const std::vector<double>* y0,
                                 int n, int k, int m) {
  std::vector<double> y(n * m);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) {
      long double s = b.empty() ? 0.0L : b[j];
      for (int p = 0; p < k; ++p) s += static_cast<long double>(x[i * k + p]) * w[j * k + p];
      y[i * m + j] = static_cast<double>(s) + (y0 ? (*y0)[i * m + j] : 0.0);
    }
  return y;
}

struct Data {
  std::vector<double> x = test::random_vector(kN * kK, 11);
  std::vector<double> w = test::random_vector(kM * kK, 12);
  std::vector<double> b = test::random_vector(kM, 13);
  std::vector<double> y0 = test::random_vector(kN * kM, 14);
  std::vector<double> r = test::random_vector(kN * kM, 15);  // loss weights = dy
};

template <class T>
std::vector<T> run_forward(const Data& d, bool bias, bool accumulate) {
  auto x = cast_vector<T>(d.x), w = cast_vector<T>(d.w), b = cast_vector<T>(d.b);
  std::vector<T> y = accumulate ? cast_vector<T>(d.y0) : std::vector<T>(kN * kM, T(-7));
  linear_forward<T>(cview2(x, kN, kK), cview2(w, kM, kK), bias ? cview1(b) : CView1<T>(), view2(y, kN, kM),
                    accumulate);
  return y;
}

TEST(Linear, ForwardMatchesNaive) {
  const Data d;
  for (bool bias : {true, false})
    for (bool acc : {false, true}) {
      const auto ref = naive_linear(d.x, d.w, bias ? d.b : std::vector<double>{},
                                    acc ? &d.y0 : nullptr, kN, kK, kM);
      EXPECT_LE(test::max_scaled_error(run_forward<double>(d, bias, acc), ref), 1e-15)
          << "bias=" << bias << " accumulate=" << acc;
      EXPECT_LE(test::max_scaled_error(run_forward<float>(d, bias, acc), ref), 1e-6)
          << "bias=" << bias << " accumulate=" << acc;
    }
}

// Gradient of loss = sum(linear_forward(x, w, b) * r) w.r.t. x, w, b, checked by
// central differences through the real forward (also in accumulate mode).
void check_gradients(bool bias, bool accumulate, const char* label) {
  const Data d;
  auto loss_of = [&](const std::vector<double>& x, const std::vector<double>& w,
                     const std::vector<double>& b) {
    std::vector<double> y = accumulate ? d.y0 : std::vector<double>(kN * kM, 0.0);
    linear_forward<double>(cview2(x, kN, kK), cview2(w, kM, kK),
                           bias ? cview1(b) : CView1<double>(), view2(y, kN, kM), accumulate);
    return test::weighted_sum(y, d.r);
  };
  std::vector<double> dx(kN * kK, 123.0), dw(kM * kK, 0.0), db(kM, 0.0);
  linear_backward<double>(cview2(d.x, kN, kK), cview2(d.w, kM, kK), cview2(d.r, kN, kM),
                          view2(dx, kN, kK), view2(dw, kM, kK),
                          bias ? view1(db) : View1<double>());
  const std::string l(label);
  EXPECT_TRUE(test::gradient_ok(l + " dx", test::gradcheck([&](std::span<const double> v) {
    return loss_of(std::vector<double>(v.begin(), v.end()), d.w, d.b);
  }, d.x, dx)));
  EXPECT_TRUE(test::gradient_ok(l + " dw", test::gradcheck([&](std::span<const double> v) {
    return loss_of(d.x, std::vector<double>(v.begin(), v.end()), d.b);
  }, d.w, dw)));
  if (bias) {
    EXPECT_TRUE(test::gradient_ok(l + " db", test::gradcheck([&](std::span<const double> v) {
      return loss_of(d.x, d.w, std::vector<double>(v.begin(), v.end()));
    }, d.b, db)));
  } else {
    for (double v : db) EXPECT_EQ(v, 0.0);  // empty db: nothing written
  }
}

TEST(Linear, GradientsWithBias) { check_gradients(true, false, "linear bias"); }
TEST(Linear, GradientsWithoutBias) { check_gradients(false, false, "linear no-bias"); }
TEST(Linear, GradientsOfAccumulateForward) { check_gradients(true, true, "linear accumulate"); }

TEST(Linear, BackwardOverwritesDxAndAccumulatesDwDb) {
  const Data d;
  auto backward = [&](std::vector<double>& dx, std::vector<double>& dw, std::vector<double>& db) {
    linear_backward<double>(cview2(d.x, kN, kK), cview2(d.w, kM, kK), cview2(d.r, kN, kM),
                            view2(dx, kN, kK), view2(dw, kM, kK), view1(db));
  };
  std::vector<double> dx1(kN * kK, 0.0), dw1(kM * kK, 0.0), db1(kM, 0.0);
  backward(dx1, dw1, db1);
  std::vector<double> dx2(kN * kK, 5.0), dw2(kM * kK, 0.0), db2(kM, 0.0);
  backward(dx2, dw2, db2);
  backward(dx2, dw2, db2);
  for (int i = 0; i < kN * kK; ++i) EXPECT_EQ(dx2[i], dx1[i]);  // overwritten, not doubled
  for (int i = 0; i < kM * kK; ++i) EXPECT_DOUBLE_EQ(dw2[i], 2.0 * dw1[i]);
  for (int i = 0; i < kM; ++i) EXPECT_DOUBLE_EQ(db2[i], 2.0 * db1[i]);
  // Accumulates onto whatever is there.
  std::vector<double> dw3(kM * kK, 1.0), db3(kM, -2.0);
  backward(dx2, dw3, db3);
  for (int i = 0; i < kM * kK; ++i) EXPECT_NEAR(dw3[i], 1.0 + dw1[i], 1e-15);
  for (int i = 0; i < kM; ++i) EXPECT_NEAR(db3[i], -2.0 + db1[i], 1e-15);
}

TEST(Linear, EmptyDxIsSkipped) {
  const Data d;
  std::vector<double> dw(kM * kK, 0.0), db(kM, 0.0), dw_ref(kM * kK, 0.0), db_ref(kM, 0.0);
  std::vector<double> dx(kN * kK);
  linear_backward<double>(cview2(d.x, kN, kK), cview2(d.w, kM, kK), cview2(d.r, kN, kM),
                          View2<double>(), view2(dw, kM, kK), view1(db));
  linear_backward<double>(cview2(d.x, kN, kK), cview2(d.w, kM, kK), cview2(d.r, kN, kM),
                          view2(dx, kN, kK), view2(dw_ref, kM, kK), view1(db_ref));
  EXPECT_EQ(dw, dw_ref);
  EXPECT_EQ(db, db_ref);
}

TEST(Linear, FloatBackwardMatchesDouble) {
  const Data d;
  std::vector<double> dx(kN * kK), dw(kM * kK, 0.0), db(kM, 0.0);
  linear_backward<double>(cview2(d.x, kN, kK), cview2(d.w, kM, kK), cview2(d.r, kN, kM),
                          view2(dx, kN, kK), view2(dw, kM, kK), view1(db));
  auto x = cast_vector<float>(d.x), w = cast_vector<float>(d.w), r = cast_vector<float>(d.r);
  std::vector<float> dxf(kN * kK), dwf(kM * kK, 0.0f), dbf(kM, 0.0f);
  linear_backward<float>(cview2(x, kN, kK), cview2(w, kM, kK), cview2(r, kN, kM),
                         view2(dxf, kN, kK), view2(dwf, kM, kK), view1(dbf));
  EXPECT_LE(test::max_scaled_error(dxf, dx), 1e-6);
  EXPECT_LE(test::max_scaled_error(dwf, dw), 1e-6);
  EXPECT_LE(test::max_scaled_error(dbf, db), 1e-6);
}

// accumulate == false on every path (double: the plain GEMM; float and bf16 on
// an AVX512-BF16 CPU: oneDNN with beta 0; f16 and bf16 elsewhere: the fp32 block
// path): dw and db start as NaN, and must come out equal to accumulating into
// zeros (== on the values: +0 and -0 count as equal), with dx as before. n = 0
// writes zeros. Shapes span several blocks of the 16-bit path.
template <class T>
void check_overwrite(std::int64_t n, std::int64_t k, std::int64_t m, const std::string& label) {
  SCOPED_TRACE(label);
  auto x = cast_vector<T>(test::random_vector(n * k, 21)), w = cast_vector<T>(test::random_vector(m * k, 22));
  auto dy = cast_vector<T>(test::random_vector(n * m, 23));
  const T nan = T(std::nanf(""));
  std::vector<float> scratch(static_cast<std::size_t>(linear_half_scratch_elems(n, k, m)) + 1);
  half_scratch_bind(scratch.data(), scratch.size());  // the 16-bit paths' fp32 blocks
  struct Unbind { ~Unbind() { half_scratch_bind(nullptr, 0); } } unbind;
  std::vector<T> dx_a(n * k), dw_a(m * k, T(0.0f)), db_a(m, T(0.0f));
  std::vector<T> dx_o(n * k), dw_o(m * k, nan), db_o(m, nan);
  linear_backward<T>(cview2(x, n, k), cview2(w, m, k), cview2(dy, n, m), view2(dx_a, n, k), view2(dw_a, m, k),
                     view1(db_a), /*accumulate=*/true);
  linear_backward<T>(cview2(x, n, k), cview2(w, m, k), cview2(dy, n, m), view2(dx_o, n, k), view2(dw_o, m, k),
                     view1(db_o), /*accumulate=*/false);
  auto val = [](T v) -> double {
    if constexpr (std::is_same_v<T, double>) return v;
    else return static_cast<double>(static_cast<float>(v));
  };
  auto same = [&](const std::vector<T>& a, const std::vector<T>& b, const char* what) {
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!(val(a[i]) == val(b[i]))) {
        ADD_FAILURE() << what << "[" << i << "]: accumulated into zeros " << val(a[i]) << ", overwritten "
                      << val(b[i]);
        return;
      }
  };
  same(dw_a, dw_o, "dw");
  same(db_a, db_o, "db");
  same(dx_a, dx_o, "dx");
}

template <class T>
void check_overwrite_all(const std::string& type) {
  check_overwrite<T>(6, 5, 4, type + " small");
  check_overwrite<T>(300, 70, 260, type + " several blocks");
  check_overwrite<T>(0, 5, 4, type + " n = 0 writes zeros");
}

// db is, on every path, the column sums of dy in row order in compute_t<T> added to
// the loaded db (accumulate) or to 0 (overwrite), and rounded once: bit for bit
// against that loop here (m = 150: two 64-column blocks and a ragged one; n below
// the 16-bit path's row block, so it too sums all rows before its one add).
template <class T>
void check_bias_sums(const std::string& label) {
  SCOPED_TRACE(label);
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const std::int64_t n = 37, k = 5, m = 150;
  auto x = cast_vector<T>(test::random_vector(n * k, 31)), w = cast_vector<T>(test::random_vector(m * k, 32));
  auto dy = cast_vector<T>(test::random_vector(n * m, 33));
  const auto db0 = cast_vector<T>(test::random_vector(m, 34));
  std::vector<float> scratch(static_cast<std::size_t>(linear_half_scratch_elems(n, k, m)) + 1);
  half_scratch_bind(scratch.data(), scratch.size());
  struct Unbind { ~Unbind() { half_scratch_bind(nullptr, 0); } } unbind;
  auto bits = [](T v) -> std::uint64_t {
    if constexpr (std::is_same_v<T, double>) return std::bit_cast<std::uint64_t>(v);
    else if constexpr (std::is_same_v<T, float>) return std::bit_cast<std::uint32_t>(v);
    else return v.bits;
  };
  for (bool accumulate : {true, false}) {
    std::vector<T> dx(n * k), dw(m * k, T(0.0f)), db = accumulate ? db0 : std::vector<T>(m, T(std::nanf("")));
    linear_backward<T>(cview2(x, n, k), cview2(w, m, k), cview2(dy, n, m), view2(dx, n, k), view2(dw, m, k),
                       view1(db), accumulate);
    for (std::int64_t j = 0; j < m; ++j) {
      C sum = C(0);
      for (std::int64_t i = 0; i < n; ++i) sum += static_cast<C>(dy[i * m + j]);
      const T want = T(accumulate ? static_cast<C>(db0[j]) + sum : sum);
      ASSERT_EQ(bits(db[j]), bits(want)) << (accumulate ? "accumulate" : "overwrite") << ", column " << j;
    }
  }
}

TEST(Linear, BiasGradientIsColumnSumsInRowOrder) {
  check_bias_sums<double>("double");
  check_bias_sums<float>("float");
  check_bias_sums<f16>("f16");
  check_bias_sums<bf16>("bf16");
}

TEST(Linear, OverwriteEqualsAccumulatingIntoZeros) {
  check_overwrite_all<double>("double");
  check_overwrite_all<float>("float");
  check_overwrite_all<f16>("f16");
  check_overwrite_all<bf16>("bf16");
}

TEST(Linear, ShapeMismatchThrows) {
  const Data d;
  std::vector<double> y(kN * kM), bad_b(kM + 1), dw(kM * kK);
  EXPECT_THROW(linear_forward<double>(cview2(d.x, kN, kK), cview2(d.w, kM, kK), cview1(bad_b),
                                      view2(y, kN, kM)),
               Error);
  EXPECT_THROW(linear_forward<double>(cview2(d.x, kN, kK), cview2(d.w, kK, kM), cview1(d.b),
                                      view2(y, kN, kM)),
               Error);
  EXPECT_THROW(linear_backward<double>(cview2(d.x, kN, kK), cview2(d.w, kM, kK),
                                       cview2(d.r, kN, kM), View2<double>(),
                                       view2(dw, kK, kM), View1<double>()),
               Error);
}

}  // namespace
}  // namespace shardtrain
