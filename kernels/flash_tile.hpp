// shardtrain/kernels/flash_tile.hpp
// Owns the per-tile math of the tiled ("flash") attention of
// kernels/cuda/flash_attention.cu, as SHARDTRAIN_HOST_DEVICE functions that the
// CUDA kernels and the host unit test (tests/unit/kernels/flash_tile_test.cpp,
// which runs the same tiled algorithm on the CPU against a float64 reference)
// both call, so the algorithm is checked in every build, without a GPU:
//  - the tile loop bounds with the causal skipping: which key tiles a block of
//    query rows visits (forward, dQ), which query tiles a block of key rows is
//    visited by (dK, dV), and the mask of one (query, key) pair;
//  - the online softmax (running max m and sum l of exp(s - m) of one query row,
//    rescaled when a tile raises the max) and its result, the row's log-sum-exp;
//  - the backward's pieces: P = exp(s - lse) recomputed from the saved
//    log-sum-exp, D = rowsum(dO * O) and dS = P * (dP - D).
// Semantics (kernels/attention.hpp): s(t, u) = scale * q_t . k_u with scale =
// 1/sqrt(hd); row t attends to the keys u < key_end(t) (u <= t when causal);
// out_t = sum_u softmax(s(t, .))_u v_u; lse_t = log sum_u exp(s(t, u)).
// Backward: dV_u = sum_t P(t,u) dO_t; dP(t,u) = dO_t . v_u; D_t = dO_t . O_t;
// dS = P (dP - D); dQ_t = scale sum_u dS(t,u) k_u; dK_u = scale sum_t dS(t,u) q_t.
// Invariants: a tile loop over [0, key_tiles(...)) visits every unmasked key of
// its rows, and skips only tiles whose every (row, key) pair is masked; the first
// key tile of any row holds an unmasked key (key 0), so the running max is finite
// after it and rescale() never forms exp(-inf - -inf).
// Pure C++ with float math from <cmath> (expf / logf / fmaxf exist in device
// code too); no Kokkos, CUDA or other header.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.hpp"

namespace shardtrain::flash {

// -inf as a float, on the host and in device code.
SHARDTRAIN_HOST_DEVICE inline float neg_inf() { return -__builtin_huge_valf(); }

// --- tile loop bounds --------------------------------------------------------
// Row t (0 <= t < T) attends to the keys [0, key_end(t)).
SHARDTRAIN_HOST_DEVICE constexpr std::int64_t key_end(std::int64_t t, std::int64_t seq_len, bool causal) {
  return causal ? t + 1 : seq_len;
}
// Whether key u is masked for row t.
SHARDTRAIN_HOST_DEVICE constexpr bool masked(std::int64_t t, std::int64_t u, std::int64_t seq_len, bool causal) {
  return u >= key_end(t, seq_len, causal);
}
// Key tiles of `tile` keys that the query rows [q_begin, q_end) visit (q_end <= T):
// tiles [0, key_tiles) hold every key any of them attends to. Causal: the last row's
// keys, ceil(q_end / tile); the tiles above the diagonal are skipped.
SHARDTRAIN_HOST_DEVICE constexpr std::int64_t key_tiles(std::int64_t q_end, std::int64_t seq_len, bool causal,
                                                        std::int64_t tile) {
  const std::int64_t keys = q_end > 0 ? key_end(q_end - 1, seq_len, causal) : 0;
  return (keys + tile - 1) / tile;
}
// The first query row that attends to any key of [k_begin, ...): causal k_begin
// (row t sees keys u <= t), else 0. A dK/dV loop runs its query tiles from the
// tile holding this row to the last, skipping those below.
SHARDTRAIN_HOST_DEVICE constexpr std::int64_t first_query(std::int64_t k_begin, bool causal) {
  return causal ? k_begin : 0;
}
SHARDTRAIN_HOST_DEVICE constexpr std::int64_t first_query_tile(std::int64_t k_begin, bool causal, std::int64_t tile) {
  return first_query(k_begin, causal) / tile;
}
SHARDTRAIN_HOST_DEVICE constexpr std::int64_t tile_count(std::int64_t n, std::int64_t tile) {
  return (n + tile - 1) / tile;
}

// --- online softmax of one query row ------------------------------------------
// m: the largest score seen; l: sum of exp(s - m) over the scores seen.
struct RowState {
  float m;
  float l;
};
SHARDTRAIN_HOST_DEVICE inline RowState row_start() { return {neg_inf(), 0.0f}; }
// A tile whose largest unmasked score is tile_max (-inf: none) arrives: the max
// becomes max(m, tile_max), l is rescaled to it, and the factor returned is the
// one the row's output accumulator must be multiplied by before the tile's
// exp(s - m) v terms are added (0 for the first tile: nothing accumulated yet).
SHARDTRAIN_HOST_DEVICE inline float rescale(RowState& st, float tile_max) {
  const float m_new = fmaxf(st.m, tile_max);
  const float alpha = st.m == neg_inf() ? 0.0f : expf(st.m - m_new);
  st.l *= alpha;
  st.m = m_new;
  return alpha;
}
// The weight of score s after rescale (0 for a masked key): exp(s - m). The caller
// adds the tile's weights to l (its own summation order) and their v terms to the
// accumulator.
SHARDTRAIN_HOST_DEVICE inline float weight(const RowState& st, float s, bool is_masked) {
  return is_masked ? 0.0f : expf(s - st.m);
}
// After the last tile: the output is accumulator * out_factor, and the row's
// log-sum-exp (all backward keeps besides the output) is m + log l.
SHARDTRAIN_HOST_DEVICE inline float out_factor(const RowState& st) { return 1.0f / st.l; }
SHARDTRAIN_HOST_DEVICE inline float logsumexp(const RowState& st) { return st.m + logf(st.l); }

// --- backward -------------------------------------------------------------------
// P(t, u) recomputed from the score and the row's saved log-sum-exp (0 if masked).
SHARDTRAIN_HOST_DEVICE inline float prob(float s, float lse, bool is_masked) {
  return is_masked ? 0.0f : expf(s - lse);
}
// dS(t, u) = P (dP - D_t), D_t = rowsum(dO_t * O_t) (= sum_u P dP over the row).
SHARDTRAIN_HOST_DEVICE inline float score_grad(float p, float dp, float d_row) { return p * (dp - d_row); }
// D_t's running sum: one product of dO_t * O_t added (the caller's order).
SHARDTRAIN_HOST_DEVICE inline float d_row_add(float acc, float dout, float out) { return acc + dout * out; }

}  // namespace shardtrain::flash
