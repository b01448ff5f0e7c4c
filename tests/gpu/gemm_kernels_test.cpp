// Device tests of the cuBLAS GEMM, linear and causal attention CUDA ops
// (kernels/cuda/{gemm,linear,attention}.cuh) against the Kokkos host kernels
// (kernels/{gemm,linear,attention}.hpp), for T = float, __half, __nv_bfloat16.
//
// Method: random inputs (fixed seeds) are rounded to T once; the host kernel runs
// on the host type with the same bits (f16 / bf16 <-> __half / __nv_bfloat16 are
// bit-identical layouts) and the device op on a device copy. Outputs are compared
// as   relative error = ||dev - host||_2 / ||host||_2   over the whole buffer, with
//   float: <= 1e-5 (GEMM, linear), <= 5e-5 (attention: longer chains, expf vs the
//          host's polynomial exp);
//   f16:   <= 1e-2;   bf16: <= 2e-2   (the bounds of tests/unit/kernels/test_half_kernels.cpp;
//          both sides accumulate in fp32 and round to 16 bits, in different orders).
// Outputs an op overwrites are pre-filled with NaN (on both sides), outputs it
// accumulates into (+=: linear y with accumulate, dw, db; GEMM C with beta != 0)
// with random values. Shapes are non-square and ragged (not multiples of 8, 32 or
// 64), including k == 0 for GEMM and padded leading dimensions / batch strides.
// Attention also checks causality on the device: probs are exactly 0 above the
// diagonal, and changing the last position's q, k, v leaves every earlier output
// row bit-identical; q, k, v in `saved` equal the host's bit for bit.
//
// Without a CUDA device main() prints why and returns 1: this test never skips.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/gemm.hpp"
#include "kernels/half.hpp"
#include "kernels/half_scratch.hpp"
#include "kernels/linear.hpp"
#include "device_buffer.hpp"
#include "device_compare.hpp"

namespace shardtrain {
namespace {

using shardtrain::test::DeviceBuffer;
using shardtrain::test::random_values;

using shardtrain::test::Host;
using shardtrain::test::nan_values;
using shardtrain::test::rel_l2;

template <class H>
bool same_bits(const std::vector<H>& a, const std::vector<H>& b, std::size_t begin,
               std::size_t end) {
  return std::memcmp(a.data() + begin, b.data() + begin, (end - begin) * sizeof(H)) == 0;
}

template <class D>
class GemmKernels : public shardtrain::test::StreamTest {
 protected:
  using H = typename Host<D>::type;
};

using DeviceTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(GemmKernels, DeviceTypes);

// Row-major (rows, cols) matrix copied to row stride ld >= cols (padding NaN).
template <class H>
std::vector<H> pad_rows(const std::vector<H>& a, std::int64_t rows, std::int64_t cols,
                        std::int64_t ld) {
  std::vector<H> out = nan_values<H>(static_cast<std::size_t>(rows * ld));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) out[i * ld + j] = a[i * cols + j];
  return out;
}

TYPED_TEST(GemmKernels, GemmMatchesHost) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  struct Shape { std::int64_t m, n, k; };
  const Shape shapes[] = {{37, 19, 53}, {1, 70, 9}, {66, 3, 130}, {20, 33, 0}};
  unsigned seed = 1;
  for (const Shape& s : shapes) {
    for (const Trans ta : {Trans::N, Trans::T}) {
      for (const Trans tb : {Trans::N, Trans::T}) {
        const std::int64_t ar = ta == Trans::N ? s.m : s.k, ac = ta == Trans::N ? s.k : s.m;
        const std::int64_t br = tb == Trans::N ? s.k : s.n, bc = tb == Trans::N ? s.n : s.k;
        const auto a = random_values<H>(static_cast<std::size_t>(ar * ac), seed++);
        const auto b = random_values<H>(static_cast<std::size_t>(br * bc), seed++);
        const auto c0 = random_values<H>(static_cast<std::size_t>(s.m * s.n), seed++);
        std::vector<H> want = c0;
        gemm<H>(ta, tb, from_float<H>(0.75f), CView2<H>(a.data(), ar, ac),
                CView2<H>(b.data(), br, bc), from_float<H>(0.5f),
                View2<H>(want.data(), s.m, s.n));
        const std::int64_t lda = ac + 3;  // padded leading dimension for A
        DeviceBuffer<D> da(pad_rows(a, ar, ac, lda)), db(b), dc(c0);
        cuda::gemm<D>(this->m_handle, this->m_stream,
                      ta == Trans::N ? cuda::Trans::N : cuda::Trans::T,
                      tb == Trans::N ? cuda::Trans::N : cuda::Trans::T, s.m, s.n, s.k, 0.75f,
                      da.data(), lda, db.data(), bc > 0 ? bc : 1, 0.5f, dc.data(), s.n);
        this->sync();
        const std::string what = std::string("gemm ") + (ta == Trans::N ? "N" : "T") +
                                 (tb == Trans::N ? "N" : "T") + " m " + std::to_string(s.m) +
                                 " n " + std::to_string(s.n) + " k " + std::to_string(s.k);
        EXPECT_REL(dc.template download<H>(), want, Host<D>::tol, what);
      }
    }
  }
}

TYPED_TEST(GemmKernels, GemmStridedBatchedMatchesHost) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  const std::int64_t m = 13, n = 21, k = 17, batch = 3;
  const std::int64_t stride_a = m * k + 5, stride_b = k * n + 2, stride_c = m * n;
  // A_i (k, m) read transposed, B_i (k, n): C_i = 1.25 A_i^T B_i (beta 0, C NaN-filled).
  const auto a = random_values<H>(static_cast<std::size_t>(batch * stride_a), 11);
  const auto b = random_values<H>(static_cast<std::size_t>(batch * stride_b), 12);
  std::vector<H> want = nan_values<H>(static_cast<std::size_t>(batch * stride_c));
  for (std::int64_t i = 0; i < batch; ++i)
    gemm<H>(Trans::T, Trans::N, from_float<H>(1.25f), CView2<H>(a.data() + i * stride_a, k, m),
            CView2<H>(b.data() + i * stride_b, k, n), from_float<H>(0.0f),
            View2<H>(want.data() + i * stride_c, m, n));
  DeviceBuffer<D> da(a), db(b), dc(nan_values<H>(want.size()));
  cuda::gemm_strided_batched<D>(this->m_handle, this->m_stream, cuda::Trans::T, cuda::Trans::N,
                                m, n, k, 1.25f, da.data(), m, stride_a, db.data(), n, stride_b,
                                0.0f, dc.data(), n, stride_c, batch);
  this->sync();
  EXPECT_REL(dc.template download<H>(), want, Host<D>::tol, "gemm_strided_batched TN");
}

TYPED_TEST(GemmKernels, LinearForwardMatchesHost) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  const std::int64_t n = 45, k = 33, m = 27;
  const auto x = random_values<H>(static_cast<std::size_t>(n * k), 21);
  const auto w = random_values<H>(static_cast<std::size_t>(m * k), 22);
  const auto bias = random_values<H>(static_cast<std::size_t>(m), 23);
  for (const bool has_bias : {true, false}) {
    for (const bool accumulate : {false, true}) {
      const auto y0 = accumulate ? random_values<H>(static_cast<std::size_t>(n * m), 24)
                                 : nan_values<H>(static_cast<std::size_t>(n * m));
      std::vector<H> want = y0;
      linear_forward<H>(CView2<H>(x.data(), n, k), CView2<H>(w.data(), m, k),
                        has_bias ? CView1<H>(bias.data(), m) : CView1<H>(),
                        View2<H>(want.data(), n, m), accumulate);
      DeviceBuffer<D> dx(x), dw(w), dbias(bias), dy(y0);
      cuda::linear_forward<D>(this->m_handle, this->m_stream, dx.data(), dw.data(),
                              has_bias ? dbias.data() : nullptr, dy.data(), n, k, m, accumulate);
      this->sync();
      const std::string what = std::string("linear_forward") + (has_bias ? " bias" : " no-bias") +
                               (accumulate ? " accumulate" : "");
      EXPECT_REL(dy.template download<H>(), want, Host<D>::tol, what);
    }
  }
}

TYPED_TEST(GemmKernels, LinearBackwardMatchesHost) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  const std::int64_t n = 45, k = 33, m = 27;
  const auto x = random_values<H>(static_cast<std::size_t>(n * k), 31);
  const auto w = random_values<H>(static_cast<std::size_t>(m * k), 32);
  const auto dy = random_values<H>(static_cast<std::size_t>(n * m), 33);
  const auto dw0 = random_values<H>(static_cast<std::size_t>(m * k), 34);
  const auto db0 = random_values<H>(static_cast<std::size_t>(m), 35);
  for (const bool with_db : {true, false}) {
    std::vector<H> dx_want = nan_values<H>(static_cast<std::size_t>(n * k));
    std::vector<H> dw_want = dw0, db_want = db0;
    linear_backward<H>(CView2<H>(x.data(), n, k), CView2<H>(w.data(), m, k),
                       CView2<H>(dy.data(), n, m), View2<H>(dx_want.data(), n, k),
                       View2<H>(dw_want.data(), m, k),
                       with_db ? View1<H>(db_want.data(), m) : View1<H>());
    DeviceBuffer<D> d_x(x), d_w(w), d_dy(dy), d_dx(nan_values<H>(dx_want.size())), d_dw(dw0),
        d_db(db0);
    cuda::linear_backward<D>(this->m_handle, this->m_stream, d_x.data(), d_w.data(), d_dy.data(),
                             d_dx.data(), d_dw.data(), with_db ? d_db.data() : nullptr, n, k, m);
    this->sync();
    const std::string tag = with_db ? "" : " no-db";
    EXPECT_REL(d_dx.template download<H>(), dx_want, Host<D>::tol, "linear_backward dx" + tag);
    EXPECT_REL(d_dw.template download<H>(), dw_want, Host<D>::tol, "linear_backward dw" + tag);
    const auto db_got = d_db.template download<H>();
    if (with_db) {
      EXPECT_REL(db_got, db_want, Host<D>::tol, "linear_backward db");
    } else {
      EXPECT_TRUE(same_bits(db_got, db0, 0, db0.size())) << "db written although nullptr";
    }
  }
}

TYPED_TEST(GemmKernels, AttentionMatchesHostAndIsCausal) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  const AttentionShape shapes[] = {{2, 37, 24, 3}, {1, 70, 32, 2}};
  for (const AttentionShape& s : shapes) {
    const std::int64_t nb = s.batch, nt = s.seq_len, nc = s.channels, nh = s.n_head;
    const std::string tag = " B" + std::to_string(nb) + " T" + std::to_string(nt) + " C" +
                            std::to_string(nc) + " H" + std::to_string(nh);
    const cuda::AttentionShape cs{nb, nt, nc, nh};
    const std::int64_t saved_elems = attention_saved_elems(s);
    ASSERT_EQ(cuda::attention_saved_elems(cs), saved_elems);
    const std::size_t qkv_n = static_cast<std::size_t>(nb * nt * 3 * nc);
    const std::size_t out_n = static_cast<std::size_t>(nb * nt * nc);
    const auto qkv = random_values<H>(qkv_n, 41, -2.0f, 2.0f);
    const auto dout = random_values<H>(out_n, 42);

    // Host reference.
    std::vector<H> saved_want = nan_values<H>(static_cast<std::size_t>(saved_elems));
    std::vector<H> ws_host = nan_values<H>(static_cast<std::size_t>(attention_workspace_elems(s)));
    std::vector<H> out_want = nan_values<H>(out_n), dqkv_want = nan_values<H>(qkv_n);
    attention_forward<H>(s, CView3<H>(qkv.data(), nb, nt, 3 * nc),
                         View1<H>(saved_want.data(), saved_want.size()),
                         View1<H>(ws_host.data(), ws_host.size()),
                         View3<H>(out_want.data(), nb, nt, nc));
    attention_backward<H>(s, CView3<H>(dout.data(), nb, nt, nc),
                          CView1<H>(saved_want.data(), saved_want.size()),
                          View1<H>(ws_host.data(), ws_host.size()),
                          View3<H>(dqkv_want.data(), nb, nt, 3 * nc));

    // Device.
    const std::size_t ws_bytes = cuda::attention_workspace_bytes<D>(cs);
    DeviceBuffer<unsigned char> d_ws(ws_bytes);
    DeviceBuffer<D> d_qkv(qkv), d_dout(dout), d_saved(nan_values<H>(saved_want.size())),
        d_out(nan_values<H>(out_n)), d_dqkv(nan_values<H>(qkv_n));
    cuda::attention_forward<D>(this->m_handle, this->m_stream, cs, d_qkv.data(), d_saved.data(),
                               d_ws.data(), ws_bytes, d_out.data());
    cuda::attention_backward<D>(this->m_handle, this->m_stream, cs, d_dout.data(),
                                d_saved.data(), d_ws.data(), ws_bytes, d_dqkv.data());
    this->sync();
    const auto saved_got = d_saved.template download<H>();
    const auto out_got = d_out.template download<H>();
    const auto dqkv_got = d_dqkv.template download<H>();

    const std::size_t qkv_saved = static_cast<std::size_t>(3 * nb * nt * nc);
    EXPECT_TRUE(same_bits(saved_got, saved_want, 0, qkv_saved))
        << "saved q, k, v differ from the host" << tag;
    const std::vector<H> probs_got(saved_got.begin() + qkv_saved, saved_got.end());
    const std::vector<H> probs_want(saved_want.begin() + qkv_saved, saved_want.end());
    EXPECT_REL(probs_got, probs_want, Host<D>::attention_tol, "attention probs" + tag);
    EXPECT_REL(out_got, out_want, Host<D>::attention_tol, "attention out" + tag);
    EXPECT_REL(dqkv_got, dqkv_want, Host<D>::attention_tol, "attention dqkv" + tag);

    // Causal mask: probs(b, h, t, s) == +0 exactly for s > t.
    std::int64_t nonzero_above = 0;
    for (std::int64_t bh = 0; bh < nb * nh; ++bh)
      for (std::int64_t t = 0; t < nt; ++t)
        for (std::int64_t j = t + 1; j < nt; ++j)
          if (to_float(probs_got[static_cast<std::size_t>((bh * nt + t) * nt + j)]) != 0.0f)
            ++nonzero_above;
    EXPECT_EQ(nonzero_above, 0) << "probs above the diagonal" << tag;

    // Causality: new q, k, v at the last position change no earlier output row.
    std::vector<H> qkv2 = qkv;
    for (std::int64_t b = 0; b < nb; ++b)
      for (std::int64_t j = 0; j < 3 * nc; ++j)
        qkv2[static_cast<std::size_t>((b * nt + nt - 1) * 3 * nc + j)] = from_float<H>(3.0f);
    DeviceBuffer<D> d_qkv2(qkv2), d_out2(nan_values<H>(out_n));
    cuda::attention_forward<D>(this->m_handle, this->m_stream, cs, d_qkv2.data(), d_saved.data(),
                               d_ws.data(), ws_bytes, d_out2.data());
    this->sync();
    const auto out2 = d_out2.template download<H>();
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::size_t begin = static_cast<std::size_t>(b * nt * nc);
      const std::size_t end = begin + static_cast<std::size_t>((nt - 1) * nc);
      EXPECT_TRUE(same_bits(out2, out_got, begin, end))
          << "rows before the last position changed in sequence " << b << tag;
      bool last_changed = false;
      for (std::size_t i = end; i < end + static_cast<std::size_t>(nc); ++i)
        last_changed = last_changed || !same_bits(out2, out_got, i, i + 1);
      EXPECT_TRUE(last_changed) << "the last position did not change" << tag;
    }
  }
}

}  // namespace
}  // namespace shardtrain

int main(int argc, char** argv) {
  if (shardtrain::test::no_device("gpu_gemm_kernels_test")) return 1;
  ::testing::InitGoogleTest(&argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  // fp32 scratch arena of the host 16-bit kernels (far more than these shapes need).
  std::vector<float> scratch(std::size_t{1} << 22);
  shardtrain::half_scratch_bind(scratch.data(), scratch.size());
  const int result = RUN_ALL_TESTS();
  shardtrain::half_scratch_bind(nullptr, 0);
  return result;
}
