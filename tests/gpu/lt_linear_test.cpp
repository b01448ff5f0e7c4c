// Device tests of the cuBLASLt Linear (kernels/cuda/lt_linear.cuh, model.gemm =
// "cublaslt") against the Kokkos host kernels (kernels/linear.hpp), for T = float,
// __half, __nv_bfloat16, with the method and bounds of gemm_kernels_test.cpp
// (relative L2 error: float 1e-5, f16 1e-2, bf16 2e-2; outputs an op overwrites
// pre-filled with NaN, outputs it accumulates into with random values).
//  - forward: with and without bias (the BIAS epilogue), accumulate false / true
//    (beta = 1, C = D = y);
//  - backward: with and without db (the BGRADB epilogue: straight into db when
//    !accumulate, through the context's scratch and an add when accumulate),
//    dx == nullptr, accumulate false / true;
//  - shapes: multiples of 8 (16-byte rows in 16 bits), which must run on
//    cuBLASLt (LtContext::fallbacks() unchanged), and ragged ones (33, 27, 9, 77)
//    where cuBLASLt may offer no algorithm for 16-bit rows that are not 16-byte
//    aligned: then the call runs the cuBLAS path (counted), and the result must
//    match the host either way (the test prints which path ran);
//  - determinism: a GPT-2-sized MLP Linear (n 2048, k 768, m 3072) forward and
//    backward twice from the same inputs are bitwise equal, and the second run
//    asks the heuristic for nothing new (the algorithm cache).
//  - the GELU epilogues (model.gelu = "epilogue"): lt_linear_gelu_forward (GELU_AUX_BIAS:
//    act and the aux pre-activation) against the host's linear_forward + gelu_forward,
//    with and without bias; lt_linear_dgelu_backward (DGELU on the dx matmul, dw / db
//    as lt_linear_backward) against the host's linear_backward + gelu_backward, with
//    and without db, accumulate false / true; the same shapes and rule (aligned
//    shapes must take the epilogue: LtContext::gelu_fallbacks() unchanged; ragged
//    ones may run the unfused path, counted, and must match either way). The fp32
//    cases also prove their inputs tell GELU's tanh form from its erf form (more
//    than 5x the tolerance apart), so an epilogue computing the erf form fails
//    them. A GPT-2-sized MLP (2048 x 768 -> 3072, and fc2's backward 3072 -> 768)
//    twice from the same inputs is bitwise equal, from the cached algorithms.
// Not yet run on a device (2026-11-29; the GELU cases 2026-11-30). Without a CUDA device main() prints why
// and returns 1: this test never skips.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/half.hpp"
#include "kernels/cuda/lt_linear.cuh"
#include "kernels/gelu.hpp"
#include "kernels/half_scratch.hpp"
#include "kernels/linear.hpp"
#include "device_buffer.hpp"
#include "device_compare.hpp"

namespace shardtrain {
namespace {

using shardtrain::test::DeviceBuffer;
using shardtrain::test::Host;
using shardtrain::test::nan_values;
using shardtrain::test::random_values;
using shardtrain::test::rel_l2;

template <class D>
class LtLinear : public shardtrain::test::StreamTest {
 protected:
  void SetUp() override {
    shardtrain::test::StreamTest::SetUp();
    m_lt = std::make_unique<cuda::LtContext>();
  }
  void TearDown() override {
    m_lt.reset();
    shardtrain::test::StreamTest::TearDown();
  }
  std::unique_ptr<cuda::LtContext> m_lt;
};

using DeviceTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(LtLinear, DeviceTypes);

struct Shape {
  std::int64_t n, k, m;
  bool aligned;  // every row 16-byte aligned in 16 bits: cuBLASLt must take it
};
constexpr Shape kShapes[] = {{64, 128, 96, true}, {1000, 256, 72, true}, {45, 33, 27, false}, {1000, 9, 77, false}};

std::string shape_tag(const Shape& s) {
  return " n " + std::to_string(s.n) + " k " + std::to_string(s.k) + " m " + std::to_string(s.m);
}

TYPED_TEST(LtLinear, ForwardMatchesHost) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  for (const Shape& s : kShapes) {
    const auto x = random_values<H>(static_cast<std::size_t>(s.n * s.k), 21);
    const auto w = random_values<H>(static_cast<std::size_t>(s.m * s.k), 22);
    const auto bias = random_values<H>(static_cast<std::size_t>(s.m), 23);
    for (const bool has_bias : {true, false}) {
      for (const bool accumulate : {false, true}) {
        const auto y0 = accumulate ? random_values<H>(static_cast<std::size_t>(s.n * s.m), 24)
                                   : nan_values<H>(static_cast<std::size_t>(s.n * s.m));
        std::vector<H> want = y0;
        linear_forward<H>(CView2<H>(x.data(), s.n, s.k), CView2<H>(w.data(), s.m, s.k),
                          has_bias ? CView1<H>(bias.data(), s.m) : CView1<H>(), View2<H>(want.data(), s.n, s.m),
                          accumulate);
        DeviceBuffer<D> dx(x), dw(w), dbias(bias), dy(y0);
        const std::int64_t before = this->m_lt->fallbacks();
        cuda::lt_linear_forward<D>(*this->m_lt, this->m_handle, this->m_stream, dx.data(), dw.data(),
                                   has_bias ? dbias.data() : nullptr, dy.data(), s.n, s.k, s.m, accumulate);
        this->sync();
        const bool fell_back = this->m_lt->fallbacks() != before;
        const std::string what = std::string("lt_linear_forward") + (has_bias ? " bias" : " no-bias") +
                                 (accumulate ? " accumulate" : "") + shape_tag(s) +
                                 (fell_back ? " (cuBLAS path)" : " (cuBLASLt)");
        if (s.aligned) {
          EXPECT_FALSE(fell_back) << "cuBLASLt offered no algorithm for" << what;
        }
        EXPECT_REL(dy.template download<H>(), want, Host<D>::tol, what);
      }
    }
  }
}

TYPED_TEST(LtLinear, BackwardMatchesHost) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  for (const Shape& s : kShapes) {
    const auto x = random_values<H>(static_cast<std::size_t>(s.n * s.k), 31);
    const auto w = random_values<H>(static_cast<std::size_t>(s.m * s.k), 32);
    const auto dy = random_values<H>(static_cast<std::size_t>(s.n * s.m), 33);
    const auto dw0 = random_values<H>(static_cast<std::size_t>(s.m * s.k), 34);
    const auto db0 = random_values<H>(static_cast<std::size_t>(s.m), 35);
    for (const bool with_db : {true, false}) {
      for (const bool accumulate : {true, false}) {
        for (const bool with_dx : {true, false}) {
          std::vector<H> dx_want = nan_values<H>(static_cast<std::size_t>(s.n * s.k));
          std::vector<H> dw_want = accumulate ? dw0 : nan_values<H>(dw0.size());
          std::vector<H> db_want = accumulate ? db0 : nan_values<H>(db0.size());
          std::vector<H> dx_host = dx_want;
          linear_backward<H>(CView2<H>(x.data(), s.n, s.k), CView2<H>(w.data(), s.m, s.k),
                             CView2<H>(dy.data(), s.n, s.m), View2<H>(dx_host.data(), s.n, s.k),
                             View2<H>(dw_want.data(), s.m, s.k), with_db ? View1<H>(db_want.data(), s.m) : View1<H>(),
                             accumulate);
          if (with_dx) dx_want = dx_host;
          const auto db_start = accumulate ? db0 : nan_values<H>(db0.size());
          DeviceBuffer<D> d_x(x), d_w(w), d_dy(dy), d_dx(nan_values<H>(dx_want.size())),
              d_dw(accumulate ? dw0 : nan_values<H>(dw0.size())), d_db(db_start);
          const std::int64_t before = this->m_lt->fallbacks();
          cuda::lt_linear_backward<D>(*this->m_lt, this->m_handle, this->m_stream, d_x.data(), d_w.data(),
                                      d_dy.data(), with_dx ? d_dx.data() : nullptr, d_dw.data(),
                                      with_db ? d_db.data() : nullptr, s.n, s.k, s.m, accumulate);
          this->sync();
          const bool fell_back = this->m_lt->fallbacks() != before;
          const std::string tag = std::string(with_db ? "" : " no-db") + (accumulate ? " accumulate" : "") +
                                  (with_dx ? "" : " no-dx") + shape_tag(s) +
                                  (fell_back ? " (cuBLAS path)" : " (cuBLASLt)");
          if (s.aligned) {
            EXPECT_FALSE(fell_back) << "cuBLASLt offered no algorithm for" << tag;
          }
          const auto dx_got = d_dx.template download<H>();
          if (with_dx) {
            EXPECT_REL(dx_got, dx_want, Host<D>::tol, "lt_linear_backward dx" + tag);
          } else {
            EXPECT_TRUE(std::memcmp(dx_got.data(), dx_want.data(), dx_got.size() * sizeof(H)) == 0)
                << "dx written although nullptr" << tag;
          }
          EXPECT_REL(d_dw.template download<H>(), dw_want, Host<D>::tol, "lt_linear_backward dw" + tag);
          const auto db_got = d_db.template download<H>();
          if (with_db) {
            EXPECT_REL(db_got, db_want, Host<D>::tol, "lt_linear_backward db" + tag);
          } else {
            EXPECT_TRUE(std::memcmp(db_got.data(), db_start.data(), db_got.size() * sizeof(H)) == 0)
                << "db written although nullptr" << tag;
          }
        }
      }
    }
  }
}

// Two runs of a GPT-2-sized MLP Linear (fc: 768 -> 3072 over 2048 rows) from the
// same inputs give the same bits in y, dx, dw and db, and the second run uses the
// cached algorithms (no new heuristic query).
TYPED_TEST(LtLinear, TwoRunsBitwiseEqual) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  const std::int64_t n = 2048, k = 768, m = 3072;
  const auto x = random_values<H>(static_cast<std::size_t>(n * k), 51);
  const auto w = random_values<H>(static_cast<std::size_t>(m * k), 52);
  const auto b = random_values<H>(static_cast<std::size_t>(m), 53);
  const auto g = random_values<H>(static_cast<std::size_t>(n * m), 54);
  const auto dw0 = random_values<H>(static_cast<std::size_t>(m * k), 55);
  const auto db0 = random_values<H>(static_cast<std::size_t>(m), 56);
  std::vector<std::vector<H>> runs[2];
  std::size_t cached_after_first = 0;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer<D> d_x(x), d_w(w), d_b(b), d_g(g), d_y(nan_values<H>(static_cast<std::size_t>(n * m))),
        d_dx(nan_values<H>(x.size())), d_dw(dw0), d_db(db0);
    cuda::lt_linear_forward<D>(*this->m_lt, this->m_handle, this->m_stream, d_x.data(), d_w.data(), d_b.data(),
                               d_y.data(), n, k, m, false);
    cuda::lt_linear_backward<D>(*this->m_lt, this->m_handle, this->m_stream, d_x.data(), d_w.data(), d_g.data(),
                                d_dx.data(), d_dw.data(), d_db.data(), n, k, m, true);
    this->sync();
    runs[run] = {d_y.template download<H>(), d_dx.template download<H>(), d_dw.template download<H>(),
                 d_db.template download<H>()};
    if (run == 0) cached_after_first = this->m_lt->cached_algorithms();
  }
  EXPECT_EQ(this->m_lt->fallbacks(), 0) << "the GPT-2-sized Linear ran the cuBLAS path";
  EXPECT_EQ(this->m_lt->cached_algorithms(), cached_after_first) << "the second run asked the heuristic again";
  const char* names[] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < 4; ++i) {
    const auto& a = runs[0][i];
    const auto& c = runs[1][i];
    ASSERT_EQ(a.size(), c.size());
    EXPECT_TRUE(std::memcmp(a.data(), c.data(), a.size() * sizeof(H)) == 0)
        << names[i] << " differs between two runs from the same inputs";
  }
}

// --- the GELU epilogues ---

template <class H>
std::vector<H> host_gelu(const std::vector<H>& x, bool erf_form = false) {
  std::vector<H> y(x.size());
  if (erf_form)
    gelu_erf_forward<H>(CView1<H>(x.data(), x.size()), View1<H>(y.data(), y.size()));
  else
    gelu_forward<H>(CView1<H>(x.data(), x.size()), View1<H>(y.data(), y.size()));
  return y;
}
template <class H>
std::vector<H> host_gelu_backward(const std::vector<H>& x, const std::vector<H>& dy, bool erf_form = false) {
  std::vector<H> dx(x.size());
  if (erf_form)
    gelu_erf_backward<H>(CView1<H>(x.data(), x.size()), CView1<H>(dy.data(), dy.size()),
                         View1<H>(dx.data(), dx.size()));
  else
    gelu_backward<H>(CView1<H>(x.data(), x.size()), CView1<H>(dy.data(), dy.size()), View1<H>(dx.data(), dx.size()));
  return dx;
}

// fp32 only (16-bit tolerances are wider than the gap): the host's erf form is more
// than 5x the tolerance away from the tanh form on these inputs (numpy: about 1.7e-4
// forward, 6e-4 backward, relative L2), so an epilogue that computed the erf form
// would fail the comparison with `want`.
template <class D, class H>
void expect_forms_apart(const std::vector<H>& tanh_form, const std::vector<H>& erf_form, const std::string& what) {
  if constexpr (std::is_same_v<D, float>) {
    EXPECT_GT(rel_l2(erf_form, tanh_form), 5 * Host<D>::tol)
        << what << ": the inputs do not tell GELU's tanh form from its erf form";
  }
}

TYPED_TEST(LtLinear, GeluForwardMatchesHost) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  for (const Shape& s : kShapes) {
    // x in [-a, a], a = 4.5 / sqrt(k): pre's spread about 1.5 at every k (where the forms differ).
    const float a = std::min(1.0f, 4.5f / std::sqrt(static_cast<float>(s.k)));
    const auto x = random_values<H>(static_cast<std::size_t>(s.n * s.k), 61, -a, a);
    const auto w = random_values<H>(static_cast<std::size_t>(s.m * s.k), 62);
    const auto bias = random_values<H>(static_cast<std::size_t>(s.m), 63);
    for (const bool has_bias : {true, false}) {
      std::vector<H> pre_want = nan_values<H>(static_cast<std::size_t>(s.n * s.m));
      linear_forward<H>(CView2<H>(x.data(), s.n, s.k), CView2<H>(w.data(), s.m, s.k),
                        has_bias ? CView1<H>(bias.data(), s.m) : CView1<H>(), View2<H>(pre_want.data(), s.n, s.m),
                        false);
      const std::vector<H> act_want = host_gelu(pre_want);
      DeviceBuffer<D> d_x(x), d_w(w), d_bias(bias), d_pre(nan_values<H>(pre_want.size())),
          d_act(nan_values<H>(pre_want.size()));
      const std::int64_t before = this->m_lt->gelu_fallbacks();
      cuda::lt_linear_gelu_forward<D>(*this->m_lt, this->m_handle, this->m_stream, d_x.data(), d_w.data(),
                                      has_bias ? d_bias.data() : nullptr, d_pre.data(), d_act.data(), s.n, s.k, s.m);
      this->sync();
      const bool fell_back = this->m_lt->gelu_fallbacks() != before;
      const std::string what = std::string("lt_linear_gelu_forward") + (has_bias ? " bias" : " no-bias") +
                               shape_tag(s) + (fell_back ? " (unfused path)" : " (GELU epilogue)");
      if (s.aligned) {
        EXPECT_FALSE(fell_back) << "cuBLASLt offered no GELU-epilogue algorithm for" << what;
      }
      EXPECT_REL(d_pre.template download<H>(), pre_want, Host<D>::tol, what + " pre (aux)");
      EXPECT_REL(d_act.template download<H>(), act_want, Host<D>::tol, what + " act");
      expect_forms_apart<D>(act_want, host_gelu(pre_want, true), what);
    }
  }
}

TYPED_TEST(LtLinear, DgeluBackwardMatchesHost) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  for (const Shape& s : kShapes) {
    // The layer after the GELU: input x = gelu(pre) (n, k), pre in [-3, 3] (where the forms differ most).
    const auto pre = random_values<H>(static_cast<std::size_t>(s.n * s.k), 71, -3.0f, 3.0f);
    const auto x = host_gelu(pre);
    const auto w = random_values<H>(static_cast<std::size_t>(s.m * s.k), 72);
    const auto dy = random_values<H>(static_cast<std::size_t>(s.n * s.m), 73);
    const auto dw0 = random_values<H>(static_cast<std::size_t>(s.m * s.k), 74);
    const auto db0 = random_values<H>(static_cast<std::size_t>(s.m), 75);
    for (const bool with_db : {true, false}) {
      for (const bool accumulate : {true, false}) {
        std::vector<H> dx = nan_values<H>(x.size());
        std::vector<H> dw_want = accumulate ? dw0 : nan_values<H>(dw0.size());
        std::vector<H> db_want = accumulate ? db0 : nan_values<H>(db0.size());
        linear_backward<H>(CView2<H>(x.data(), s.n, s.k), CView2<H>(w.data(), s.m, s.k),
                           CView2<H>(dy.data(), s.n, s.m), View2<H>(dx.data(), s.n, s.k),
                           View2<H>(dw_want.data(), s.m, s.k), with_db ? View1<H>(db_want.data(), s.m) : View1<H>(),
                           accumulate);
        const std::vector<H> dpre_want = host_gelu_backward(pre, dx);
        const auto db_start = accumulate ? db0 : nan_values<H>(db0.size());
        DeviceBuffer<D> d_x(x), d_w(w), d_dy(dy), d_pre(pre), d_dpre(nan_values<H>(x.size())),
            d_dw(accumulate ? dw0 : nan_values<H>(dw0.size())), d_db(db_start);
        const std::int64_t gelu_before = this->m_lt->gelu_fallbacks(), before = this->m_lt->fallbacks();
        cuda::lt_linear_dgelu_backward<D>(*this->m_lt, this->m_handle, this->m_stream, d_x.data(), d_w.data(),
                                          d_dy.data(), d_pre.data(), d_dpre.data(), d_dw.data(),
                                          with_db ? d_db.data() : nullptr, s.n, s.k, s.m, accumulate);
        this->sync();
        const bool fell_back = this->m_lt->gelu_fallbacks() != gelu_before;
        const std::string tag = std::string(with_db ? "" : " no-db") + (accumulate ? " accumulate" : "") +
                                shape_tag(s) + (fell_back ? " (unfused path)" : " (DGELU epilogue)");
        if (s.aligned) {
          EXPECT_FALSE(fell_back) << "cuBLASLt offered no DGELU algorithm for" << tag;
          EXPECT_EQ(this->m_lt->fallbacks(), before) << "the dw matmul took the cuBLAS path for" << tag;
        }
        EXPECT_REL(d_dpre.template download<H>(), dpre_want, Host<D>::tol, "lt_linear_dgelu_backward dpre" + tag);
        EXPECT_REL(d_dw.template download<H>(), dw_want, Host<D>::tol, "lt_linear_dgelu_backward dw" + tag);
        const auto db_got = d_db.template download<H>();
        if (with_db) {
          EXPECT_REL(db_got, db_want, Host<D>::tol, "lt_linear_dgelu_backward db" + tag);
        } else {
          EXPECT_TRUE(std::memcmp(db_got.data(), db_start.data(), db_got.size() * sizeof(H)) == 0)
              << "db written although nullptr" << tag;
        }
        const auto pre_after = d_pre.template download<H>();
        EXPECT_TRUE(std::memcmp(pre_after.data(), pre.data(), pre.size() * sizeof(H)) == 0)
            << "pre (the aux input) was written" << tag;
        expect_forms_apart<D>(dpre_want, host_gelu_backward(pre, dx, true), "lt_linear_dgelu_backward" + tag);
      }
    }
  }
}

// The GPT-2-sized MLP with the GELU epilogues, twice from the same inputs: fc
// forward (2048 x 768 -> 3072: pre, act) and fc2's backward through the GELU (x =
// act, 3072 -> 768: dpre, dw, db accumulated) give the same bits, take the epilogues
// (no fallback of either kind), and the second run asks the heuristic for nothing.
TYPED_TEST(LtLinear, GeluEpiloguesTwoRunsBitwiseEqual) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  const std::int64_t n = 2048, c = 768, h = 3072;
  const auto x = random_values<H>(static_cast<std::size_t>(n * c), 81);
  const auto w = random_values<H>(static_cast<std::size_t>(h * c), 82, -0.1f, 0.1f);
  const auto b = random_values<H>(static_cast<std::size_t>(h), 83);
  const auto w2 = random_values<H>(static_cast<std::size_t>(c * h), 84);
  const auto g = random_values<H>(static_cast<std::size_t>(n * c), 85);
  const auto dw0 = random_values<H>(static_cast<std::size_t>(c * h), 86);
  const auto db0 = random_values<H>(static_cast<std::size_t>(c), 87);
  std::vector<std::vector<H>> runs[2];
  std::size_t cached_after_first = 0;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer<D> d_x(x), d_w(w), d_b(b), d_w2(w2), d_g(g), d_pre(nan_values<H>(static_cast<std::size_t>(n * h))),
        d_act(nan_values<H>(static_cast<std::size_t>(n * h))), d_dpre(nan_values<H>(static_cast<std::size_t>(n * h))),
        d_dw(dw0), d_db(db0);
    cuda::lt_linear_gelu_forward<D>(*this->m_lt, this->m_handle, this->m_stream, d_x.data(), d_w.data(), d_b.data(),
                                    d_pre.data(), d_act.data(), n, c, h);
    cuda::lt_linear_dgelu_backward<D>(*this->m_lt, this->m_handle, this->m_stream, d_act.data(), d_w2.data(),
                                      d_g.data(), d_pre.data(), d_dpre.data(), d_dw.data(), d_db.data(), n, h, c, true);
    this->sync();
    runs[run] = {d_pre.template download<H>(), d_act.template download<H>(), d_dpre.template download<H>(),
                 d_dw.template download<H>(), d_db.template download<H>()};
    if (run == 0) cached_after_first = this->m_lt->cached_algorithms();
  }
  EXPECT_EQ(this->m_lt->gelu_fallbacks(), 0) << "the GPT-2-sized MLP ran the unfused GELU path";
  EXPECT_EQ(this->m_lt->fallbacks(), 0) << "the GPT-2-sized MLP ran the cuBLAS path";
  EXPECT_EQ(this->m_lt->cached_algorithms(), cached_after_first) << "the second run asked the heuristic again";
  const char* names[] = {"pre", "act", "dpre", "dw", "db"};
  for (int i = 0; i < 5; ++i) {
    const auto& a = runs[0][i];
    const auto& e = runs[1][i];
    ASSERT_EQ(a.size(), e.size());
    EXPECT_TRUE(std::memcmp(a.data(), e.data(), a.size() * sizeof(H)) == 0)
        << names[i] << " differs between two runs from the same inputs";
  }
}

}  // namespace
}  // namespace shardtrain

int main(int argc, char** argv) {
  if (shardtrain::test::no_device("gpu_lt_linear_test")) return 1;
  ::testing::InitGoogleTest(&argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  // fp32 scratch arena of the host 16-bit kernels: 4M floats, far more than these shapes need.
  std::vector<float> scratch(std::size_t{1} << 22);
  shardtrain::half_scratch_bind(scratch.data(), scratch.size());
  const int result = RUN_ALL_TESTS();
  shardtrain::half_scratch_bind(nullptr, 0);
  return result;
}
