// shardtrain/kernels/attention.cpp
// Owns multi-head self-attention between the qkv and output projections:
// causal (GPT) or bidirectional (encoder), with an optional key padding mask.
//
// saved (attention_saved_elems = 3*B*T*C + B*H*T*T), written by forward, read by backward:
//   [ q (B,H,T,hd) | k (B,H,T,hd) | v (B,H,T,hd) | probs (B,H,T,T) ]
//   q/k/v are qkv's [q | k | v] column blocks permuted head-major, so every (b, h)
//   slice is a contiguous (T, hd) matrix; probs(b,h,t,s) = softmax over the
//   unmasked s (s < len_b, and s <= t when causal) of q.k / sqrt(hd), exactly 0
//   where masked.
// workspace (attention_workspace_elems = slots * (T*T + T*hd)), scratch valid only
// during one call, one piece of T*T + T*hd per slot (slots = attention_pair_slots):
//   forward:  [ K^T (hd,T) | unused ] of the (b, h) pair the slot is processing;
//   backward: [ dP / dS (T,T) | V^T (hd,T) ] of the (b, h) pair the slot is processing.
// Each (b, h) pair issues its products (small_gemm, kernels/small_gemm.hpp: register
// tiles, no packing, every element one fma chain over the inner index) and its
// softmax rows, which keeps the (T,T) block hot in cache and makes the workspace
// independent of B and H (beyond the slots). How the pairs are spread
// (for_each_pair):
//   - one slot (Serial Kokkos, one thread, or B*H = 1): the pairs one after another
//     from the host, each softmax a row-parallel Kokkos kernel (as before issue 36);
//   - more than one thread: slots = min(threads, B*H), one parallel_for iteration
//     per slot running the pairs slot, slot + slots, ... in order on its thread with
//     its own workspace piece (its own 16-bit tiles), the softmax rows a plain loop.
//     Every pair's arithmetic is the one-slot arithmetic (the same row functions and
//     small_gemm calls), and no sum runs across pairs, so the results are bitwise
//     the same at every thread count and as the Serial build's (test
//     AttentionPairs.* in tests/unit/kernels/attention_test.cpp).
// Operands inside qkv/out/dout/dqkv are addressed in place with their row
// stride (C or 3C); P^T and dS^T are P and dS read with swapped strides; K^T and
// V^T are transposed into the workspace (small_gemm wants B's rows contiguous):
//   forward:  S = (1/sqrt(hd)) Q K^T -> probs (softmax in place), out[b,:,h] = P V
//   backward: dV = P^T dY, dP = dY V^T, dS = P * (dP - rowsum(dP * P)) / sqrt(hd)
//             (0 where masked), dQ = dS K, dK = dS^T Q, written straight into dqkv.
// Causal: each product runs in row blocks of kRowBlock (4) query rows [r0, r1),
// which take the keys [0, r1) only (and key blocks [c0, c1) the query rows
// [c0, T)), so about half of the full FLOPs at any T. The softmax writes every
// entry of its probs row, so whatever a skipped block left in `saved` never survives.
// Key padding (len_b < T): the products only touch key columns [0, len_b) (so a
// padded sequence costs len_b/T of the score FLOPs); dK and dV rows >= len_b are
// set to 0. Bidirectional: one block of all T rows.
// Invariants: out and dqkv are OVERWRITTEN (every element is written once);
// deterministic (fixed order everywhere, no atomics); no allocation.
//
// Each (b, h) pair runs forward_head / backward_head (scores, softmax, products)
// on contiguous operands in the compute type; the callers differ only in where the
// operands come from and the results go.
//
// T = f16 / bf16 (half_tiles.hpp): `saved` has the fp32 layout with T elements.
//   forward:  the split into q/k/v(b, h) is the same 16-bit copy as for float (the
//             saved q, k, v are the inputs' bits); per (b, h) q, v are widened and
//             K^T widened while transposing (one pass each, exact) into fp32 tiles,
//             forward_head<float> writes fp32 probs and an out tile, and those are
//             rounded once into probs(b, h) and out[b, :, h];
//   backward: per (b, h) q, k, probs and dout[b, :, h] are widened, V^T widened while
//             transposing, backward_head<float> writes a dqkv tile (T, 3hd) that is
//             rounded once into the q/k/v columns of dqkv[b, :, h].
// So the 16-bit results are the fp32 kernel's per-head math on the 16-bit inputs
// (the backward on the 16-bit saved probs), each output rounded once. Per head, not
// per sequence: the scratch is 7*T*hd + 2*T^2 floats per slot (forward uses 4*T*hd +
// T^2 of each) instead of growing with H (GPT-2 small, T = 1024: 10 MB a slot). The
// 16-bit `workspace` is not used.
// bf16 with vdpbf16ps (attention_bf16_dot_products): the scores take Q from `saved`
// and backward's dP = dY V^T takes dY from dout, unwidened, with K's / V's 32-bit
// pairs packed into K^T's / V^T's tile (bf16_pair_pack, small_gemm_bf16); the rest
// as above (quickstart GPT on a Zen 4: attention 3.3 -> 3.0 ms a step).
#include "kernels/attention.hpp"

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/half_tiles.hpp"
#include "kernels/small_gemm.hpp"
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

const std::string kLabelSplitHeads = "Attention::forward_split_heads";
const std::string kLabelSoftmax = "Attention::forward_softmax";
const std::string kLabelSoftmaxGrad = "Attention::backward_softmax";

// Rows per causal block: the products of rows [r0, r1) take the keys [0, r1) only,
// so at most kRowBlock - 1 masked columns per row are computed (and then ignored);
// small_gemm's tiles are kRowBlock rows high.
constexpr std::int64_t kRowBlock = 4;

// Keys a causal row block [.., r1) (or a bidirectional one) uses.
std::int64_t key_cols(bool causal, std::int64_t r1, std::int64_t len) {
  return causal && r1 < len ? r1 : len;
}

// dst (cols x rows) = src (rows x cols)^T, both contiguous row-major, in the
// compute type (a 16-bit src is widened on the way, exactly).
template <class S>
void transpose(const S* __restrict src, std::int64_t rows, std::int64_t cols,
               compute_t<S>* __restrict dst) {
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) dst[j * rows + i] = vec::widen(src[i * cols + j]);
}

struct Dims {
  std::int64_t b, t, c, h, hd;
  bool causal;
};

Dims check_shape(const AttentionShape& s) {
  SHARDTRAIN_CHECK(s.batch >= 0 && s.seq_len >= 0 && s.channels >= 0 && s.n_head > 0,
                   "attention: negative size or n_head <= 0");
  SHARDTRAIN_CHECK(s.channels % s.n_head == 0, "attention: n_head " + std::to_string(s.n_head) +
                                                   " does not divide channels " +
                                                   std::to_string(s.channels));
  return {s.batch, s.seq_len, s.channels, s.n_head, s.channels / s.n_head, s.causal};
}

// lengths: empty or B entries in [1, T].
void check_lengths(const char* op, const Dims& d, CView1<std::int32_t> lengths) {
  if (lengths.extent(0) == 0) return;
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(lengths.extent(0)) == d.b,
                   std::string(op) + ": lengths has " + std::to_string(lengths.extent(0)) +
                       " entries, batch is " + std::to_string(d.b));
  for (std::int64_t b = 0; b < d.b; ++b)
    SHARDTRAIN_CHECK(lengths(b) >= 1 && lengths(b) <= d.t,
                     std::string(op) + ": lengths[" + std::to_string(b) + "] = " +
                         std::to_string(lengths(b)) + " is not in [1, " + std::to_string(d.t) + "]");
}

// The valid-length array (nullptr when lengths is empty: every sequence is full),
// and the valid keys of sequence b under it.
const std::int32_t* lengths_or_null(CView1<std::int32_t> lengths) {
  return lengths.extent(0) == 0 ? nullptr : lengths.data();
}
std::int64_t valid_len(const std::int32_t* lens, std::int64_t b, std::int64_t nt) {
  return lens == nullptr ? nt : static_cast<std::int64_t>(lens[b]);
}

// One pair's workspace (fp32 / double), sequence length t and head size hd: [ (T,T) | (hd,T) ].
std::int64_t workspace_elems_for(std::int64_t t, std::int64_t hd) { return t * t + t * hd; }

const std::string kLabelForwardPairs = "Attention::forward_pairs";
const std::string kLabelBackwardPairs = "Attention::backward_pairs";

// Pairs processed at once (attention_pair_slots): the host execution space's
// threads, at most the B*H pairs; 1 with Serial Kokkos or one thread (then the pairs
// run one after another and only their softmax rows are threaded).
std::int64_t pair_slots(const Dims& d) {
  const std::int64_t threads = ExecSpace().concurrency();
  const std::int64_t pairs = d.b * d.h;
  return threads > 1 && pairs > 1 ? (threads < pairs ? threads : pairs) : 1;
}

// Runs fn(slot, bh, rows_threaded) once for every pair bh = b*H + h in [0, pairs)
// (label: the parallel_for's, when slots > 1).
// slots == 1: from the host thread, bh in order, slot 0, rows_threaded = true.
// Otherwise one parallel_for iteration per slot, which runs the pairs bh = slot,
// slot + slots, ... in order on one thread with rows_threaded = false; slot s owns
// the s-th piece of the workspace (and of the 16-bit scratch), so no two threads
// ever share one. Which thread runs a slot does not matter: each pair's arithmetic
// reads only the pair's inputs and its slot's piece and writes only the pair's
// outputs, and nothing is summed across pairs, so the results are bitwise the same
// at every thread count.
template <class F>
void for_each_pair(const std::string& label, std::int64_t pairs, std::int64_t slots, const F& fn) {
  if (slots == 1) {
    for (std::int64_t bh = 0; bh < pairs; ++bh) fn(std::int64_t{0}, bh, true);
    return;
  }
  Kokkos::parallel_for(label, range(slots), [&](const std::int64_t slot) {
    for (std::int64_t bh = slot; bh < pairs; bh += slots) fn(slot, bh, false);
  });
}

// Rows [r0, nt) of a (T, hd) head slice with row stride ld set to 0.
template <class T>
void zero_rows(T* m, std::int64_t ld, std::int64_t r0, std::int64_t nt, std::int64_t hd) {
  for (std::int64_t r = r0; r < nt; ++r)
    for (std::int64_t i = 0; i < hd; ++i) m[r * ld + i] = T(0);
}

template <class V>
bool has_extents(const V& v, std::int64_t e0, std::int64_t e1, std::int64_t e2) {
  return static_cast<std::int64_t>(v.extent(0)) == e0 &&
         static_cast<std::int64_t>(v.extent(1)) == e1 &&
         static_cast<std::int64_t>(v.extent(2)) == e2 && v.span_is_contiguous();
}

// Row t of a causal softmax, in place: p[0..len) = softmax(p[0..len)), p[len..n) = 0.
// p[len..padded) is set to -inf first (exp gives exactly 0 there), so the exp, sum
// and scale loops run over whole kLanes blocks instead of a scalar remainder.
template <class T>
SHARDTRAIN_TARGET_CLONES
void causal_softmax_row(T* __restrict p, std::int64_t len, std::int64_t n) {
  const std::int64_t up = (len + vec::kLanes - 1) / vec::kLanes * vec::kLanes;
  const std::int64_t padded = up < n ? up : n;
  for (std::int64_t j = len; j < padded; ++j) p[j] = -std::numeric_limits<T>::infinity();
  const T m = vec::max(p, padded);
  for (std::int64_t j = 0; j < padded; ++j) p[j] = vec::exp_fast<T>(p[j] - m);
  const T inv = T(1) / vec::sum(p, padded);
  for (std::int64_t j = 0; j < padded; ++j) p[j] *= inv;
  for (std::int64_t j = padded; j < n; ++j) p[j] = T(0);
}

// Row t of the softmax backward, in place on dp: dp = scale * p * (dp - <dp, p>) on
// [0, len), 0 on [len, n).
template <class T>
SHARDTRAIN_TARGET_CLONES
void causal_softmax_grad_row(const T* __restrict p, T* __restrict dp, T scale, std::int64_t len,
                             std::int64_t n) {
  const T c = vec::dot(dp, p, len);
  for (std::int64_t j = 0; j < len; ++j) dp[j] = scale * p[j] * (dp[j] - c);
  for (std::int64_t j = len; j < n; ++j) dp[j] = T(0);
}

// qkv(b, t, [q|k|v], h, :) -> q/k/v(b, h, t, :) of `saved`: a copy (exact for
// every T, so the 16-bit saved q, k, v are the inputs' bits).
template <class T>
void split_heads(const Dims& d, const T* src, T* saved) {
  const std::int64_t nt = d.t, nc = d.c, nh = d.h, hd = d.hd;
  const std::int64_t qkv_elems = d.b * nt * nc;  // one of q, k, v: (B,H,T,hd)
  T* q = saved;
  T* k = q + qkv_elems;
  T* v = k + qkv_elems;
  Kokkos::parallel_for(kLabelSplitHeads, range(d.b * nt), KOKKOS_LAMBDA(const std::int64_t bt) {
    const std::int64_t b = bt / nt, t = bt % nt;
    const T* row = src + bt * 3 * nc;
    for (std::int64_t h = 0; h < nh; ++h) {
      const std::int64_t dst = ((b * nh + h) * nt + t) * hd;
      // memcpy: GCC copies 16-bit structs one by one in a plain loop.
      std::memcpy(q + dst, row + h * hd, static_cast<std::size_t>(hd) * sizeof(T));
      std::memcpy(k + dst, row + nc + h * hd, static_cast<std::size_t>(hd) * sizeof(T));
      std::memcpy(v + dst, row + 2 * nc + h * hd, static_cast<std::size_t>(hd) * sizeof(T));
    }
  });
}

// The products whose operands are all inputs, scores = scale Q K^T and dP = dY V^T,
// as callables (r0, r1, kc, out): out[r0:r1, 0:kc] (row stride T, out at row r0) =
// alpha A[r0:r1] B[0:kc]^T, A (T, hd) with row stride lda. fma_product: small_gemm
// on compute-type operands, bt = B^T (hd, T); dot_product: small_gemm_bf16 on the
// bf16 inputs, bp = B's pairs (bf16_pair_pack, (hd/2, T) words).
template <class T>
auto fma_product(const T* a, std::int64_t lda, const T* bt, std::int64_t nt, std::int64_t hd, T alpha) {
  return [=](std::int64_t r0, std::int64_t r1, std::int64_t kc, T* out) {
    small_gemm<T>(r1 - r0, kc, hd, alpha, a + r0 * lda, lda, 1, bt, nt, out, nt);
  };
}
auto dot_product(const bf16* a, std::int64_t lda, const std::uint32_t* bp, std::int64_t nt, std::int64_t hd,
                 float alpha) {
  return [=](std::int64_t r0, std::int64_t r1, std::int64_t kc, float* out) {
    small_gemm_bf16(r1 - r0, kc, hd, alpha, a + r0 * lda, lda, bp, nt, out, nt);
  };
}

// Forward of one (sequence, head) pair in compute type T (float or double):
// scores as above, v (T, hd) contiguous; writes the probabilities pp (T, T) and
// y (T, hd) with row stride ldy. len: the valid keys. rows_threaded: the softmax
// rows are a Kokkos parallel_for (pairs one after another), else a plain loop on the
// calling thread (pairs in parallel, for_each_pair); each row's arithmetic is the
// same either way.
template <class T, class Scores>
void forward_head(const Scores& scores, const T* vh, T* pp, T* yh, std::int64_t ldy,
                  std::int64_t nt, std::int64_t hd, std::int64_t len, bool causal, bool rows_threaded) {
  const std::int64_t rb = causal ? kRowBlock : nt;  // rows per block
  // S[r0:r1, 0:kc] = scale Q[r0:r1] K[0:kc]^T with kc = min(r1, len) (causal) or len:
  // masked blocks are neither computed nor read.
  for (std::int64_t r0 = 0; r0 < nt; r0 += rb) {
    const std::int64_t r1 = r0 + rb < nt ? r0 + rb : nt;
    scores(r0, r1, key_cols(causal, r1, len), pp + r0 * nt);
  }
  const auto row = [=](const std::int64_t t) {
    causal_softmax_row(pp + t * nt, causal && t + 1 < len ? t + 1 : len, nt);
  };
  if (rows_threaded)
    Kokkos::parallel_for(kLabelSoftmax, range(nt), KOKKOS_LAMBDA(const std::int64_t t) { row(t); });
  else
    for (std::int64_t t = 0; t < nt; ++t) row(t);
  // Y[r0:r1] = P[r0:r1, 0:kc] V[0:kc]
  for (std::int64_t r0 = 0; r0 < nt; r0 += rb) {
    const std::int64_t r1 = r0 + rb < nt ? r0 + rb : nt;
    small_gemm<T>(r1 - r0, hd, key_cols(causal, r1, len), T(1), pp + r0 * nt, nt, 1, vh, hd,
                  yh + r0 * ldy, ldy);
  }
}

// Backward of one (sequence, head) pair in compute type T: q, k (T, hd) contiguous,
// dp_product (dP = dY V^T, above), pp = the probabilities (T, T), dy (T, hd) with row
// stride ldy; writes dq, dk, dv (T, hd) with row stride ld (rows >= len of dk and dv
// are 0); dpp: (T, T) workspace (dP, then dS). rows_threaded: as forward_head's.
template <class T, class DpProduct>
void backward_head(const T* qh, const T* kh, const DpProduct& dp_product, const T* pp, const T* dyh,
                   std::int64_t ldy, T* dqh, T* dkh, T* dvh, std::int64_t ld, T* dpp,
                   std::int64_t nt, std::int64_t hd, std::int64_t len, bool causal, T scale,
                   bool rows_threaded) {
  const std::int64_t rb = causal ? kRowBlock : nt;  // rows (key rows) per block
  // Key-row blocks [c0, c1) (c1 <= len) take the query rows [c0, T) when causal
  // (P, dS are 0 above the diagonal), all rows otherwise; A = P^T or dS^T is read
  // with swapped strides. Key rows >= len of dK and dV are 0.
  for (std::int64_t c0 = 0; c0 < len; c0 += rb) {  // dV = P^T dY
    const std::int64_t c1 = c0 + rb < len ? c0 + rb : len;
    const std::int64_t r_lo = causal ? c0 : 0;
    small_gemm<T>(c1 - c0, hd, nt - r_lo, T(1), pp + r_lo * nt + c0, 1, nt, dyh + r_lo * ldy, ldy,
                  dvh + c0 * ld, ld);
  }
  zero_rows(dvh, ld, len, nt, hd);
  for (std::int64_t r0 = 0; r0 < nt; r0 += rb) {  // dP = dY V^T
    const std::int64_t r1 = r0 + rb < nt ? r0 + rb : nt;
    dp_product(r0, r1, key_cols(causal, r1, len), dpp + r0 * nt);
  }
  const auto row = [=](const std::int64_t t) {
    causal_softmax_grad_row(pp + t * nt, dpp + t * nt, scale, causal && t + 1 < len ? t + 1 : len, nt);
  };
  if (rows_threaded)
    Kokkos::parallel_for(kLabelSoftmaxGrad, range(nt), KOKKOS_LAMBDA(const std::int64_t t) { row(t); });
  else
    for (std::int64_t t = 0; t < nt; ++t) row(t);
  for (std::int64_t r0 = 0; r0 < nt; r0 += rb) {  // dQ = dS K
    const std::int64_t r1 = r0 + rb < nt ? r0 + rb : nt;
    small_gemm<T>(r1 - r0, hd, key_cols(causal, r1, len), T(1), dpp + r0 * nt, nt, 1, kh, hd,
                  dqh + r0 * ld, ld);
  }
  for (std::int64_t c0 = 0; c0 < len; c0 += rb) {  // dK = dS^T Q
    const std::int64_t c1 = c0 + rb < len ? c0 + rb : len;
    const std::int64_t r_lo = causal ? c0 : 0;
    small_gemm<T>(c1 - c0, hd, nt - r_lo, T(1), dpp + r_lo * nt + c0, 1, nt, qh + r_lo * hd, hd,
                  dkh + c0 * ld, ld);
  }
  zero_rows(dkh, ld, len, nt, hd);
}

// fp32 tiles of one (sequence, head) pair for the 16-bit path, one slot's piece
// (elems() floats, the larger, backward's, so one size serves both) carved as
//   forward:  q | K^T | v | y (each T hd) | probs (T^2);
//   backward: q | k | V^T | dy (each T hd) | dqkv (T, 3hd) | probs | dP/dS (each T^2).
struct HalfAttentionTiles {
  std::int64_t t, hd;
  std::int64_t forward_elems() const { return 4 * t * hd + t * t; }
  std::int64_t backward_elems() const { return 7 * t * hd + 2 * t * t; }
  std::int64_t elems() const { return backward_elems(); }

  struct Forward { float *q, *kt, *v, *y, *p; };
  struct Backward { float *q, *k, *vt, *dy, *dqkv, *p, *dp; };
  // The tiles of slot `slot` in the slots' pieces starting at base.
  Forward forward_at(float* base, std::int64_t slot) const {
    float* at = base + slot * elems();
    auto take = [&at](std::int64_t n) { float* r = at; at += n; return r; };
    Forward f;
    f.q = take(t * hd), f.kt = take(hd * t), f.v = take(t * hd), f.y = take(t * hd), f.p = take(t * t);
    return f;
  }
  Backward backward_at(float* base, std::int64_t slot) const {
    float* at = base + slot * elems();
    auto take = [&at](std::int64_t n) { float* r = at; at += n; return r; };
    Backward g;
    g.q = take(t * hd), g.k = take(t * hd), g.vt = take(hd * t), g.dy = take(t * hd), g.dqkv = take(3 * t * hd);
    g.p = take(t * t), g.dp = take(t * t);
    return g;
  }
};

// Whether the 16-bit path takes the scores and dP on vdpbf16ps (attention.hpp).
std::atomic<bool> g_allow_dot{true};  // attention_allow_bf16_dot_products

template <class H>
bool dot_products(std::int64_t hd) {
  return std::is_same_v<H, bf16> && hd % 2 == 0 && small_gemm_bf16_native() &&
         g_allow_dot.load(std::memory_order_relaxed);
}

// Shapes checked by attention_forward; B, T, C > 0.
template <class H>
void attention_forward_half(const Dims& d, CView3<H> qkv, View1<H> saved, View3<H> out,
                            CView1<std::int32_t> lengths) {
  using namespace half_tiles;
  check_host("attention_forward");
  const std::int64_t nt = d.t, nc = d.c, nh = d.h, hd = d.hd;
  const HalfAttentionTiles tiles{nt, hd};
  const std::int64_t slots = pair_slots(d);
  // One slot's tiles per concurrent pair, taken before any output is written.
  float* base = Scratch(slots * tiles.elems(), "attention_forward").take(slots * tiles.elems());
  split_heads(d, qkv.data(), saved.data());
  const std::int64_t head_elems = nt * hd;
  const std::int64_t qkv_elems = d.b * nt * nc;  // one of q, k, v in saved
  const H* q = saved.data();
  const H* k = q + qkv_elems;
  const H* v = k + qkv_elems;
  H* probs = saved.data() + 3 * qkv_elems;
  H* y = out.data();
  const std::int32_t* lens = lengths_or_null(lengths);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool dot = dot_products<H>(hd);
  for_each_pair(kLabelForwardPairs, d.b * nh, slots,
                [&](std::int64_t slot, std::int64_t bh, bool rows_threaded) {
    const HalfAttentionTiles::Forward f = tiles.forward_at(base, slot);
    const std::int64_t b = bh / nh, h = bh % nh;
    const std::int64_t len = valid_len(lens, b, nt);
    to_f32(v + bh * head_elems, f.v, head_elems);
    if constexpr (std::is_same_v<H, bf16>) {
      if (dot) {  // Q straight from saved, K's pairs packed into K^T's tile
        auto* kp = reinterpret_cast<std::uint32_t*>(f.kt);
        bf16_pair_pack(k + bh * head_elems, nt, hd, hd, kp, nt);
        forward_head<float>(dot_product(q + bh * head_elems, hd, kp, nt, hd, scale), f.v, f.p, f.y, hd, nt, hd,
                            len, d.causal, rows_threaded);
      }
    }
    if (!dot) {  // (dot is false for f16)
      to_f32(q + bh * head_elems, f.q, head_elems);
      transpose(k + bh * head_elems, nt, hd, f.kt);
      forward_head<float>(fma_product(f.q, hd, f.kt, nt, hd, scale), f.v, f.p, f.y, hd, nt, hd, len, d.causal,
                          rows_threaded);
    }
    from_f32(f.p, probs + bh * nt * nt, nt * nt);
    store_block(f.y, nt, hd, y + b * nt * nc + h * hd, nc);
  });
}

// Shapes checked by attention_backward; B, T, C > 0.
template <class H>
void attention_backward_half(const Dims& d, CView3<H> dout, CView1<H> saved, View3<H> dqkv,
                             CView1<std::int32_t> lengths) {
  using namespace half_tiles;
  check_host("attention_backward");
  const std::int64_t nt = d.t, nc = d.c, nh = d.h, hd = d.hd;
  const HalfAttentionTiles tiles{nt, hd};
  const std::int64_t slots = pair_slots(d);
  float* base = Scratch(slots * tiles.elems(), "attention_backward").take(slots * tiles.elems());
  const std::int64_t head_elems = nt * hd;
  const std::int64_t qkv_elems = d.b * nt * nc;
  const H* q = saved.data();
  const H* k = q + qkv_elems;
  const H* v = k + qkv_elems;
  const H* probs = v + qkv_elems;
  const H* dy = dout.data();
  H* dx = dqkv.data();
  const std::int32_t* lens = lengths_or_null(lengths);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool dot = dot_products<H>(hd);
  for_each_pair(kLabelBackwardPairs, d.b * nh, slots,
                [&](std::int64_t slot, std::int64_t bh, bool rows_threaded) {
    const HalfAttentionTiles::Backward g = tiles.backward_at(base, slot);
    const std::int64_t b = bh / nh, h = bh % nh;
    const std::int64_t len = valid_len(lens, b, nt);
    const H* dyh = dy + b * nt * nc + h * hd;
    to_f32(q + bh * head_elems, g.q, head_elems);
    to_f32(k + bh * head_elems, g.k, head_elems);
    to_f32(probs + bh * nt * nt, g.p, nt * nt);
    load_block(dyh, nc, nt, hd, g.dy);
    float* dqkvt = g.dqkv;
    const auto run = [&](const auto& dp_product) {
      backward_head<float>(g.q, g.k, dp_product, g.p, g.dy, hd, dqkvt, dqkvt + hd, dqkvt + 2 * hd, 3 * hd, g.dp,
                           nt, hd, len, d.causal, scale, rows_threaded);
    };
    if constexpr (std::is_same_v<H, bf16>) {
      if (dot) {  // dY straight from dout, V's pairs packed into V^T's tile
        auto* vp = reinterpret_cast<std::uint32_t*>(g.vt);
        bf16_pair_pack(v + bh * head_elems, nt, hd, hd, vp, nt);
        run(dot_product(dyh, nc, vp, nt, hd, 1.0f));
      }
    }
    if (!dot) {
      transpose(v + bh * head_elems, nt, hd, g.vt);
      run(fma_product(g.dy, hd, g.vt, nt, hd, 1.0f));
    }
    // Row 3 t + part of the (T, 3hd) tile, read as (3T, hd), is part (dq, dk, dv) of
    // dqkv[b, t, :, h]: (3T) rows of hd at stride C from dqkv[b, 0, 0, h].
    store_block(dqkvt, 3 * nt, hd, dx + b * nt * 3 * nc + h * hd, nc);
  });
}

}  // namespace

std::int64_t attention_pair_slots(const AttentionShape& s) { return pair_slots(check_shape(s)); }

bool attention_bf16_dot_products(const AttentionShape& s) { return dot_products<bf16>(check_shape(s).hd); }

void attention_allow_bf16_dot_products(bool allow) { g_allow_dot.store(allow, std::memory_order_relaxed); }

std::int64_t attention_half_scratch_elems(const AttentionShape& s) {
  const Dims d = check_shape(s);
  if (d.b == 0 || d.t == 0 || d.c == 0) return 0;
  return pair_slots(d) * HalfAttentionTiles{d.t, d.hd}.elems();
}

std::int64_t attention_saved_elems(const AttentionShape& s) {
  const Dims d = check_shape(s);
  return 3 * d.b * d.t * d.c + d.b * d.h * d.t * d.t;
}

std::int64_t attention_workspace_elems(const AttentionShape& s) {
  const Dims d = check_shape(s);
  return pair_slots(d) * workspace_elems_for(d.t, d.hd);
}

template <class T>
void attention_forward(const AttentionShape& s, CView3<T> qkv, View1<T> saved, View1<T> workspace,
                       View3<T> out, CView1<std::int32_t> lengths) {
  const Dims d = check_shape(s);
  SHARDTRAIN_CHECK(has_extents(qkv, d.b, d.t, 3 * d.c), "attention_forward: qkv is not (B,T,3C)");
  SHARDTRAIN_CHECK(has_extents(out, d.b, d.t, d.c), "attention_forward: out is not (B,T,C)");
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(saved.extent(0)) >= attention_saved_elems(s),
                   "attention_forward: saved has " + std::to_string(saved.extent(0)) +
                       " elements, needs " + std::to_string(attention_saved_elems(s)));
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(workspace.extent(0)) >= attention_workspace_elems(s),
                   "attention_forward: workspace too small");
  check_lengths("attention_forward", d, lengths);
  if (d.b == 0 || d.t == 0 || d.c == 0) return;
  if constexpr (is_half_v<T>) {
    attention_forward_half(d, qkv, saved, out, lengths);
  } else {
    half_tiles::check_host("attention_forward");  // small_gemm reads host memory
    const std::int64_t nt = d.t, nc = d.c, nh = d.h, hd = d.hd;
    const std::int64_t head_elems = nt * hd;       // one (T, hd) slice
    const std::int64_t qkv_elems = d.b * nt * nc;  // one of q, k, v: (B,H,T,hd)
    split_heads(d, qkv.data(), saved.data());
    const T* q = saved.data();
    const T* k = q + qkv_elems;
    const T* v = k + qkv_elems;
    T* probs = saved.data() + 3 * qkv_elems;
    const T scale = T(1) / std::sqrt(T(hd));
    const std::int64_t slots = pair_slots(d), slot_elems = workspace_elems_for(nt, hd);
    T* ws = workspace.data();
    T* y = out.data();
    const std::int32_t* lens = lengths_or_null(lengths);
    for_each_pair(kLabelForwardPairs, d.b * nh, slots,
                  [&](std::int64_t slot, std::int64_t bh, bool rows_threaded) {
      T* kt = ws + slot * slot_elems;  // (hd, T): K^T of the pair
      const std::int64_t b = bh / nh, h = bh % nh;
      transpose(k + bh * head_elems, nt, hd, kt);
      forward_head<T>(fma_product(q + bh * head_elems, hd, kt, nt, hd, scale), v + bh * head_elems,
                      probs + bh * nt * nt, y + b * nt * nc + h * hd, nc, nt, hd, valid_len(lens, b, nt),
                      d.causal, rows_threaded);
    });
  }
}

template <class T>
void attention_backward(const AttentionShape& s, CView3<T> dout, CView1<T> saved,
                        View1<T> workspace, View3<T> dqkv, CView1<std::int32_t> lengths) {
  const Dims d = check_shape(s);
  SHARDTRAIN_CHECK(has_extents(dout, d.b, d.t, d.c), "attention_backward: dout is not (B,T,C)");
  SHARDTRAIN_CHECK(has_extents(dqkv, d.b, d.t, 3 * d.c),
                   "attention_backward: dqkv is not (B,T,3C)");
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(saved.extent(0)) >= attention_saved_elems(s),
                   "attention_backward: saved has " + std::to_string(saved.extent(0)) +
                       " elements, needs " + std::to_string(attention_saved_elems(s)));
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(workspace.extent(0)) >= attention_workspace_elems(s),
                   "attention_backward: workspace has " + std::to_string(workspace.extent(0)) +
                       " elements, needs " + std::to_string(attention_workspace_elems(s)));
  check_lengths("attention_backward", d, lengths);
  if (d.b == 0 || d.t == 0 || d.c == 0) return;
  if constexpr (is_half_v<T>) {
    attention_backward_half(d, dout, saved, dqkv, lengths);
  } else {
    half_tiles::check_host("attention_backward");  // small_gemm reads host memory
    const std::int64_t nt = d.t, nc = d.c, nh = d.h, hd = d.hd;
    const std::int64_t head_elems = nt * hd;
    const std::int64_t qkv_elems = d.b * nt * nc;
    const T* q = saved.data();
    const T* k = q + qkv_elems;
    const T* v = k + qkv_elems;
    const T* probs = v + qkv_elems;
    const T scale = T(1) / std::sqrt(T(hd));
    const std::int64_t ld = 3 * nc;  // row stride of dqkv
    const std::int64_t slots = pair_slots(d), slot_elems = workspace_elems_for(nt, hd);
    T* ws = workspace.data();
    T* dx = dqkv.data();
    const T* dy = dout.data();
    const std::int32_t* lens = lengths_or_null(lengths);
    for_each_pair(kLabelBackwardPairs, d.b * nh, slots,
                  [&](std::int64_t slot, std::int64_t bh, bool rows_threaded) {
      T* dpp = ws + slot * slot_elems;  // (T, T): dP, then dS, of the pair
      T* vt = dpp + nt * nt;             // (hd, T): V^T of the pair
      const std::int64_t b = bh / nh, h = bh % nh;
      const std::int64_t len = valid_len(lens, b, nt);
      T* dqh = dx + b * nt * ld + h * hd;
      transpose(v + bh * head_elems, nt, hd, vt);
      const T* dyh = dy + b * nt * nc + h * hd;
      backward_head<T>(q + bh * head_elems, k + bh * head_elems, fma_product(dyh, nc, vt, nt, hd, T(1)),
                       probs + bh * nt * nt, dyh, nc, dqh, dqh + nc, dqh + 2 * nc, ld, dpp, nt, hd, len,
                       d.causal, scale, rows_threaded);
    });
  }
}

#define SHARDTRAIN_INSTANTIATE_ATTENTION(T)                                                   \
  template void attention_forward<T>(const AttentionShape&, CView3<T>, View1<T>, View1<T>,   \
                                     View3<T>, CView1<std::int32_t>);                        \
  template void attention_backward<T>(const AttentionShape&, CView3<T>, CView1<T>, View1<T>, \
                                      View3<T>, CView1<std::int32_t>);
SHARDTRAIN_INSTANTIATE_ATTENTION(float)
SHARDTRAIN_INSTANTIATE_ATTENTION(double)
SHARDTRAIN_INSTANTIATE_ATTENTION(f16)
SHARDTRAIN_INSTANTIATE_ATTENTION(bf16)
#undef SHARDTRAIN_INSTANTIATE_ATTENTION

}  // namespace shardtrain
