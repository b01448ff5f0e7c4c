// shardtrain/kernels/half_tiles.hpp
// INTERNAL to kernels/*.cpp and their tests (not part of the kernel API): the tile
// geometry and the tile helpers of the 16-bit (f16 / bf16) kernel paths.
//
// How a 16-bit kernel call works (every kernel instantiated for T = f16 / bf16):
//  1. it checks shapes and indices with the same code as the fp32 kernel (the
//     16-bit path is dispatched after those checks);
//  2. row-wise and elementwise kernels (gelu, layernorm, cross entropy, embedding
//     forward and dwpe, accumulate) are DIRECT: one loop body per pass, written over
//     the storage type S with vec::widen / vec::narrow (vec_math.hpp), serves float
//     and the 16-bit types. It loads 16-bit values, widens them to fp32 in registers
//     (exact), does the fp32 kernel's operations in the same order, and rounds each
//     output once on store (round to nearest even, half.hpp). Outputs that the
//     kernel accumulates into (+=: layernorm's dx, dw, db, accumulate's y, dwpe)
//     are widened, added to in fp32 registers and rounded once per call; a
//     parameter gradient summed over rows (dw, db, dwpe) keeps its fp32 sum in
//     registers across ALL rows of the call. No scratch (their *_half_scratch_elems
//     are 0), except where an unrounded fp32 intermediate must outlive a pass: the
//     cross entropy backward keeps one row of exp values (V floats) in the arena;
//  3. the other kernels take fp32 tile buffers from the scratch arena
//     (half_scratch.hpp) before they write anything, so a missing arena throws with
//     outputs untouched, and per tile convert the inputs to fp32 (exact), run the
//     fp32 math on the tile (the fp32 kernel, or its per-head core for attention),
//     and round the outputs back to 16 bits once (convert() of half.hpp):
//     GEMMs (linear, gemm) of f16, and of bf16 without native bf16 dot products
//     (bf16 on AVX512-BF16 CPUs goes straight to oneDNN, no scratch); attention (its
//     per-head products run on fp32 tiles for small_gemm); embedding dwte (a token's
//     rows are scattered over the batch, so its fp32 accumulators live in scratch,
//     kVocabBlock vocabulary rows at a time, rounded once per call). A GEMM tile's
//     accumulated output (dw, db, y of a fused residual add) is loaded into fp32,
//     accumulated in fp32 and rounded back once per call.
//  Consequence: a row-wise kernel's 16-bit output is bit for bit the fp32 kernel's
//  output on the same (16-bit) inputs, rounded once (the direct kernels' parameter
//  gradients included); GEMM-based outputs and GEMM parameter gradients differ from
//  that only by fp32 summation order. half_tiles_test.cpp checks both.
//
// Tile geometry of the tiled kernels (what the *_half_scratch_elems functions size;
// none depends on the number of rows N beyond one tile):
//  - GEMMs (linear, gemm): blocks of kGemmRows rows of x (A side) and kGemmCols rows
//    of w (B side), each with the whole inner dimension K, one fp32 GEMM (BLAS) per
//    block pair. Every operand is converted once per block pair at most (x once per
//    row block), which costs about 1/(2 * block) conversions per GEMM flop;
//  - embedding dwte: kVocabBlock vocabulary rows per fp32 accumulator;
//  - attention: one (sequence, head) pair at a time;
//  - conv2d (the CNN): one image at a time (conv2d.cpp).
//
// Host memory only: conversions are host loops. With a device memory space the
// 16-bit paths throw (check_host) instead of reading device pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/half_scratch.hpp"
#include "kernels/types.hpp"

namespace shardtrain::half_tiles {

inline constexpr std::int64_t kGemmRows = 256;
inline constexpr std::int64_t kGemmCols = 256;
inline constexpr std::int64_t kVocabBlock = 1024;

constexpr std::int64_t min(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

inline void check_host(const char* op) {
  SHARDTRAIN_CHECK((Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible),
                   std::string(op) +
                       ": the fp16/bf16 path converts tiles on the host, but this memory "
                       "space is not host-accessible");
}

// out[i] = float(in[i]) (exact) / out[i] = H(in[i]) (round to nearest even), i < n.
template <class H>
inline void to_f32(const H* in, float* out, std::int64_t n) {
  convert(in, out, static_cast<std::size_t>(n));
}
template <class H>
inline void from_f32(const float* in, H* out, std::int64_t n) {
  convert(in, out, static_cast<std::size_t>(n));
}

// A (rows, cols) block of a row-major 16-bit matrix with leading dimension ld ->
// a contiguous (rows, cols) fp32 buffer, and back.
template <class H>
inline void load_block(const H* src, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                       float* dst) {
  if (ld == cols) return to_f32(src, dst, rows * cols);
  convert_rows(src, static_cast<std::size_t>(ld), dst, static_cast<std::size_t>(cols), static_cast<std::size_t>(rows),
               static_cast<std::size_t>(cols));
}
template <class H>
inline void store_block(const float* src, std::int64_t rows, std::int64_t cols, H* dst,
                        std::int64_t ld) {
  if (ld == cols) return from_f32(src, dst, rows * cols);
  convert_rows(src, static_cast<std::size_t>(cols), dst, static_cast<std::size_t>(ld), static_cast<std::size_t>(rows),
               static_cast<std::size_t>(cols));
}

// Consecutive pieces of one scratch request of `elems` floats (taken at construction,
// so before the caller writes any output).
class Scratch {
 public:
  Scratch(std::int64_t elems, const char* op)
      : m_next(half_scratch(static_cast<std::size_t>(elems), op)), m_left(elems) {}
  float* take(std::int64_t n) {
    SHARDTRAIN_CHECK(n <= m_left, "16-bit tile layout exceeds its own scratch size");
    float* p = m_next;
    m_next += n;
    m_left -= n;
    return p;
  }

 private:
  float* m_next;
  std::int64_t m_left;
};

}  // namespace shardtrain::half_tiles
