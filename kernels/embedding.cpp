// shardtrain/kernels/embedding.cpp
// Owns the token + learned position embedding: out(b,t,:) = wte(tok(b,t),:) + wpe(t,:).
// Invariants (see embedding.hpp):
//  - forward OVERWRITES out; backward ACCUMULATES (+=) into dwte and dwpe;
//  - deterministic without atomics or scratch: dwte is reduced per block of
//    columns, visiting the (b, t) positions in row-major order, so a token that
//    occurs several times sums its rows in that fixed order; dwpe is reduced per
//    position t, visiting b in order;
//  - token ids are checked to lie in [0, V) with one cheap pass before they are
//    used as indices (a bad id throws instead of reading out of bounds);
//  - wpe may have more rows than T (the model's block size); rows >= T are unused.
//  - one row function per pass for every storage type S (vec_math.hpp): values
//    are widened to compute_t<S> in registers, summed in the fp32 kernel's order and
//    rounded once on store, so T = f16 / bf16 gives the fp32 kernel's results on the
//    same 16-bit inputs rounded once, bit for bit:
//      forward:  out = narrow(widen(wte row) + widen(wpe row)), no scratch;
//      dwpe:     per position t and block of kColBlock columns, the dwpe values are
//                widened into register accumulators, every b adds its dout row in
//                order, and they are rounded back once (for fp32 the same loop,
//                with the accumulators written back unrounded), no scratch;
//      dwte (16-bit only): a token's rows are scattered anywhere in (b, t), so its
//                fp32 accumulators live in the scratch arena (half_tiles.hpp): per
//                block of kVocabBlock vocabulary rows, the rows that occur in
//                tokens are widened into fp32 accumulators, every (b, t) adds its
//                dout row in row-major order, and the rows are rounded back once
//                (rows that do not occur are not touched).
//    Scratch: embedding_half_scratch_elems (the dwte accumulators and their flags).
#include "kernels/embedding.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "kernels/half_tiles.hpp"
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

const std::string kLabelValidate = "Embedding::validate_tokens";
const std::string kLabelForward = "Embedding::forward";
const std::string kLabelBackwardWte = "Embedding::backward_wte";
const std::string kLabelBackwardWpe = "Embedding::backward_wpe";

constexpr std::int64_t kColBlock = 64;  // columns per block of the dwte / dwpe reductions

// Number of token ids outside [0, vocab).
std::int64_t count_bad_tokens(const TokenIndex* tok, std::int64_t n, std::int64_t vocab) {
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      kLabelValidate, range(n),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) {
        acc += (tok[i] < 0 || tok[i] >= vocab) ? 1 : 0;
      },
      bad);
  return bad;
}

// out = a + b, one rounding per element.
template <class S>
SHARDTRAIN_TARGET_CLONES
void add_rows(const S* __restrict a, const S* __restrict b, S* __restrict out, std::int64_t c) {
  for (std::int64_t j = 0; j < c; ++j) out[j] = vec::narrow<S>(vec::widen(a[j]) + vec::widen(b[j]));
}

// dst += src (dst in compute_t<S>: the fp32 dwte of a float call, or a 16-bit call's
// fp32 accumulators).
template <class S>
void accumulate_row(const S* __restrict src, compute_t<S>* __restrict dst, std::int64_t c) {
  for (std::int64_t j = 0; j < c; ++j) dst[j] += vec::widen(src[j]);
}

// dst[j] += sum over b of src[b * stride + j] (b = 0, 1, .., nb - 1 in order), for
// j < c: per block of kColBlock columns in register accumulators, rounded once.
template <class S>
SHARDTRAIN_TARGET_CLONES
void accumulate_strided_rows(const S* __restrict src, std::int64_t stride, std::int64_t nb,
                             S* __restrict dst, std::int64_t c) {
  using T = compute_t<S>;
  for (std::int64_t j0 = 0; j0 < c; j0 += kColBlock) {
    const std::int64_t nj = (c - j0) < kColBlock ? (c - j0) : kColBlock;
    T acc[kColBlock];
    for (std::int64_t j = 0; j < nj; ++j) acc[j] = vec::widen(dst[j0 + j]);
    for (std::int64_t b = 0; b < nb; ++b)
      for (std::int64_t j = 0; j < nj; ++j) acc[j] += vec::widen(src[b * stride + j0 + j]);
    for (std::int64_t j = 0; j < nj; ++j) dst[j0 + j] = vec::narrow<S>(acc[j]);
  }
}

// --- 16-bit dwte ------------------------------------------------------------------

// Scratch of the 16-bit dwte: vocab_rows accumulator rows and one "occurs" flag per row.
struct HalfEmbeddingTiles {
  std::int64_t vocab_rows, c;
  std::int64_t elems() const { return vocab_rows * c + vocab_rows; }
};

HalfEmbeddingTiles half_embedding_tiles(std::int64_t vocab, std::int64_t c) {
  return {half_tiles::min(vocab, half_tiles::kVocabBlock), c};
}

// dwte of a 16-bit call. Shapes and token ids checked by embedding_backward;
// n = nb * nt > 0, c > 0.
template <class H>
void embedding_backward_wte_half(const TokenIndex* tok, const H* dout, H* dwte, std::int64_t n,
                                 std::int64_t c, std::int64_t vocab) {
  using namespace half_tiles;
  const HalfEmbeddingTiles tiles = half_embedding_tiles(vocab, c);
  float* const acc = Scratch(tiles.elems(), "embedding_backward").take(tiles.elems());
  float* const occurs = acc + tiles.vocab_rows * c;
  const std::int64_t col_blocks = (c + kColBlock - 1) / kColBlock;
  for (std::int64_t v0 = 0; v0 < vocab; v0 += tiles.vocab_rows) {
    const std::int64_t nv = min(tiles.vocab_rows, vocab - v0);
    std::fill(occurs, occurs + nv, 0.0f);
    bool any = false;
    for (std::int64_t bt = 0; bt < n; ++bt) {
      const std::int64_t r = static_cast<std::int64_t>(tok[bt]) - v0;
      if (r >= 0 && r < nv) {
        occurs[r] = 1.0f;
        any = true;
      }
    }
    if (!any) continue;
    for (std::int64_t r = 0; r < nv; ++r)
      if (occurs[r] != 0.0f) to_f32(dwte + (v0 + r) * c, acc + r * c, c);
    Kokkos::parallel_for(
        kLabelBackwardWte, range(col_blocks), KOKKOS_LAMBDA(const std::int64_t blk) {
          const std::int64_t j0 = blk * kColBlock;
          const std::int64_t nj = (c - j0) < kColBlock ? (c - j0) : kColBlock;
          for (std::int64_t bt = 0; bt < n; ++bt) {
            const std::int64_t r = static_cast<std::int64_t>(tok[bt]) - v0;
            if (r >= 0 && r < nv) accumulate_row(dout + bt * c + j0, acc + r * c + j0, nj);
          }
        });
    for (std::int64_t r = 0; r < nv; ++r)
      if (occurs[r] != 0.0f) from_f32(acc + r * c, dwte + (v0 + r) * c, c);
  }
}

}  // namespace

std::int64_t embedding_half_scratch_elems(std::int64_t vocab, std::int64_t c) {
  if (vocab <= 0 || c <= 0) return 0;
  return half_embedding_tiles(vocab, c).elems();
}

template <class T>
void embedding_forward(CView2<TokenIndex> tokens, CView2<T> wte, CView2<T> wpe, View3<T> out) {
  const std::int64_t nb = static_cast<std::int64_t>(tokens.extent(0));
  const std::int64_t nt = static_cast<std::int64_t>(tokens.extent(1));
  const std::int64_t c = static_cast<std::int64_t>(wte.extent(1));
  const std::int64_t vocab = static_cast<std::int64_t>(wte.extent(0));
  SHARDTRAIN_CHECK(wpe.extent(1) == wte.extent(1) && wpe.extent(0) >= tokens.extent(1) &&
                       out.extent(0) == tokens.extent(0) && out.extent(1) == tokens.extent(1) &&
                       out.extent(2) == wte.extent(1),
                   "embedding_forward: tokens(" + std::to_string(nb) + "," + std::to_string(nt) +
                       ") wte(" + std::to_string(vocab) + "," + std::to_string(c) + ") wpe(" +
                       std::to_string(wpe.extent(0)) + "," + std::to_string(wpe.extent(1)) +
                       ") out(" + std::to_string(out.extent(0)) + "," +
                       std::to_string(out.extent(1)) + "," + std::to_string(out.extent(2)) + ")");
  SHARDTRAIN_CHECK(contiguous(tokens, wte, wpe, out), "embedding_forward: views must be contiguous");
  const TokenIndex* tok = tokens.data();
  const std::int64_t bad = count_bad_tokens(tok, nb * nt, vocab);
  SHARDTRAIN_CHECK(bad == 0, std::to_string(bad) + " token ids outside [0, " +
                                 std::to_string(vocab) + ")");
  const T* wtep = wte.data();
  const T* wpep = wpe.data();
  T* outp = out.data();
  if constexpr (is_half_v<T>) half_tiles::check_host("embedding_forward");
  Kokkos::parallel_for(kLabelForward, range(nb * nt), KOKKOS_LAMBDA(const std::int64_t bt) {
    const std::int64_t t = bt % nt;
    add_rows(wtep + static_cast<std::int64_t>(tok[bt]) * c, wpep + t * c, outp + bt * c, c);
  });
}

template <class T>
void embedding_backward(CView2<TokenIndex> tokens, CView3<T> dout, View2<T> dwte, View2<T> dwpe) {
  const std::int64_t nb = static_cast<std::int64_t>(tokens.extent(0));
  const std::int64_t nt = static_cast<std::int64_t>(tokens.extent(1));
  const std::int64_t c = static_cast<std::int64_t>(dwte.extent(1));
  const std::int64_t vocab = static_cast<std::int64_t>(dwte.extent(0));
  SHARDTRAIN_CHECK(dwpe.extent(1) == dwte.extent(1) && dwpe.extent(0) >= tokens.extent(1) &&
                       dout.extent(0) == tokens.extent(0) && dout.extent(1) == tokens.extent(1) &&
                       dout.extent(2) == dwte.extent(1),
                   "embedding_backward: tokens(" + std::to_string(nb) + "," +
                       std::to_string(nt) + ") dwte(" + std::to_string(vocab) + "," +
                       std::to_string(c) + ") dwpe(" + std::to_string(dwpe.extent(0)) + "," +
                       std::to_string(dwpe.extent(1)) + ") dout(" +
                       std::to_string(dout.extent(0)) + "," + std::to_string(dout.extent(1)) +
                       "," + std::to_string(dout.extent(2)) + ")");
  SHARDTRAIN_CHECK(contiguous(tokens, dout, dwte, dwpe),
                   "embedding_backward: views must be contiguous");
  const TokenIndex* tok = tokens.data();
  const std::int64_t bad = count_bad_tokens(tok, nb * nt, vocab);
  SHARDTRAIN_CHECK(bad == 0, std::to_string(bad) + " token ids outside [0, " +
                                 std::to_string(vocab) + ")");
  const T* doutp = dout.data();
  T* dwtep = dwte.data();
  T* dwpep = dwpe.data();
  const std::int64_t n = nb * nt;
  if (n == 0 || c == 0) return;
  if constexpr (is_half_v<T>) {
    half_tiles::check_host("embedding_backward");
    // Takes its scratch before anything is written (dwpe included).
    embedding_backward_wte_half(tok, doutp, dwtep, n, c, vocab);
  } else {
    const std::int64_t blocks = (c + kColBlock - 1) / kColBlock;
    Kokkos::parallel_for(kLabelBackwardWte, range(blocks), KOKKOS_LAMBDA(const std::int64_t blk) {
      const std::int64_t j0 = blk * kColBlock;
      const std::int64_t nj = (c - j0) < kColBlock ? (c - j0) : kColBlock;
      for (std::int64_t bt = 0; bt < n; ++bt)
        accumulate_row(doutp + bt * c + j0, dwtep + static_cast<std::int64_t>(tok[bt]) * c + j0,
                       nj);
    });
  }
  Kokkos::parallel_for(kLabelBackwardWpe, range(nt), KOKKOS_LAMBDA(const std::int64_t t) {
    accumulate_strided_rows(doutp + t * c, nt * c, nb, dwpep + t * c, c);
  });
}

#define SHARDTRAIN_INSTANTIATE_EMBEDDING(T)                                                    \
  template void embedding_forward<T>(CView2<TokenIndex>, CView2<T>, CView2<T>, View3<T>);     \
  template void embedding_backward<T>(CView2<TokenIndex>, CView3<T>, View2<T>, View2<T>);
SHARDTRAIN_INSTANTIATE_EMBEDDING(float)
SHARDTRAIN_INSTANTIATE_EMBEDDING(double)
SHARDTRAIN_INSTANTIATE_EMBEDDING(f16)
SHARDTRAIN_INSTANTIATE_EMBEDDING(bf16)
#undef SHARDTRAIN_INSTANTIATE_EMBEDDING

}  // namespace shardtrain
