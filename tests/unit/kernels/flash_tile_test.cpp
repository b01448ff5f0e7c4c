// Host test of the tiled ("flash") attention algorithm of
// kernels/cuda/flash_attention.cu through its per-tile math (kernels/flash_tile.hpp),
// without a GPU: the same tile loops as the CUDA kernels (query rows in blocks of
// kRows, keys in tiles of kKeys for the forward and dQ; keys in blocks and queries
// in tiles for dK/dV), the same causal skipping, the same online softmax and
// backward pieces, in fp32, against a float64 reference of kernels/attention.hpp's
// semantics (full softmax, no tiles). Forward: out and the rows' log-sum-exp;
// backward: dQ, dK, dV. Shapes: several T (1, a tile, not a multiple of a tile,
// several tiles), head widths 1 to 128, causal and not, several tile sizes
// (including the CUDA kernels' 8 x 32).
// The bounds are also checked exhaustively: every (query tile, key tile) pair a
// loop skips is masked in full, every pair it visits reaches an unmasked key, and
// causal skipping saves about half the tiles at T = 1024.
// Tolerance: relative L2 <= 2e-5 (fp32 accumulation in tile order vs float64).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/flash_tile.hpp"

namespace shardtrain {
namespace {

using I = std::int64_t;

struct Case {
  I seq_len, head_dim;
  bool causal;
  I rows, keys;  // query rows per block, keys per tile
};

// One (sequence, head): q, k, v, dout as (T, hd) row-major.
struct Head {
  I t, hd;
  std::vector<float> q, k, v, dout;
};

Head random_head(I t, I hd, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Head h{t, hd, {}, {}, {}, {}};
  for (auto* x : {&h.q, &h.k, &h.v, &h.dout}) {
    x->resize(static_cast<std::size_t>(t * hd));
    for (float& e : *x) e = n(gen);
  }
  return h;
}

struct Result {
  std::vector<double> out, lse, dq, dk, dv;
};

// float64, untiled: the semantics of kernels/attention.hpp.
Result reference(const Head& h, bool causal) {
  const I T = h.t, D = h.hd;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Result r;
  r.out.assign(T * D, 0.0);
  r.lse.assign(T, 0.0);
  r.dq.assign(T * D, 0.0);
  r.dk.assign(T * D, 0.0);
  r.dv.assign(T * D, 0.0);
  std::vector<double> p(T), dp(T);
  for (I t = 0; t < T; ++t) {
    const I end = causal ? t + 1 : T;
    double m = -INFINITY;
    for (I u = 0; u < end; ++u) {
      double s = 0;
      for (I d = 0; d < D; ++d) s += static_cast<double>(h.q[t * D + d]) * h.k[u * D + d];
      p[u] = s * scale;
      m = std::max(m, p[u]);
    }
    double z = 0;
    for (I u = 0; u < end; ++u) z += std::exp(p[u] - m);
    r.lse[t] = m + std::log(z);
    for (I u = 0; u < end; ++u) p[u] = std::exp(p[u] - m) / z;
    for (I u = 0; u < end; ++u)
      for (I d = 0; d < D; ++d) r.out[t * D + d] += p[u] * h.v[u * D + d];
    double drow = 0;
    for (I u = 0; u < end; ++u) {
      dp[u] = 0;
      for (I d = 0; d < D; ++d) dp[u] += static_cast<double>(h.dout[t * D + d]) * h.v[u * D + d];
      drow += p[u] * dp[u];
    }
    for (I u = 0; u < end; ++u) {
      const double ds = p[u] * (dp[u] - drow) * scale;
      for (I d = 0; d < D; ++d) {
        r.dq[t * D + d] += ds * h.k[u * D + d];
        r.dk[u * D + d] += ds * h.q[t * D + d];
        r.dv[u * D + d] += p[u] * h.dout[t * D + d];
      }
    }
  }
  return r;
}

float dot(const float* a, const float* b, I n) {
  float s = 0;
  for (I i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The CUDA kernels' algorithm in fp32 on the host, tile by tile (flash_attention.cu).
Result tiled(const Head& h, const Case& c) {
  const I T = h.t, D = h.hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> out(T * D, 0.0f), lse(T, 0.0f), drow(T, 0.0f);
  // Forward: a block of c.rows query rows visits the key tiles [0, key_tiles).
  for (I q0 = 0; q0 < T; q0 += c.rows) {
    const I q1 = std::min(q0 + c.rows, T);
    std::vector<flash::RowState> st(q1 - q0, flash::row_start());
    std::vector<float> acc((q1 - q0) * D, 0.0f);
    const I tiles = flash::key_tiles(q1, T, c.causal, c.keys);
    for (I kt = 0; kt < tiles; ++kt) {
      const I k0 = kt * c.keys, k1 = std::min(k0 + c.keys, T);
      for (I t = q0; t < q1; ++t) {
        std::vector<float> s(k1 - k0);
        float tile_max = flash::neg_inf();
        for (I u = k0; u < k1; ++u) {
          s[u - k0] = scale * dot(&h.q[t * D], &h.k[u * D], D);
          if (!flash::masked(t, u, T, c.causal)) tile_max = std::max(tile_max, s[u - k0]);
        }
        flash::RowState& r = st[t - q0];
        const float alpha = flash::rescale(r, tile_max);
        float* a = &acc[(t - q0) * D];
        for (I d = 0; d < D; ++d) a[d] *= alpha;
        float lsum = 0;
        for (I u = k0; u < k1; ++u) {
          const float w = flash::weight(r, s[u - k0], flash::masked(t, u, T, c.causal));
          lsum += w;
          for (I d = 0; d < D; ++d) a[d] += w * h.v[u * D + d];
        }
        r.l += lsum;
      }
    }
    for (I t = q0; t < q1; ++t) {
      const float f = flash::out_factor(st[t - q0]);
      for (I d = 0; d < D; ++d) out[t * D + d] = acc[(t - q0) * D + d] * f;
      lse[t] = flash::logsumexp(st[t - q0]);
    }
  }
  // Backward, D_t = rowsum(dO * O).
  for (I t = 0; t < T; ++t) {
    float a = 0;
    for (I d = 0; d < D; ++d) a = flash::d_row_add(a, h.dout[t * D + d], out[t * D + d]);
    drow[t] = a;
  }
  std::vector<float> dq(T * D, 0.0f), dk(T * D, 0.0f), dv(T * D, 0.0f);
  // dQ: query blocks over key tiles, as the forward.
  for (I q0 = 0; q0 < T; q0 += c.rows) {
    const I q1 = std::min(q0 + c.rows, T);
    const I tiles = flash::key_tiles(q1, T, c.causal, c.keys);
    for (I kt = 0; kt < tiles; ++kt)
      for (I t = q0; t < q1; ++t)
        for (I u = kt * c.keys; u < std::min((kt + 1) * c.keys, T); ++u) {
          const bool m = flash::masked(t, u, T, c.causal);
          const float p = flash::prob(scale * dot(&h.q[t * D], &h.k[u * D], D), lse[t], m);
          const float ds = flash::score_grad(p, dot(&h.dout[t * D], &h.v[u * D], D), drow[t]);
          for (I d = 0; d < D; ++d) dq[t * D + d] += ds * h.k[u * D + d];
        }
  }
  // dK, dV: key blocks over query tiles from first_query_tile.
  for (I k0 = 0; k0 < T; k0 += c.rows) {
    const I k1 = std::min(k0 + c.rows, T);
    for (I qt = flash::first_query_tile(k0, c.causal, c.keys); qt < flash::tile_count(T, c.keys); ++qt)
      for (I u = k0; u < k1; ++u)
        for (I t = qt * c.keys; t < std::min((qt + 1) * c.keys, T); ++t) {
          const bool m = flash::masked(t, u, T, c.causal);
          const float p = flash::prob(scale * dot(&h.q[t * D], &h.k[u * D], D), lse[t], m);
          const float ds = flash::score_grad(p, dot(&h.dout[t * D], &h.v[u * D], D), drow[t]);
          for (I d = 0; d < D; ++d) {
            dv[u * D + d] += p * h.dout[t * D + d];
            dk[u * D + d] += ds * h.q[t * D + d];
          }
        }
  }
  for (float& x : dq) x *= scale;
  for (float& x : dk) x *= scale;
  auto widen = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  return {widen(out), widen(lse), widen(dq), widen(dk), widen(dv)};
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

class FlashTile : public ::testing::TestWithParam<Case> {};

TEST_P(FlashTile, MatchesFloat64Reference) {
  const Case c = GetParam();
  const Head h = random_head(c.seq_len, c.head_dim, static_cast<unsigned>(c.seq_len * 131 + c.head_dim));
  const Result want = reference(h, c.causal);
  const Result got = tiled(h, c);
  constexpr double kTol = 2e-5;
  EXPECT_LE(rel_l2(got.out, want.out), kTol) << "out";
  EXPECT_LE(rel_l2(got.lse, want.lse), kTol) << "log-sum-exp";
  EXPECT_LE(rel_l2(got.dq, want.dq), kTol) << "dQ";
  EXPECT_LE(rel_l2(got.dk, want.dk), kTol) << "dK";
  EXPECT_LE(rel_l2(got.dv, want.dv), kTol) << "dV";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashTile,
    ::testing::Values(Case{1, 64, true, 8, 32}, Case{1, 1, false, 8, 32}, Case{32, 64, true, 8, 32},
                      Case{33, 16, true, 8, 32}, Case{100, 64, true, 8, 32}, Case{100, 64, false, 8, 32},
                      Case{77, 128, true, 8, 32}, Case{45, 3, true, 4, 8}, Case{64, 32, true, 16, 16},
                      Case{129, 8, false, 8, 32}, Case{256, 64, true, 8, 32}));

// Every skipped (row block, key tile) pair is masked in full; every visited one
// holds an unmasked key; the dK/dV loop's skipped query tiles likewise.
TEST(FlashTileBounds, SkipOnlyMaskedTiles) {
  for (bool causal : {true, false})
    for (I T : {1, 7, 8, 31, 32, 33, 100, 257})
      for (I rows : {1, 4, 8, 32})
        for (I keys : {1, 8, 32}) {
          for (I q0 = 0; q0 < T; q0 += rows) {
            const I q1 = std::min(q0 + rows, T);
            const I tiles = flash::key_tiles(q1, T, causal, keys);
            ASSERT_LE(tiles, flash::tile_count(T, keys));
            for (I kt = 0; kt < flash::tile_count(T, keys); ++kt) {
              bool any = false;
              for (I t = q0; t < q1; ++t)
                for (I u = kt * keys; u < std::min((kt + 1) * keys, T); ++u) any |= !flash::masked(t, u, T, causal);
              EXPECT_EQ(any, kt < tiles) << "T " << T << " rows [" << q0 << ", " << q1 << ") key tile " << kt;
            }
          }
          for (I k0 = 0; k0 < T; k0 += rows) {
            const I k1 = std::min(k0 + rows, T);
            const I first = flash::first_query_tile(k0, causal, keys);
            for (I qt = 0; qt < flash::tile_count(T, keys); ++qt) {
              bool any = false;
              for (I u = k0; u < k1; ++u)
                for (I t = qt * keys; t < std::min((qt + 1) * keys, T); ++t) any |= !flash::masked(t, u, T, causal);
              if (qt < first) {
                EXPECT_FALSE(any) << "T " << T << " keys [" << k0 << ", " << k1 << ") query tile " << qt;
              }
            }
          }
        }
}

// Causal skipping is real: the forward of T = 1024 in 8-row blocks and 32-key
// tiles visits about half of the (block, tile) pairs.
TEST(FlashTileBounds, CausalSkipsAboutHalf) {
  const I T = 1024, rows = 8, keys = 32;
  I visited = 0, all = 0;
  for (I q0 = 0; q0 < T; q0 += rows) {
    visited += flash::key_tiles(std::min(q0 + rows, T), T, true, keys);
    all += flash::key_tiles(std::min(q0 + rows, T), T, false, keys);
  }
  EXPECT_LT(static_cast<double>(visited) / static_cast<double>(all), 0.53);
  EXPECT_GT(static_cast<double>(visited) / static_cast<double>(all), 0.5);
}

// The online softmax over tiles equals the one-pass softmax of the whole row,
// with the max rising in a later tile and a tile without an unmasked key.
TEST(FlashTileOnlineSoftmax, RescalesWhenTheMaxRises) {
  const std::vector<std::vector<float>> tiles = {{0.5f, -1.0f}, {3.0f, 2.0f}, {}, {-4.0f, 1.0f}};
  flash::RowState st = flash::row_start();
  double acc = 0;  // sum of w * value, value = index
  float index = 0;
  std::vector<float> all;
  for (const auto& tile : tiles) {
    float mx = flash::neg_inf();
    for (float s : tile) mx = std::max(mx, s);
    const float alpha = flash::rescale(st, mx);
    acc *= alpha;
    for (float s : tile) {
      const float w = flash::weight(st, s, false);
      st.l += w;
      acc += w * index;
      index += 1;
      all.push_back(s);
    }
  }
  double z = 0, want = 0, m = *std::max_element(all.begin(), all.end());
  for (std::size_t i = 0; i < all.size(); ++i) {
    z += std::exp(all[i] - m);
    want += std::exp(all[i] - m) * static_cast<double>(i);
  }
  EXPECT_NEAR(acc * flash::out_factor(st), want / z, 1e-6);
  EXPECT_NEAR(flash::logsumexp(st), m + std::log(z), 1e-6);
  EXPECT_EQ(st.m, 3.0f);
}

}  // namespace
}  // namespace shardtrain
