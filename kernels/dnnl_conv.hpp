// shardtrain/kernels/dnnl_conv.hpp
// INTERNAL to kernels/*.cpp: 2-D convolutions on oneDNN's convolution
// primitives (forward with the bias fused, backward data, backward weights),
// the engine of conv2d<float> and, on CPUs with native bf16, conv2d<bf16>.
// Semantics are conv2d.hpp's; the caller's tensors are plain: x (N, IC, H, W),
// y / dy (N, OC, OH, OW) NCHW, w (OC, IC, KH, KW) OIHW. `data` is the storage
// type of x, w, b, y, dy and dx (f32, or bf16 with fp32 accumulation inside
// oneDNN). Backward weights returns the batch's dw and db in fp32, OVERWRITING
// dw_sum / db_sum (conv2d.cpp adds them to the caller's gradients).
// Layouts: the primitives are asked for channels-last activations (NHWC) and
// weights in the layout oneDNN prefers (format_tag::any), which selects its
// direct / brgemm convolutions; on the MNIST LeNet's convs they take 1.3-2.6x
// less time than the GEMM-based ones it runs on NCHW, reorders included
// (conv2d.cpp has the numbers). The reorders go through the caller's workspace; a tensor whose
// layouts have the same bytes (a channel count or a spatial size of 1) is used
// in place.
// Invariants:
//  - the batch is run in blocks of dnnl_conv_samples_per_block(s) samples (and
//    one ragged block), so the layout copies, and the workspace, are bounded by
//    the shape, not by the batch;
//  - one entry per distinct (shape with its block batch, data type, bias): the
//    convolution and reorder primitive descriptors are made on first use and
//    cached for the life of the process, each primitive on its first execution;
//    later calls only wrap pointers;
//  - scratchpad_mode::user for every primitive: oneDNN's scratch memory is part
//    of the caller's workspace, so kernels never allocate and the model's memory
//    plan counts these bytes;
//  - backward weights over several blocks: each block's fp32 dw / db is
//    reordered into dw_sum / db_sum with oneDNN's sum post-op (fp32 additions in
//    block order);
//  - every primitive has run to completion when a call returns;
//  - results depend only on the inputs, the shape (batch included) and the
//    thread count at descriptor creation, not on earlier calls;
//  - dnnl::error becomes shardtrain::Error naming the caller and the shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <dnnl.hpp>

#include "kernels/cnn_shapes.hpp"

namespace shardtrain {

// Samples per oneDNN call: as many as keep one block's layout copies of x, dx
// and y / dy within kDnnlBlockElems elements (at least 1, at most the batch).
std::int64_t dnnl_conv_samples_per_block(const Conv2dShape& s);

// Bytes of workspace dnnl_conv_forward / dnnl_conv_backward need for every batch
// from 1 to s.batch (any alignment of the pointer): the layout copies and
// oneDNN's scratchpad of the largest block, and of the smaller (ragged) blocks
// oneDNN may want more scratchpad for (batches 1 .. min(block, 2 threads): with
// t threads its scratchpad depends on the batch through the split over threads,
// periodically with period t, measured; with one thread not at all).
std::size_t dnnl_conv_workspace_bytes(const Conv2dShape& s, dnnl::memory::data_type data);

// y = conv(x, w) (+ b when b != nullptr; b has the data type). s.batch >= 1.
void dnnl_conv_forward(const Conv2dShape& s, dnnl::memory::data_type data, const void* x, const void* w,
                       const void* b, void* y, void* workspace);

// dx = conv_transpose(dy, w) (OVERWRITTEN; skipped when dx == nullptr);
// dw_sum (fp32, OIHW) = sum over the batch of dy_n (x) x_n, OVERWRITTEN; db_sum
// (fp32, OC) = the sums of dy per channel when db_sum != nullptr. s.batch >= 1.
void dnnl_conv_backward(const Conv2dShape& s, dnnl::memory::data_type data, const void* x, const void* w,
                        const void* dy, void* dx, float* dw_sum, float* db_sum, void* workspace);

// oneDNN's implementation names of the three passes ("fwd / bwd_d / bwd_w") at
// s's block batch, for the tests and the reports.
std::string dnnl_conv_impl(const Conv2dShape& s, dnnl::memory::data_type data);

// Number of cached entries (tests: a repeated shape must not add one).
std::size_t dnnl_conv_cache_size();

}  // namespace shardtrain
