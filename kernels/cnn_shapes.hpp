// shardtrain/kernels/cnn_shapes.hpp
// Owns the parameter structs of the CNN kernels -- Conv2dShape (conv2d.hpp),
// Pool2dShape (pool.hpp), DropoutParams (dropout.hpp) -- and dropout's keep
// predicate, in one Kokkos-free header: the host kernels, ModelOps
// (backend/model_ops.hpp) and the CUDA kernels (kernels/cuda/pool.cuh,
// dropout.cuh, compiled by nvcc without Kokkos) all use these same types, so
// no backend converts between copies of them.
// Invariant: dropout_keeps_bits is the ONE expression of the mask; the host
// kernel and the CUDA kernel both call it (core/rng.hpp's hash64 is host and
// device code), so their masks are bitwise the same.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/rng.hpp"

namespace shardtrain {

struct Conv2dShape {
  std::int64_t batch = 0;         // N
  std::int64_t in_channels = 0;   // IC
  std::int64_t height = 0;        // H
  std::int64_t width = 0;         // W
  std::int64_t out_channels = 0;  // OC
  std::int64_t kernel_h = 0;      // KH
  std::int64_t kernel_w = 0;      // KW
  std::int64_t stride = 1;
  std::int64_t padding = 0;       // zero padding on all four sides

  std::int64_t out_h() const { return (height + 2 * padding - kernel_h) / stride + 1; }
  std::int64_t out_w() const { return (width + 2 * padding - kernel_w) / stride + 1; }
  // Rows of the im2col matrix of one sample: IC * KH * KW (the GEMM inner dimension).
  std::int64_t col_rows() const { return in_channels * kernel_h * kernel_w; }
};

struct Pool2dShape {
  std::int64_t batch = 0;     // N
  std::int64_t channels = 0;  // C
  std::int64_t height = 0;    // H
  std::int64_t width = 0;     // W
  std::int64_t kernel = 2;    // square window
  std::int64_t stride = 2;

  std::int64_t out_h() const { return (height - kernel) / stride + 1; }
  std::int64_t out_w() const { return (width - kernel) / stride + 1; }
};

struct DropoutParams {
  double p = 0.0;            // drop probability, in [0, 1]
  std::uint64_t seed = 0;    // the run's seed
  std::uint64_t stream = 0;  // one per (dropout site, step, micro-batch), chosen by the caller
  std::uint64_t offset = 0;  // global counter of element 0 of this call
  bool training = true;      // false: identity
};

// ceil(p * 2^53) for p in [0, 1], unchecked (dropout_threshold in dropout.hpp
// checks p first). p * 2^53 is exact (a power-of-two scaling).
inline std::uint64_t dropout_threshold_bits(double p) {
  return static_cast<std::uint64_t>(std::ceil(p * 9007199254740992.0));
}

// keep_i of dropout.hpp for global counter `index`: the 53 high bits of the
// counter hash against the threshold (integer comparison, no floating point).
SHARDTRAIN_HOST_DEVICE constexpr bool dropout_keeps_bits(std::uint64_t seed, std::uint64_t stream,
                                                         std::uint64_t index, std::uint64_t threshold) {
  return (hash64(seed, stream, index) >> 11) >= threshold;
}

}  // namespace shardtrain
