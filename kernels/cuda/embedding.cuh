// shardtrain/kernels/cuda/embedding.cuh
// CUDA token + learned position embedding, mirroring kernels/embedding.hpp:
//   forward:  out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]          (OVERWRITES out)
//   backward: dwte[v,:] += sum over (b,t) with tokens[b,t] == v of dout[b,t,:]
//             dwpe[t,:] += sum over b of dout[b,t,:]               (ACCUMULATE)
// Deterministic, no float atomics: the (b,t) positions are stably sorted by token
// id (cub radix sort, integer keys: same permutation on every run) and cut into
// chunks of at most 64 positions of one token (at run starts and at every 64th
// sorted position); one thread per (chunk, channel) sums its chunk's rows in
// ascending (b,t) order in fp32, the run's first chunk starting from dwte, and a
// token with several chunks then gets its chunk sums added in order and rounded
// once. So a token that fills most of the batch is summed by n/64 threads per
// channel, not one, in a fixed order (bitwise the same every run; for a token
// within one chunk, the host kernel's order exactly). dwpe: one thread per
// (t, channel), b in order.
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

// Bytes of device workspace embedding_backward needs for n = b * t positions of
// c channels (the sort buffers, 2 ceil(n / 64) c fp32 chunk sums, cub's storage).
std::size_t embedding_backward_workspace_bytes(std::int64_t n, std::int64_t c);

// `workspace`: at least embedding_backward_workspace_bytes(b * t, c) bytes,
// 256-byte aligned (cudaMalloc memory is), not overlapping any other argument.
template <class T>
void embedding_backward(const std::int32_t* tokens, const T* dout, T* dwte, T* dwpe,
                        std::int64_t b, std::int64_t t, std::int64_t c, std::int64_t vocab,
                        void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace shardtrain::cuda
