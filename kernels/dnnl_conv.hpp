// shardtrain/kernels/dnnl_conv.hpp
// INTERNAL to kernels/*.cpp: 2-D convolutions on oneDNN's convolution
// primitives (forward with the bias fused, backward data, backward weights),
// the engine of conv2d<float> and, on CPUs with native bf16, conv2d<bf16>.
// Semantics and layouts are conv2d.hpp's: x (N, IC, H, W), w (OC, IC, KH, KW),
// y (N, OC, OH, OW), plain NCHW / OIHW on the caller's buffers (memory objects
// wrap the pointers; nothing is copied or reordered). `data` is the storage type
// of x, w, b, y, dy and dx (f32, or bf16 with fp32 accumulation inside oneDNN).
// Backward weights always writes fp32 dw / db, OVERWRITING them (oneDNN's
// convention; conv2d.cpp adds them to the caller's gradients).
// Invariants:
//  - one entry per distinct (shape with its batch, data type, bias): the three
//    primitive descriptors are made on first use and cached for the life of the
//    process, each primitive on its first execution (an eval-only batch makes no
//    backward primitives); later calls only wrap pointers;
//  - scratchpad_mode::user: oneDNN's scratch memory is the caller's `scratchpad`
//    (at least dnnl_conv_scratchpad_bytes(s, data) bytes, any alignment), so
//    kernels never allocate and the model's memory plan counts these bytes;
//  - oneDNN decides the scratchpad size per batch from its thread count: with one
//    thread it does not depend on the batch; with t > 1 it varies with the batch
//    and is periodic in it (measured; conv2d.cpp sizes for the worst case);
//  - every primitive has run to completion when the call returns;
//  - results depend only on the inputs, the shape (batch included) and the
//    thread count at descriptor creation, not on earlier calls;
//  - dnnl::error becomes shardtrain::Error naming the caller and the shape.
#pragma once

#include <cstddef>
#include <string>

#include <dnnl.hpp>

#include "kernels/cnn_shapes.hpp"

namespace shardtrain {

// Bytes of scratchpad the three passes of shape s need (the largest of forward,
// backward data and backward weights, with and without bias). s.batch >= 1.
std::size_t dnnl_conv_scratchpad_bytes(const Conv2dShape& s, dnnl::memory::data_type data);

// y = conv(x, w) (+ b when b != nullptr; b has the data type).
void dnnl_conv_forward(const Conv2dShape& s, dnnl::memory::data_type data, const void* x, const void* w,
                       const void* b, void* y, void* scratchpad);

// dx = conv_transpose(dy, w) (OVERWRITTEN).
void dnnl_conv_backward_data(const Conv2dShape& s, dnnl::memory::data_type data, const void* dy, const void* w,
                             void* dx, void* scratchpad);

// dw = sum over the batch of dy_n (x) x_n, fp32, OVERWRITTEN; db (fp32, OC) =
// the sums of dy per channel when db != nullptr.
void dnnl_conv_backward_weights(const Conv2dShape& s, dnnl::memory::data_type data, const void* x, const void* dy,
                                float* dw, float* db, void* scratchpad);

// oneDNN's implementation names of the three passes ("fwd / bwd_d / bwd_w"),
// for the tests and the reports.
std::string dnnl_conv_impl(const Conv2dShape& s, dnnl::memory::data_type data);

// Number of cached entries (tests: a repeated shape must not add one).
std::size_t dnnl_conv_cache_size();

}  // namespace shardtrain
