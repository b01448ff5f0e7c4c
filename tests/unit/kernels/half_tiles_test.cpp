// This file is long because every layer kernel's f16 and bf16 paths are checked forward and backward.
// Tests the f16 / bf16 paths of every layer kernel (kernels/half_tiles.hpp) against
// the fp32 kernels, forward and backward, for both 16-bit types.
//
// Method: random inputs (fixed seeds) are rounded to 16 bits. The fp32 kernel runs
// on the rounded values (widened to float, exact) and the 16-bit kernel on the
// 16-bit values. Every output and every gradient is compared as
//
//     relative error = ||a16 - a32||_2 / ||a32||_2
//
// over the whole output buffer, a16 = the 16-bit result widened to double, a32 =
// the fp32 result. Bounds (acceptance of the mixed-precision issue):
//     fp16: relative error <= 1e-2        bf16: relative error <= 2e-2.
// Every measured error is printed as "[half-error] <type> <kernel> <output>: ...".
// Outputs a kernel accumulates into (+=: dx of layernorm, dw / db, dwte / dwpe, y of
// linear_forward with accumulate) are pre-filled with random values, rounded to 16
// bits and given to both kernels, and the 16-bit result is also checked to be far
// from what overwriting would give. Outputs a kernel overwrites are pre-filled with
// NaN. The bound scratch arena is NaN-filled too, so a read of scratch that was
// never written shows up as NaN (which fails every comparison).
// Row-wise kernels (layernorm incl. its dw / db, gelu, cross entropy, embedding,
// accumulate) run directly on 16-bit memory with the fp32 kernel's arithmetic in
// registers, and are checked BIT FOR BIT against the fp32 result rounded once, as
// half_tiles.hpp promises: on the shapes below, on every length that leaves a
// vector tail (DirectKernelsAllTailLengths), and on inputs with NaN, +-inf and
// values that overflow the 16-bit range when rounded (DirectKernelsNonFinite, where
// a NaN result must be NaN in both and every other result has the same bits).
// Shapes span several tiles / work chunks with a ragged last one.
// Scratch: each call runs with exactly its *_half_scratch_elems bound; one float
// less, or nothing bound, throws shardtrain::Error and leaves the outputs untouched.
// Kernels whose size is 0 (gelu, layernorm, elementwise, cross entropy forward)
// run and write their outputs with nothing bound.
// The fp32 / double paths are covered, unchanged, by the other kernels_* tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/attention.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"
#include "core/half.hpp"
#include "kernels/cpu_compute.hpp"
#include "kernels/half_scratch.hpp"
#include "kernels/half_tiles.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"

namespace shardtrain {
namespace {

using test::cview1;
using test::cview2;
using test::cview3;
using test::cview4;
using test::view1;
using test::view2;
using test::view3;
using test::view4;
namespace tiles = half_tiles;

// --- Shapes: several tiles / work chunks each, the last one ragged ---------------

constexpr std::int64_t kRows = 150, kChannels = 96;  // layernorm
constexpr std::int64_t kVocab = 1000;                // cross entropy
constexpr std::int64_t kLinN = 300, kLinK = 96, kLinM = 600;
constexpr std::int64_t kGemmM = 300, kGemmN = 290, kGemmK = 70;
constexpr std::int64_t kGeluN = 16 * 2048 + 1234;    // gelu.cpp's 2048-element work chunks
constexpr std::int64_t kEmbB = 3, kEmbT = 50, kEmbC = 40, kEmbV = tiles::kVocabBlock + 300;
const AttentionShape kAtt{3, 70, 48, 4};  // T = 70 > the fp32 kernel's 64-row causal blocks
//                   N  IC  H   W  OC KH KW stride pad: odd sizes, stride 2, padding
const Conv2dShape kConv{5, 6, 13, 11, 10, 3, 3, 2, 1};  // -> 7 x 6

static_assert(kLinN > tiles::kGemmRows && kLinN % tiles::kGemmRows != 0);
static_assert(kLinM > 2 * tiles::kGemmCols && kLinM % tiles::kGemmCols != 0);
static_assert(kGemmM > tiles::kGemmRows && kGemmN > tiles::kGemmCols);

// --- Conversions and comparisons ----------------------------------------------------

template <class H>
constexpr double bound() {
  return std::is_same_v<H, f16> ? 1e-2 : 2e-2;
}

template <class H>
std::vector<H> to_half(const std::vector<double>& v) {
  std::vector<H> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = H(static_cast<float>(v[i]));
  return out;
}

template <class H>
std::vector<float> widen(const std::vector<H>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
  return out;
}

template <class H>
std::vector<H> nan_filled(std::size_t n) {
  return std::vector<H>(n, H(std::numeric_limits<float>::quiet_NaN()));
}

template <class H>
std::vector<H> random_half(std::size_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return to_half<H>(test::random_vector(n, seed, lo, hi));
}

// ||got - want||_2 / ||want||_2 (NaN or a size mismatch gives +inf).
template <class H>
double rel_l2(const std::vector<H>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(to_float(got[i])) - static_cast<double>(want[i]);
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  const double e = den > 0.0 ? std::sqrt(num / den) : (num == 0.0 ? 0.0 : INFINITY);
  return std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
}

template <class H>
void expect_close(const std::string& what, const std::vector<H>& got,
                  const std::vector<float>& want) {
  const double e = rel_l2(got, want);
  std::cout << "[half-error] " << type_name<H>() << " " << what << ": " << e << " (bound "
            << bound<H>() << ")" << std::endl;
  EXPECT_LE(e, bound<H>()) << type_name<H>() << " " << what;
}

// Accumulated output: close to `want` (pre-filled values added to) and not close to
// `overwritten` (what the kernel gives from a zero pre-fill).
template <class H>
void expect_accumulated(const std::string& what, const std::vector<H>& got,
                        const std::vector<float>& want, const std::vector<float>& overwritten) {
  expect_close(what, got, want);
  EXPECT_GT(rel_l2(got, overwritten), 10 * bound<H>())
      << type_name<H>() << " " << what << ": the pre-filled values were not added to";
}

// got == H(want) bit for bit.
template <class H>
void expect_rounded_bits(const std::string& what, const std::vector<H>& got,
                         const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i].bits != H(want[i]).bits && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << type_name<H>() << " " << what << ": " << bad
                     << " elements differ from the rounded fp32 result, first at " << first;
}

// got == H(want) bit for bit where want is not NaN, and got is NaN where want is
// (IEEE leaves NaN payloads to the implementation, so they are not compared).
template <class H>
void expect_rounded_bits_or_nan(const std::string& what, const std::vector<H>& got,
                                const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0, first = 0, nans = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(want[i]) ? std::isnan(to_float(got[i])) : got[i].bits == H(want[i]).bits;
    nans += std::isnan(want[i]) ? 1 : 0;
    if (!ok && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << type_name<H>() << " " << what << ": " << bad
                     << " elements differ from the rounded fp32 result, first at " << first
                     << " (got bits " << got[first].bits << ", want " << want[first] << ")";
  std::cout << "[half-nonfinite] " << type_name<H>() << " " << what << ": " << nans
            << " NaN results of " << got.size() << std::endl;
}

template <class H>
bool same_bits(const std::vector<H>& a, const std::vector<H>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(H)) == 0;
}

// Binds `elems` NaN-filled floats as the 16-bit scratch arena for one scope.
class BoundScratch {
 public:
  explicit BoundScratch(std::int64_t elems)
      : m_buf(static_cast<std::size_t>(elems), std::numeric_limits<float>::quiet_NaN()) {
    half_scratch_bind(m_buf.data(), m_buf.size());
  }
  ~BoundScratch() { half_scratch_bind(nullptr, 0); }
  BoundScratch(const BoundScratch&) = delete;
  BoundScratch& operator=(const BoundScratch&) = delete;

 private:
  std::vector<float> m_buf;
};

// The 16-bit call `run` needs exactly `elems` floats of scratch: with one float less
// and with nothing bound it throws shardtrain::Error naming what it needs, and it
// does not write the output watched by `output_bits`.
void expect_scratch_exact(const std::string& what, std::int64_t elems,
                          const std::function<void()>& run,
                          const std::function<std::vector<std::uint16_t>()>& output_bits) {
  const auto before = output_bits();
  {
    BoundScratch scratch(elems - 1);
    try {
      run();
      ADD_FAILURE() << what << ": ran with " << elems - 1 << " floats of scratch";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("needs " + std::to_string(elems) + " floats"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(elems - 1) + " are bound"), std::string::npos) << msg;
    }
  }
  try {
    run();
    ADD_FAILURE() << what << ": ran without scratch";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no scratch is bound"), std::string::npos) << e.what();
  }
  EXPECT_EQ(output_bits(), before) << what << ": output written although the call threw";
}

// A 16-bit call that takes no scratch (the bf16 GEMMs of a CPU with native bf16 dot
// products, which run straight on oneDNN; gelu, layernorm, the cross entropy
// forward, which run directly on 16-bit memory): with nothing bound the call runs and
// writes its output.
void expect_runs_without_scratch(const std::string& what, const std::function<void()>& run,
                                 const std::function<std::vector<std::uint16_t>()>& output_bits) {
  const auto before = output_bits();
  ASSERT_EQ(half_scratch_size(), 0u);
  run();
  EXPECT_NE(output_bits(), before) << what << ": ran without scratch but wrote nothing";
}

// Whether gemm / linear / conv2d with storage H convert tiles to fp32 (f16 always;
// bf16 on CPUs without native bf16, or under DNNL_MAX_CPU_ISA=AVX512_CORE).
template <class H>
bool gemm_on_tiles() {
  return !(std::is_same_v<H, bf16> && cpu_bf16_native());
}

template <class H>
std::vector<std::uint16_t> bits_of(const std::vector<H>& v) {
  std::vector<std::uint16_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = v[i].bits;
  return b;
}

template <class H>
class HalfKernels : public ::testing::Test {};

struct TypeNames {
  template <class H>
  static std::string GetName(int) {
    return type_name<H>();
  }
};
using HalfTypes = ::testing::Types<f16, bf16>;
TYPED_TEST_SUITE(HalfKernels, HalfTypes, TypeNames);

// --- gemm ------------------------------------------------------------------------

TYPED_TEST(HalfKernels, Gemm) {
  using H = TypeParam;
  const std::int64_t m = kGemmM, n = kGemmN, k = kGemmK;
  const H alpha(0.75f), beta(0.5f);
  for (Trans ta : {Trans::N, Trans::T})
    for (Trans tb : {Trans::N, Trans::T}) {
      const std::string label =
          std::string("gemm ") + (ta == Trans::N ? "N" : "T") + (tb == Trans::N ? "N" : "T");
      const auto a = random_half<H>(m * k, 101), b = random_half<H>(k * n, 102);
      const auto c0 = random_half<H>(m * n, 103);
      const std::size_t a0 = ta == Trans::N ? m : k, a1 = ta == Trans::N ? k : m;
      const std::size_t b0 = tb == Trans::N ? k : n, b1 = tb == Trans::N ? n : k;
      const auto a32 = widen(a), b32 = widen(b);
      for (bool with_beta : {true, false}) {
        std::vector<H> c = with_beta ? c0 : nan_filled<H>(m * n);
        std::vector<float> c32 = widen(c);
        const H bt = with_beta ? beta : H(0.0f);
        {
          BoundScratch scratch(gemm_half_scratch_elems(m, n, k));
          gemm<H>(ta, tb, alpha, cview2(a, a0, a1), cview2(b, b0, b1), bt, view2(c, m, n));
        }
        gemm<float>(ta, tb, to_float(alpha), cview2(a32, a0, a1), cview2(b32, b0, b1), to_float(bt),
                    view2(c32, m, n));
        expect_close(label + (with_beta ? " beta=0.5 C" : " beta=0 C"), c, c32);
      }
    }
}

// The first `cols` columns of a row-major matrix: LayoutRight with a row stride.
template <class V>
V sub(const V& m, std::int64_t cols) {
  return Kokkos::subview(m, Kokkos::ALL, Kokkos::make_pair(std::int64_t{0}, cols));
}

// Row-strided (LayoutRight subview) operands, and K == 0.
TYPED_TEST(HalfKernels, GemmRowStridedViewsAndEmptyK) {
  using H = TypeParam;
  const std::int64_t m = kGemmM, n = kGemmN, k = kGemmK, pad = 7;
  const auto a = random_half<H>(m * (k + pad), 111), b = random_half<H>(k * (n + pad), 112);
  auto c = random_half<H>(m * (n + pad), 113);
  const auto c_before = c;
  const auto a32 = widen(a), b32 = widen(b);
  auto c32 = widen(c);
  {
    BoundScratch scratch(gemm_half_scratch_elems(m, n, k));
    gemm<H>(Trans::N, Trans::N, H(1.0f), sub(cview2(a, m, k + pad), k),
            sub(cview2(b, k, n + pad), n), H(1.0f), sub(view2(c, m, n + pad), n));
  }
  gemm<float>(Trans::N, Trans::N, 1.0f, sub(cview2(a32, m, k + pad), k),
              sub(cview2(b32, k, n + pad), n), 1.0f, sub(view2(c32, m, n + pad), n));
  expect_close("gemm NN row-strided C", c, c32);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = n; j < n + pad; ++j)
      ASSERT_EQ(c[i * (n + pad) + j].bits, c_before[i * (n + pad) + j].bits) << "padding written";

  // K == 0: C = beta C (BLAS semantics, as for float).
  std::vector<H> e = random_half<H>(m * n, 114);
  const auto e32 = widen(e);
  {
    BoundScratch scratch(gemm_half_scratch_elems(m, n, 0));
    gemm<H>(Trans::N, Trans::T, H(1.0f), CView2<H>(a.data(), m, 0), CView2<H>(b.data(), n, 0),
            H(0.5f), view2(e, m, n));
  }
  for (std::size_t i = 0; i < e.size(); ++i) ASSERT_EQ(e[i].bits, H(0.5f * e32[i]).bits);
}

// --- linear ----------------------------------------------------------------------

TYPED_TEST(HalfKernels, LinearForward) {
  using H = TypeParam;
  const std::int64_t n = kLinN, k = kLinK, m = kLinM;
  const auto x = random_half<H>(n * k, 201), w = random_half<H>(m * k, 202, -0.2, 0.2);
  const auto b = random_half<H>(m, 203), y0 = random_half<H>(n * m, 204, -2.0, 2.0);
  const auto x32 = widen(x), w32 = widen(w), b32 = widen(b);
  for (bool bias : {true, false})
    for (bool acc : {false, true}) {
      std::vector<H> y = acc ? y0 : nan_filled<H>(n * m);
      std::vector<float> y32 = widen(y), y32_zero(n * m, 0.0f);
      {
        BoundScratch scratch(linear_half_scratch_elems(n, k, m));
        linear_forward<H>(cview2(x, n, k), cview2(w, m, k), bias ? cview1(b) : CView1<H>(),
                          view2(y, n, m), acc);
      }
      linear_forward<float>(cview2(x32, n, k), cview2(w32, m, k),
                            bias ? cview1(b32) : CView1<float>(), view2(y32, n, m), acc);
      const std::string label = std::string("linear_forward") + (bias ? " bias" : " no-bias") +
                                (acc ? " accumulate y" : " y");
      if (acc) {
        linear_forward<float>(cview2(x32, n, k), cview2(w32, m, k),
                              bias ? cview1(b32) : CView1<float>(), view2(y32_zero, n, m), acc);
        expect_accumulated(label, y, y32, y32_zero);
      } else {
        expect_close(label, y, y32);
      }
    }
}

TYPED_TEST(HalfKernels, LinearBackward) {
  using H = TypeParam;
  const std::int64_t n = kLinN, k = kLinK, m = kLinM;
  const auto x = random_half<H>(n * k, 211), w = random_half<H>(m * k, 212, -0.2, 0.2);
  const auto dy = random_half<H>(n * m, 213);
  // Pre-filled parameter gradients of the size of one call's contribution.
  const auto dw0 = random_half<H>(m * k, 214, -8.0, 8.0), db0 = random_half<H>(m, 215, -8.0, 8.0);
  const auto x32 = widen(x), w32 = widen(w), dy32 = widen(dy);
  for (bool bias : {true, false})
    for (bool with_dx : {true, false}) {
      std::vector<H> dx = nan_filled<H>(n * k), dw = dw0, db = db0;
      std::vector<float> dx32(n * k, NAN), dw32 = widen(dw0), db32 = widen(db0);
      std::vector<float> dw32_zero(m * k, 0.0f), db32_zero(m, 0.0f);
      {
        BoundScratch scratch(linear_half_scratch_elems(n, k, m));
        linear_backward<H>(cview2(x, n, k), cview2(w, m, k), cview2(dy, n, m),
                           with_dx ? view2(dx, n, k) : View2<H>(), view2(dw, m, k),
                           bias ? view1(db) : View1<H>());
      }
      linear_backward<float>(cview2(x32, n, k), cview2(w32, m, k), cview2(dy32, n, m),
                             with_dx ? view2(dx32, n, k) : View2<float>(), view2(dw32, m, k),
                             bias ? view1(db32) : View1<float>());
      linear_backward<float>(cview2(x32, n, k), cview2(w32, m, k), cview2(dy32, n, m),
                             View2<float>(), view2(dw32_zero, m, k),
                             bias ? view1(db32_zero) : View1<float>());
      const std::string label = std::string("linear_backward") + (bias ? "" : " empty-bias") +
                                (with_dx ? "" : " empty-dx");
      if (with_dx)
        expect_close(label + " dx", dx, dx32);
      else
        EXPECT_TRUE(same_bits(dx, nan_filled<H>(n * k))) << "empty dx: buffer written";
      expect_accumulated(label + " dw", dw, dw32, dw32_zero);
      if (bias)
        expect_accumulated(label + " db", db, db32, db32_zero);
      else
        EXPECT_TRUE(same_bits(db, db0)) << "empty db: buffer written";
    }
}

// --- layernorm ---------------------------------------------------------------------

template <class H>
struct LayerNormData {
  std::int64_t n = kRows, c = kChannels;
  std::vector<H> x = random_half<H>(kRows * kChannels, 301, -1.5, 2.5);
  std::vector<H> w = random_half<H>(kChannels, 302, 0.5, 1.5);
  std::vector<H> b = random_half<H>(kChannels, 303, -0.5, 0.5);
  H eps = H(1e-5f);
};

TYPED_TEST(HalfKernels, LayerNormForward) {
  using H = TypeParam;
  const LayerNormData<H> d;
  const std::int64_t n = d.n, c = d.c;
  auto y = nan_filled<H>(n * c), mean = nan_filled<H>(n), rstd = nan_filled<H>(n);
  {
    BoundScratch scratch(layernorm_half_scratch_elems(c));
    layernorm_forward<H>(cview2(d.x, n, c), cview1(d.w), cview1(d.b), view2(y, n, c), view1(mean),
                         view1(rstd), d.eps);
  }
  const auto x32 = widen(d.x), w32 = widen(d.w), b32 = widen(d.b);
  std::vector<float> y32(n * c), mean32(n), rstd32(n);
  layernorm_forward<float>(cview2(x32, n, c), cview1(w32), cview1(b32), view2(y32, n, c),
                           view1(mean32), view1(rstd32), to_float(d.eps));
  expect_close("layernorm_forward y", y, y32);
  expect_close("layernorm_forward mean", mean, mean32);
  expect_close("layernorm_forward rstd", rstd, rstd32);
  expect_rounded_bits("layernorm_forward y", y, y32);
  expect_rounded_bits("layernorm_forward mean", mean, mean32);
  expect_rounded_bits("layernorm_forward rstd", rstd, rstd32);
}

TYPED_TEST(HalfKernels, LayerNormBackward) {
  using H = TypeParam;
  const LayerNormData<H> d;
  const std::int64_t n = d.n, c = d.c;
  // Saved statistics: the 16-bit forward's.
  auto y = nan_filled<H>(n * c), mean = nan_filled<H>(n), rstd = nan_filled<H>(n);
  BoundScratch scratch(layernorm_half_scratch_elems(c));
  layernorm_forward<H>(cview2(d.x, n, c), cview1(d.w), cview1(d.b), view2(y, n, c), view1(mean),
                       view1(rstd), d.eps);
  const auto dy = random_half<H>(n * c, 311);
  auto dx = random_half<H>(n * c, 312, -2.0, 2.0);  // all three are accumulated into
  auto dw = random_half<H>(c, 313, -10.0, 10.0), db = random_half<H>(c, 314, -10.0, 10.0);
  auto dx32 = widen(dx), dw32 = widen(dw), db32 = widen(db);
  std::vector<float> dx32_zero(n * c, 0.0f), dw32_zero(c, 0.0f), db32_zero(c, 0.0f);
  layernorm_backward<H>(cview2(d.x, n, c), cview1(d.w), cview1(mean), cview1(rstd),
                        cview2(dy, n, c), view2(dx, n, c), view1(dw), view1(db));
  const auto x32 = widen(d.x), w32 = widen(d.w), mean32 = widen(mean), rstd32 = widen(rstd);
  const auto dy32 = widen(dy);
  for (auto* out : {&dx32, &dx32_zero}) {
    const bool zero = out == &dx32_zero;
    layernorm_backward<float>(cview2(x32, n, c), cview1(w32), cview1(mean32), cview1(rstd32),
                              cview2(dy32, n, c), view2(*out, n, c), view1(zero ? dw32_zero : dw32),
                              view1(zero ? db32_zero : db32));
  }
  expect_accumulated("layernorm_backward dx", dx, dx32, dx32_zero);
  expect_accumulated("layernorm_backward dw", dw, dw32, dw32_zero);
  expect_accumulated("layernorm_backward db", db, db32, db32_zero);
  expect_rounded_bits("layernorm_backward dx", dx, dx32);
  // dw / db: summed over all rows in fp32 in the fp32 kernel's order, rounded once.
  expect_rounded_bits("layernorm_backward dw", dw, dw32);
  expect_rounded_bits("layernorm_backward db", db, db32);
}

// --- gelu --------------------------------------------------------------------------

TYPED_TEST(HalfKernels, Gelu) {
  using H = TypeParam;
  const std::int64_t n = kGeluN;
  const auto x = random_half<H>(n, 401, -6.0, 6.0), dy = random_half<H>(n, 402);
  const auto x32 = widen(x), dy32 = widen(dy);
  BoundScratch scratch(gelu_half_scratch_elems());
  auto y = nan_filled<H>(n), dx = nan_filled<H>(n);
  gelu_forward<H>(cview1(x), view1(y));
  gelu_backward<H>(cview1(x), cview1(dy), view1(dx));
  std::vector<float> y32(n), dx32(n);
  gelu_forward<float>(cview1(x32), view1(y32));
  gelu_backward<float>(cview1(x32), cview1(dy32), view1(dx32));
  expect_close("gelu_forward y", y, y32);
  expect_close("gelu_backward dx", dx, dx32);
  expect_rounded_bits("gelu_forward y", y, y32);
  expect_rounded_bits("gelu_backward dx", dx, dx32);
  // In place: y == x, dx == dy.
  auto inplace = x;
  gelu_forward<H>(cview1(inplace), view1(inplace));
  EXPECT_TRUE(same_bits(inplace, y)) << "in-place gelu_forward";
  inplace = dy;
  gelu_backward<H>(cview1(x), cview1(inplace), view1(inplace));
  EXPECT_TRUE(same_bits(inplace, dx)) << "in-place gelu_backward";
}

// --- embedding ---------------------------------------------------------------------

std::vector<TokenIndex> embedding_tokens() {
  // Half uniform over the vocabulary, half from a few ids in both vocabulary blocks,
  // so rows repeat within a call (accumulated in order) and most rows never occur.
  std::vector<TokenIndex> tok(kEmbB * kEmbT);
  const auto u = test::random_vector(tok.size(), 501, 0.0, 1.0);
  const TokenIndex common[] = {3, 7, 1100, static_cast<TokenIndex>(kEmbV - 1)};
  for (std::size_t i = 0; i < tok.size(); ++i)
    tok[i] = i % 2 ? common[i % 7 % 4] : static_cast<TokenIndex>(u[i] * (kEmbV - 1));
  return tok;
}

TYPED_TEST(HalfKernels, Embedding) {
  using H = TypeParam;
  const std::int64_t nb = kEmbB, nt = kEmbT, c = kEmbC, v = kEmbV, np = kEmbT + 5;
  const auto tok = embedding_tokens();
  const auto wte = random_half<H>(v * c, 502), wpe = random_half<H>(np * c, 503);
  auto out = nan_filled<H>(nb * nt * c);
  const auto dout = random_half<H>(nb * nt * c, 504);
  const auto dwte0 = random_half<H>(v * c, 505, -3.0, 3.0);
  const auto dwpe0 = random_half<H>(np * c, 506, -3.0, 3.0);
  auto dwte = dwte0, dwpe = dwpe0;
  embedding_forward<H>(cview2(tok, nb, nt), cview2(wte, v, c), cview2(wpe, np, c),
                       view3(out, nb, nt, c));  // needs no scratch
  {
    BoundScratch scratch(embedding_half_scratch_elems(v, c));
    embedding_backward<H>(cview2(tok, nb, nt), cview3(dout, nb, nt, c), view2(dwte, v, c),
                          view2(dwpe, np, c));
  }
  const auto wte32 = widen(wte), wpe32 = widen(wpe), dout32 = widen(dout);
  std::vector<float> out32(nb * nt * c), dwte32 = widen(dwte0), dwpe32 = widen(dwpe0);
  std::vector<float> dwte32_zero(v * c, 0.0f), dwpe32_zero(np * c, 0.0f);
  embedding_forward<float>(cview2(tok, nb, nt), cview2(wte32, v, c), cview2(wpe32, np, c),
                           view3(out32, nb, nt, c));
  embedding_backward<float>(cview2(tok, nb, nt), cview3(dout32, nb, nt, c), view2(dwte32, v, c),
                            view2(dwpe32, np, c));
  embedding_backward<float>(cview2(tok, nb, nt), cview3(dout32, nb, nt, c),
                            view2(dwte32_zero, v, c), view2(dwpe32_zero, np, c));
  expect_close("embedding_forward out", out, out32);
  expect_accumulated("embedding_backward dwte", dwte, dwte32, dwte32_zero);
  expect_accumulated("embedding_backward dwpe", dwpe, dwpe32, dwpe32_zero);
  expect_rounded_bits("embedding_forward out", out, out32);
  expect_rounded_bits("embedding_backward dwte", dwte, dwte32);  // rows not in tokens unchanged
  expect_rounded_bits("embedding_backward dwpe", dwpe, dwpe32);
}

// --- attention ---------------------------------------------------------------------

TYPED_TEST(HalfKernels, Attention) {
  using H = TypeParam;
  const AttentionShape s = kAtt;
  const std::int64_t B = s.batch, T = s.seq_len, C = s.channels;
  const std::int64_t n_saved = attention_saved_elems(s), n_ws = attention_workspace_elems(s);
  const auto qkv = random_half<H>(B * T * 3 * C, 601, -2.0, 2.0);
  auto saved = nan_filled<H>(n_saved), ws = nan_filled<H>(n_ws);
  auto out = nan_filled<H>(B * T * C), dqkv = nan_filled<H>(B * T * 3 * C);
  const auto dout = random_half<H>(B * T * C, 602);
  {
    BoundScratch scratch(attention_half_scratch_elems(s));
    attention_forward<H>(s, cview3(qkv, B, T, 3 * C), view1(saved), view1(ws), view3(out, B, T, C));
    attention_backward<H>(s, cview3(dout, B, T, C), cview1(saved), view1(ws),
                          view3(dqkv, B, T, 3 * C));
  }
  const auto qkv32 = widen(qkv), dout32 = widen(dout);
  std::vector<float> saved32(n_saved), ws32(n_ws), out32(B * T * C), dqkv32(B * T * 3 * C);
  attention_forward<float>(s, cview3(qkv32, B, T, 3 * C), view1(saved32), view1(ws32),
                           view3(out32, B, T, C));
  expect_close("attention_forward out", out, out32);
  const std::int64_t qkv_elems = 3 * B * T * C;  // q | k | v, then the probabilities
  const std::vector<H> probs(saved.begin() + qkv_elems, saved.end());
  expect_close("attention_forward probs", probs,
               std::vector<float>(saved32.begin() + qkv_elems, saved32.end()));
  expect_rounded_bits("attention_forward saved q|k|v",
                      std::vector<H>(saved.begin(), saved.begin() + qkv_elems),
                      std::vector<float>(saved32.begin(), saved32.begin() + qkv_elems));
  // Backward from the 16-bit saved state, given to both.
  const auto saved16_32 = widen(saved);
  attention_backward<float>(s, cview3(dout32, B, T, C), cview1(saved16_32), view1(ws32),
                            view3(dqkv32, B, T, 3 * C));
  expect_close("attention_backward dqkv", dqkv, dqkv32);
}

// --- cross entropy -----------------------------------------------------------------

TYPED_TEST(HalfKernels, CrossEntropy) {
  using H = TypeParam;
  const std::int64_t n = kRows, v = kVocab;
  const auto logits = random_half<H>(n * v, 701, -4.0, 4.0);
  std::vector<TokenIndex> tgt(n);
  const auto u = test::random_vector(n, 702, 0.0, 1.0);
  for (std::int64_t i = 0; i < n; ++i)
    tgt[i] = i % 11 == 5 ? -1 : static_cast<TokenIndex>(u[i] * (v - 1));
  const H scale(1.0f / static_cast<float>(n));
  BoundScratch scratch(cross_entropy_half_scratch_elems(v));
  auto losses = nan_filled<H>(n), dlogits = nan_filled<H>(n * v);
  cross_entropy_forward<H>(cview2(logits, n, v), cview1(tgt), view1(losses));
  cross_entropy_backward<H>(cview2(logits, n, v), cview1(tgt), scale, view2(dlogits, n, v));
  const auto logits32 = widen(logits);
  std::vector<float> losses32(n), dlogits32(n * v);
  cross_entropy_forward<float>(cview2(logits32, n, v), cview1(tgt), view1(losses32));
  cross_entropy_backward<float>(cview2(logits32, n, v), cview1(tgt), to_float(scale),
                                view2(dlogits32, n, v));
  expect_close("cross_entropy_forward losses", losses, losses32);
  expect_close("cross_entropy_backward dlogits", dlogits, dlogits32);
  expect_rounded_bits("cross_entropy_forward losses", losses, losses32);
  expect_rounded_bits("cross_entropy_backward dlogits", dlogits, dlogits32);
  auto inplace = logits;  // dlogits == logits, as the GPT head does
  cross_entropy_backward<H>(cview2(inplace, n, v), cview1(tgt), scale, view2(inplace, n, v));
  EXPECT_TRUE(same_bits(inplace, dlogits)) << "in-place cross_entropy_backward";
}

// --- elementwise ------------------------------------------------------------------

TYPED_TEST(HalfKernels, Elementwise) {
  using H = TypeParam;
  const std::int64_t n = 3 * 8192 + 77;  // several of elementwise.cpp's chunks
  const auto x = random_half<H>(n, 801), y0 = random_half<H>(n, 802, -4.0, 4.0);
  half_scratch_bind(nullptr, 0);  // none of them uses scratch
  auto y = nan_filled<H>(n);
  copy<H>(cview1(x), view1(y));
  EXPECT_TRUE(same_bits(y, x)) << "copy";
  y = y0;
  accumulate<H>(cview1(x), view1(y));
  std::vector<float> y32 = widen(y0), y32_zero(n, 0.0f);
  const auto x32 = widen(x);
  accumulate<float>(cview1(x32), view1(y32));
  accumulate<float>(cview1(x32), view1(y32_zero));
  expect_accumulated("accumulate y", y, y32, y32_zero);
  expect_rounded_bits("accumulate y", y, y32);
  fill<H>(view1(y), H(-0.3f));
  for (const H& e : y) ASSERT_EQ(e.bits, H(-0.3f).bits);
  EXPECT_EQ(elementwise_half_scratch_elems(), 0);
}

// --- conv2d ------------------------------------------------------------------------
// f16, and bf16 without native bf16: im2col on fp32 copies of one sample at a time;
// bf16 with native bf16: oneDNN on the bf16 buffers (fp32 accumulation, dw / db
// accumulated in fp32 and rounded once). The fp32 reference is conv2d<float>
// (oneDNN fp32) on the same rounded values.

template <class H>
struct ConvData {
  Conv2dShape s = kConv;
  std::int64_t xn = kConv.batch * kConv.in_channels * kConv.height * kConv.width;
  std::int64_t yn = kConv.batch * kConv.out_channels * kConv.out_h() * kConv.out_w();
  std::int64_t wn = kConv.out_channels * kConv.col_rows();
  std::vector<H> x = random_half<H>(xn, 1001), w = random_half<H>(wn, 1002, -0.3, 0.3);
  std::vector<H> b = random_half<H>(kConv.out_channels, 1003), dy = random_half<H>(yn, 1004);
  CView4<H> x4() const { return cview4(x, s.batch, s.in_channels, s.height, s.width); }
  CView4<H> w4() const { return cview4(w, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w); }
};

template <class T>
View4<T> y_view(std::vector<T>& y, const Conv2dShape& s) {
  return view4(y, s.batch, s.out_channels, s.out_h(), s.out_w());
}

TYPED_TEST(HalfKernels, Conv2dForward) {
  using H = TypeParam;
  const ConvData<H> d;
  const Conv2dShape s = d.s;
  const auto x32 = widen(d.x), w32 = widen(d.w), b32 = widen(d.b);
  for (bool bias : {true, false}) {
    auto y = nan_filled<H>(d.yn);
    std::vector<H> ws = nan_filled<H>(conv2d_workspace_elems<H>(s));
    {
      BoundScratch scratch(conv2d_half_scratch_elems(s));
      conv2d_forward<H>(s, d.x4(), d.w4(), bias ? cview1(d.b) : CView1<H>(), view1(ws), y_view(y, s));
    }
    std::vector<float> y32(d.yn, NAN), ws32(conv2d_workspace_elems<float>(s));
    conv2d_forward<float>(s, cview4(x32, s.batch, s.in_channels, s.height, s.width),
                          cview4(w32, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
                          bias ? cview1(b32) : CView1<float>(), view1(ws32), y_view(y32, s));
    expect_close(std::string("conv2d_forward") + (bias ? " y" : " no-bias y"), y, y32);
  }
}

TYPED_TEST(HalfKernels, Conv2dBackward) {
  using H = TypeParam;
  const ConvData<H> d;
  const Conv2dShape s = d.s;
  // Pre-filled parameter gradients of the size of one call's contribution.
  const auto dw0 = random_half<H>(d.wn, 1005, -8.0, 8.0), db0 = random_half<H>(s.out_channels, 1006, -8.0, 8.0);
  const auto x32 = widen(d.x), w32 = widen(d.w), dy32 = widen(d.dy);
  const auto x4 = cview4(x32, s.batch, s.in_channels, s.height, s.width);
  const auto w4 = cview4(w32, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w);
  const auto dy4 = cview4(dy32, s.batch, s.out_channels, s.out_h(), s.out_w());
  std::vector<float> ws32(conv2d_workspace_elems<float>(s));
  for (bool bias : {true, false})
    for (bool with_dx : {true, false}) {
      std::vector<H> dx = nan_filled<H>(d.xn), dw = dw0, db = db0;
      std::vector<H> ws = nan_filled<H>(conv2d_workspace_elems<H>(s));
      {
        BoundScratch scratch(conv2d_half_scratch_elems(s));
        conv2d_backward<H>(s, d.x4(), d.w4(), cview4(d.dy, s.batch, s.out_channels, s.out_h(), s.out_w()),
                           view1(ws), with_dx ? view4(dx, s.batch, s.in_channels, s.height, s.width) : View4<H>(),
                           view4(dw, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
                           bias ? view1(db) : View1<H>());
      }
      std::vector<float> dx32(d.xn, NAN), dw32 = widen(dw0), db32 = widen(db0);
      std::vector<float> dw32_zero(d.wn, 0.0f), db32_zero(s.out_channels, 0.0f);
      conv2d_backward<float>(s, x4, w4, dy4, view1(ws32),
                             with_dx ? view4(dx32, s.batch, s.in_channels, s.height, s.width) : View4<float>(),
                             view4(dw32, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
                             bias ? view1(db32) : View1<float>());
      conv2d_backward<float>(s, x4, w4, dy4, view1(ws32), View4<float>(),
                             view4(dw32_zero, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
                             bias ? view1(db32_zero) : View1<float>());
      const std::string label =
          std::string("conv2d_backward") + (bias ? "" : " empty-db") + (with_dx ? "" : " empty-dx");
      if (with_dx)
        expect_close(label + " dx", dx, dx32);
      else
        EXPECT_TRUE(same_bits(dx, nan_filled<H>(d.xn))) << "empty dx: buffer written";
      expect_accumulated(label + " dw", dw, dw32, dw32_zero);
      if (bias)
        expect_accumulated(label + " db", db, db32, db32_zero);
      else
        EXPECT_TRUE(same_bits(db, db0)) << "empty db: buffer written";
    }
}

// dw and db gather the whole batch in fp32 and are rounded once: a batch of
// identical samples whose per-sample contributions are each below half an ulp of
// the pre-filled dw / db still moves them, as it would in fp32 (per-sample
// rounding would leave them unchanged).
TYPED_TEST(HalfKernels, Conv2dWeightGradsRoundedOnce) {
  using H = TypeParam;
  const Conv2dShape s{64, 1, 3, 3, 1, 3, 3, 1, 0};  // one output pixel per sample
  const std::vector<H> x(9 * 64, H(1.0f)), w(9, H(1.0f));
  const std::vector<H> dy(64, H(1.0f / 512));  // each sample adds 2^-9 to every dw / db
  std::vector<H> dw(9, H(1.0f)), db(1, H(1.0f));  // bf16 ulp at 1 is 2^-7, f16 2^-10
  std::vector<H> ws = nan_filled<H>(conv2d_workspace_elems<H>(s));
  {
    BoundScratch scratch(conv2d_half_scratch_elems(s));
    conv2d_backward<H>(s, cview4(x, 64, 1, 3, 3), cview4(w, 1, 1, 3, 3), cview4(dy, 64, 1, 1, 1), view1(ws),
                       View4<H>(), view4(dw, 1, 1, 3, 3), view1(db));
  }
  for (const H& v : dw) EXPECT_EQ(to_float(v), 1.125f) << type_name<H>();  // 1 + 64 * 2^-9, exact in both
  EXPECT_EQ(to_float(db[0]), 1.125f) << type_name<H>();
}

// --- direct 16-bit loops: vector tails and non-finite values ---------------------

// Every length that leaves a tail after the 16-lane sums, the 16-element max blocks
// and the 32-element (AVX-512, 16-bit) vectors: outputs equal the fp32 kernel's on
// the same 16-bit inputs, rounded once, bit for bit.
TYPED_TEST(HalfKernels, DirectKernelsAllTailLengths) {
  using H = TypeParam;
  half_scratch_bind(nullptr, 0);  // only the cross entropy backward uses scratch
  for (std::int64_t n = 0; n <= 80; ++n) {
    const std::string at = " n=" + std::to_string(n);
    const auto x = random_half<H>(n, 1001 + n, -6.0, 6.0), dy = random_half<H>(n, 1101 + n);
    const auto x32 = widen(x), dy32 = widen(dy);
    auto y = nan_filled<H>(n), dx = nan_filled<H>(n);
    std::vector<float> y32(n), dx32(n);
    gelu_forward<H>(cview1(x), view1(y));
    gelu_backward<H>(cview1(x), cview1(dy), view1(dx));
    gelu_forward<float>(cview1(x32), view1(y32));
    gelu_backward<float>(cview1(x32), cview1(dy32), view1(dx32));
    expect_rounded_bits("gelu_forward y" + at, y, y32);
    expect_rounded_bits("gelu_backward dx" + at, dx, dx32);
    auto acc = dy;
    auto acc32 = dy32;
    accumulate<H>(cview1(x), view1(acc));
    accumulate<float>(cview1(x32), view1(acc32));
    expect_rounded_bits("accumulate y" + at, acc, acc32);
  }
  for (std::int64_t c : {1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 97, 129}) {
    const std::string at = " c=" + std::to_string(c);
    const std::int64_t n = 5;
    const auto x = random_half<H>(n * c, 1201 + c, -1.5, 2.5);
    const auto w = random_half<H>(c, 1301 + c, 0.5, 1.5), b = random_half<H>(c, 1401 + c, -0.5, 0.5);
    const H eps(1e-5f);
    auto y = nan_filled<H>(n * c), mean = nan_filled<H>(n), rstd = nan_filled<H>(n);
    layernorm_forward<H>(cview2(x, n, c), cview1(w), cview1(b), view2(y, n, c), view1(mean),
                         view1(rstd), eps);
    const auto x32 = widen(x), w32 = widen(w), b32 = widen(b);
    std::vector<float> y32(n * c), mean32(n), rstd32(n);
    layernorm_forward<float>(cview2(x32, n, c), cview1(w32), cview1(b32), view2(y32, n, c),
                             view1(mean32), view1(rstd32), to_float(eps));
    expect_rounded_bits("layernorm_forward y" + at, y, y32);
    expect_rounded_bits("layernorm_forward mean" + at, mean, mean32);
    expect_rounded_bits("layernorm_forward rstd" + at, rstd, rstd32);
    const auto dy = random_half<H>(n * c, 1501 + c);
    auto dx = random_half<H>(n * c, 1601 + c), dw = random_half<H>(c, 1701 + c),
         db = random_half<H>(c, 1801 + c);
    auto dx32 = widen(dx), dw32 = widen(dw), db32 = widen(db);
    const auto dy32 = widen(dy), m32 = widen(mean), r32 = widen(rstd);
    layernorm_backward<H>(cview2(x, n, c), cview1(w), cview1(mean), cview1(rstd), cview2(dy, n, c),
                          view2(dx, n, c), view1(dw), view1(db));
    layernorm_backward<float>(cview2(x32, n, c), cview1(w32), cview1(m32), cview1(r32),
                              cview2(dy32, n, c), view2(dx32, n, c), view1(dw32), view1(db32));
    expect_rounded_bits("layernorm_backward dx" + at, dx, dx32);
    expect_rounded_bits("layernorm_backward dw" + at, dw, dw32);
    expect_rounded_bits("layernorm_backward db" + at, db, db32);
  }
  for (std::int64_t v : {1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 129}) {
    const std::string at = " v=" + std::to_string(v);
    const std::int64_t n = 4;
    const auto logits = random_half<H>(n * v, 1901 + v, -4.0, 4.0);
    // The last class, the first, one ignored row, one in between.
    const std::vector<TokenIndex> tgt = {static_cast<TokenIndex>(v - 1), 0, -1,
                                         static_cast<TokenIndex>(v / 2)};
    const H scale(0.25f);
    auto losses = nan_filled<H>(n), dl = nan_filled<H>(n * v);
    BoundScratch scratch(cross_entropy_half_scratch_elems(v));
    cross_entropy_forward<H>(cview2(logits, n, v), cview1(tgt), view1(losses));
    cross_entropy_backward<H>(cview2(logits, n, v), cview1(tgt), scale, view2(dl, n, v));
    const auto l32 = widen(logits);
    std::vector<float> losses32(n), dl32(n * v);
    cross_entropy_forward<float>(cview2(l32, n, v), cview1(tgt), view1(losses32));
    cross_entropy_backward<float>(cview2(l32, n, v), cview1(tgt), to_float(scale),
                                  view2(dl32, n, v));
    expect_rounded_bits("cross_entropy_forward losses" + at, losses, losses32);
    expect_rounded_bits("cross_entropy_backward dlogits" + at, dl, dl32);
    auto inplace = logits;
    cross_entropy_backward<H>(cview2(inplace, n, v), cview1(tgt), scale, view2(inplace, n, v));
    EXPECT_TRUE(same_bits(inplace, dl)) << "in-place cross_entropy_backward" << at;
  }
  for (std::int64_t c : {1, 7, 17, 33, 65, 130}) {
    const std::string at = " c=" + std::to_string(c);
    const std::int64_t nb = 3, nt = 5, v = 11;
    std::vector<TokenIndex> tok(nb * nt);
    for (std::size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<TokenIndex>(i * 7 % 4);
    const auto wte = random_half<H>(v * c, 2001 + c), wpe = random_half<H>(nt * c, 2101 + c);
    const auto dout = random_half<H>(nb * nt * c, 2201 + c);
    auto out = nan_filled<H>(nb * nt * c), dwpe = random_half<H>(nt * c, 2301 + c);
    auto dwte = random_half<H>(v * c, 2401 + c);
    const auto wte32 = widen(wte), wpe32 = widen(wpe), dout32 = widen(dout);
    std::vector<float> out32(nb * nt * c);
    auto dwte32 = widen(dwte), dwpe32 = widen(dwpe);
    embedding_forward<H>(cview2(tok, nb, nt), cview2(wte, v, c), cview2(wpe, nt, c),
                         view3(out, nb, nt, c));
    embedding_forward<float>(cview2(tok, nb, nt), cview2(wte32, v, c), cview2(wpe32, nt, c),
                             view3(out32, nb, nt, c));
    {
      BoundScratch scratch(embedding_half_scratch_elems(v, c));
      embedding_backward<H>(cview2(tok, nb, nt), cview3(dout, nb, nt, c), view2(dwte, v, c),
                            view2(dwpe, nt, c));
    }
    embedding_backward<float>(cview2(tok, nb, nt), cview3(dout32, nb, nt, c),
                              view2(dwte32, v, c), view2(dwpe32, nt, c));
    expect_rounded_bits("embedding_forward out" + at, out, out32);
    expect_rounded_bits("embedding_backward dwte" + at, dwte, dwte32);
    expect_rounded_bits("embedding_backward dwpe" + at, dwpe, dwpe32);
  }
}

// `v` with NaN, +-inf, the largest finite 16-bit value (both signs) and values that
// round to +-inf in 16 bits planted at every `every`-th element from `first`.
template <class H>
std::vector<H> with_non_finite(std::vector<H> v, std::size_t first, std::size_t every) {
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            max_finite<H>(),
                            -max_finite<H>(),
                            -std::numeric_limits<float>::quiet_NaN()};
  std::size_t k = 0;
  for (std::size_t i = first; i < v.size(); i += every) v[i] = H(specials[k++ % 6]);
  return v;
}

// NaN and +-inf propagate as in the fp32 kernel, and results beyond the 16-bit range
// round to +-inf, in the vector body and in the tails.
TYPED_TEST(HalfKernels, DirectKernelsNonFinite) {
  using H = TypeParam;
  half_scratch_bind(nullptr, 0);
  {
    const std::int64_t n = 1000 + 37;
    const auto x = with_non_finite(random_half<H>(n, 2501, -6.0, 6.0), 3, 29);
    const auto dy = with_non_finite(random_half<H>(n, 2502), 5, 31);
    const auto x32 = widen(x), dy32 = widen(dy);
    auto y = nan_filled<H>(n), dx = nan_filled<H>(n);
    std::vector<float> y32(n), dx32(n);
    gelu_forward<H>(cview1(x), view1(y));
    gelu_backward<H>(cview1(x), cview1(dy), view1(dx));
    gelu_forward<float>(cview1(x32), view1(y32));
    gelu_backward<float>(cview1(x32), cview1(dy32), view1(dx32));
    expect_rounded_bits_or_nan("gelu_forward y", y, y32);
    expect_rounded_bits_or_nan("gelu_backward dx", dx, dx32);
    // x + x overflows the 16-bit range where x = +-max (rounds to +-inf).
    auto acc = x;
    auto acc32 = x32;
    accumulate<H>(cview1(x), view1(acc));
    accumulate<float>(cview1(x32), view1(acc32));
    expect_rounded_bits_or_nan("accumulate y", acc, acc32);
    EXPECT_EQ(acc[3 + 3 * 29].bits, H(std::numeric_limits<float>::infinity()).bits)
        << "max + max must round to +inf";
  }
  {
    // Rows 1, 4, 6 hold one special each; the others are finite, with w = +-max so
    // that y overflows the 16-bit range.
    const std::int64_t n = 8, c = 37;
    auto x = random_half<H>(n * c, 2601, -1.5, 2.5);
    x[1 * c + 36] = H(std::numeric_limits<float>::quiet_NaN());
    x[4 * c + 0] = H(std::numeric_limits<float>::infinity());
    x[6 * c + 20] = H(-std::numeric_limits<float>::infinity());
    auto w = random_half<H>(c, 2602, 0.5, 1.5);
    w[3] = H(max_finite<H>());
    w[34] = H(-max_finite<H>());
    const auto b = random_half<H>(c, 2603, -0.5, 0.5);
    const H eps(1e-5f);
    auto y = nan_filled<H>(n * c), mean = nan_filled<H>(n), rstd = nan_filled<H>(n);
    layernorm_forward<H>(cview2(x, n, c), cview1(w), cview1(b), view2(y, n, c), view1(mean),
                         view1(rstd), eps);
    const auto x32 = widen(x), w32 = widen(w), b32 = widen(b);
    std::vector<float> y32(n * c), mean32(n), rstd32(n);
    layernorm_forward<float>(cview2(x32, n, c), cview1(w32), cview1(b32), view2(y32, n, c),
                             view1(mean32), view1(rstd32), to_float(eps));
    expect_rounded_bits_or_nan("layernorm_forward y", y, y32);
    expect_rounded_bits_or_nan("layernorm_forward mean", mean, mean32);
    expect_rounded_bits_or_nan("layernorm_forward rstd", rstd, rstd32);
    // Backward on finite x (its own 16-bit statistics) with specials in dy, so that
    // dx rows and dw / db columns without a special stay finite.
    const auto xf = random_half<H>(n * c, 2608, -1.5, 2.5), wf = random_half<H>(c, 2609, 0.5, 1.5);
    layernorm_forward<H>(cview2(xf, n, c), cview1(wf), cview1(b), view2(y, n, c), view1(mean),
                         view1(rstd), eps);
    const auto dy = with_non_finite(random_half<H>(n * c, 2604), 50, 97);
    auto dx = random_half<H>(n * c, 2605), dw = random_half<H>(c, 2606), db = random_half<H>(c, 2607);
    auto dx32 = widen(dx), dw32 = widen(dw), db32 = widen(db);
    const auto dy32 = widen(dy), m32 = widen(mean), r32 = widen(rstd);
    const auto xf32 = widen(xf), wf32 = widen(wf);
    layernorm_backward<H>(cview2(xf, n, c), cview1(wf), cview1(mean), cview1(rstd), cview2(dy, n, c),
                          view2(dx, n, c), view1(dw), view1(db));
    layernorm_backward<float>(cview2(xf32, n, c), cview1(wf32), cview1(m32), cview1(r32),
                              cview2(dy32, n, c), view2(dx32, n, c), view1(dw32), view1(db32));
    expect_rounded_bits_or_nan("layernorm_backward dx", dx, dx32);
    expect_rounded_bits_or_nan("layernorm_backward dw", dw, dw32);
    expect_rounded_bits_or_nan("layernorm_backward db", db, db32);
  }
  {
    // Row 0: a NaN logit; row 1: a +inf logit; row 2: -inf logits, one the target's;
    // row 3: finite (near the 16-bit maximum: x - max stays finite).
    const std::int64_t n = 4, v = 41;
    auto logits = random_half<H>(n * v, 2701, -4.0, 4.0);
    logits[0 * v + 39] = H(std::numeric_limits<float>::quiet_NaN());
    logits[1 * v + 17] = H(std::numeric_limits<float>::infinity());
    logits[2 * v + 2] = H(-std::numeric_limits<float>::infinity());
    logits[2 * v + 40] = H(-std::numeric_limits<float>::infinity());
    for (std::int64_t j = 0; j < v; j += 5) logits[3 * v + j] = H(max_finite<H>());
    const std::vector<TokenIndex> tgt = {3, 17, 40, 5};
    const H scale(2.0f);
    auto losses = nan_filled<H>(n), dl = nan_filled<H>(n * v);
    BoundScratch scratch(cross_entropy_half_scratch_elems(v));
    cross_entropy_forward<H>(cview2(logits, n, v), cview1(tgt), view1(losses));
    cross_entropy_backward<H>(cview2(logits, n, v), cview1(tgt), scale, view2(dl, n, v));
    const auto l32 = widen(logits);
    std::vector<float> losses32(n), dl32(n * v);
    cross_entropy_forward<float>(cview2(l32, n, v), cview1(tgt), view1(losses32));
    cross_entropy_backward<float>(cview2(l32, n, v), cview1(tgt), to_float(scale),
                                  view2(dl32, n, v));
    expect_rounded_bits_or_nan("cross_entropy_forward losses", losses, losses32);
    expect_rounded_bits_or_nan("cross_entropy_backward dlogits", dl, dl32);
    EXPECT_TRUE(std::isnan(to_float(losses[0]))) << "a NaN logit makes the loss NaN";
    EXPECT_EQ(to_float(losses[2]), std::numeric_limits<float>::infinity())
        << "a -inf target logit gives an infinite loss";
  }
}

// --- scratch arena ------------------------------------------------------------------

TEST(HalfScratch, BindSizeAndErrors) {
  std::vector<float> buf(10);
  half_scratch_bind(buf.data(), buf.size());
  EXPECT_EQ(half_scratch_size(), 10u);
  EXPECT_EQ(half_scratch(10, "test"), buf.data());
  EXPECT_THROW(half_scratch(11, "test"), Error);
  half_scratch_bind(nullptr, 0);
  EXPECT_EQ(half_scratch_size(), 0u);
  EXPECT_THROW(half_scratch(1, "test"), Error);
  EXPECT_THROW(half_scratch_bind(nullptr, 5), Error);
}

// The sizes depend on the tiles, not on the number of rows, and are 0 for empty calls.
TEST(HalfScratch, SizesAreBoundedByTiles) {
  EXPECT_EQ(linear_half_scratch_elems(kLinN, kLinK, kLinM),
            linear_half_scratch_elems(std::int64_t{1} << 24, kLinK, kLinM));
  EXPECT_EQ(gemm_half_scratch_elems(kGemmM, kGemmN, kGemmK),
            gemm_half_scratch_elems(std::int64_t{1} << 24, std::int64_t{1} << 24, kGemmK));
  AttentionShape big = kAtt;
  big.batch = 1000;
  EXPECT_EQ(attention_half_scratch_elems(kAtt), attention_half_scratch_elems(big));
  EXPECT_EQ(linear_half_scratch_elems(0, kLinK, kLinM), 0);
  // GPT-2 small shapes stay small: attention at T = 1024 is the largest (10 MB per
  // pair slot: one slot per Kokkos host thread, attention.hpp).
  const AttentionShape gpt2{8, 1024, 768, 12};
  EXPECT_EQ(attention_half_scratch_elems(gpt2),
            attention_pair_slots(gpt2) * (7 * 1024 * 64 + 2 * 1024 * 1024));
  EXPECT_LE(cross_entropy_half_scratch_elems(50257), 2 * 50257);
  EXPECT_LE(linear_half_scratch_elems(8192, 3072, 768), 2 * 1024 * 1024);
}

// Each 16-bit kernel needs exactly its sizing function's scratch for a call that
// fills its tiles: one float less throws (and writes nothing), as does no scratch.
TYPED_TEST(HalfKernels, ScratchSizesAreExactAndMissingScratchThrows) {
  using H = TypeParam;
  {
    const std::int64_t m = kGemmM, n = kGemmN, k = kGemmK;
    const auto a = random_half<H>(m * k, 901), b = random_half<H>(k * n, 902);
    auto c = random_half<H>(m * n, 903);
    const auto run = [&] {
      gemm<H>(Trans::N, Trans::N, H(1.0f), cview2(a, m, k), cview2(b, k, n), H(1.0f), view2(c, m, n));
    };
    if (gemm_on_tiles<H>()) {
      expect_scratch_exact("gemm", gemm_half_scratch_elems(m, n, k), run, [&] { return bits_of(c); });
    } else {
      expect_runs_without_scratch("gemm", run, [&] { return bits_of(c); });
    }
  }
  {
    const std::int64_t n = kLinN, k = kLinK, m = kLinM;
    const auto x = random_half<H>(n * k, 911), w = random_half<H>(m * k, 912);
    const auto bias = random_half<H>(m, 913), dy = random_half<H>(n * m, 914);
    auto y = random_half<H>(n * m, 915), dx = random_half<H>(n * k, 916);
    auto dw = random_half<H>(m * k, 917), db = random_half<H>(m, 918);
    const std::int64_t elems = linear_half_scratch_elems(n, k, m);
    const auto forward = [&] {
      linear_forward<H>(cview2(x, n, k), cview2(w, m, k), cview1(bias), view2(y, n, m), true);
    };
    const auto backward = [&] {
      linear_backward<H>(cview2(x, n, k), cview2(w, m, k), cview2(dy, n, m), view2(dx, n, k),
                         view2(dw, m, k), view1(db));
    };
    const auto backward_bits = [&] {
      auto all = bits_of(dx), more = bits_of(dw), last = bits_of(db);
      all.insert(all.end(), more.begin(), more.end());
      all.insert(all.end(), last.begin(), last.end());
      return all;
    };
    if (gemm_on_tiles<H>()) {
      expect_scratch_exact("linear_forward", elems, forward, [&] { return bits_of(y); });
      expect_scratch_exact("linear_backward", elems, backward, backward_bits);
    } else {
      expect_runs_without_scratch("linear_forward", forward, [&] { return bits_of(y); });
      expect_runs_without_scratch("linear_backward", backward, backward_bits);
    }
  }
  {
    const LayerNormData<H> d;
    const std::int64_t n = d.n, c = d.c;
    const auto mean = random_half<H>(n, 921), rstd = random_half<H>(n, 922, 0.5, 2.0);
    const auto dy = random_half<H>(n * c, 923);
    auto dx = random_half<H>(n * c, 924), dw = random_half<H>(c, 925), db = random_half<H>(c, 926);
    EXPECT_EQ(layernorm_half_scratch_elems(c), 0);
    expect_runs_without_scratch(
        "layernorm_backward",
        [&] {
          layernorm_backward<H>(cview2(d.x, n, c), cview1(d.w), cview1(mean), cview1(rstd),
                                cview2(dy, n, c), view2(dx, n, c), view1(dw), view1(db));
        },
        [&] { return bits_of(dx); });
  }
  {
    const auto x = random_half<H>(kGeluN, 931), dy = random_half<H>(kGeluN, 932);
    auto dx = random_half<H>(kGeluN, 933);
    EXPECT_EQ(gelu_half_scratch_elems(), 0);
    expect_runs_without_scratch(
        "gelu_backward", [&] { gelu_backward<H>(cview1(x), cview1(dy), view1(dx)); },
        [&] { return bits_of(dx); });
  }
  {
    const std::int64_t nb = kEmbB, nt = kEmbT, c = kEmbC, v = kEmbV;
    const auto tok = embedding_tokens();
    const auto dout = random_half<H>(nb * nt * c, 941);
    auto dwte = random_half<H>(v * c, 942), dwpe = random_half<H>(nt * c, 943);
    expect_scratch_exact(
        "embedding_backward", embedding_half_scratch_elems(v, c),
        [&] {
          embedding_backward<H>(cview2(tok, nb, nt), cview3(dout, nb, nt, c), view2(dwte, v, c),
                                view2(dwpe, nt, c));
        },
        [&] { return bits_of(dwte); });
  }
  {
    const AttentionShape s = kAtt;
    const std::int64_t B = s.batch, T = s.seq_len, C = s.channels;
    const auto qkv = random_half<H>(B * T * 3 * C, 951);
    auto saved = random_half<H>(attention_saved_elems(s), 952);
    auto ws = random_half<H>(attention_workspace_elems(s), 953);
    auto out = random_half<H>(B * T * C, 954), dqkv = random_half<H>(B * T * 3 * C, 955);
    const std::int64_t elems = attention_half_scratch_elems(s);
    expect_scratch_exact(
        "attention_forward", elems,
        [&] {
          attention_forward<H>(s, cview3(qkv, B, T, 3 * C), view1(saved), view1(ws),
                               view3(out, B, T, C));
        },
        [&] { return bits_of(out); });
    expect_scratch_exact(
        "attention_backward", elems,
        [&] {
          attention_backward<H>(s, cview3(out, B, T, C), cview1(saved), view1(ws),
                                view3(dqkv, B, T, 3 * C));
        },
        [&] { return bits_of(dqkv); });
  }
  {
    const std::int64_t n = kRows, v = kVocab;
    const auto logits = random_half<H>(n * v, 961);
    const std::vector<TokenIndex> tgt(n, 1);
    auto losses = random_half<H>(n, 962), dlogits = random_half<H>(n * v, 963);
    expect_runs_without_scratch(
        "cross_entropy_forward",
        [&] { cross_entropy_forward<H>(cview2(logits, n, v), cview1(tgt), view1(losses)); },
        [&] { return bits_of(losses); });
    EXPECT_EQ(cross_entropy_half_scratch_elems(v), v);
    expect_scratch_exact(
        "cross_entropy_backward", cross_entropy_half_scratch_elems(v),
        [&] {
          cross_entropy_backward<H>(cview2(logits, n, v), cview1(tgt), H(1.0f),
                                    view2(dlogits, n, v));
        },
        [&] { return bits_of(dlogits); });
  }
  {
    const ConvData<H> d;
    const Conv2dShape s = d.s;
    auto y = random_half<H>(d.yn, 971), dx = random_half<H>(d.xn, 972);
    auto dw = random_half<H>(d.wn, 973), db = random_half<H>(s.out_channels, 974);
    std::vector<H> ws(conv2d_workspace_elems<H>(s));
    const auto forward = [&] {
      conv2d_forward<H>(s, d.x4(), d.w4(), cview1(d.b), view1(ws), y_view(y, s));
    };
    const auto backward = [&] {
      conv2d_backward<H>(s, d.x4(), d.w4(), cview4(d.dy, s.batch, s.out_channels, s.out_h(), s.out_w()),
                         view1(ws), view4(dx, s.batch, s.in_channels, s.height, s.width),
                         view4(dw, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w), view1(db));
    };
    const auto backward_bits = [&] {
      auto all = bits_of(dx), more = bits_of(dw), last = bits_of(db);
      all.insert(all.end(), more.begin(), more.end());
      all.insert(all.end(), last.begin(), last.end());
      return all;
    };
    const std::int64_t elems = conv2d_half_scratch_elems(s);
    if (gemm_on_tiles<H>()) {
      EXPECT_EQ(conv2d_workspace_elems<H>(s), 0);
      expect_scratch_exact("conv2d_forward", elems, forward, [&] { return bits_of(y); });
      expect_scratch_exact("conv2d_backward", elems, backward, backward_bits);
    } else {
      EXPECT_GT(conv2d_workspace_elems<H>(s), 0);  // oneDNN's scratchpad and the fp32 dw / db
      expect_runs_without_scratch("conv2d_forward", forward, [&] { return bits_of(y); });
      expect_runs_without_scratch("conv2d_backward", backward, backward_bits);
    }
  }
}

}  // namespace
}  // namespace shardtrain
