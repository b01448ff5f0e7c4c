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
//  - T = f16 / bf16 (half_tiles.hpp). The math here is a gather and a scatter-add,
//    so the 16-bit path does it directly on converted values instead of calling
//    the fp32 kernel on tiles (that would need the whole of wte in fp32), with the
//    same visiting order, so results equal the fp32 kernel's on the 16-bit inputs
//    rounded once, bit for bit:
//      forward:  out = round(float(wte row) + float(wpe row)), no scratch;
//      backward: per block of kVocabBlock vocabulary rows, the rows that occur in
//                tokens are loaded into fp32 accumulators, every (b, t) adds its
//                dout row in row-major order, and the rows are rounded back once
//                (rows that do not occur are not touched); dwpe likewise per tile
//                of tile_rows(C) positions, visiting b in order.
//    Scratch: embedding_half_scratch_elems.
#include "kernels/embedding.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "kernels/half_tiles.hpp"

namespace shardtrain {
namespace {

const std::string kLabelValidate = "Embedding::validate_tokens";
const std::string kLabelForward = "Embedding::forward";
const std::string kLabelBackwardWte = "Embedding::backward_wte";
const std::string kLabelBackwardWpe = "Embedding::backward_wpe";

constexpr std::int64_t kColBlock = 64;  // columns per work item of the dwte reduction

template <class... V>
bool contiguous(const V&... v) {
  return (v.span_is_contiguous() && ...);
}

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

template <class T>
void add_rows(const T* __restrict a, const T* __restrict b, T* __restrict out, std::int64_t c) {
  for (std::int64_t j = 0; j < c; ++j) out[j] = a[j] + b[j];
}

template <class T>
void accumulate_row(const T* __restrict src, T* __restrict dst, std::int64_t c) {
  for (std::int64_t j = 0; j < c; ++j) dst[j] += src[j];
}

// --- 16-bit path --------------------------------------------------------------

template <class H>
void add_rows_half(const H* __restrict a, const H* __restrict b, H* __restrict out,
                   std::int64_t c) {
  for (std::int64_t j = 0; j < c; ++j) out[j] = H(to_float(a[j]) + to_float(b[j]));
}

template <class H>
void accumulate_row_half(const H* __restrict src, float* __restrict dst, std::int64_t c) {
  for (std::int64_t j = 0; j < c; ++j) dst[j] += to_float(src[j]);
}

// Scratch of the 16-bit backward: the dwte phase holds vocab_rows accumulator rows
// and one "occurs" flag per row; the dwpe phase reuses the start for pos_rows rows.
struct HalfEmbeddingTiles {
  std::int64_t vocab_rows, pos_rows, c;
  std::int64_t elems() const {
    return std::max(vocab_rows * c + vocab_rows, pos_rows * c);
  }
};

HalfEmbeddingTiles half_embedding_tiles(std::int64_t vocab, std::int64_t c, std::int64_t nt) {
  return {half_tiles::min(vocab, half_tiles::kVocabBlock),
          half_tiles::min(nt, half_tiles::tile_rows(c)), c};
}

// Shapes and token ids checked by embedding_forward.
template <class H>
void embedding_forward_half(const TokenIndex* tok, const H* wte, const H* wpe, H* out,
                            std::int64_t n, std::int64_t nt, std::int64_t c) {
  half_tiles::check_host("embedding_forward");
  Kokkos::parallel_for(kLabelForward, range(n), KOKKOS_LAMBDA(const std::int64_t bt) {
    const std::int64_t t = bt % nt;
    add_rows_half(wte + static_cast<std::int64_t>(tok[bt]) * c, wpe + t * c, out + bt * c, c);
  });
}

// Shapes and token ids checked by embedding_backward; n = nb * nt > 0, c > 0.
template <class H>
void embedding_backward_half(const TokenIndex* tok, const H* dout, H* dwte, H* dwpe,
                             std::int64_t nb, std::int64_t nt, std::int64_t c,
                             std::int64_t vocab) {
  using namespace half_tiles;
  check_host("embedding_backward");
  const std::int64_t n = nb * nt;
  const HalfEmbeddingTiles tiles = half_embedding_tiles(vocab, c, nt);
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
            if (r >= 0 && r < nv) accumulate_row_half(dout + bt * c + j0, acc + r * c + j0, nj);
          }
        });
    for (std::int64_t r = 0; r < nv; ++r)
      if (occurs[r] != 0.0f) from_f32(acc + r * c, dwte + (v0 + r) * c, c);
  }
  for (std::int64_t t0 = 0; t0 < nt; t0 += tiles.pos_rows) {
    const std::int64_t np = min(tiles.pos_rows, nt - t0);
    to_f32(dwpe + t0 * c, acc, np * c);
    Kokkos::parallel_for(kLabelBackwardWpe, range(np), KOKKOS_LAMBDA(const std::int64_t i) {
      for (std::int64_t b = 0; b < nb; ++b)
        accumulate_row_half(dout + (b * nt + t0 + i) * c, acc + i * c, c);
    });
    from_f32(acc, dwpe + t0 * c, np * c);
  }
}

}  // namespace

std::int64_t embedding_half_scratch_elems(std::int64_t vocab, std::int64_t c) {
  if (vocab <= 0 || c <= 0) return 0;
  return half_embedding_tiles(vocab, c, half_tiles::tile_rows(c)).elems();
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
  if constexpr (is_half_v<T>) {
    if (nb * nt > 0) embedding_forward_half(tok, wtep, wpep, outp, nb * nt, nt, c);
  } else {
    Kokkos::parallel_for(kLabelForward, range(nb * nt), KOKKOS_LAMBDA(const std::int64_t bt) {
      const std::int64_t t = bt % nt;
      add_rows(wtep + static_cast<std::int64_t>(tok[bt]) * c, wpep + t * c, outp + bt * c, c);
    });
  }
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
  if constexpr (is_half_v<T>) {
    if (nb * nt > 0 && c > 0) embedding_backward_half(tok, doutp, dwtep, dwpep, nb, nt, c, vocab);
  } else {
    const std::int64_t n = nb * nt;
    const std::int64_t blocks = (c + kColBlock - 1) / kColBlock;
    Kokkos::parallel_for(kLabelBackwardWte, range(blocks), KOKKOS_LAMBDA(const std::int64_t blk) {
      const std::int64_t j0 = blk * kColBlock;
      const std::int64_t nj = (c - j0) < kColBlock ? (c - j0) : kColBlock;
      for (std::int64_t bt = 0; bt < n; ++bt)
        accumulate_row(doutp + bt * c + j0, dwtep + static_cast<std::int64_t>(tok[bt]) * c + j0,
                       nj);
    });
    Kokkos::parallel_for(kLabelBackwardWpe, range(nt), KOKKOS_LAMBDA(const std::int64_t t) {
      for (std::int64_t b = 0; b < nb; ++b)
        accumulate_row(doutp + (b * nt + t) * c, dwpep + t * c, c);
    });
  }
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
