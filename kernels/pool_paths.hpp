// shardtrain/kernels/pool_paths.hpp
// INTERNAL to kernels/ and its tests (not part of the kernel API; pool.hpp is):
// the implementations of max pooling a caller can ask for by name, so that the
// unit tests run each of them on this CPU and compare them bit for bit, and the
// AVX-512 row kernels of pool_avx512.cpp.
// Every path has pool.hpp's semantics exactly (first maximum / first NaN wins,
// y the stored value, argmax the in-plane index, dx = 0 + the routed dy, sums
// in row-major output order); they differ only in speed:
//  - Scalar: the window scan and zero-then-scatter backward in compute_t<T>;
//    every shape, every T.
//  - Vector: 2x2 windows with stride 2, float / bf16 / f16: row loops on the
//    storage bits that GCC vectorises per target clone (AVX2 and baseline x86,
//    and other CPUs); short rows (ow below the vector width) run mostly scalar.
//  - Avx512: the same shapes and types with AVX-512F/BW intrinsics, 16 outputs
//    per step with masked loads and stores, so short rows (MNIST's 12 and 4
//    outputs) stay vectorised; only where the CPU has AVX-512F and BW.
//  - Auto: Avx512 where available, else Vector, for the shapes they take;
//    Scalar otherwise. What pool.hpp's functions run.
// A path that does not take a shape or type falls back as Auto would below it
// (Avx512 -> Vector -> Scalar), so every path accepts every call.
#pragma once

#include <cstdint>

#include "kernels/pool.hpp"

namespace shardtrain {

enum class PoolPath { Auto, Avx512, Vector, Scalar };

// Whether this CPU runs the Avx512 path (AVX-512F and AVX-512BW).
bool pool_avx512_available();

template <class T>
void max_pool2d_forward_path(PoolPath path, const Pool2dShape& s, CView4<T> x, View4<T> y,
                             View4<std::int32_t> argmax);
template <class T>
void max_pool2d_backward_path(PoolPath path, const Pool2dShape& s, CView4<T> dy,
                              CView4<std::int32_t> argmax, View4<T> dx);

// pool_avx512.cpp, T = float, bf16, f16; only where pool_avx512_available().
// One (n, c) plane of a 2x2 / stride 2 pool: x (h, w) -> y, argmax (oh, ow).
namespace pool_avx512 {
template <class T>
void forward_plane_2x2(const T* x, T* y, std::int32_t* argmax, std::int32_t w, std::int32_t oh,
                       std::int32_t ow);
// dx (h, w) from dy and argmax (oh, ow), every element written. Returns false,
// having written the plane partly, when an argmax is not in its own window: the
// caller then runs the general backward on the plane.
template <class T>
bool backward_plane_2x2(const T* dy, const std::int32_t* argmax, T* dx, std::int32_t h, std::int32_t w,
                        std::int32_t oh, std::int32_t ow);
}  // namespace pool_avx512

}  // namespace shardtrain
