// Tests attention_forward / attention_backward: forward output and saved
// probabilities against a naive per-(b,h,t) causal softmax attention (double and
// float); masked probabilities exactly 0; the documented layout of `saved`;
// float64 central-difference checks of dqkv for (B,T,C,H) = (2,5,6,2) and two
// shapes with hd != T; dqkv OVERWRITTEN; bitwise-deterministic repeats; errors.
// Bidirectional attention and the key padding mask (lengths): forward against a
// direct reference, masked probabilities exactly 0, float64 gradient checks
// (non-causal with and without lengths, causal with lengths), length checks,
// the 16-bit path against fp32, and causal with all-T lengths == no lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/attention.hpp"
#include "kernels/half_scratch.hpp"

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
    EXPECT_TRUE(test::gradient_ok(m.label, test::gradcheck(loss, qkv, dqkv)));
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

}  // namespace
}  // namespace shardtrain
