// shardtrain/kernels/cuda/attention.cuh
// Owns multi-head self-attention on the device (everything between the qkv
// and the output projections), mirroring kernels/attention.hpp:
//   qkv(B,T,3C) last dim is [q | k | v], each C = H heads x hd = C/H (head-major);
//   att = softmax(q k^T / sqrt(hd)) with position t attending to s < len_b and,
//   when causal, s <= t (len_b = lengths[b], a DEVICE array of B entries in
//   [1, T]; lengths == nullptr: all T valid);
//   out(B,T,C) = att v, heads concatenated back in head-major order.
// `saved` has the SAME layout and element count as the host kernel's
// (attention_saved_elems = 3*B*T*C + B*H*T*T elements of T):
//   [ q (B,H,T,hd) | k (B,H,T,hd) | v (B,H,T,hd) | probs (B,H,T,T) ]
// probs(b,h,t,s) is exactly 0 where masked (so dK, dV rows >= len_b are 0). forward OVERWRITES out and saved,
// backward OVERWRITES dqkv. Deterministic (no atomics, fixed reduction orders).
//
// The workspace DIFFERS from the host's (T*T elements of T): it is a byte buffer
// of attention_workspace_bytes<T>(s) bytes (see attention.cu for its regions),
// scratch valid only during one call, independent of B (the sequences are
// processed one after another, the H heads of a sequence in one batched GEMM).
// Its start must be 256-byte aligned (cudaMalloc pointers are).
// Each call sets `handle` to `stream`; nothing allocates or synchronizes.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace shardtrain::cuda {

// Same fields as shardtrain::AttentionShape (kernels/attention.hpp), which this
// header does not include so that it stays free of Kokkos.
struct AttentionShape {
  std::int64_t batch = 0;    // B
  std::int64_t seq_len = 0;  // T
  std::int64_t channels = 0; // C
  std::int64_t n_head = 0;   // H, divides C
  bool causal = true;        // false: bidirectional (encoder)
};

std::int64_t attention_saved_elems(const AttentionShape& s);  // 3*B*T*C + B*H*T*T

// Bytes of workspace attention_forward / attention_backward need for T.
template <class T>
std::size_t attention_workspace_bytes(const AttentionShape& s);

template <class T>
void attention_forward(cublasHandle_t handle, cudaStream_t stream, const AttentionShape& s,
                       const T* qkv, T* saved, void* workspace, std::size_t workspace_bytes,
                       T* out, const std::int32_t* lengths = nullptr);

template <class T>
void attention_backward(cublasHandle_t handle, cudaStream_t stream, const AttentionShape& s,
                        const T* dout, const T* saved, void* workspace,
                        std::size_t workspace_bytes, T* dqkv, const std::int32_t* lengths = nullptr);

#define SHARDTRAIN_CUDA_DECLARE_ATTENTION(T)                                                  \
  extern template std::size_t attention_workspace_bytes<T>(const AttentionShape&);           \
  extern template void attention_forward<T>(cublasHandle_t, cudaStream_t,                    \
                                            const AttentionShape&, const T*, T*, void*,      \
                                            std::size_t, T*, const std::int32_t*);           \
  extern template void attention_backward<T>(cublasHandle_t, cudaStream_t,                   \
                                             const AttentionShape&, const T*, const T*,      \
                                             void*, std::size_t, T*, const std::int32_t*);
SHARDTRAIN_CUDA_DECLARE_ATTENTION(float)
SHARDTRAIN_CUDA_DECLARE_ATTENTION(__half)
SHARDTRAIN_CUDA_DECLARE_ATTENTION(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_DECLARE_ATTENTION

}  // namespace shardtrain::cuda
