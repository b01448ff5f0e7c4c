// shardtrain/kernels/conv2d.cpp
// Owns 2-D convolution forward/backward (conv2d.hpp): the checks, which path runs
// for which storage type, the oneDNN path's workspace and gradient accumulation,
// and the 16-bit tile path.
// Paths:
//  - oneDNN (float; bf16 when cpu_bf16_native()): dnnl_conv.hpp runs the
//    primitives on channels-last (NHWC) copies of the activations and weights in
//    oneDNN's preferred layout, block by block of samples, reordering through the
//    workspace (tensors whose bytes are the same in both layouts, e.g. a
//    1-channel input, are used in place). Forward has the bias fused; backward
//    data OVERWRITES dx; backward weights gives the batch's fp32 dw / db (oneDNN
//    overwrites its outputs and has no sum post-op for backward weights), which
//    one pass here adds to the caller's dw / db in fp32 (bf16: float(dw) + sum
//    rounded once, to nearest even).
//    Why channels-last: oneDNN 2.6 runs plain NCHW / OIHW as im2col + its sgemm
//    (no faster than our im2col path) and picks its direct / brgemm kernels only
//    for other layouts. Measured on the MNIST LeNet's convs (1x28x28 -> 20 and
//    20x12x12 -> 50 @ 5x5, batch 64, forward + backward, one thread, CPU time,
//    AMD EPYC with AVX512-BF16): fp32 1.49 + 4.29 ms (NHWC, reorders included)
//    against 1.69 + 6.21 (im2col, the path before) and 1.88 + 5.98 (oneDNN on
//    NCHW); bf16 1.14 + 2.73 against 1.64 + 5.81 (the fp32 tile path before) and
//    3.0 + 5.1 (oneDNN on NCHW); oneDNN's blocked nChw16c layout was in between.
//  - im2col + GEMM (conv2d_im2col.hpp) for double (oneDNN has no f64
//    convolution; double runs only in the gradient checks), and for f16 and bf16
//    without native bf16 through the tile path below: oneDNN 2.6 has no f16
//    convolution on CPUs without AVX512-FP16 and, without AVX512-BF16, none for
//    bf16 that does better than converting to fp32, which the tile path does with
//    the GEMMs already tested.
// Invariants:
//  - oneDNN workspace, carved from the caller's buffer at 64-byte aligned
//    offsets: the fp32 dw (OC*K) and db (OC) staging, then dnnl_conv's part (the
//    layout copies of one block of samples and oneDNN's scratchpad,
//    scratchpad_mode::user: kernels never allocate, the model's plan counts it).
//    Bounded by the shape: blocks of dnnl_conv_samples_per_block samples, and
//    oneDNN's scratchpad depends on the batch only through how it splits a block
//    over threads (not at all with one thread), so dnnl_conv_workspace_bytes
//    takes the largest over the block and batches 1 .. min(block, 2 threads).
//  - Determinism: every sum has a fixed order, so results are bitwise
//    reproducible between calls with the same thread count (tested with 1 and 2
//    threads). Per-sample outputs (y, dx) do not depend on the other samples of
//    the batch on either path (tested); dw and db do, through the summation order
//    (oneDNN sums a block inside one call, blocks in order; im2col adds sample
//    after sample).
//  - Kernel label: "Conv::add_weight_grad" (the oneDNN path's fp32 addition);
//    conv2d_im2col.cpp has the im2col path's.
//  - Shapes, contiguity and the workspace size are checked before anything is
//    written.
//  - T = f16 / bf16 without native bf16: one sample at a time (batch-1 shape):
//    x_n (and dy_n) converted to fp32 in the scratch arena, the im2col path runs
//    on it with fp32 copies of w and b, y_n / dx_n rounded once; dw and db are
//    loaded into fp32 accumulators, collect every sample and are rounded once at
//    the end. The caller's workspace is not used (conv2d_workspace_elems is 0).
//    Scratch: conv2d_half_scratch_elems.
#include "kernels/conv2d.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "kernels/conv2d_im2col.hpp"
#include "kernels/cpu_compute.hpp"
#include "kernels/dnnl_context.hpp"
#include "kernels/dnnl_conv.hpp"
#include "kernels/half_tiles.hpp"

namespace shardtrain {
namespace {

const std::string kLabelAddGrad = "Conv::add_weight_grad";

// Alignment of the pieces of the oneDNN workspace.
constexpr std::size_t kAlign = 64;

template <class V>
std::string dims(const char* name, const V& v) {
  std::string s = std::string(name) + "(";
  for (unsigned r = 0; r < V::rank; ++r) {
    if (r) s += ',';
    s += std::to_string(v.extent(r));
  }
  return s + ")";
}

std::string shape_text(const Conv2dShape& s) {
  return "conv2d shape N=" + std::to_string(s.batch) + " IC=" + std::to_string(s.in_channels) +
         " H=" + std::to_string(s.height) + " W=" + std::to_string(s.width) +
         " OC=" + std::to_string(s.out_channels) + " KH=" + std::to_string(s.kernel_h) +
         " KW=" + std::to_string(s.kernel_w) + " stride=" + std::to_string(s.stride) +
         " padding=" + std::to_string(s.padding);
}

// Whether storage type T runs on oneDNN's convolution primitives.
template <class T>
bool on_dnnl() {
  if constexpr (std::is_same_v<T, float>) return true;
  else if constexpr (std::is_same_v<T, bf16>) return cpu_bf16_native();
  else return false;
}

std::size_t align_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Bytes of the fp32 dw and db staging of the oneDNN backward.
std::size_t staging_bytes(const Conv2dShape& s) {
  return align_up(sizeof(float) * static_cast<std::size_t>(s.out_channels * (s.col_rows() + 1)));
}

// Bytes of the oneDNN path's workspace for every batch 1 .. s.batch (s.batch >= 1).
std::size_t dnnl_workspace_bytes(const Conv2dShape& s, dnnl::memory::data_type data) {
  // kAlign - 1 bytes to align the caller's pointer, the staging, dnnl_conv's part.
  return kAlign - 1 + staging_bytes(s) + dnnl_conv_workspace_bytes(s, data);
}

// The pieces of the oneDNN workspace (see the invariants above).
struct DnnlWorkspace {
  float* dw;
  float* db;
  void* rest;  // dnnl_conv's (layout copies, scratchpad)
};

DnnlWorkspace carve(const Conv2dShape& s, void* base) {
  const auto addr = reinterpret_cast<std::uintptr_t>(base);
  char* p = static_cast<char*>(base) + (align_up(addr) - addr);
  float* dw = reinterpret_cast<float*>(p);
  return {dw, dw + s.out_channels * s.col_rows(), p + staging_bytes(s)};
}

// Shapes of x, w and the workspace (common to forward and backward).
template <class T>
void check_common(const char* op, const Conv2dShape& s, CView4<T> x, CView4<T> w,
                  View1<T> workspace) {
  conv2d_check_shape(s);
  SHARDTRAIN_CHECK(extents_are(x, s.batch, s.in_channels, s.height, s.width) &&
                       extents_are(w, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
                   std::string(op) + ": " + dims("x", x) + " " + dims("w", w) + " for " +
                       shape_text(s));
  const std::int64_t need = conv2d_workspace_elems<T>(s);
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(workspace.extent(0)) >= need,
                   std::string(op) + ": workspace has " + std::to_string(workspace.extent(0)) +
                       " elements, needs " + std::to_string(need) + " (conv2d_workspace_elems)");
}

// --- oneDNN path -------------------------------------------------------------------

// Shapes checked, s.batch >= 1. T: float or bf16.
template <class T>
void dnnl_forward(const Conv2dShape& s, const T* x, const T* w, const T* b, T* workspace, T* y) {
  half_tiles::check_host("conv2d_forward");
  const DnnlWorkspace ws = carve(s, workspace);
  dnnl_conv_forward(s, dnnl_type<T>(), x, w, b, y, ws.rest);
}

// dw[i] = T(float(dw[i]) + acc[i]): fp32 addition, one rounding for bf16.
template <class T>
void add_weight_grad(const float* acc, T* dw, std::int64_t n) {
  Kokkos::parallel_for(kLabelAddGrad, range(n), KOKKOS_LAMBDA(const std::int64_t i) {
    if constexpr (std::is_same_v<T, float>) dw[i] += acc[i];
    else dw[i] = T(to_float(dw[i]) + acc[i]);
  });
}

template <class T>
void dnnl_backward(const Conv2dShape& s, const T* x, const T* w, const T* dy, T* workspace, T* dx, T* dw,
                   T* db) {
  half_tiles::check_host("conv2d_backward");
  const DnnlWorkspace ws = carve(s, workspace);
  dnnl_conv_backward(s, dnnl_type<T>(), x, w, dy, dx, ws.dw, db ? ws.db : nullptr, ws.rest);
  add_weight_grad(ws.dw, dw, s.out_channels * s.col_rows());
  if (db) add_weight_grad(ws.db, db, s.out_channels);
}

// --- 16-bit path (f16; bf16 without native bf16) -----------------------------------

// fp32 scratch pieces of the 16-bit path (one sample).
struct HalfConvSizes {
  std::int64_t x, y, w, b, col;
  explicit HalfConvSizes(const Conv2dShape& s)
      : x(s.in_channels * s.height * s.width), y(s.out_channels * s.out_h() * s.out_w()),
        w(s.out_channels * s.col_rows()), b(s.out_channels),
        col(s.col_rows() * s.out_h() * s.out_w()) {}
  // w, dw, db, x, dx, y / dy, one im2col matrix.
  std::int64_t elems() const { return 2 * w + b + 2 * x + y + col; }
};

Conv2dShape one_sample(const Conv2dShape& s) {
  Conv2dShape s1 = s;
  s1.batch = 1;
  return s1;
}

// Shapes checked by conv2d_forward.
template <class H>
void conv2d_forward_half(const Conv2dShape& s, CView4<H> x, CView4<H> w, CView1<H> b,
                         View4<H> y) {
  using namespace half_tiles;
  if (s.batch == 0) return;
  check_host("conv2d_forward");
  const HalfConvSizes z(s);
  Scratch scratch(z.elems(), "conv2d_forward");
  float* wt = scratch.take(z.w);
  float* bt = scratch.take(z.b);
  float* xt = scratch.take(z.x);
  float* yt = scratch.take(z.y);
  float* ct = scratch.take(z.col);
  const bool has_bias = b.extent(0) != 0;
  to_f32(w.data(), wt, z.w);
  if (has_bias) to_f32(b.data(), bt, z.b);
  const Conv2dShape s1 = one_sample(s);
  for (std::int64_t n = 0; n < s.batch; ++n) {
    to_f32(x.data() + n * z.x, xt, z.x);
    conv2d_im2col_forward<float>(s1, xt, wt, has_bias ? bt : nullptr, ct, yt);
    from_f32(yt, y.data() + n * z.y, z.y);
  }
}

// Shapes (including dx and db) checked by conv2d_backward.
template <class H>
void conv2d_backward_half(const Conv2dShape& s, CView4<H> x, CView4<H> w, CView4<H> dy,
                          View4<H> dx, View4<H> dw, View1<H> db) {
  using namespace half_tiles;
  if (s.batch == 0) return;  // dw, db += 0; dx is empty
  check_host("conv2d_backward");
  const HalfConvSizes z(s);
  Scratch scratch(z.elems(), "conv2d_backward");
  float* wt = scratch.take(z.w);
  float* dwt = scratch.take(z.w);
  float* dbt = scratch.take(z.b);
  float* xt = scratch.take(z.x);
  float* dxt = scratch.take(z.x);
  float* dyt = scratch.take(z.y);
  float* ct = scratch.take(z.col);
  const bool has_dx = dx.size() != 0, has_db = db.extent(0) != 0;
  to_f32(w.data(), wt, z.w);
  to_f32(dw.data(), dwt, z.w);
  if (has_db) to_f32(db.data(), dbt, z.b);
  const Conv2dShape s1 = one_sample(s);
  for (std::int64_t n = 0; n < s.batch; ++n) {
    to_f32(x.data() + n * z.x, xt, z.x);
    to_f32(dy.data() + n * z.y, dyt, z.y);
    conv2d_im2col_backward<float>(s1, xt, wt, dyt, ct, has_dx ? dxt : nullptr, dwt, has_db ? dbt : nullptr);
    if (has_dx) from_f32(dxt, dx.data() + n * z.x, z.x);
  }
  from_f32(dwt, dw.data(), z.w);
  if (has_db) from_f32(dbt, db.data(), z.b);
}

}  // namespace

void conv2d_check_shape(const Conv2dShape& s) {
  SHARDTRAIN_CHECK(s.batch >= 0 && s.in_channels >= 1 && s.height >= 1 && s.width >= 1 &&
                       s.out_channels >= 1 && s.kernel_h >= 1 && s.kernel_w >= 1 &&
                       s.stride >= 1 && s.padding >= 0 &&
                       s.height + 2 * s.padding >= s.kernel_h &&
                       s.width + 2 * s.padding >= s.kernel_w,
                   "invalid " + shape_text(s));
}

template <class T>
std::int64_t conv2d_workspace_elems(const Conv2dShape& s) {
  conv2d_check_shape(s);
  if constexpr (std::is_same_v<T, double>) {
    return conv2d_im2col_elems(s);
  } else {
    if (s.batch == 0 || !on_dnnl<T>()) return 0;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16>) {
      const std::size_t bytes = dnnl_workspace_bytes(s, dnnl_type<T>());
      return static_cast<std::int64_t>((bytes + sizeof(T) - 1) / sizeof(T));
    }
    return 0;
  }
}

std::int64_t conv2d_half_scratch_elems(const Conv2dShape& s) {
  conv2d_check_shape(s);
  return s.batch == 0 ? 0 : HalfConvSizes(s).elems();
}

template <class T>
void conv2d_forward(const Conv2dShape& s, CView4<T> x, CView4<T> w, CView1<T> b,
                    View1<T> workspace, View4<T> y) {
  check_common("conv2d_forward", s, x, w, workspace);
  SHARDTRAIN_CHECK(extents_are(y, s.batch, s.out_channels, s.out_h(), s.out_w()),
                   "conv2d_forward: " + dims("y", y) + " for " + shape_text(s));
  const bool has_bias = b.extent(0) != 0;
  SHARDTRAIN_CHECK(!has_bias || static_cast<std::int64_t>(b.extent(0)) == s.out_channels,
                   "conv2d_forward: bias has " + std::to_string(b.extent(0)) +
                       " elements, expected " + std::to_string(s.out_channels));
  SHARDTRAIN_CHECK(contiguous(x, w, b, workspace, y), "conv2d_forward: views must be contiguous");
  if (s.batch == 0) return;
  const T* bp = has_bias ? b.data() : nullptr;
  if (on_dnnl<T>()) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16>)
      dnnl_forward<T>(s, x.data(), w.data(), bp, workspace.data(), y.data());
  } else if constexpr (is_half_v<T>) {
    conv2d_forward_half(s, x, w, b, y);
  } else {
    conv2d_im2col_forward<T>(s, x.data(), w.data(), bp, workspace.data(), y.data());
  }
}

template <class T>
void conv2d_backward(const Conv2dShape& s, CView4<T> x, CView4<T> w, CView4<T> dy,
                     View1<T> workspace, View4<T> dx, View4<T> dw, View1<T> db) {
  check_common("conv2d_backward", s, x, w, workspace);
  SHARDTRAIN_CHECK(extents_are(dy, s.batch, s.out_channels, s.out_h(), s.out_w()) &&
                       extents_are(dw, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
                   "conv2d_backward: " + dims("dy", dy) + " " + dims("dw", dw) + " for " +
                       shape_text(s));
  const bool has_dx = dx.size() != 0, has_db = db.extent(0) != 0;
  SHARDTRAIN_CHECK(!has_dx || extents_are(dx, s.batch, s.in_channels, s.height, s.width),
                   "conv2d_backward: " + dims("dx", dx) + " does not match " + dims("x", x));
  SHARDTRAIN_CHECK(!has_db || static_cast<std::int64_t>(db.extent(0)) == s.out_channels,
                   "conv2d_backward: db has " + std::to_string(db.extent(0)) +
                       " elements, expected " + std::to_string(s.out_channels));
  SHARDTRAIN_CHECK(contiguous(x, w, dy, workspace, dx, dw, db),
                   "conv2d_backward: views must be contiguous");
  if (s.batch == 0) return;  // dw, db += 0; dx is empty
  T* dxp = has_dx ? dx.data() : nullptr;
  T* dbp = has_db ? db.data() : nullptr;
  if (on_dnnl<T>()) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16>)
      dnnl_backward<T>(s, x.data(), w.data(), dy.data(), workspace.data(), dxp, dw.data(), dbp);
  } else if constexpr (is_half_v<T>) {
    conv2d_backward_half(s, x, w, dy, dx, dw, db);
  } else {
    conv2d_im2col_backward<T>(s, x.data(), w.data(), dy.data(), workspace.data(), dxp, dw.data(), dbp);
  }
}

template <class T>
void conv2d_warm_up(const Conv2dShape& s) {
  conv2d_check_shape(s);
  if (s.batch == 0 || !on_dnnl<T>()) return;
  Conv2dShape w2 = s;
  w2.batch = dnnl_conv_samples_per_block(s);  // the block the calls at s.batch run
  const std::int64_t oh = s.out_h(), ow = s.out_w();
  std::vector<T> x(static_cast<std::size_t>(w2.batch * s.in_channels * s.height * s.width), T(0.0f));
  std::vector<T> dx(x.size()), w(static_cast<std::size_t>(s.out_channels * s.col_rows()), T(0.0f)), dw(w.size(), T(0.0f));
  std::vector<T> b(static_cast<std::size_t>(s.out_channels), T(0.0f)), db(b.size(), T(0.0f));
  std::vector<T> y(static_cast<std::size_t>(w2.batch * s.out_channels * oh * ow), T(0.0f));
  std::vector<T> ws(static_cast<std::size_t>(conv2d_workspace_elems<T>(w2)));
  const CView4<T> xv(x.data(), w2.batch, s.in_channels, s.height, s.width);
  const CView4<T> wv(w.data(), s.out_channels, s.in_channels, s.kernel_h, s.kernel_w);
  conv2d_forward<T>(w2, xv, wv, CView1<T>(b.data(), b.size()), View1<T>(ws.data(), ws.size()),
                    View4<T>(y.data(), w2.batch, s.out_channels, oh, ow));
  conv2d_backward<T>(w2, xv, wv, CView4<T>(y.data(), w2.batch, s.out_channels, oh, ow),
                     View1<T>(ws.data(), ws.size()), View4<T>(dx.data(), w2.batch, s.in_channels, s.height, s.width),
                     View4<T>(dw.data(), s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
                     View1<T>(db.data(), db.size()));
}

#define SHARDTRAIN_INSTANTIATE_CONV2D(T)                                                     \
  template std::int64_t conv2d_workspace_elems<T>(const Conv2dShape&);                      \
  template void conv2d_warm_up<T>(const Conv2dShape&);                                      \
  template void conv2d_forward<T>(const Conv2dShape&, CView4<T>, CView4<T>, CView1<T>,      \
                                  View1<T>, View4<T>);                                      \
  template void conv2d_backward<T>(const Conv2dShape&, CView4<T>, CView4<T>, CView4<T>,     \
                                   View1<T>, View4<T>, View4<T>, View1<T>);
SHARDTRAIN_INSTANTIATE_CONV2D(float)
SHARDTRAIN_INSTANTIATE_CONV2D(double)
SHARDTRAIN_INSTANTIATE_CONV2D(f16)
SHARDTRAIN_INSTANTIATE_CONV2D(bf16)
#undef SHARDTRAIN_INSTANTIATE_CONV2D

}  // namespace shardtrain
