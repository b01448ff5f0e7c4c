// shardtrain/kernels/cuda/cross_entropy.cuh
// CUDA fused softmax cross-entropy over rows of logits (n, v), mirroring
// kernels/cross_entropy.hpp:
//   forward:  losses[i] = logsumexp(logits[i,:]) - logits[i, targets[i]]   (OVERWRITES)
//   backward: dlogits[i,:] = scale * (softmax(logits[i,:]) - onehot(targets[i]))
//             (OVERWRITES; dlogits may be the same memory as logits).
// A negative target ignores its row: loss 0, gradient row 0. The host throws for
// a target >= v; here such a row gets a NaN loss / NaN gradient row (the caller
// validates targets, as for the host kernel). Log-sum-exp subtracts the row max.
// One block per row; block sums use a fixed shared-memory tree, so results are
// deterministic. `scale` is the float the host kernel uses (to_float(T(scale))).
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {

// row_stats (or nullptr; 2 n floats, device): the forward also writes each row's
// running max and sum of exp(x - max) there (rows with an ignored or invalid target
// are left alone). A backward given the forward's row_stats, for the same logits
// (unchanged since) and targets, skips its own statistics pass: one read of the
// logits instead of two, and the same bits, because the forward's statistics are
// what that pass computes (the same code over the same values) wherever the
// backward visits rows as the forward did (16-byte packs or single values: when
// dlogits' alignment differs from logits', the backward computes its own). Used by
// train.device_kernels = "candidate" (not yet run on a device).
template <class T>
void cross_entropy_forward(const T* logits, const std::int32_t* targets, T* losses,
                           std::int64_t n, std::int64_t v, cudaStream_t stream, float* row_stats = nullptr);

template <class T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, float scale,
                            T* dlogits, std::int64_t n, std::int64_t v, cudaStream_t stream,
                            const float* row_stats = nullptr);

}  // namespace shardtrain::cuda
