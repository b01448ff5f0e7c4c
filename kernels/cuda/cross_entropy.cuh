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

template <class T>
void cross_entropy_forward(const T* logits, const std::int32_t* targets, T* losses,
                           std::int64_t n, std::int64_t v, cudaStream_t stream);

template <class T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, float scale,
                            T* dlogits, std::int64_t n, std::int64_t v, cudaStream_t stream);

}  // namespace shardtrain::cuda
