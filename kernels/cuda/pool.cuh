// shardtrain/kernels/cuda/pool.cuh
// CUDA max pooling with the host kernel's semantics (kernels/pool.hpp), NCHW
// row-major, square window `kernel`, stride `stride`, no padding:
//  - forward: y = the window maximum, scanned row-major; an element replaces the
//    running maximum only when strictly greater, or NaN while the maximum is not
//    (first maximum / first NaN wins); y is the stored value itself; argmax
//    (int32) = its in-plane index ih * W + iw;
//  - backward OVERWRITES dx: dx(e) = sum of dy(o) over the outputs o, in row-major
//    output order, whose argmax is e (0 elsewhere), added in fp32 and rounded to T
//    after every addition exactly as the host does -- bitwise the host result
//    for every T, also for overlapping windows.
// Unlike the host, backward does not validate argmax (that needs a device
// reduction and a sync): an index outside the plane matches no element, so it
// is dropped, never written out of bounds.
// float / __half / __nv_bfloat16. NOT RUN here (no GPU): tests/gpu/cnn_kernels_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cnn_shapes.hpp"  // Pool2dShape

namespace shardtrain::cuda {

// Throws shardtrain::Error (the host kernel's max_pool2d_check_shape conditions).
template <class T>
void max_pool2d_forward(const Pool2dShape& s, const T* x, T* y, std::int32_t* argmax, cudaStream_t stream);
template <class T>
void max_pool2d_backward(const Pool2dShape& s, const T* dy, const std::int32_t* argmax, T* dx,
                         cudaStream_t stream);

}  // namespace shardtrain::cuda
