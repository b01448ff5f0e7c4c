// shardtrain/kernels/cuda/common.cuh
// Owns what every CUDA op in kernels/cuda shares: the storage types (float,
// __half, __nv_bfloat16) with fp32 math (load_f32 / store_as), launch sizing,
// and the check after a launch. Every op takes device pointers and the stream
// it runs on; nothing here allocates or synchronizes.
// Invariants: 16-bit values are widened to fp32 for arithmetic and rounded once
// (round to nearest even) when stored, as the host kernels do (core/half.hpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace shardtrain::cuda {

__host__ __device__ inline float load_f32(float x) { return x; }
__host__ __device__ inline float load_f32(__half x) { return __half2float(x); }
__host__ __device__ inline float load_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__host__ __device__ inline T store_as(float x);
template <>
__host__ __device__ inline float store_as<float>(float x) { return x; }
template <>
__host__ __device__ inline __half store_as<__half>(float x) { return __float2half_rn(x); }
template <>
__host__ __device__ inline __nv_bfloat16 store_as<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// 16-byte packs: kPack<T> values of T loaded or stored by one 128-bit access
// (8 bf16 / f16, 4 float). The memory-bound ops (GELU, LayerNorm, cross-entropy)
// take a pack path where their pointers are 16-byte aligned and a scalar path
// for the rest; the math per element is the same on both.
template <class T>
inline constexpr int kPack = static_cast<int>(16 / sizeof(T));
template <class T>
struct alignas(16) Pack {
  T v[kPack<T>];
};
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Blocks of `threads` covering n elements (at least one block). Throws when
// that exceeds gridDim.x's limit of 2^31 - 1 blocks: the cast to unsigned
// would otherwise wrap past 2^32 blocks and silently leave elements out.
inline unsigned blocks_for(std::int64_t n, unsigned threads) {
  const std::int64_t b = (n + threads - 1) / threads;
  SHARDTRAIN_CHECK(b <= INT32_MAX, "CUDA launch of " + std::to_string(n) + " elements needs more than 2^31 - 1 blocks of " +
                                       std::to_string(threads) + " threads");
  return static_cast<unsigned>(b > 0 ? b : 1);
}

// Throws shardtrain::Error naming `what` when the last launch failed.
void check_launch(const char* what);

}  // namespace shardtrain::cuda
