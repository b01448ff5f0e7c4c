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
//   f16:   <= 1e-2;   bf16: <= 2e-2   (the bounds of tests/unit/kernels/half_tiles_test.cpp;
//          both sides accumulate in fp32 and round to 16 bits, in different orders).
// Outputs an op overwrites are pre-filled with NaN (on both sides), outputs it
// accumulates into (+=: linear y with accumulate, dw, db; GEMM C with beta != 0)
// with random values. Shapes are non-square and ragged (not multiples of 8, 32 or
// 64), including k == 0 for GEMM and padded leading dimensions / batch strides.
// Attention also checks causality on the device: probs are exactly 0 above the
// diagonal, and changing the last position's q, k, v leaves every earlier output
// row bit-identical; q, k, v in `saved` equal the host's bit for bit.
//
// GPT-2 124M sizes (B 16, T 1024, C 768, H 12, V 50304): the tied LM head
// (824M logits) forward and backward, and causal attention (201M probabilities),
// inputs made on the device, outputs scanned on the device for unwritten (NaN)
// elements and compared with the host kernels on sampled rows / sequences (the
// full host reference would take minutes).
// Without a CUDA device main() prints why and returns 1: this test never skips.
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
#include "core/half.hpp"
#include "kernels/half_scratch.hpp"
#include "kernels/linear.hpp"
#include "device_buffer.hpp"
#include "device_compare.hpp"
#include "device_fill.hpp"

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
  // The second shape's rows (1000) run the bias gradient's unrolled loop (256 rows a
  // pass) and its tail; its 77 columns leave the last block of 32 part-empty.
  const std::int64_t shapes[][3] = {{45, 33, 27}, {1000, 9, 77}};
  for (const auto& [n, k, m] : shapes) {
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
    const std::string tag = (with_db ? "" : " no-db") + std::string(" n ") + std::to_string(n);
    EXPECT_REL(d_dx.template download<H>(), dx_want, Host<D>::tol, "linear_backward dx" + tag);
    EXPECT_REL(d_dw.template download<H>(), dw_want, Host<D>::tol, "linear_backward dw" + tag);
    const auto db_got = d_db.template download<H>();
    if (with_db) {
      EXPECT_REL(db_got, db_want, Host<D>::tol, "linear_backward db" + tag);
    } else {
      EXPECT_TRUE(same_bits(db_got, db0, 0, db0.size())) << "db written although nullptr" << tag;
    }
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

// --- GPT-2 124M sizes -------------------------------------------------------------
// B 16, T 1024, C 768, H 12, V 50304. Inputs are made on the device
// (device_fill.hpp); outputs start as NaN and a device-side scan proves every
// element was written. The host reference over all of it would take minutes
// single-threaded, so it runs on samples and says so: 16 rows spread over the
// batch (first and last two included) for the LM head's y and dx, 16 rows of dw
// (its columns of dy copied out), and the first and last sequence of attention.
constexpr std::int64_t kG2B = 16, kG2T = 1024, kG2C = 768, kG2H = 12, kG2V = 50304;
constexpr std::size_t kSampled = 16;

// The tied LM head: logits (B T, V) = x (B T, C) wte (V, C)^T -- 824M outputs,
// 3.3 GB in fp32 -- and its backward dx = dlogits wte, dwte += dlogits^T x.
TYPED_TEST(GemmKernels, LinearLmHeadAtGpt2SizeMatchesHost) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  const std::int64_t n = kG2B * kG2T, k = kG2C, m = kG2V;
  const auto nz = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  DeviceBuffer<D> d_x(nz(n * k)), d_w(nz(m * k)), d_y(nz(n * m)), d_dx(nz(n * k)), d_dw(nz(m * k));
  ASSERT_EQ(gpu_test::fill_uniform(d_x.data(), d_x.size(), 91, -1.0f, 1.0f, this->m_stream), cudaSuccess);
  ASSERT_EQ(gpu_test::fill_uniform(d_w.data(), d_w.size(), 92, -0.1f, 0.1f, this->m_stream), cudaSuccess);
  ASSERT_EQ(gpu_test::fill_uniform(d_dw.data(), d_dw.size(), 93, -1.0f, 1.0f, this->m_stream), cudaSuccess);
  cuda::linear_forward<D>(this->m_handle, this->m_stream, d_x.data(), d_w.data(), nullptr, d_y.data(), n, k, m);
  EXPECT_EQ(test::first_non_finite_on_device(d_y.data(), n * m, this->m_stream), -1) << "LM head y";

  const auto rows = test::sample_rows(nz(n), kSampled);
  const std::int64_t ns = static_cast<std::int64_t>(rows.size());
  const auto x_all = d_x.template download<H>();
  const auto w_all = d_w.template download<H>();
  std::vector<H> x_s, y_got;
  for (const std::size_t r : rows) {
    x_s.insert(x_s.end(), x_all.begin() + r * k, x_all.begin() + (r + 1) * k);
    const auto yr = d_y.template download_range<H>(r * m, nz(m));
    y_got.insert(y_got.end(), yr.begin(), yr.end());
  }
  std::vector<H> y_want = nan_values<H>(nz(ns * m));
  linear_forward<H>(CView2<H>(x_s.data(), ns, k), CView2<H>(w_all.data(), m, k), CView1<H>(),
                    View2<H>(y_want.data(), ns, m));
  EXPECT_REL(y_got, y_want, Host<D>::tol, "LM head y (GPT-2 size, 16 sampled rows)");

  // Backward, dlogits in the logits buffer.
  ASSERT_EQ(gpu_test::fill_uniform(d_y.data(), d_y.size(), 94, -1.0f, 1.0f, this->m_stream), cudaSuccess);
  const auto cols = test::sample_rows(nz(m), kSampled);  // rows of dw = columns of dlogits
  const std::int64_t nc = static_cast<std::int64_t>(cols.size());
  std::vector<H> dw_want, w_c;
  for (const std::size_t j : cols) {
    const auto dr = d_dw.template download_range<H>(j * k, nz(k));  // dw before the backward
    dw_want.insert(dw_want.end(), dr.begin(), dr.end());
    w_c.insert(w_c.end(), w_all.begin() + j * k, w_all.begin() + (j + 1) * k);
  }
  cuda::linear_backward<D>(this->m_handle, this->m_stream, d_x.data(), d_w.data(), d_y.data(), d_dx.data(),
                           d_dw.data(), nullptr, n, k, m);
  EXPECT_EQ(test::first_non_finite_on_device(d_dx.data(), n * k, this->m_stream), -1) << "LM head dx";
  EXPECT_EQ(test::first_non_finite_on_device(d_dw.data(), m * k, this->m_stream), -1) << "LM head dw";
  // dx rows: from the sampled rows of dlogits.
  std::vector<H> dy_s, dx_got;
  for (const std::size_t r : rows) {
    const auto dr = d_y.template download_range<H>(r * m, nz(m));
    dy_s.insert(dy_s.end(), dr.begin(), dr.end());
    const auto xr = d_dx.template download_range<H>(r * k, nz(k));
    dx_got.insert(dx_got.end(), xr.begin(), xr.end());
  }
  std::vector<H> dx_want = nan_values<H>(nz(ns * k)), dw_unused(nz(m * k), from_float<H>(0.0f));
  linear_backward<H>(CView2<H>(x_s.data(), ns, k), CView2<H>(w_all.data(), m, k), CView2<H>(dy_s.data(), ns, m),
                     View2<H>(dx_want.data(), ns, k), View2<H>(dw_unused.data(), m, k), View1<H>());
  EXPECT_REL(dx_got, dx_want, Host<D>::tol, "LM head dx (GPT-2 size, 16 sampled rows)");
  // dw rows: all n rows of x against the sampled columns of dlogits.
  std::vector<H> dy_c(nz(n * nc)), dw_got;
  for (std::int64_t jj = 0; jj < nc; ++jj) {
    const auto col = d_y.template download_block<H>(nz(m), 0, cols[static_cast<std::size_t>(jj)], nz(n), 1);
    for (std::int64_t i = 0; i < n; ++i) dy_c[nz(i * nc + jj)] = col[nz(i)];
    const auto wr = d_dw.template download_range<H>(cols[static_cast<std::size_t>(jj)] * k, nz(k));
    dw_got.insert(dw_got.end(), wr.begin(), wr.end());
  }
  linear_backward<H>(CView2<H>(x_all.data(), n, k), CView2<H>(w_c.data(), nc, k), CView2<H>(dy_c.data(), n, nc),
                     View2<H>(), View2<H>(dw_want.data(), nc, k), View1<H>());
  EXPECT_REL(dw_got, dw_want, Host<D>::tol, "LM head dw (GPT-2 size, 16 sampled rows)");
}

// Causal attention at B 16, T 1024, C 768, H 12: probs B H T T = 201M elements.
// Every output is scanned on the device; the host reference runs on the first
// and the last sequence (the last one's offsets are the largest).
TYPED_TEST(GemmKernels, AttentionAtGpt2SizeMatchesHost) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  const std::int64_t nb = kG2B, nt = kG2T, nc = kG2C, nh = kG2H;
  const auto nz = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  const cuda::AttentionShape cs{nb, nt, nc, nh};
  const std::int64_t saved_elems = cuda::attention_saved_elems(cs);
  const std::size_t ws_bytes = cuda::attention_workspace_bytes<D>(cs);
  DeviceBuffer<unsigned char> d_ws(ws_bytes);
  DeviceBuffer<D> d_qkv(nz(nb * nt * 3 * nc)), d_dout(nz(nb * nt * nc)), d_saved(nz(saved_elems)),
      d_out(nz(nb * nt * nc)), d_dqkv(nz(nb * nt * 3 * nc));
  ASSERT_EQ(gpu_test::fill_uniform(d_qkv.data(), d_qkv.size(), 101, -2.0f, 2.0f, this->m_stream), cudaSuccess);
  ASSERT_EQ(gpu_test::fill_uniform(d_dout.data(), d_dout.size(), 102, -1.0f, 1.0f, this->m_stream), cudaSuccess);
  cuda::attention_forward<D>(this->m_handle, this->m_stream, cs, d_qkv.data(), d_saved.data(), d_ws.data(), ws_bytes,
                             d_out.data());
  cuda::attention_backward<D>(this->m_handle, this->m_stream, cs, d_dout.data(), d_saved.data(), d_ws.data(),
                              ws_bytes, d_dqkv.data());
  EXPECT_EQ(test::first_non_finite_on_device(d_saved.data(), saved_elems, this->m_stream), -1) << "saved";
  EXPECT_EQ(test::first_non_finite_on_device(d_out.data(), nb * nt * nc, this->m_stream), -1) << "out";
  EXPECT_EQ(test::first_non_finite_on_device(d_dqkv.data(), nb * nt * 3 * nc, this->m_stream), -1) << "dqkv";

  const AttentionShape s1{1, nt, nc, nh};
  for (const std::int64_t b : {std::int64_t{0}, nb - 1}) {
    const auto qkv = d_qkv.template download_range<H>(nz(b * nt * 3 * nc), nz(nt * 3 * nc));
    const auto dout = d_dout.template download_range<H>(nz(b * nt * nc), nz(nt * nc));
    std::vector<H> saved = nan_values<H>(nz(attention_saved_elems(s1)));
    std::vector<H> ws = nan_values<H>(nz(attention_workspace_elems(s1)));
    std::vector<H> out = nan_values<H>(nz(nt * nc)), dqkv = nan_values<H>(nz(nt * 3 * nc));
    attention_forward<H>(s1, CView3<H>(qkv.data(), 1, nt, 3 * nc), View1<H>(saved.data(), saved.size()),
                         View1<H>(ws.data(), ws.size()), View3<H>(out.data(), 1, nt, nc));
    attention_backward<H>(s1, CView3<H>(dout.data(), 1, nt, nc), CView1<H>(saved.data(), saved.size()),
                          View1<H>(ws.data(), ws.size()), View3<H>(dqkv.data(), 1, nt, 3 * nc));
    const std::string tag = " (GPT-2 size, sequence " + std::to_string(b) + ")";
    const std::vector<H> probs_want(saved.begin() + 3 * nt * nc, saved.end());
    EXPECT_REL(d_saved.template download_range<H>(nz(3 * nb * nt * nc + b * nh * nt * nt), nz(nh * nt * nt)),
               probs_want, Host<D>::attention_tol, "attention probs" + tag);
    EXPECT_REL(d_out.template download_range<H>(nz(b * nt * nc), nz(nt * nc)), out, Host<D>::attention_tol,
               "attention out" + tag);
    EXPECT_REL(d_dqkv.template download_range<H>(nz(b * nt * 3 * nc), nz(nt * 3 * nc)), dqkv,
               Host<D>::attention_tol, "attention dqkv" + tag);
  }
}

}  // namespace
}  // namespace shardtrain

int main(int argc, char** argv) {
  if (shardtrain::test::no_device("gpu_gemm_kernels_test")) return 1;
  ::testing::InitGoogleTest(&argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  // fp32 scratch arena of the host 16-bit kernels: 4M floats (far more than the
  // small shapes need), or what the GPT-2-sized references need.
  using namespace shardtrain;
  const std::int64_t g2_rows = 16 * 1024, g2_c = 768, g2_v = 50304, sampled = 16;
  const std::int64_t elems = std::max({std::int64_t{1} << 22, linear_half_scratch_elems(sampled, g2_c, g2_v),
                                       linear_half_scratch_elems(g2_rows, g2_c, sampled),
                                       attention_half_scratch_elems(AttentionShape{1, 1024, g2_c, 12})});
  std::vector<float> scratch(static_cast<std::size_t>(elems));
  shardtrain::half_scratch_bind(scratch.data(), scratch.size());
  const int result = RUN_ALL_TESTS();
  shardtrain::half_scratch_bind(nullptr, 0);
  return result;
}
