// shardtrain/kernels/cuda/embedding.cuh
// CUDA token + learned position embedding, mirroring kernels/embedding.hpp:
//   forward:  out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]          (OVERWRITES out)
//   backward: dwte[v,:] += sum over (b,t) with tokens[b,t] == v of dout[b,t,:]
//             dwpe[t,:] += sum over b of dout[b,t,:]               (ACCUMULATE)
// Deterministic, no float atomics: the (b,t) positions are stably sorted by token
// id (cub radix sort, integer keys: same permutation on every run), then one
// thread per (vocabulary row, channel) adds its positions' rows in ascending
// (b,t) order -- the order the host kernel uses -- to an fp32 accumulator loaded
// from dwte and rounds once. dwpe: one thread per (t, channel), b in order.
// Token ids must lie in [0, vocab) (the caller validates data, as on the host);
// the kernels never read out of bounds: forward writes NaN rows for a bad id and
// backward ignores it.
// All pointers are device pointers; tokens, out/dout are (b, t) row-major.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {

template <class T>
void embedding_forward(const std::int32_t* tokens, const T* wte, const T* wpe, T* out,
                       std::int64_t b, std::int64_t t, std::int64_t c, std::int64_t vocab,
                       cudaStream_t stream);

// Bytes of device workspace embedding_backward needs for n = b * t positions and
// `vocab` rows (the sort buffers plus cub's temporary storage).
std::size_t embedding_backward_workspace_bytes(std::int64_t n, std::int64_t vocab);

// `workspace`: at least embedding_backward_workspace_bytes(b * t, vocab) bytes,
// 256-byte aligned (cudaMalloc memory is), not overlapping any other argument.
template <class T>
void embedding_backward(const std::int32_t* tokens, const T* dout, T* dwte, T* dwpe,
                        std::int64_t b, std::int64_t t, std::int64_t c, std::int64_t vocab,
                        void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace shardtrain::cuda
