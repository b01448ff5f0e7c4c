// shardtrain/kernels/cuda/vector_reduce.cuh
// CUDA vector kernels around the model (the CUDA backend's VectorOps,
// src/backend/cuda): the deterministic partial sums of squares of the gradient
// norm, the first inf/NaN, and fp32 <-> storage-type conversion.
// Determinism: sum_of_squares_partials launches a FIXED grid (grid blocks of
// kReduceThreads threads, independent of the data); thread i of block b sums
// the elements b*threads + i + k*grid*threads in k order, in double, and the
// block reduces its threads in a fixed tree; partials[b] is the block's sum. The
// caller sums the partials in order on the host, so the norm is bitwise the
// same on every run of the same inputs (not the host backend's order, though).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardtrain::cuda {

constexpr unsigned kReduceThreads = 256;
constexpr unsigned kReduceGrid = 256;  // partials per call

// partials[0, kReduceGrid) = block sums of x[i]^2 (x widened to float, squared in double).
template <class T>
void sum_of_squares_partials(const T* x, std::int64_t n, double* partials, cudaStream_t stream);

// One piece of a flat vector: n elements from element `offset`.
struct ReducePiece {
  std::int64_t offset = 0, n = 0;
};

// The same partials as one sum_of_squares_partials call per piece, in one launch:
// partials[k * kReduceGrid + b] = piece k's block b, bitwise what the per-piece
// call writes at partials + k * kReduceGrid. `pieces` is a DEVICE array of
// num_pieces (at most 65535) entries.
template <class T>
void sum_of_squares_pieces_partials(const T* x, const ReducePiece* pieces, std::int64_t num_pieces, double* partials,
                                    cudaStream_t stream);

// *first = min(*first, index of every inf/NaN in x[0, n)); the caller
// initialises *first (device memory) to ~0ull.
template <class T>
void first_non_finite(const T* x, std::int64_t n, unsigned long long* first, cudaStream_t stream);

template <class T>
void widen(const T* x, float* y, std::int64_t n, cudaStream_t stream);   // y = float(x)
template <class T>
void narrow(const float* x, T* y, std::int64_t n, cudaStream_t stream);  // y = round-to-nearest-even(x)

}  // namespace shardtrain::cuda
