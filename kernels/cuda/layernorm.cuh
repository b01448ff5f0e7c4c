// shardtrain/kernels/cuda/layernorm.cuh
// CUDA LayerNorm over the last dimension of (n, c) rows with affine w, b,
// mirroring kernels/layernorm.hpp:
//  - forward OVERWRITES y, mean, rstd; mean and rstd = 1/sqrt(var + eps) (biased,
//    two-pass variance) are saved per row in T, y uses the fp32 values;
//  - backward ACCUMULATES into dx, dw and db (+=), x-hat recomputed from
//    (x, mean, rstd) with the saved (T-rounded) statistics.
// Deterministic, no atomics: one warp per row with a fixed shuffle tree for the
// row sums; dw/db are reduced over rows in two passes: per chunk of
// kLayerNormRowChunk rows (rows in order) into an fp32 workspace, then per
// channel over the chunks in order, added to dw/db in fp32 and rounded once.
// All pointers are device pointers. eps is the float the host kernel uses
// (to_float(T(eps)) for 16-bit T).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {

// candidate (train.device_kernels = "candidate", not yet run on a device): for
// packed rows (c a whole number of 16-byte packs, pointers aligned) of at most
// 1024 values (1..4 packs a lane in 16-bit types, 1..8 in fp32), the row is read once
// into registers; the sums and outputs are the same expressions in the same order
// as the default's. Other rows take the default kernels.
template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, float eps,
                       std::int64_t n, std::int64_t c, cudaStream_t stream, bool candidate = false);

// Bytes of fp32 device workspace layernorm_backward needs for (n, c); with
// candidate, enough for either candidate layout.
std::size_t layernorm_backward_workspace_bytes(std::int64_t n, std::int64_t c, bool candidate = false);

// candidate (train.device_kernels = "candidate", not yet run on a device):
// - rows the candidate forward takes (above): one pass computes dx (the default's
//   expressions) and, per block of 32 rows, the dw/db partial sums (each warp its
//   rows in order in registers, the block's 4 warps added in warp order), so x and
//   dy are read once; then the chunks are summed by the grouped pass below;
// - other rows: dw/db's two passes with 8 row groups per block of 32 channels (the
//   same workspace; the groups' sums added in group order).
// Deterministic either way, though dw/db are not bitwise the default's (another
// order of the same sums).
template <class T>
void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, T* dx,
                        T* dw, T* db, std::int64_t n, std::int64_t c, void* workspace,
                        std::size_t workspace_bytes, cudaStream_t stream, bool candidate = false);

}  // namespace shardtrain::cuda
