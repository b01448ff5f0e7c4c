// This file is long because each device op is checked against its host kernel in fp32, f16 and bf16.
// Device tests of the pointwise/row CUDA ops (kernels/cuda: embedding, layernorm,
// gelu, relu, cross_entropy, elementwise, adamw, and the weights CRC's crc32) against the Kokkos host kernels
// (kernels/*.hpp) and AdamW::step (src/optim/adamw.cpp), for T = float, f16, bf16.
//
// Method: random inputs (fixed seeds) are rounded to T once; the host kernel and
// the CUDA op get the same T values (the 16-bit types have the same bits on both
// sides: shardtrain::f16 / bf16 vs __half / __nv_bfloat16). Outputs an op
// accumulates into (+=) are pre-filled with the same random values on both sides;
// outputs it overwrites start as NaN on the device (DeviceBuffer(n) poisons, or
// nan_values), so an element a kernel skips fails. Streams are non-blocking, as
// the trainer's.
// Tolerances, per output buffer:
//   fp32:      every element |got - want| <= 1e-5 |want| + 1e-5 max|want|
//              (the host sums with 16 fixed lanes, the device with other trees,
//              and the host uses a polynomial exp: a few ulps, plus the
//              cancellation of row sums, which is bounded by the buffer's scale);
//   fp16/bf16: relative L2 error ||got - want|| / ||want|| <= 1e-2 / 2e-2, the
//              bounds of the host 16-bit kernels' own test (tests/unit/kernels/half_tiles_test.cpp).
// AdamW fp32 state (master weights, m, v) is compared with rtol 1e-5 whatever T.
// Determinism: the backward reductions (embedding dwte / dwpe, layernorm dx / dw /
// db) run twice from the same starting values and must be bitwise equal.
// GPT-2 124M sizes (B 16, T 1024, C 768, V 50304): embedding (one token at half
// of the positions), layernorm and gelu compared completely; cross entropy over
// the 824M logits on 20 sampled rows plus a device scan for unwritten elements;
// gelu and accumulate past 2^31 elements on samples around the 2^31 boundary.
//
// Without a CUDA device every test FAILS in SetUp with a message naming the
// cudaGetDeviceCount error: these tests never skip. Kokkos is initialised by the
// GTest global environment of tests/support (shardtrain_kokkos_gtest_env).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/crc32.cuh"
#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/relu.cuh"
#include "kernels/cuda/tanh.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/relu.hpp"
#include "kernels/tanh.hpp"
#include "core/half.hpp"
#include "kernels/half_scratch.hpp"
#include "kernels/layernorm.hpp"
#include "core/param_layout.hpp"
#include "io/crc32.hpp"
#include "optim/adamw.hpp"
#include "device_buffer.hpp"
#include "device_compare.hpp"
#include "device_fill.hpp"

namespace shardtrain {
namespace {

using shardtrain::test::DeviceBuffer;
using shardtrain::test::random_values;

// --- Shapes ------------------------------------------------------------------

constexpr std::int64_t kEmbB = 3, kEmbT = 50, kEmbC = 40, kEmbV = 300;
constexpr std::int64_t kRows = 300, kChannels = 96;  // layernorm: 2 row chunks (256)
constexpr std::int64_t kCeRows = 37, kVocab = 1000;  // cross entropy
constexpr std::int64_t kFlat = 10007;                // gelu, elementwise
// GPT-2 124M: B 16, T 1024, C 768, V 50304 (the padded GPT-2 vocabulary).
constexpr std::int64_t kG2B = 16, kG2T = 1024, kG2C = 768, kG2V = 50304;

// --- Device memory -----------------------------------------------------------

// --- Data --------------------------------------------------------------------

// Token ids with many repeats (half of them from the first 20 ids).
std::vector<TokenIndex> random_tokens(std::size_t n, std::int64_t vocab, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<TokenIndex> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<TokenIndex>(gen() % (i % 2 == 0 ? 20u : static_cast<unsigned>(vocab)));
  return v;
}

template <class H>
std::vector<double> widen(const std::vector<H>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(to_float(v[i]));
  return out;
}

template <class H>
bool bitwise_equal(const std::vector<H>& a, const std::vector<H>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(H)) == 0;
}

// --- Comparisons -------------------------------------------------------------

// fp32: elementwise |g - w| <= rtol |w| + rtol max|w|. NaN never passes.
void expect_close_f32(const std::vector<double>& got, const std::vector<double>& want,
                      double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  std::size_t bad = 0, first_bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (!(err <= rtol * std::abs(want[i]) + rtol * scale)) {
      if (bad++ == 0) first_bad = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements out of tolerance, first at " << first_bad
                     << ": got " << got[first_bad] << " want " << want[first_bad];
}

// ||got - want||_2 / ||want||_2 (NaN if anything is NaN).
double relative_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

template <class H>
double half_bound() {
  return std::is_same_v<H, f16> ? 1e-2 : 2e-2;
}

// The stated tolerance for storage type H (see the top of the file).
template <class H>
void expect_close(const std::vector<H>& got, const std::vector<H>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if constexpr (std::is_same_v<H, float>) {
    expect_close_f32(widen(got), widen(want), 1e-5, what);
  } else {
    const double err = relative_l2(widen(got), widen(want));
    EXPECT_LE(err, half_bound<H>()) << what << " (" << type_name<H>() << "): relative L2 error";
  }
}

// --- Fixture -----------------------------------------------------------------

using shardtrain::test::StorageTypes;

template <class P>
class PointwiseKernels : public ::testing::Test {
 public:  // the shared check helpers below take the fixture
  using Host = typename P::Host;
  using Dev = typename P::Dev;

  void SetUp() override {
    ASSERT_CUDA_DEVICE();
    SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
    const std::int64_t elems = std::max(
        {embedding_half_scratch_elems(kEmbV, kEmbC), layernorm_half_scratch_elems(kChannels),
         gelu_half_scratch_elems(), cross_entropy_half_scratch_elems(kVocab),
         embedding_half_scratch_elems(kG2V, kG2C), layernorm_half_scratch_elems(kG2C),
         cross_entropy_half_scratch_elems(kG2V)});
    m_scratch.assign(static_cast<std::size_t>(elems), 0.0f);
    half_scratch_bind(m_scratch.data(), m_scratch.size());
  }
  void TearDown() override {
    half_scratch_bind(nullptr, 0);
    if (m_stream != nullptr) cudaStreamDestroy(m_stream);
  }

  template <class B>
  Dev* dev(B& buffer) {
    return buffer.template as<Dev>();
  }

  cudaStream_t m_stream = nullptr;
  std::vector<float> m_scratch;
};
TYPED_TEST_SUITE(PointwiseKernels, StorageTypes);

// --- Embedding -----------------------------------------------------------------

// Forward and backward of one embedding shape against the host kernel, and the
// backward run twice from the same start must give the same bits.
template <class Fixture, class H>
void check_embedding(Fixture& f, std::int64_t nb, std::int64_t nt, std::int64_t nc, std::int64_t nv,
                     const std::vector<TokenIndex>& tokens, const std::string& tag) {
  const std::int64_t n = nb * nt;
  const auto wte = random_values<H>(nv * nc, 2);
  const auto wpe = random_values<H>(nt * nc, 3);
  const auto dout = random_values<H>(n * nc, 4);
  const auto dwte0 = random_values<H>(nv * nc, 5);
  const auto dwpe0 = random_values<H>(nt * nc, 6);

  std::vector<H> out = shardtrain::test::nan_values<H>(n * nc), dwte = dwte0, dwpe = dwpe0;
  embedding_forward<H>(CView2<TokenIndex>(tokens.data(), nb, nt), CView2<H>(wte.data(), nv, nc),
                       CView2<H>(wpe.data(), nt, nc), View3<H>(out.data(), nb, nt, nc));
  embedding_backward<H>(CView2<TokenIndex>(tokens.data(), nb, nt), CView3<H>(dout.data(), nb, nt, nc),
                        View2<H>(dwte.data(), nv, nc), View2<H>(dwpe.data(), nt, nc));

  DeviceBuffer<TokenIndex> d_tok(tokens);
  DeviceBuffer<H> d_wte(wte), d_wpe(wpe), d_out(shardtrain::test::nan_values<H>(out.size())), d_dout(dout),
      d_dwte(dwte0), d_dwpe(dwpe0);
  const std::size_t ws_bytes = cuda::embedding_backward_workspace_bytes(n, nc);
  DeviceBuffer<char> d_ws(ws_bytes);
  cuda::embedding_forward(d_tok.data(), f.dev(d_wte), f.dev(d_wpe), f.dev(d_out), nb, nt, nc, nv, f.m_stream);
  cuda::embedding_backward(d_tok.data(), f.dev(d_dout), f.dev(d_dwte), f.dev(d_dwpe), nb, nt, nc, nv, d_ws.data(),
                           ws_bytes, f.m_stream);
  expect_close(d_out.download(), out, "embedding out" + tag);
  const auto got_dwte = d_dwte.download(), got_dwpe = d_dwpe.download();
  expect_close(got_dwte, dwte, "embedding dwte" + tag);
  expect_close(got_dwpe, dwpe, "embedding dwpe" + tag);

  // Deterministic: a second run from the same starting values gives the same bits.
  d_dwte.upload(dwte0);
  d_dwpe.upload(dwpe0);
  cuda::embedding_backward(d_tok.data(), f.dev(d_dout), f.dev(d_dwte), f.dev(d_dwpe), nb, nt, nc, nv, d_ws.data(),
                           ws_bytes, f.m_stream);
  EXPECT_TRUE(bitwise_equal(d_dwte.download(), got_dwte)) << "embedding dwte not deterministic" << tag;
  EXPECT_TRUE(bitwise_equal(d_dwpe.download(), got_dwpe)) << "embedding dwpe not deterministic" << tag;
}

// n tokens, most of them one id (`share` of them, spread over the batch), the
// rest random: one run of the sorted order spans many 64-position chunks.
std::vector<TokenIndex> dominant_tokens(std::size_t n, std::int64_t vocab, TokenIndex id, double share,
                                        unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<TokenIndex> v(n);
  for (auto& t : v) t = u(gen) < share ? id : static_cast<TokenIndex>(gen() % static_cast<unsigned>(vocab));
  return v;
}

TYPED_TEST(PointwiseKernels, EmbeddingMatchesHost) {
  using H = typename TestFixture::Host;
  check_embedding<TestFixture, H>(*this, kEmbB, kEmbT, kEmbC, kEmbV, random_tokens(kEmbB * kEmbT, kEmbV, 1), "");
}

// A token that fills most of the batch: the backward sums it over many chunks
// in parallel (catches a wrong chunk split or partial-sum slot: lost or doubled
// rows; and a nondeterministic order: the bitwise rerun check), plus a run that
// starts exactly on a chunk boundary (all positions the same token).
TYPED_TEST(PointwiseKernels, EmbeddingWithOneDominantTokenMatchesHost) {
  using H = typename TestFixture::Host;
  const std::int64_t nb = 4, nt = 256;
  check_embedding<TestFixture, H>(*this, nb, nt, kEmbC, kEmbV,
                                  dominant_tokens(nb * nt, kEmbV, 7, 0.9, 8), " (one token 90%)");
  check_embedding<TestFixture, H>(*this, nb, nt, kEmbC, kEmbV, std::vector<TokenIndex>(nb * nt, 299),
                                  " (one token 100%)");
}

// --- LayerNorm -----------------------------------------------------------------

template <class Fixture, class H>
void check_layernorm(Fixture& f, std::int64_t rows, std::int64_t channels, const std::string& tag) {
  const H eps = static_cast<H>(1e-5f);
  const auto x = random_values<H>(rows * channels, 11, -2.0f, 3.0f);
  const auto w = random_values<H>(channels, 12, 0.5f, 1.5f);
  const auto b = random_values<H>(channels, 13);
  const auto dy = random_values<H>(rows * channels, 14);
  const auto dx0 = random_values<H>(rows * channels, 15);
  const auto dw0 = random_values<H>(channels, 16);
  const auto db0 = random_values<H>(channels, 17);

  std::vector<H> y(rows * channels), mean(rows), rstd(rows), dx = dx0, dw = dw0, db = db0;
  layernorm_forward<H>(CView2<H>(x.data(), rows, channels), CView1<H>(w.data(), channels),
                       CView1<H>(b.data(), channels), View2<H>(y.data(), rows, channels),
                       View1<H>(mean.data(), rows), View1<H>(rstd.data(), rows), eps);
  layernorm_backward<H>(CView2<H>(x.data(), rows, channels), CView1<H>(w.data(), channels),
                        CView1<H>(mean.data(), rows), CView1<H>(rstd.data(), rows),
                        CView2<H>(dy.data(), rows, channels),
                        View2<H>(dx.data(), rows, channels), View1<H>(dw.data(), channels),
                        View1<H>(db.data(), channels));

  DeviceBuffer<H> d_x(x), d_w(w), d_b(b), d_y(y.size()), d_mean(rows), d_rstd(rows), d_dy(dy),  // y, mean, rstd NaN
      d_dx(dx0), d_dw(dw0), d_db(db0);
  cuda::layernorm_forward(f.dev(d_x), f.dev(d_w), f.dev(d_b), f.dev(d_y),
                          f.dev(d_mean), f.dev(d_rstd), to_float(eps), rows, channels,
                          f.m_stream);
  expect_close(d_y.download(), y, "layernorm y" + tag);
  expect_close(d_mean.download(), mean, "layernorm mean" + tag);
  expect_close(d_rstd.download(), rstd, "layernorm rstd" + tag);

  // The backward gets the host's saved statistics, so it is checked on its own.
  d_mean.upload(mean);
  d_rstd.upload(rstd);
  const std::size_t ws_bytes = cuda::layernorm_backward_workspace_bytes(rows, channels);
  DeviceBuffer<char> d_ws(ws_bytes);
  auto run_backward = [&] {
    cuda::layernorm_backward(f.dev(d_x), f.dev(d_w), f.dev(d_mean), f.dev(d_rstd),
                             f.dev(d_dy), f.dev(d_dx), f.dev(d_dw), f.dev(d_db),
                             rows, channels, d_ws.data(), ws_bytes, f.m_stream);
  };
  run_backward();
  const auto got_dx = d_dx.download(), got_dw = d_dw.download(), got_db = d_db.download();
  expect_close(got_dx, dx, "layernorm dx" + tag);
  expect_close(got_dw, dw, "layernorm dw" + tag);
  expect_close(got_db, db, "layernorm db" + tag);

  d_dx.upload(dx0);
  d_dw.upload(dw0);
  d_db.upload(db0);
  run_backward();
  EXPECT_TRUE(bitwise_equal(d_dx.download(), got_dx)) << "layernorm dx not deterministic" + tag;
  EXPECT_TRUE(bitwise_equal(d_dw.download(), got_dw)) << "layernorm dw not deterministic" + tag;
  EXPECT_TRUE(bitwise_equal(d_db.download(), got_db)) << "layernorm db not deterministic" + tag;

  // The candidate dw/db passes (train.device_kernels = "candidate"): against the
  // host, the same dx bits as the default (only dw/db's passes differ), repeatable.
  auto run_candidate = [&] {
    d_dx.upload(dx0);
    d_dw.upload(dw0);
    d_db.upload(db0);
    cuda::layernorm_backward(f.dev(d_x), f.dev(d_w), f.dev(d_mean), f.dev(d_rstd), f.dev(d_dy), f.dev(d_dx),
                             f.dev(d_dw), f.dev(d_db), rows, channels, d_ws.data(), ws_bytes, f.m_stream,
                             /*candidate=*/true);
  };
  run_candidate();
  const auto cand_dw = d_dw.download(), cand_db = d_db.download();
  EXPECT_TRUE(bitwise_equal(d_dx.download(), got_dx)) << "layernorm dx (candidate)" + tag;
  expect_close(cand_dw, dw, "layernorm dw (candidate)" + tag);
  expect_close(cand_db, db, "layernorm db (candidate)" + tag);
  run_candidate();
  EXPECT_TRUE(bitwise_equal(d_dx.download(), got_dx)) << "layernorm dx (candidate, second run)" + tag;
  EXPECT_TRUE(bitwise_equal(d_dw.download(), cand_dw)) << "layernorm dw (candidate) not deterministic" + tag;
  EXPECT_TRUE(bitwise_equal(d_db.download(), cand_db)) << "layernorm db (candidate) not deterministic" + tag;

  // The candidate forward (rows held in registers where c <= 4 packs a lane): the
  // same expressions in the same order as the default's, so the same bits.
  DeviceBuffer<H> d_y2(y.size()), d_mean2(rows), d_rstd2(rows);
  cuda::layernorm_forward(f.dev(d_x), f.dev(d_w), f.dev(d_b), f.dev(d_y), f.dev(d_mean), f.dev(d_rstd),
                          to_float(eps), rows, channels, f.m_stream);
  cuda::layernorm_forward(f.dev(d_x), f.dev(d_w), f.dev(d_b), f.dev(d_y2), f.dev(d_mean2), f.dev(d_rstd2),
                          to_float(eps), rows, channels, f.m_stream, /*candidate=*/true);
  expect_close(d_y2.download(), y, "layernorm y (candidate)" + tag);
  EXPECT_TRUE(bitwise_equal(d_y2.download(), d_y.download())) << "layernorm y (candidate) against the default" + tag;
  EXPECT_TRUE(bitwise_equal(d_mean2.download(), d_mean.download())) << "layernorm mean (candidate)" + tag;
  EXPECT_TRUE(bitwise_equal(d_rstd2.download(), d_rstd.download())) << "layernorm rstd (candidate)" + tag;
}

// The candidate LayerNorm at widths its row kernels take (1 pack a lane, 3 packs,
// and the widest, 1024 values) and just past them (the fallback), at a row count
// that leaves the fused backward's last 32-row block part full.
TYPED_TEST(PointwiseKernels, LayerNormCandidateRowKernelsMatchHostAtEveryWidth) {
  using H = typename TestFixture::Host;
  constexpr std::int64_t pack = cuda::kPack<typename TestFixture::Dev>;
  for (const std::int64_t c : {32 * pack, 96 * pack, std::int64_t{1024}, 1024 + 4 * pack})
    check_layernorm<TestFixture, H>(*this, 77, c, " (C " + std::to_string(c) + ", 77 rows)");
}

TYPED_TEST(PointwiseKernels, LayerNormMatchesHost) {
  check_layernorm<TestFixture, typename TestFixture::Host>(*this, kRows, kChannels, " (C 96: packs)");
  check_layernorm<TestFixture, typename TestFixture::Host>(*this, kRows, 37, " (C 37: single values)");
}

// --- GELU --------------------------------------------------------------------

template <class Fixture, class H>
void check_gelu(Fixture& f, std::int64_t n, const std::string& tag) {
  const auto x = random_values<H>(n, 21, -6.0f, 6.0f);
  const auto dy = random_values<H>(n, 22);
  std::vector<H> y(n), dx(n);
  gelu_forward<H>(CView1<H>(x.data(), n), View1<H>(y.data(), n));
  gelu_backward<H>(CView1<H>(x.data(), n), CView1<H>(dy.data(), n),
                   View1<H>(dx.data(), n));

  DeviceBuffer<H> d_x(x), d_y(n), d_dy(dy), d_dx(n);
  cuda::gelu_forward(f.dev(d_x), f.dev(d_y), n, f.m_stream);
  cuda::gelu_backward(f.dev(d_x), f.dev(d_dy), f.dev(d_dx), n, f.m_stream);
  expect_close(d_y.download(), y, "gelu y" + tag);
  expect_close(d_dx.download(), dx, "gelu dx" + tag);

  // In place: y = gelu(x) written over x, then dx written over dy (x from d_y).
  d_y.upload(x);
  cuda::gelu_forward(f.dev(d_x), f.dev(d_x), n, f.m_stream);
  cuda::gelu_backward(f.dev(d_y), f.dev(d_dy), f.dev(d_dy), n, f.m_stream);
  expect_close(d_x.download(), y, "gelu y in place" + tag);
  expect_close(d_dy.download(), dx, "gelu dx in place" + tag);
}

TYPED_TEST(PointwiseKernels, GeluMatchesHost) { check_gelu<TestFixture, typename TestFixture::Host>(*this, kFlat, ""); }

// The 16-byte pack path (aligned pointers, kFlat = 10007 leaves a scalar tail) and
// the scalar path (the same buffers one element in: misaligned) give the same bits,
// for both GELU forms, forward and backward.
TYPED_TEST(PointwiseKernels, GeluPackAndScalarPathsAgreeBitwise) {
  using H = typename TestFixture::Host;
  const std::int64_t n = kFlat;
  const auto x = random_values<H>(n + 1, 27, -6.0f, 6.0f);
  const auto dy = random_values<H>(n + 1, 28);
  DeviceBuffer<H> d_x(x), d_dy(dy), d_y(n + 1), d_dx(n + 1), d_y1(n + 1), d_dx1(n + 1);
  auto* const x0 = this->dev(d_x);
  auto* const g0 = this->dev(d_dy);
  for (const bool erf : {false, true}) {
    const std::string form = erf ? "gelu_erf" : "gelu";
    // Pack path over [0, n + 1): elements 1..n are compared with the scalar path's.
    if (erf) {
      cuda::gelu_erf_forward(x0, this->dev(d_y), n + 1, this->m_stream);
      cuda::gelu_erf_backward(x0, g0, this->dev(d_dx), n + 1, this->m_stream);
      cuda::gelu_erf_forward(x0 + 1, this->dev(d_y1) + 1, n, this->m_stream);
      cuda::gelu_erf_backward(x0 + 1, g0 + 1, this->dev(d_dx1) + 1, n, this->m_stream);
    } else {
      cuda::gelu_forward(x0, this->dev(d_y), n + 1, this->m_stream);
      cuda::gelu_backward(x0, g0, this->dev(d_dx), n + 1, this->m_stream);
      cuda::gelu_forward(x0 + 1, this->dev(d_y1) + 1, n, this->m_stream);
      cuda::gelu_backward(x0 + 1, g0 + 1, this->dev(d_dx1) + 1, n, this->m_stream);
    }
    auto y = d_y.download(), y1 = d_y1.download(), dx = d_dx.download(), dx1 = d_dx1.download();
    y.erase(y.begin());
    y1.erase(y1.begin());
    dx.erase(dx.begin());
    dx1.erase(dx1.begin());
    EXPECT_TRUE(bitwise_equal(y, y1)) << form << " y: pack path against scalar path";
    EXPECT_TRUE(bitwise_equal(dx, dx1)) << form << " dx: pack path against scalar path";
  }
}

// GELU's erf form (BERT) and tanh (the BERT pooler), against the host kernels, in place too.
TYPED_TEST(PointwiseKernels, GeluErfAndTanhMatchHost) {
  using H = typename TestFixture::Host;
  const std::int64_t n = kFlat;
  const auto x = random_values<H>(n, 25, -6.0f, 6.0f);
  const auto dy = random_values<H>(n, 26);
  std::vector<H> y(n), dx(n), t(n), dt(n);
  gelu_erf_forward<H>(CView1<H>(x.data(), n), View1<H>(y.data(), n));
  gelu_erf_backward<H>(CView1<H>(x.data(), n), CView1<H>(dy.data(), n), View1<H>(dx.data(), n));
  tanh_forward<H>(CView1<H>(x.data(), n), View1<H>(t.data(), n));
  tanh_backward<H>(CView1<H>(t.data(), n), CView1<H>(dy.data(), n), View1<H>(dt.data(), n));
  DeviceBuffer<H> d_x(x), d_y(n), d_dy(dy), d_dx(n), d_t(n), d_dt(n);
  cuda::gelu_erf_forward(this->dev(d_x), this->dev(d_y), n, this->m_stream);
  cuda::gelu_erf_backward(this->dev(d_x), this->dev(d_dy), this->dev(d_dx), n, this->m_stream);
  expect_close(d_y.download(), y, "gelu_erf y");
  expect_close(d_dx.download(), dx, "gelu_erf dx");
  cuda::tanh_forward(this->dev(d_x), this->dev(d_t), n, this->m_stream);
  cuda::tanh_backward(this->dev(d_t), this->dev(d_dy), this->dev(d_dt), n, this->m_stream);
  expect_close(d_t.download(), t, "tanh y");
  expect_close(d_dt.download(), dt, "tanh dx");
  cuda::tanh_forward(this->dev(d_x), this->dev(d_x), n, this->m_stream);
  cuda::tanh_backward(this->dev(d_x), this->dev(d_dy), this->dev(d_dy), n, this->m_stream);
  expect_close(d_x.download(), t, "tanh y in place");
  expect_close(d_dy.download(), dt, "tanh dx in place");
}

// --- ReLU ----------------------------------------------------------------------

// Exact in every type (each result is an input value or 0): bitwise against the
// host kernel, from the saved input and from the saved output, in place too.
TYPED_TEST(PointwiseKernels, ReluMatchesHostBitwise) {
  using H = typename TestFixture::Host;
  auto x = random_values<H>(kFlat, 23);
  x[5] = H(0.0f);
  const auto dy = random_values<H>(kFlat, 24);
  std::vector<H> y(kFlat), dx(kFlat);
  relu_forward<H>(CView1<H>(x.data(), kFlat), View1<H>(y.data(), kFlat));
  relu_backward<H>(CView1<H>(x.data(), kFlat), CView1<H>(dy.data(), kFlat), View1<H>(dx.data(), kFlat));

  DeviceBuffer<H> d_x(x), d_y(kFlat), d_dy(dy), d_dx(kFlat);
  cuda::relu_forward(this->dev(d_x), this->dev(d_y), kFlat, this->m_stream);
  cuda::relu_backward(this->dev(d_x), this->dev(d_dy), this->dev(d_dx), kFlat, this->m_stream);
  EXPECT_TRUE(bitwise_equal(d_y.download(), y)) << "relu y";
  EXPECT_TRUE(bitwise_equal(d_dx.download(), dx)) << "relu dx from the saved input";
  cuda::relu_backward(this->dev(d_y), this->dev(d_dy), this->dev(d_dy), kFlat, this->m_stream);
  EXPECT_TRUE(bitwise_equal(d_dy.download(), dx)) << "relu dx from the saved output, in place";
  cuda::relu_forward(this->dev(d_x), this->dev(d_x), kFlat, this->m_stream);
  EXPECT_TRUE(bitwise_equal(d_x.download(), y)) << "relu y in place";
}

// --- Cross entropy -------------------------------------------------------------

// V = 1000 takes the 16-byte pack path (rows aligned), 997 the scalar one.
template <class Fixture, class H>
void check_cross_entropy(Fixture& f, std::int64_t vocab, const std::string& tag) {
  const auto logits = random_values<H>(kCeRows * vocab, 31, -4.0f, 4.0f);
  std::vector<TokenIndex> targets = random_tokens(kCeRows, vocab, 32);
  targets[3] = -1;  // ignored rows
  targets[10] = -100;
  const H scale = static_cast<H>(0.25f);

  std::vector<H> losses(kCeRows), dlogits(kCeRows * vocab);
  cross_entropy_forward<H>(CView2<H>(logits.data(), kCeRows, vocab),
                           CView1<TokenIndex>(targets.data(), kCeRows),
                           View1<H>(losses.data(), kCeRows));
  cross_entropy_backward<H>(CView2<H>(logits.data(), kCeRows, vocab),
                            CView1<TokenIndex>(targets.data(), kCeRows), scale,
                            View2<H>(dlogits.data(), kCeRows, vocab));

  DeviceBuffer<H> d_logits(logits), d_losses(kCeRows), d_dlogits(dlogits.size());
  DeviceBuffer<TokenIndex> d_targets(targets);
  cuda::cross_entropy_forward(f.dev(d_logits), d_targets.data(), f.dev(d_losses), kCeRows,
                              vocab, f.m_stream);
  cuda::cross_entropy_backward(f.dev(d_logits), d_targets.data(), to_float(scale),
                               f.dev(d_dlogits), kCeRows, vocab, f.m_stream);
  const auto got_losses = d_losses.download();
  const auto got_dlogits = d_dlogits.download();
  expect_close(got_losses, losses, "cross entropy losses" + tag);
  expect_close(got_dlogits, dlogits, "cross entropy dlogits" + tag);
  EXPECT_EQ(to_float(got_losses[3]), 0.0f);
  for (std::int64_t j = 0; j < vocab; ++j)
    ASSERT_EQ(to_float(got_dlogits[10 * vocab + j]), 0.0f) << "ignored row, column " << j << tag;

  // The candidate (train.device_kernels = "candidate"): the forward keeps its row
  // statistics, the backward reads them instead of its own pass. The same loss and
  // dlogits bits as above, to a separate dlogits and in place. (Planted errors:
  // a statistics pass skipped with nothing read instead, or the sum stored for the
  // max, change every dlogits row.)
  DeviceBuffer<float> d_stats(static_cast<std::size_t>(2 * kCeRows));
  DeviceBuffer<H> d_losses2(kCeRows), d_dlogits2(dlogits.size());
  cuda::cross_entropy_forward(f.dev(d_logits), d_targets.data(), f.dev(d_losses2), kCeRows, vocab, f.m_stream,
                              d_stats.data());
  EXPECT_TRUE(bitwise_equal(d_losses2.download(), got_losses)) << "cross entropy losses (row statistics kept)" + tag;
  cuda::cross_entropy_backward(f.dev(d_logits), d_targets.data(), to_float(scale), f.dev(d_dlogits2), kCeRows,
                               vocab, f.m_stream, d_stats.data());
  EXPECT_TRUE(bitwise_equal(d_dlogits2.download(), got_dlogits))
      << "cross entropy dlogits (from the forward's row statistics)" + tag;

  // In place (dlogits == logits): the default, then the candidate on a fresh copy.
  cuda::cross_entropy_backward(f.dev(d_logits), d_targets.data(), to_float(scale),
                               f.dev(d_logits), kCeRows, vocab, f.m_stream);
  const auto in_place = d_logits.download();
  expect_close(in_place, dlogits, "cross entropy dlogits in place" + tag);
  d_logits.upload(logits);
  cuda::cross_entropy_backward(f.dev(d_logits), d_targets.data(), to_float(scale), f.dev(d_logits), kCeRows, vocab,
                               f.m_stream, d_stats.data());
  EXPECT_TRUE(bitwise_equal(d_logits.download(), in_place))
      << "cross entropy dlogits in place (from the forward's row statistics)" + tag;
}

TYPED_TEST(PointwiseKernels, CrossEntropyMatchesHost) {
  check_cross_entropy<TestFixture, typename TestFixture::Host>(*this, kVocab, " (V 1000: packs)");
  check_cross_entropy<TestFixture, typename TestFixture::Host>(*this, 997, " (V 997: single values)");
}

// --- Elementwise -----------------------------------------------------------------

TYPED_TEST(PointwiseKernels, ElementwiseMatchesHost) {
  using H = typename TestFixture::Host;
  using D = typename TestFixture::Dev;
  const auto x = random_values<H>(kFlat, 41);
  const auto y0 = random_values<H>(kFlat, 42);
  std::vector<H> y = y0;
  accumulate<H>(CView1<H>(x.data(), kFlat), View1<H>(y.data(), kFlat));

  DeviceBuffer<H> d_x(x), d_y(y0), d_z(kFlat);
  cuda::accumulate(this->dev(d_x), this->dev(d_y), kFlat, this->m_stream);
  // One add of two T values rounded once: the same bits as the host.
  EXPECT_TRUE(bitwise_equal(d_y.download(), y)) << "accumulate";

  cuda::copy(this->dev(d_x), this->dev(d_z), kFlat, this->m_stream);
  EXPECT_TRUE(bitwise_equal(d_z.download(), x)) << "copy";

  const H value = static_cast<H>(-1.375f);
  d_z.fill_nan();  // fill's output starts as NaN too
  D dvalue;
  std::memcpy(static_cast<void*>(&dvalue), &value, sizeof(H));  // same bits
  cuda::fill(this->dev(d_z), dvalue, kFlat, this->m_stream);
  std::vector<H> filled(kFlat);
  fill<H>(View1<H>(filled.data(), kFlat), value);
  EXPECT_TRUE(bitwise_equal(d_z.download(), filled)) << "fill";
}

// --- AdamW -------------------------------------------------------------------

TYPED_TEST(PointwiseKernels, AdamWMatchesHost) {
  using H = typename TestFixture::Host;
  constexpr bool kMaster = !std::is_same_v<H, float>;
  ParamLayout layout;
  layout.add("w1", {40, 24}, true, 0);
  layout.add("b1", {24}, false, 0);
  layout.add("w2", {30, 17}, true, 1);
  layout.add("ln", {17}, false, 1);
  layout.finalize(2);
  // Rank 1's shard of 2: starts inside w1, crosses the alignment gaps and ends in
  // the final padding.
  const auto [lo, hi] = layout.shard_range(1);
  const std::int64_t n = hi - lo;
  std::vector<cuda::AdamWSegment> segments;
  for (const auto& e : layout.entries()) {
    const std::int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.numel);
    if (a < b) segments.push_back({a - lo, b - lo, e.weight_decay});
  }
  ASSERT_GE(segments.size(), 2u);

  OptimConfig config;
  config.weight_decay = 0.1;
  const AdamW host(config, layout);
  std::vector<H> params = random_values<H>(n, 51);
  const std::vector<H> params0 = params;
  // The host state of [lo, hi): fp32 master weights (16-bit H) and the moments.
  std::vector<float> host_master(kMaster ? n : 0), exp_avg(n, 0.0f), exp_avg_sq(n, 0.0f);
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(host_master.size()); ++i)
    host_master[i] = to_float(params[i]);

  DeviceBuffer<H> d_params(params0), d_grads(n);
  DeviceBuffer<float> d_master(n), d_m(n), d_v(n);
  std::vector<float> master0(n), zeros(n, 0.0f);
  for (std::int64_t i = 0; i < n; ++i) master0[i] = to_float(params0[i]);
  d_master.upload(master0);
  d_m.upload(zeros);
  d_v.upload(zeros);

  const float grad_scale = 0.5f;
  for (std::int64_t step = 0; step < 3; ++step) {
    const double lr = 1e-2 * static_cast<double>(step + 1);
    const auto grads = random_values<H>(n, 60 + static_cast<unsigned>(step), -2.0f, 2.0f);
    std::vector<H> host_grads = grads;
    ShardView<H> view{lo, hi, params, host_grads, {}, exp_avg, exp_avg_sq};
    if constexpr (kMaster) view.master = host_master;
    else view.master = params;
    host.step(view, lr, grad_scale, step);
    d_grads.upload(grads);
    cuda::AdamWHyper hyper;
    hyper.lr = lr;
    hyper.beta1 = config.beta1;
    hyper.beta2 = config.beta2;
    hyper.eps = config.eps;
    hyper.weight_decay = config.weight_decay;
    hyper.grad_scale = grad_scale;
    hyper.step = step;
    cuda::adamw_step(this->dev(d_params), this->dev(d_grads), kMaster ? d_master.data() : nullptr,
                     d_m.data(), d_v.data(), segments.data(), segments.size(), hyper,
                     this->m_stream);
  }
  const auto got_params = d_params.download();
  expect_close(got_params, params, "adamw params");
  expect_close_f32(widen(d_m.download()), widen(std::vector<float>(exp_avg.begin(), exp_avg.end())),
                   1e-5, "adamw exp_avg");
  expect_close_f32(widen(d_v.download()),
                   widen(std::vector<float>(exp_avg_sq.begin(), exp_avg_sq.end())), 1e-5,
                   "adamw exp_avg_sq");
  if constexpr (kMaster) {
    expect_close_f32(widen(d_master.download()), widen(host_master), 1e-5,
                     "adamw master weights");
  }
  // Padding (after the last segment) is never touched.
  for (std::int64_t i = segments.back().end; i < n; ++i)
    ASSERT_TRUE(bitwise_equal(std::vector<H>{got_params[i]}, std::vector<H>{params0[i]}))
        << "padding element " << i << " changed";
}

// --- GPT-2 124M sizes -------------------------------------------------------------
// One GPT-2-sized shape per op (B 16, T 1024, C 768, V 50304): offsets such as
// row * V (up to 824M), b * T * 3C, the grids, and the chunked reductions at
// full length. Where the host reference over everything would take more than
// about 20 s single-threaded (cross entropy over 824M logits), it runs on a
// sample of rows, and a device-side scan proves the whole NaN-prefilled output
// was written; elsewhere the comparison is complete.

// Embedding at 16K positions and a 50304-token vocabulary, one token (50256,
// GPT-2's end-of-text) at half of the positions: its run spans ~128 chunks.
TYPED_TEST(PointwiseKernels, EmbeddingAtGpt2SizeMatchesHost) {
  using H = typename TestFixture::Host;
  check_embedding<TestFixture, H>(*this, kG2B, kG2T, kG2C, kG2V,
                                  dominant_tokens(kG2B * kG2T, kG2V, 50256, 0.5, 9), " (GPT-2 size)");
}

TYPED_TEST(PointwiseKernels, LayerNormAtGpt2SizeMatchesHost) {
  check_layernorm<TestFixture, typename TestFixture::Host>(*this, kG2B * kG2T, kG2C, " (GPT-2 size)");
}

// The MLP activation: B T 4C = 50.3M elements.
TYPED_TEST(PointwiseKernels, GeluAtGpt2SizeMatchesHost) {
  check_gelu<TestFixture, typename TestFixture::Host>(*this, kG2B * kG2T * 4 * kG2C, " (GPT-2 size)");
}

// Cross entropy over the GPT-2 logits, (B T, V) = 16384 x 50304 = 824M elements
// (3.3 GB in fp32): logits made on the device; every loss and every dlogits
// element must be written (device scan), and 20 rows spread over the batch
// (first and last two included) must match the host kernel.
TYPED_TEST(PointwiseKernels, CrossEntropyAtGpt2SizeMatchesHost) {
  using H = typename TestFixture::Host;
  const std::int64_t rows = kG2B * kG2T, v = kG2V;
  std::vector<TokenIndex> targets = random_tokens(static_cast<std::size_t>(rows), v, 71);
  targets[5] = -1;  // an ignored row
  targets[static_cast<std::size_t>(rows - 1)] = static_cast<TokenIndex>(v - 1);
  const float scale = 1.0f / static_cast<float>(rows);
  DeviceBuffer<H> d_logits(static_cast<std::size_t>(rows * v)), d_dlogits(static_cast<std::size_t>(rows * v)),
      d_losses(static_cast<std::size_t>(rows));  // outputs NaN-poisoned
  DeviceBuffer<TokenIndex> d_targets(targets);
  ASSERT_EQ(gpu_test::fill_uniform(this->dev(d_logits), d_logits.size(), 72, -4.0f, 4.0f, this->m_stream),
            cudaSuccess);
  cuda::cross_entropy_forward(this->dev(d_logits), d_targets.data(), this->dev(d_losses), rows, v, this->m_stream);
  cuda::cross_entropy_backward(this->dev(d_logits), d_targets.data(), scale, this->dev(d_dlogits), rows, v,
                               this->m_stream);
  EXPECT_EQ(test::first_non_finite_on_device(this->dev(d_losses), rows, this->m_stream), -1) << "losses";
  EXPECT_EQ(test::first_non_finite_on_device(this->dev(d_dlogits), rows * v, this->m_stream), -1) << "dlogits";

  const auto sample = test::sample_rows(static_cast<std::size_t>(rows), 20);
  const std::int64_t ns = static_cast<std::int64_t>(sample.size());
  std::vector<H> logits_s, dlogits_got;
  std::vector<TokenIndex> targets_s;
  for (const std::size_t r : sample) {
    const auto lr = d_logits.download_range(r * v, v), dr = d_dlogits.download_range(r * v, v);
    logits_s.insert(logits_s.end(), lr.begin(), lr.end());
    dlogits_got.insert(dlogits_got.end(), dr.begin(), dr.end());
    targets_s.push_back(targets[r]);
  }
  const auto losses_all = d_losses.download();
  std::vector<H> losses_got;
  for (const std::size_t r : sample) losses_got.push_back(losses_all[r]);
  std::vector<H> losses_want(static_cast<std::size_t>(ns)), dlogits_want(logits_s.size());
  cross_entropy_forward<H>(CView2<H>(logits_s.data(), ns, v), CView1<TokenIndex>(targets_s.data(), ns),
                           View1<H>(losses_want.data(), ns));
  cross_entropy_backward<H>(CView2<H>(logits_s.data(), ns, v), CView1<TokenIndex>(targets_s.data(), ns),
                            static_cast<H>(scale), View2<H>(dlogits_want.data(), ns, v));
  expect_close(losses_got, losses_want, "cross entropy losses (GPT-2 size, sampled rows)");
  expect_close(dlogits_got, dlogits_want, "cross entropy dlogits (GPT-2 size, sampled rows)");
}

// A launch that needs more than 2^31 - 1 blocks is refused before it is made
// (catches blocks_for's unsigned cast wrapping: 2^32 + 1 blocks launched as 1), on
// GELU's 16-byte pack path (aligned pointers: a block covers 256 packs of 8 or 4
// values) and on its scalar path (misaligned pointers: 256 values a block). The
// pointers are never dereferenced: the refusal comes before the launch (on
// 2026-11-29 an H200 ran this test's earlier form, 2^32 + 1 blocks of single
// values, into the pack path, launched, and faulted on the null pointers).
TYPED_TEST(PointwiseKernels, RefusesALaunchPastTheGridLimit) {
  using D = typename TestFixture::Dev;
  const std::int64_t blocks = (std::int64_t{1} << 32) + 1;
  EXPECT_THROW(cuda::gelu_forward<D>(nullptr, nullptr, blocks * 256 * cuda::kPack<D>, this->m_stream), Error)
      << "pack path";
  D* const misaligned = reinterpret_cast<D*>(std::uintptr_t{2});
  EXPECT_THROW(cuda::gelu_forward<D>(misaligned, misaligned, blocks * 256, this->m_stream), Error)
      << "scalar path";
}

// Elementwise kernels past 2^31 elements (4.3 GB in bf16, 8.6 GB in fp32 per
// buffer): a 32-bit element index or grid computation would wrap before the end.
// gelu then accumulate over n = 2^31 + 4099; every output element must be written
// (device scan) and elements sampled at the start, around 2^31 and at the end
// must match the host kernels.
TYPED_TEST(PointwiseKernels, ElementwisePastTwoToThe31ElementsMatchesHost) {
  using H = typename TestFixture::Host;
  const std::int64_t n = (std::int64_t{1} << 31) + 4099;
  DeviceBuffer<H> d_x(static_cast<std::size_t>(n)), d_y(static_cast<std::size_t>(n));  // y NaN-poisoned
  ASSERT_EQ(gpu_test::fill_uniform(this->dev(d_x), d_x.size(), 81, -6.0f, 6.0f, this->m_stream), cudaSuccess);
  cuda::gelu_forward(this->dev(d_x), this->dev(d_y), n, this->m_stream);
  EXPECT_EQ(test::first_non_finite_on_device(this->dev(d_y), n, this->m_stream), -1) << "gelu output";
  const std::int64_t starts[] = {0, (std::int64_t{1} << 31) - 2048, n - 2048};
  std::vector<H> xs, gelu_got;
  for (const std::int64_t a : starts) {
    const auto xr = d_x.download_range(static_cast<std::size_t>(a), 2048);
    const auto yr = d_y.download_range(static_cast<std::size_t>(a), 2048);
    xs.insert(xs.end(), xr.begin(), xr.end());
    gelu_got.insert(gelu_got.end(), yr.begin(), yr.end());
  }
  const std::int64_t ns = static_cast<std::int64_t>(xs.size());
  std::vector<H> gelu_want(xs.size());
  gelu_forward<H>(CView1<H>(xs.data(), ns), View1<H>(gelu_want.data(), ns));
  expect_close(gelu_got, gelu_want, "gelu past 2^31 elements (sampled)");

  cuda::accumulate(this->dev(d_x), this->dev(d_y), n, this->m_stream);  // y = gelu(x) + x
  std::vector<H> acc_got, acc_want = gelu_got;  // one rounded add on the device's gelu values: bitwise
  for (const std::int64_t a : starts) {
    const auto yr = d_y.download_range(static_cast<std::size_t>(a), 2048);
    acc_got.insert(acc_got.end(), yr.begin(), yr.end());
  }
  accumulate<H>(CView1<H>(xs.data(), ns), View1<H>(acc_want.data(), ns));
  EXPECT_TRUE(bitwise_equal(acc_got, acc_want)) << "accumulate past 2^31 elements (sampled)";
}

// kernels/cuda/crc32 (the weights CRC of metrics.csv on a device), the default
// kernel (a thread a piece) and the candidate (a block a piece, its threads' CRCs
// joined: kernels/crc32_shift.hpp): every piece's CRC against ISA-L's
// (io/crc32.hpp) and the joined CRC (crc32_join) against the whole range's:
// 16-byte loads (aligned start, piece a multiple of 16) and byte loads (odd
// starts, a piece of 1000), pieces that do not divide the length, pieces under
// 256 bytes (the candidate's idle threads), lengths 0, 1, under one piece, and
// 64 MiB + 13 in 64 KiB pieces (the trainer's); both kernels' outputs equal.
TEST(DeviceCrc32, PiecesMatchIsaLAndJoinToTheWholeRange) {
  std::mt19937 gen(77);
  std::vector<unsigned char> host((std::size_t{64} << 20) + 64);
  for (auto& b : host) b = static_cast<unsigned char>(gen());
  DeviceBuffer<unsigned char> dev(host);
  cudaStream_t stream = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct Case {
    std::size_t offset, bytes, piece;
  };
  const std::size_t big = (std::size_t{64} << 20) + 13;
  const Case cases[] = {{0, 0, 64},         {0, 1, 64},        {0, 63, 64},          {0, 64, 64},
                        {0, 65, 64},        {3, 1000, 64},     {5, 100'003, 1000},   {16, 100'000, 4096},
                        {0, 5 * 65536, 65536}, {0, big, 65536}, {1, big, 65536},    {0, 300'000, 65536 + 16},
                        {7, 77'777, 77'777}};
  for (const Case& c : cases) {
    const std::size_t n = (c.bytes + c.piece - 1) / c.piece;
    std::vector<std::uint32_t> by_kernel[2];
    for (const bool candidate : {false, true}) {
      const std::string tag = std::string(candidate ? "candidate" : "default") + " kernel, offset " +
                              std::to_string(c.offset) + " bytes " + std::to_string(c.bytes) + " piece " +
                              std::to_string(c.piece);
      DeviceBuffer<std::uint32_t> out(std::max<std::size_t>(n, 1));
      cuda::crc32_pieces(dev.data() + c.offset, c.bytes, c.piece, out.data(), stream, candidate);
      SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::vector<std::uint32_t> got = out.template download_range<std::uint32_t>(0, n);
      const unsigned char* base = host.data() + c.offset;
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], crc32_ieee(0, base + i * c.piece, std::min(c.piece, c.bytes - i * c.piece)))
            << "piece " << i << ", " << tag;
      EXPECT_EQ(crc32_join(got, c.piece, c.bytes), crc32_ieee(0, base, c.bytes)) << tag;
      by_kernel[candidate ? 1 : 0] = got;
    }
    EXPECT_EQ(by_kernel[0], by_kernel[1]) << "offset " << c.offset << " bytes " << c.bytes;
  }
  SHARDTRAIN_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace shardtrain
