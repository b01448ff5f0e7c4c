// shardtrain/kernels/cuda/flash_attention.cuh
// Owns our own tiled ("flash") multi-head self-attention on the device
// (model.attention = "flash"): the semantics of kernels/attention.hpp without the
// key padding mask (causal or bidirectional, every key valid), computed tile by
// tile with an online softmax, so no (T, T) matrix is ever in memory and, when
// causal, the key tiles above the diagonal are skipped. The per-tile math (tile
// loop bounds, online softmax, the backward's P, D and dS) is
// kernels/flash_tile.hpp, shared with the host test that runs the same algorithm
// on the CPU (tests/unit/kernels/flash_tile_test.cpp).
//   qkv (B, T, 3C) as kernels/attention.hpp ([q | k | v], head h = channels
//   [h*hd, (h+1)*hd) of each); out (B, T, C); lse (B, H, T) fp32, each query row's
//   log sum_u exp(s(t, u)) with s = q_t . k_u / sqrt(hd): all the forward saves
//   besides its output. backward recomputes the probabilities from qkv and lse.
// Storage float, __half or __nv_bfloat16; every dot product, the softmax and all
// accumulators are fp32, each output rounded to T once.
// forward OVERWRITES out and lse; backward OVERWRITES dqkv (every element). The
// backward needs flash_attention_workspace_bytes(s) bytes of workspace (D =
// rowsum(dO * O), B*H*T floats), 256-byte aligned (cudaMalloc's are), scratch
// valid only during the call.
// Deterministic, bitwise: no atomics; dQ is summed by one warp per query row over
// the key tiles in order (one kernel), dK and dV by one warp per key row over the
// query tiles in order (another kernel); every in-warp reduction is the same
// butterfly.
// Head width hd = C/H in [1, kFlashMaxHeadDim]; T >= 0, any value (the last tile
// is partial). Nothing allocates or synchronizes; everything runs on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention.cuh"  // AttentionShape

namespace shardtrain::cuda {

inline constexpr std::int64_t kFlashMaxHeadDim = 128;

// Elements of lse: B*H*T floats.
std::int64_t flash_attention_lse_elems(const AttentionShape& s);
// Bytes of backward's workspace: B*H*T floats, rounded up to 256.
std::size_t flash_attention_workspace_bytes(const AttentionShape& s);

template <class T>
void flash_attention_forward(cudaStream_t stream, const AttentionShape& s, const T* qkv, T* out, float* lse);

template <class T>
void flash_attention_backward(cudaStream_t stream, const AttentionShape& s, const T* qkv, const T* out,
                              const T* dout, const float* lse, void* workspace, std::size_t workspace_bytes,
                              T* dqkv);

#define SHARDTRAIN_CUDA_DECLARE_FLASH_ATTENTION(T)                                                       \
  extern template void flash_attention_forward<T>(cudaStream_t, const AttentionShape&, const T*, T*,    \
                                                  float*);                                              \
  extern template void flash_attention_backward<T>(cudaStream_t, const AttentionShape&, const T*,       \
                                                   const T*, const T*, const float*, void*, std::size_t, \
                                                   T*);
SHARDTRAIN_CUDA_DECLARE_FLASH_ATTENTION(float)
SHARDTRAIN_CUDA_DECLARE_FLASH_ATTENTION(__half)
SHARDTRAIN_CUDA_DECLARE_FLASH_ATTENTION(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_DECLARE_FLASH_ATTENTION

}  // namespace shardtrain::cuda
