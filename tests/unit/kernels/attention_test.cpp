// This file is long because its reference, gradient, mask, pair and 16-bit path cases share one set of helpers.
// Tests attention_forward / attention_backward: forward output and saved
// probabilities against a naive per-(b,h,t) causal softmax attention (double and
// float); masked probabilities exactly 0; the documented layout of `saved`;
// float64 central-difference checks of dqkv for (B,T,C,H) = (2,5,6,2) and two
// shapes with hd != T; dqkv OVERWRITTEN; bitwise-deterministic repeats; errors.
// Bidirectional attention and the key padding mask (lengths): forward against a
// direct reference, masked probabilities exactly 0, float64 gradient checks
// (non-causal with and without lengths, causal with lengths), length checks,
// the 16-bit path against fp32, and causal with all-T lengths == no lengths.
// The (sequence, head) pairs in parallel (issue 36; run at 1, 2 and 4 Kokkos threads
// by the kokkos-omp tests): every pair of a B x H call is bitwise the same as that
// pair alone (a one-sequence, one-head call, which runs on one slot), forward and
// backward, float, double, f16 and bf16, causal, padded and bidirectional; and the
// workspace and 16-bit scratch sizes are attention_pair_slots pairs', each slot
// writing its own piece. A workspace piece shared by two threads (planted: every slot
// given slot 0's piece) fails it: the piece check always, the bitwise comparison when
// the threads' pairs overlap in time.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstring>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/attention.hpp"
#include "kernels/half_scratch.hpp"
#include "kernels/small_gemm.hpp"
#include "kernels/types.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview1;
using test::cview3;
using test::view1;
using test::view3;

struct Ref {
  std::vector<double> out, probs;  // (B,T,C), (B,H,T,T)
};

Ref naive_attention(const AttentionShape& s, const std::vector<double>& qkv) {
  const int B = s.batch, T = s.seq_len, C = s.channels, H = s.n_head, hd = C / H;
  Ref r{std::vector<double>(B * T * C, 0.0), std::vector<double>(B * H * T * T, 0.0)};
  auto at = [&](int b, int t, int col) { return qkv[(b * T + t) * 3 * C + col]; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<long double> sc(t + 1);
        long double mx = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          long double d = 0.0L;
          for (int i = 0; i < hd; ++i) d += (long double)at(b, t, h * hd + i) * at(b, u, C + h * hd + i);
          sc[u] = d / std::sqrt((long double)hd);
          mx = std::max(mx, sc[u]);
        }
        long double z = 0.0L;
        for (int u = 0; u <= t; ++u) z += std::exp(sc[u] - mx);
        for (int u = 0; u <= t; ++u) {
          const long double p = std::exp(sc[u] - mx) / z;
          r.probs[((b * H + h) * T + t) * T + u] = static_cast<double>(p);
          for (int i = 0; i < hd; ++i)
            r.out[(b * T + t) * C + h * hd + i] += static_cast<double>(p * at(b, u, 2 * C + h * hd + i));
        }
      }
  return r;
}

template <class T>
struct Run {
  std::vector<T> out, saved;
};

template <class T>
Run<T> run_forward(const AttentionShape& s, const std::vector<T>& qkv) {
  Run<T> r{std::vector<T>(s.batch * s.seq_len * s.channels, T(-3)),
           std::vector<T>(attention_saved_elems(s), T(-5))};
  std::vector<T> ws(attention_workspace_elems(s), T(-9));
  attention_forward<T>(s, cview3(qkv, s.batch, s.seq_len, 3 * s.channels), view1(r.saved),
                       view1(ws), view3(r.out, s.batch, s.seq_len, s.channels));
  return r;
}

template <class T>
std::vector<T> run_backward(const AttentionShape& s, const std::vector<T>& saved,
                            const std::vector<T>& dout, T prefill = T(0)) {
  std::vector<T> dqkv(s.batch * s.seq_len * 3 * s.channels, prefill);
  std::vector<T> ws(attention_workspace_elems(s), std::numeric_limits<T>::quiet_NaN());
  attention_backward<T>(s, cview3(dout, s.batch, s.seq_len, s.channels), cview1(saved), view1(ws),
                        view3(dqkv, s.batch, s.seq_len, 3 * s.channels));
  return dqkv;
}

const AttentionShape kSquare{2, 5, 6, 2};     // hd = 3
const AttentionShape kWideHead{1, 3, 16, 2};  // hd = 8 > T
const AttentionShape kLongSeq{2, 7, 12, 3};   // hd = 4 < T

std::vector<double> qkv_for(const AttentionShape& s, std::uint64_t seed) {
  return test::random_vector(s.batch * s.seq_len * 3 * s.channels, seed, -1.5, 1.5);
}

TEST(Attention, SizesAndShapeErrors) {
  EXPECT_EQ(attention_saved_elems(kSquare), 3 * 2 * 5 * 6 + 2 * 2 * 5 * 5);
  EXPECT_GE(attention_workspace_elems(kSquare), 0);
  EXPECT_THROW(attention_saved_elems(AttentionShape{2, 5, 6, 4}), Error);  // 4 does not divide 6
  EXPECT_THROW(attention_saved_elems(AttentionShape{2, 5, 6, 0}), Error);
  const auto qkv = qkv_for(kSquare, 1);
  std::vector<double> saved(attention_saved_elems(kSquare)), out(2 * 5 * 6);
  std::vector<double> ws(attention_workspace_elems(kSquare));
  std::vector<double> small(attention_saved_elems(kSquare) - 1);
  EXPECT_THROW(attention_forward<double>(kSquare, cview3(qkv, 2, 5, 18), view1(small), view1(ws),
                                         view3(out, 2, 5, 6)),
               Error);
  EXPECT_THROW(attention_forward<double>(kSquare, cview3(qkv, 2, 15, 6), view1(saved), view1(ws),
                                         view3(out, 2, 5, 6)),
               Error);
  if (!ws.empty()) {
    std::vector<double> ws_small(ws.size() - 1);
    EXPECT_THROW(attention_backward<double>(kSquare, cview3(out, 2, 5, 6), cview1(saved),
                                            view1(ws_small), view3(saved, 2, 5, 18)),
                 Error);
  }
}

TEST(Attention, ForwardMatchesNaive) {
  std::uint64_t seed = 50;
  // T = 64, 130: one causal block of 64 rows, and three (the last one partial).
  for (const AttentionShape& s : {kSquare, kWideHead, kLongSeq, AttentionShape{1, 64, 32, 4},
                                  AttentionShape{2, 130, 16, 2}}) {
    const auto qkv = qkv_for(s, ++seed);
    const Ref ref = naive_attention(s, qkv);
    const std::int64_t BTC = s.batch * s.seq_len * s.channels;
    const auto d = run_forward<double>(s, qkv);
    EXPECT_LE(test::tolerance_ratio(d.out, ref.out, 1e-14, 1e-13), 1.0) << "T=" << s.seq_len;
    const std::vector<double> probs_d(d.saved.begin() + 3 * BTC, d.saved.end());
    EXPECT_LE(test::tolerance_ratio(probs_d, ref.probs, 1e-15, 1e-13), 1.0);

    const auto qkvf = cast_vector<float>(qkv);
    const Ref reff = naive_attention(s, cast_vector<double>(qkvf));
    const auto f = run_forward<float>(s, qkvf);
    EXPECT_LE(test::tolerance_ratio(f.out, reff.out, 2e-6, 2e-6), 1.0) << "T=" << s.seq_len;
    const std::vector<float> probs_f(f.saved.begin() + 3 * BTC, f.saved.end());
    EXPECT_LE(test::tolerance_ratio(probs_f, reff.probs, 1e-6, 2e-6), 1.0);

    // Masked entries (s > t) are exactly 0 in both precisions; rows sum to 1.
    const int T = s.seq_len;
    for (std::int64_t bh = 0; bh < s.batch * s.n_head; ++bh)
      for (int t = 0; t < T; ++t) {
        double sum = 0.0;
        for (int u = 0; u < T; ++u) {
          const std::size_t i = (bh * T + t) * T + u;
          if (u > t) {
            ASSERT_EQ(probs_d[i], 0.0);
            ASSERT_EQ(probs_f[i], 0.0f);
          }
          sum += probs_d[i];
        }
        EXPECT_NEAR(sum, 1.0, 1e-14);
      }
  }
}

// saved = [q | k | v] as (B,H,T,hd) each, then probs: check q/k/v against qkv.
TEST(Attention, SavedLayoutIsHeadMajor) {
  const AttentionShape s = kLongSeq;
  const auto qkv = qkv_for(s, 7);
  const auto r = run_forward<double>(s, qkv);
  const int B = s.batch, T = s.seq_len, C = s.channels, H = s.n_head, hd = C / H;
  for (int part = 0; part < 3; ++part)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < T; ++t)
          for (int i = 0; i < hd; ++i)
            ASSERT_EQ(r.saved[part * B * T * C + ((b * H + h) * T + t) * hd + i],
                      qkv[(b * T + t) * 3 * C + part * C + h * hd + i]);
}

void check_gradient(const AttentionShape& s, const std::string& label) {
  const auto qkv = qkv_for(s, 60 + s.seq_len);
  const auto r = test::random_vector(s.batch * s.seq_len * s.channels, 61);
  const auto fwd = run_forward<double>(s, qkv);
  const auto dqkv = run_backward<double>(s, fwd.saved, r, std::numeric_limits<double>::quiet_NaN());
  auto loss = [&](std::span<const double> v) {
    return test::weighted_sum(run_forward<double>(s, {v.begin(), v.end()}).out, r);
  };
  EXPECT_TRUE(test::gradient_ok(label, test::gradcheck(loss, qkv, dqkv)));
}

TEST(Attention, GradientSquare) { check_gradient(kSquare, "attention B2 T5 C6 H2 dqkv"); }
TEST(Attention, GradientWideHead) { check_gradient(kWideHead, "attention B1 T3 C16 H2 dqkv"); }
TEST(Attention, GradientLongSequence) { check_gradient(kLongSeq, "attention B2 T7 C12 H3 dqkv"); }
// T = 130 spans three causal row blocks (64, 64, 2) of the blocked GEMMs.
TEST(Attention, GradientSeveralCausalBlocks) {
  check_gradient(AttentionShape{1, 130, 4, 2}, "attention B1 T130 C4 H2 dqkv");
}

TEST(Attention, BackwardOverwritesAndIsDeterministic) {
  const AttentionShape s{2, 130, 12, 3};  // several causal blocks
  const auto qkv = qkv_for(s, 70);
  const auto r = test::random_vector(s.batch * s.seq_len * s.channels, 71);
  const auto fwd = run_forward<double>(s, qkv);
  const auto a = run_backward<double>(s, fwd.saved, r, 0.0);
  ASSERT_FALSE(a.empty());
  const auto b = run_backward<double>(s, fwd.saved, r, std::numeric_limits<double>::quiet_NaN());
  const auto c = run_backward<double>(s, fwd.saved, r, 1e30);
  EXPECT_EQ(a, b);  // bitwise: every element written, nothing read from dqkv
  EXPECT_EQ(a, c);
}

TEST(Attention, FloatBackwardMatchesDouble) {
  const AttentionShape s{2, 80, 32, 4};
  const auto qkv = qkv_for(s, 80);
  const auto r = test::random_vector(s.batch * s.seq_len * s.channels, 81);
  const auto qkvf = cast_vector<float>(qkv);
  const auto rf = cast_vector<float>(r);
  // Reference: double kernels on the float-rounded inputs.
  const auto fwd = run_forward<double>(s, cast_vector<double>(qkvf));
  const auto ref = run_backward<double>(s, fwd.saved, cast_vector<double>(rf));
  const auto fwdf = run_forward<float>(s, qkvf);
  const auto got = run_backward<float>(s, fwdf.saved, rf);
  EXPECT_LE(test::max_scaled_error(got, ref), 2e-6);
}

// ---- bidirectional attention and key padding mask --------------------------

Ref masked_reference(const AttentionShape& s, const std::vector<double>& qkv,
                     const std::vector<std::int32_t>& lengths) {
  const int B = s.batch, T = s.seq_len, C = s.channels, H = s.n_head, hd = C / H;
  Ref r{std::vector<double>(B * T * C, 0.0), std::vector<double>(B * H * T * T, 0.0)};
  auto at = [&](int b, int t, int col) { return qkv[(b * T + t) * 3 * C + col]; };
  for (int b = 0; b < B; ++b) {
    const int len = lengths.empty() ? T : lengths[b];
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        const int n = s.causal ? std::min(t + 1, len) : len;  // keys 0..n-1
        std::vector<long double> sc(n);
        long double mx = -INFINITY, z = 0.0L;
        for (int u = 0; u < n; ++u) {
          long double d = 0.0L;
          for (int i = 0; i < hd; ++i) d += (long double)at(b, t, h * hd + i) * at(b, u, C + h * hd + i);
          sc[u] = d / std::sqrt((long double)hd);
          mx = std::max(mx, sc[u]);
        }
        for (int u = 0; u < n; ++u) z += std::exp(sc[u] - mx);
        for (int u = 0; u < n; ++u) {
          const long double p = std::exp(sc[u] - mx) / z;
          r.probs[((b * H + h) * T + t) * T + u] = static_cast<double>(p);
          for (int i = 0; i < hd; ++i)
            r.out[(b * T + t) * C + h * hd + i] += static_cast<double>(p * at(b, u, 2 * C + h * hd + i));
        }
      }
  }
  return r;
}

template <class T>
Run<T> run_forward_masked(const AttentionShape& s, const std::vector<T>& qkv, const std::vector<std::int32_t>& len) {
  Run<T> r{std::vector<T>(s.batch * s.seq_len * s.channels, T(-3.0f)),
           std::vector<T>(attention_saved_elems(s), T(-5.0f))};
  std::vector<T> ws(attention_workspace_elems(s), T(-9.0f));
  attention_forward<T>(s, cview3(qkv, s.batch, s.seq_len, 3 * s.channels), view1(r.saved), view1(ws),
                       view3(r.out, s.batch, s.seq_len, s.channels), cview1(len));
  return r;
}

template <class T>
std::vector<T> run_backward_masked(const AttentionShape& s, const std::vector<T>& saved, const std::vector<T>& dout,
                                   const std::vector<std::int32_t>& len, T prefill) {
  std::vector<T> dqkv(s.batch * s.seq_len * 3 * s.channels, prefill);
  std::vector<T> ws(attention_workspace_elems(s), T(-7.0f));
  attention_backward<T>(s, cview3(dout, s.batch, s.seq_len, s.channels), cview1(saved), view1(ws),
                        view3(dqkv, s.batch, s.seq_len, 3 * s.channels), cview1(len));
  return dqkv;
}

struct MaskCase {
  AttentionShape s;
  std::vector<std::int32_t> lengths;
  const char* label;
};

std::vector<MaskCase> mask_cases() {
  return {
      {{2, 5, 6, 2, false}, {}, "bidirectional B2 T5 C6 H2"},
      {{3, 6, 8, 2, false}, {1, 6, 4}, "bidirectional B3 T6 C8 H2 lengths 1,6,4"},
      {{2, 7, 12, 3, true}, {3, 7}, "causal B2 T7 C12 H3 lengths 3,7"},
      {{2, 130, 8, 2, false}, {130, 71}, "bidirectional B2 T130 lengths 130,71"},
      {{2, 130, 8, 2, true}, {100, 65}, "causal B2 T130 (3 blocks) lengths 100,65"},
  };
}

TEST(AttentionMask, ForwardMatchesReference) {
  std::uint64_t seed = 90;
  for (const MaskCase& m : mask_cases()) {
    const AttentionShape& s = m.s;
    const auto qkv = qkv_for(s, ++seed);
    const Ref ref = masked_reference(s, qkv, m.lengths);
    const auto d = run_forward_masked<double>(s, qkv, m.lengths);
    EXPECT_LE(test::tolerance_ratio(d.out, ref.out, 1e-14, 1e-13), 1.0) << m.label;
    const std::int64_t BTC = s.batch * s.seq_len * s.channels;
    const std::vector<double> probs(d.saved.begin() + 3 * BTC, d.saved.end());
    EXPECT_LE(test::tolerance_ratio(probs, ref.probs, 1e-15, 1e-13), 1.0) << m.label;
    for (std::size_t i = 0; i < probs.size(); ++i) {
      if (ref.probs[i] == 0.0) {
        ASSERT_EQ(probs[i], 0.0) << m.label << " masked entry " << i;
      }
    }
    const auto qkvf = cast_vector<float>(qkv);
    const Ref reff = masked_reference(s, cast_vector<double>(qkvf), m.lengths);
    const auto f = run_forward_masked<float>(s, qkvf, m.lengths);
    EXPECT_LE(test::tolerance_ratio(f.out, reff.out, 2e-6, 2e-6), 1.0) << m.label;
  }
}

// The entries of qkv (B, T, 3C) a gradient check of a long case visits: every
// channel of q, k and v at the tokens where the kernel's loops change (the first
// two, both sides of the 64-token block boundaries, both sides of each sequence's
// length, the last two) and every 17th entry of the rest.
std::vector<std::size_t> boundary_entries(const AttentionShape& s, const std::vector<std::int32_t>& lengths) {
  const std::int64_t T = s.seq_len, row = 3 * s.channels;
  std::vector<std::size_t> at;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    const std::int64_t len = lengths.empty() ? T : lengths[static_cast<std::size_t>(b)];
    std::vector<std::int64_t> tokens{0, 1, len - 2, len - 1, len, T - 2, T - 1};
    for (std::int64_t edge = 64; edge < T; edge += 64)
      for (const std::int64_t t : {edge - 1, edge, edge + 1}) tokens.push_back(t);
    std::vector<bool> whole(static_cast<std::size_t>(T), false);
    for (const std::int64_t t : tokens)
      if (t >= 0 && t < T) whole[static_cast<std::size_t>(t)] = true;
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t j = 0; j < row; ++j) {
        const std::size_t i = static_cast<std::size_t>((b * T + t) * row + j);
        if (whole[static_cast<std::size_t>(t)] || i % 17 == 0) at.push_back(i);
      }
  }
  return at;
}

// Short cases check every entry; the T = 130 cases (6,240 entries, two forwards of
// 4 ms each per entry) check boundary_entries' ~40%.
TEST(AttentionMask, GradientsMatchCentralDifferences) {
  for (const MaskCase& m : mask_cases()) {
    const AttentionShape& s = m.s;
    const auto qkv = qkv_for(s, 160 + s.seq_len);
    const auto r = test::random_vector(s.batch * s.seq_len * s.channels, 161);
    const auto fwd = run_forward_masked<double>(s, qkv, m.lengths);
    const auto dqkv = run_backward_masked<double>(s, fwd.saved, r, m.lengths, std::numeric_limits<double>::quiet_NaN());
    auto loss = [&](std::span<const double> v) {
      return test::weighted_sum(run_forward_masked<double>(s, {v.begin(), v.end()}, m.lengths).out, r);
    };
    if (s.seq_len <= 64) {
      EXPECT_TRUE(test::gradient_ok(m.label, test::gradcheck(loss, qkv, dqkv)));
    } else {
      const std::vector<std::size_t> at = boundary_entries(s, m.lengths);
      EXPECT_TRUE(test::gradient_ok(m.label, test::gradcheck_at(loss, qkv, dqkv, at)));
    }
  }
}

TEST(AttentionMask, CausalWithFullLengthsIsBitwiseTheUnmaskedKernel) {
  const AttentionShape s{2, 130, 12, 3};
  const auto qkv = qkv_for(s, 200);
  const auto r = test::random_vector(s.batch * s.seq_len * s.channels, 201);
  const std::vector<std::int32_t> full{130, 130};
  const auto a = run_forward<double>(s, qkv);
  const auto b = run_forward_masked<double>(s, qkv, full);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.saved, b.saved);
  EXPECT_EQ(run_backward<double>(s, a.saved, r), run_backward_masked<double>(s, b.saved, r, full, 0.0));
}

TEST(AttentionMask, LengthsAreChecked) {
  const AttentionShape s{2, 5, 6, 2, false};
  const auto qkv = qkv_for(s, 210);
  for (const std::vector<std::int32_t>& bad : {std::vector<std::int32_t>{0, 5}, {5, 6}, {3}, {1, 2, 3}})
    EXPECT_THROW(run_forward_masked<double>(s, qkv, bad), Error);
  const auto fwd = run_forward_masked<double>(s, qkv, {2, 5});
  const auto r = test::random_vector(2 * 5 * 6, 211);
  EXPECT_THROW(run_backward_masked<double>(s, fwd.saved, r, {2, -1}, 0.0), Error);
}

template <class H>
void half_matches_float(double tol) {
  for (const MaskCase& m : mask_cases()) {
    const AttentionShape& s = m.s;
    std::vector<float> scratch(attention_half_scratch_elems(s));
    half_scratch_bind(scratch.data(), scratch.size());
    const auto qkvh = cast_vector<H>(cast_vector<float>(qkv_for(s, 220 + s.seq_len)));
    const auto rh = cast_vector<H>(cast_vector<float>(test::random_vector(s.batch * s.seq_len * s.channels, 221)));
    const auto qkvf = cast_vector<float>(qkvh);
    const auto rf = cast_vector<float>(rh);
    const auto ff = run_forward_masked<float>(s, qkvf, m.lengths);
    const auto gf = run_backward_masked<float>(s, ff.saved, rf, m.lengths, 0.0f);
    const auto fh = run_forward_masked<H>(s, qkvh, m.lengths);
    const auto gh = run_backward_masked<H>(s, fh.saved, rh, m.lengths, H(0.0f));
    EXPECT_LE(test::max_scaled_error(cast_vector<float>(fh.out), ff.out), tol) << m.label;
    EXPECT_LE(test::max_scaled_error(cast_vector<float>(gh), gf), 4 * tol) << m.label;
    half_scratch_bind(nullptr, 0);
  }
}

TEST(AttentionMask, SixteenBitMatchesFloat) {
  half_matches_float<bf16>(1e-2);
  half_matches_float<f16>(2e-3);
}

// bf16 on a CPU with AVX512-BF16: the scores and dP on vdpbf16ps (attention.hpp).
// With the dot products allowed and forbidden, the bf16 forward and backward match
// the float kernel on the same (bf16-valued) inputs within the 16-bit tolerance; the
// dot path is taken where attention_bf16_dot_products says (an odd head size, a
// forbidding call or a CPU without the instruction keeps the chain: the same bits
// with or without the allowance; with the instruction some case's bits change).
// Planted (each caught on a Zen 4): the dot scores without the 1/sqrt(hd) scale ->
// forward error 0.065 (tolerance 1e-2); dP's pairs packed from K instead of V ->
// backward error 0.18-0.36 (tolerance 4e-2).
TEST(AttentionMask, Bf16DotProductsAndFmaChainBothMatchFloat) {
  struct Restore {
    ~Restore() { attention_allow_bf16_dot_products(true); }
  } restore;
  std::vector<MaskCase> cases = mask_cases();
  cases.push_back({{2, 64, 64, 2, true}, {}, "causal B2 T64 C64 H2 (hd 32, the quickstart's)"});
  cases.push_back({{2, 48, 64, 1, false}, {48, 37}, "bidirectional B2 T48 C64 H1 (hd 64) lengths 48,37"});
  int dot_cases = 0, dot_cases_differing = 0;
  for (const MaskCase& m : cases) {
    const AttentionShape& s = m.s;
    std::vector<float> scratch(attention_half_scratch_elems(s));
    half_scratch_bind(scratch.data(), scratch.size());
    // Magnitudes spread over 2^-6 .. 1.5 (uniform ones make most fp32 sums of bf16
    // products exact, and then both paths give the same bits).
    auto qkvd = qkv_for(s, 230 + s.seq_len);
    for (std::size_t i = 0; i < qkvd.size(); ++i) qkvd[i] = std::ldexp(qkvd[i], -static_cast<int>(i * 5 % 7));
    const auto qkvh = cast_vector<bf16>(cast_vector<float>(qkvd));
    const auto rh = cast_vector<bf16>(cast_vector<float>(test::random_vector(s.batch * s.seq_len * s.channels, 231)));
    const auto ff = run_forward_masked<float>(s, cast_vector<float>(qkvh), m.lengths);
    const auto gf = run_backward_masked<float>(s, ff.saved, cast_vector<float>(rh), m.lengths, 0.0f);
    std::vector<float> out[2], grad[2];
    for (int allow = 0; allow < 2; ++allow) {
      attention_allow_bf16_dot_products(allow == 1);
      const bool dot = allow == 1 && small_gemm_bf16_native() && (s.channels / s.n_head) % 2 == 0;
      EXPECT_EQ(attention_bf16_dot_products(s), dot) << m.label;
      const auto fh = run_forward_masked<bf16>(s, qkvh, m.lengths);
      const auto gh = run_backward_masked<bf16>(s, fh.saved, rh, m.lengths, bf16(0.0f));
      out[allow] = cast_vector<float>(fh.out), grad[allow] = cast_vector<float>(gh);
      EXPECT_LE(test::max_scaled_error(out[allow], ff.out), 1e-2) << m.label << (dot ? " (dot)" : " (fma)");
      EXPECT_LE(test::max_scaled_error(grad[allow], gf), 4e-2) << m.label << (dot ? " (dot)" : " (fma)");
    }
    const bool same = out[0] == out[1] && grad[0] == grad[1];
    if (!attention_bf16_dot_products(s)) {
      EXPECT_TRUE(same) << m.label << ": the dot path is taken where it should not be";
    }
    dot_cases += attention_bf16_dot_products(s) ? 1 : 0;
    dot_cases_differing += attention_bf16_dot_products(s) && !same ? 1 : 0;
    half_scratch_bind(nullptr, 0);
  }
  // The outputs are rounded to bf16, so one fp32 ulp of a score seldom shows: some
  // dot-path cases give the chain's bits (the small ones), but not all of them.
  if (small_gemm_bf16_native()) {
    EXPECT_EQ(dot_cases, static_cast<int>(cases.size()) - 1);  // all but the odd head size
    EXPECT_GT(dot_cases_differing, 0) << "no case's bits changed: the dot path was never taken";
  }
}

// ---- the (sequence, head) pairs in parallel -----------------------------------

TEST(AttentionPairs, SlotsAndSizes) {
  const std::int64_t threads = ExecSpace().concurrency();
  for (const AttentionShape& s : {AttentionShape{4, 24, 16, 4}, AttentionShape{1, 24, 16, 1},
                                  AttentionShape{1, 24, 16, 2}, AttentionShape{0, 24, 16, 4}}) {
    const std::int64_t pairs = s.batch * s.n_head, hd = s.channels / s.n_head, T = s.seq_len;
    const std::int64_t want = threads > 1 && pairs > 1 ? std::min(threads, pairs) : 1;
    EXPECT_EQ(attention_pair_slots(s), want) << "B" << s.batch << " H" << s.n_head;
    EXPECT_EQ(attention_workspace_elems(s), want * (T * T + T * hd));
    EXPECT_EQ(attention_half_scratch_elems(s), s.batch == 0 ? 0 : want * (7 * T * hd + 2 * T * T));
  }
}

// n values in [-1.5, 1.5] that every T holds (rounded through float, then T).
template <class T>
std::vector<T> values_for(std::int64_t n, std::uint64_t seed) {
  return cast_vector<T>(cast_vector<float>(test::random_vector(n, seed, -1.5, 1.5)));
}

template <class T>
bool same_bits(const T* a, const T* b, std::int64_t n) {
  return std::memcmp(a, b, static_cast<std::size_t>(n) * sizeof(T)) == 0;
}

// The whole call against each pair alone: out, probs and dqkv bitwise equal.
template <class T>
void pairs_match_single_pair_calls(const AttentionShape& s, const std::vector<std::int32_t>& lengths,
                                   const char* label) {
  const std::int64_t B = s.batch, nT = s.seq_len, C = s.channels, H = s.n_head, hd = C / H;
  const auto qkv = values_for<T>(B * nT * 3 * C, 300 + nT);
  const auto dout = values_for<T>(B * nT * C, 301 + nT);
  std::vector<float> scratch;
  if constexpr (is_half_v<T>) {
    scratch.resize(static_cast<std::size_t>(attention_half_scratch_elems(s)));
    half_scratch_bind(scratch.data(), scratch.size());
  }
  const auto all = run_forward_masked<T>(s, qkv, lengths);
  const auto dall = run_backward_masked<T>(s, all.saved, dout, lengths, T(-1.0f));
  const AttentionShape one{1, nT, hd, 1, s.causal};
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      std::vector<T> qkv1(nT * 3 * hd), dout1(nT * hd);
      for (std::int64_t t = 0; t < nT; ++t) {
        for (std::int64_t part = 0; part < 3; ++part)
          std::copy_n(qkv.begin() + (b * nT + t) * 3 * C + part * C + h * hd, hd,
                      qkv1.begin() + t * 3 * hd + part * hd);
        std::copy_n(dout.begin() + (b * nT + t) * C + h * hd, hd, dout1.begin() + t * hd);
      }
      const std::vector<std::int32_t> len1 =
          lengths.empty() ? std::vector<std::int32_t>{} : std::vector<std::int32_t>{lengths[b]};
      const auto r = run_forward_masked<T>(one, qkv1, len1);
      const auto dr = run_backward_masked<T>(one, r.saved, dout1, len1, T(-1.0f));
      const T* probs = all.saved.data() + 3 * B * nT * C + (b * H + h) * nT * nT;
      ASSERT_TRUE(same_bits(probs, r.saved.data() + 3 * nT * hd, nT * nT))
          << label << ": probs of pair b=" << b << " h=" << h << " differ from the pair alone";
      for (std::int64_t t = 0; t < nT; ++t) {
        ASSERT_TRUE(same_bits(all.out.data() + (b * nT + t) * C + h * hd, r.out.data() + t * hd, hd))
            << label << ": out of pair b=" << b << " h=" << h << " row " << t;
        for (std::int64_t part = 0; part < 3; ++part)
          ASSERT_TRUE(same_bits(dall.data() + (b * nT + t) * 3 * C + part * C + h * hd,
                                dr.data() + t * 3 * hd + part * hd, hd))
              << label << ": d" << "qkv"[part] << " of pair b=" << b << " h=" << h << " row " << t;
      }
    }
  if constexpr (is_half_v<T>) half_scratch_bind(nullptr, 0);
}

// Enough pairs (24 to 64) and long enough ones (T up to 128) that the threads' pairs
// overlap in time; each case is repeated so that a race has several chances to show.
// (A race needs the threads to run at once: on a busy machine it may not show,
// which EverySlotUsesItsOwnPiece below does not depend on.)
template <class T>
void pairs_cases() {
  for (int repeat = 0; repeat < 3; ++repeat) {
    pairs_match_single_pair_calls<T>(AttentionShape{8, 128, 64, 8, true}, {}, "causal B8 T128 H8");
    pairs_match_single_pair_calls<T>(AttentionShape{4, 96, 48, 6, true}, {96, 37, 1, 70},
                                     "causal B4 T96 H6 lengths 96,37,1,70");
    pairs_match_single_pair_calls<T>(AttentionShape{3, 67, 32, 8, false}, {67, 20, 5},
                                     "bidirectional B3 T67 H8 lengths 67,20,5");
  }
}

TEST(AttentionPairs, EachPairIsBitwiseThePairAloneFloat) { pairs_cases<float>(); }
TEST(AttentionPairs, EachPairIsBitwiseThePairAloneDouble) { pairs_cases<double>(); }
TEST(AttentionPairs, EachPairIsBitwiseThePairAloneBf16) { pairs_cases<bf16>(); }
TEST(AttentionPairs, EachPairIsBitwiseThePairAloneF16) { pairs_cases<f16>(); }

// Each slot writes its own piece of the workspace (float: forward K^T, backward dP and
// V^T) and of the 16-bit scratch (bf16: the pair's tiles): with more than one slot, a
// piece left as it was filled means two slots shared one (planted: every slot given
// slot 0's piece fails here at any timing).
bool piece_written(const std::vector<float>& v, std::int64_t lo, std::int64_t n, float fill) {
  for (std::int64_t i = lo; i < lo + n; ++i)
    if (std::memcmp(&v[i], &fill, sizeof(float)) != 0) return true;
  return false;
}

TEST(AttentionPairs, EverySlotUsesItsOwnPiece) {
  const AttentionShape s{4, 32, 32, 4};  // 16 pairs, hd 8
  const std::int64_t B = s.batch, nT = s.seq_len, C = s.channels, hd = C / s.n_head;
  const std::int64_t slots = attention_pair_slots(s);
  const float fill = -12345.0f;
  const auto qkv = values_for<float>(B * nT * 3 * C, 340);
  const auto dout = values_for<float>(B * nT * C, 341);
  std::vector<float> saved(attention_saved_elems(s)), out(B * nT * C), dqkv(B * nT * 3 * C);
  const std::int64_t piece = nT * nT + nT * hd;
  ASSERT_EQ(attention_workspace_elems(s), slots * piece);
  std::vector<float> ws(attention_workspace_elems(s), fill);
  attention_forward<float>(s, cview3(qkv, B, nT, 3 * C), view1(saved), view1(ws), view3(out, B, nT, C));
  for (std::int64_t slot = 0; slot < slots; ++slot)
    EXPECT_TRUE(piece_written(ws, slot * piece, piece, fill)) << "forward: slot " << slot << " of " << slots;
  std::fill(ws.begin(), ws.end(), fill);
  attention_backward<float>(s, cview3(dout, B, nT, C), cview1(saved), view1(ws), view3(dqkv, B, nT, 3 * C));
  for (std::int64_t slot = 0; slot < slots; ++slot)
    EXPECT_TRUE(piece_written(ws, slot * piece, piece, fill)) << "backward: slot " << slot << " of " << slots;

  const auto qkvh = cast_vector<bf16>(qkv);
  const auto douth = cast_vector<bf16>(dout);
  std::vector<bf16> savedh(saved.size()), wsh(attention_workspace_elems(s)), outh(out.size()),
      dqkvh(dqkv.size());
  const std::int64_t tiles = 7 * nT * hd + 2 * nT * nT;
  ASSERT_EQ(attention_half_scratch_elems(s), slots * tiles);
  std::vector<float> scratch(attention_half_scratch_elems(s), fill);
  half_scratch_bind(scratch.data(), scratch.size());
  attention_forward<bf16>(s, cview3(qkvh, B, nT, 3 * C), view1(savedh), view1(wsh), view3(outh, B, nT, C));
  for (std::int64_t slot = 0; slot < slots; ++slot)
    EXPECT_TRUE(piece_written(scratch, slot * tiles, tiles, fill)) << "bf16 forward: slot " << slot;
  std::fill(scratch.begin(), scratch.end(), fill);
  attention_backward<bf16>(s, cview3(douth, B, nT, C), cview1(savedh), view1(wsh), view3(dqkvh, B, nT, 3 * C));
  for (std::int64_t slot = 0; slot < slots; ++slot)
    EXPECT_TRUE(piece_written(scratch, slot * tiles, tiles, fill)) << "bf16 backward: slot " << slot;
  half_scratch_bind(nullptr, 0);
}

// One float of workspace or 16-bit scratch less than the slots need throws.
TEST(AttentionPairs, TooSmallForTheSlotsThrows) {
  const AttentionShape s{4, 24, 16, 4};
  const auto qkv = values_for<float>(4 * 24 * 3 * 16, 330);
  std::vector<float> saved(attention_saved_elems(s)), out(4 * 24 * 16);
  std::vector<float> ws(attention_workspace_elems(s) - 1);
  EXPECT_THROW(attention_forward<float>(s, cview3(qkv, 4, 24, 48), view1(saved), view1(ws),
                                        view3(out, 4, 24, 16)),
               Error);
  const auto qkvh = cast_vector<bf16>(qkv);
  std::vector<bf16> savedh(saved.size()), wsh(attention_workspace_elems(s)), outh(out.size());
  std::vector<float> scratch(attention_half_scratch_elems(s) - 1);
  half_scratch_bind(scratch.data(), scratch.size());
  EXPECT_THROW(attention_forward<bf16>(s, cview3(qkvh, 4, 24, 48), view1(savedh), view1(wsh),
                                       view3(outh, 4, 24, 16)),
               Error);
  half_scratch_bind(nullptr, 0);
}

}  // namespace
}  // namespace shardtrain
