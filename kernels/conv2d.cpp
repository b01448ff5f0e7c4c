// shardtrain/kernels/conv2d.cpp
// Owns 2-D convolution forward/backward (conv2d.hpp) as im2col + GEMM.
// Invariants:
//  - The workspace holds the im2col ("unfold") matrices of one block of samples,
//    laid out (nb, K, P) with K = IC*KH*KW rows and P = OH*OW columns per sample
//    (row k = (c*KH + p)*KW + q, column i*OW + j), so every per-sample matrix is a
//    contiguous LayoutRight (K, P) view and every GEMM lands in OpenBLAS.
//    nb = conv2d_samples_per_block(s): the workspace never grows with the batch.
//  - forward: per block, unfold (parallel over the nb*K rows), bias rows of y
//    (parallel over nb*OC rows), then per sample y_n(OC, P) = w(OC, K) col_n(K, P)
//    with beta = 1 onto the bias (beta = 0 without bias). y is OVERWRITTEN.
//  - backward: db += per channel, summed over samples then pixels in index order
//    (parallel over channels). Per block: unfold x; per sample in order
//    dw(OC, K) += dy_n(OC, P) col_n(K, P)^T, then (dx requested) col_n is
//    overwritten by dcol_n = w^T dy_n; after the block, "fold" (col2im) sums each
//    dx plane serially in (p, q, i, j) order (parallel over the nb*IC planes, so
//    no two work items touch the same element: no atomics). dx OVERWRITTEN, dw, db
//    ACCUMULATED. Every sum has a fixed order: results are bitwise reproducible.
//  - Kernel labels: "Conv::unfold", "Conv::fold", "Conv::forward_bias",
//    "Conv::backward_bias" (the label convention allows no digits, hence "Conv";
//    unfold / fold are PyTorch's names for im2col / col2im).
//  - Shapes, contiguity and the workspace size are checked before anything is written.
//  - T = f16 / bf16: one sample at a time (batch-1 shape): x_n (and dy_n) converted
//    to fp32 in the scratch arena, conv2d_*<float> runs on it with fp32 copies of w
//    and b, y_n / dx_n rounded once; dw and db are loaded into fp32 accumulators,
//    collect every sample and are rounded once at the end. The caller's workspace
//    is not used (its size is still checked). Scratch: conv2d_half_scratch_elems.
#include "kernels/conv2d.hpp"

#include <string>

#include "core/error.hpp"
#include "kernels/gemm.hpp"
#include "kernels/half_tiles.hpp"

namespace shardtrain {
namespace {

const std::string kLabelUnfold = "Conv::unfold";
const std::string kLabelFold = "Conv::fold";
const std::string kLabelBias = "Conv::forward_bias";
const std::string kLabelBiasGrad = "Conv::backward_bias";

// Elements of the im2col matrices of one block (1 MiB of floats): LeNet layer 1
// (K = 25, P = 784) gets 13 samples per block, layer 2 (K = 150, P = 100) 17.
constexpr std::int64_t kConvColBudget = std::int64_t{1} << 18;

template <class... V>
bool contiguous(const V&... v) {
  return (v.span_is_contiguous() && ...);
}

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

// Shapes of x, w and the workspace (common to forward and backward).
template <class T>
void check_common(const char* op, const Conv2dShape& s, CView4<T> x, CView4<T> w,
                  View1<T> workspace) {
  conv2d_check_shape(s);
  SHARDTRAIN_CHECK(extents_are(x, s.batch, s.in_channels, s.height, s.width) &&
                       extents_are(w, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
                   std::string(op) + ": " + dims("x", x) + " " + dims("w", w) + " for " +
                       shape_text(s));
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(workspace.extent(0)) >= conv2d_workspace_elems(s),
                   std::string(op) + ": workspace has " + std::to_string(workspace.extent(0)) +
                       " elements, needs " + std::to_string(conv2d_workspace_elems(s)) +
                       " (conv2d_workspace_elems)");
}

// Plain copies of the shape for the kernels (no member calls inside lambdas).
struct Geometry {
  std::int64_t ic, h, w, oc, kh, kw, stride, pad, oh, ow, k, p;
  explicit Geometry(const Conv2dShape& s)
      : ic(s.in_channels), h(s.height), w(s.width), oc(s.out_channels), kh(s.kernel_h),
        kw(s.kernel_w), stride(s.stride), pad(s.padding), oh(s.out_h()), ow(s.out_w()),
        k(s.col_rows()), p(s.out_h() * s.out_w()) {}
};

// col(nb, K, P) = unfold of samples [n0, n0 + nb) of x.
template <class T>
void unfold(const Geometry& g, const T* x, std::int64_t n0, std::int64_t nb, T* col) {
  const std::int64_t ic = g.ic, h = g.h, w = g.w, kh = g.kh, kw = g.kw, stride = g.stride,
                     pad = g.pad, oh = g.oh, ow = g.ow, k = g.k, p = g.p;
  Kokkos::parallel_for(kLabelUnfold, range(nb * k), KOKKOS_LAMBDA(const std::int64_t r) {
    const std::int64_t n = r / k, row = r % k;
    const std::int64_t c = row / (kh * kw), dp = (row / kw) % kh, dq = row % kw;
    const T* src = x + ((n0 + n) * ic + c) * h * w;
    T* dst = col + r * p;
    for (std::int64_t i = 0; i < oh; ++i) {
      const std::int64_t ih = i * stride - pad + dp;
      T* out = dst + i * ow;
      if (ih < 0 || ih >= h) {
        for (std::int64_t j = 0; j < ow; ++j) out[j] = T(0.0f);
        continue;
      }
      const T* in = src + ih * w;
      for (std::int64_t j = 0; j < ow; ++j) {
        const std::int64_t iw = j * stride - pad + dq;
        out[j] = (iw >= 0 && iw < w) ? in[iw] : T(0.0f);
      }
    }
  });
}

// Planes of samples [n0, n0 + nb) of dx = fold of dcol(nb, K, P) (overwritten).
template <class T>
void fold(const Geometry& g, const T* dcol, std::int64_t n0, std::int64_t nb, T* dx) {
  const std::int64_t ic = g.ic, h = g.h, w = g.w, kh = g.kh, kw = g.kw, stride = g.stride,
                     pad = g.pad, oh = g.oh, ow = g.ow, k = g.k, p = g.p;
  Kokkos::parallel_for(kLabelFold, range(nb * ic), KOKKOS_LAMBDA(const std::int64_t r) {
    const std::int64_t n = r / ic, c = r % ic;
    T* dst = dx + ((n0 + n) * ic + c) * h * w;
    for (std::int64_t e = 0; e < h * w; ++e) dst[e] = T(0);
    for (std::int64_t dp = 0; dp < kh; ++dp)
      for (std::int64_t dq = 0; dq < kw; ++dq) {
        const T* src = dcol + (n * k + (c * kh + dp) * kw + dq) * p;
        for (std::int64_t i = 0; i < oh; ++i) {
          const std::int64_t ih = i * stride - pad + dp;
          if (ih < 0 || ih >= h) continue;
          T* out = dst + ih * w;
          const T* in = src + i * ow;
          for (std::int64_t j = 0; j < ow; ++j) {
            const std::int64_t iw = j * stride - pad + dq;
            if (iw >= 0 && iw < w) out[iw] += in[j];
          }
        }
      }
  });
}

// --- 16-bit path ---------------------------------------------------------------

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
    conv2d_forward<float>(
        s1, CView4<float>(xt, 1, s.in_channels, s.height, s.width),
        CView4<float>(wt, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
        has_bias ? CView1<float>(bt, z.b) : CView1<float>(), View1<float>(ct, z.col),
        View4<float>(yt, 1, s.out_channels, s.out_h(), s.out_w()));
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
    conv2d_backward<float>(
        s1, CView4<float>(xt, 1, s.in_channels, s.height, s.width),
        CView4<float>(wt, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
        CView4<float>(dyt, 1, s.out_channels, s.out_h(), s.out_w()), View1<float>(ct, z.col),
        has_dx ? View4<float>(dxt, 1, s.in_channels, s.height, s.width) : View4<float>(),
        View4<float>(dwt, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
        has_db ? View1<float>(dbt, z.b) : View1<float>());
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

std::int64_t conv2d_samples_per_block(const Conv2dShape& s) {
  conv2d_check_shape(s);
  const std::int64_t per_sample = s.col_rows() * s.out_h() * s.out_w();
  std::int64_t nb = kConvColBudget / per_sample;
  if (nb < 1) nb = 1;
  return nb < s.batch ? nb : s.batch;
}

std::int64_t conv2d_workspace_elems(const Conv2dShape& s) {
  return conv2d_samples_per_block(s) * s.col_rows() * s.out_h() * s.out_w();
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
  if constexpr (is_half_v<T>) {
    conv2d_forward_half(s, x, w, b, y);
  } else {
    const Geometry g(s);
    const std::int64_t nb_max = conv2d_samples_per_block(s);
    const CView2<T> w2(w.data(), g.oc, g.k);
    const T* bp = b.data();
    T* col = workspace.data();
    T* yp = y.data();
    const std::int64_t oc = g.oc, p = g.p;
    for (std::int64_t n0 = 0; n0 < s.batch; n0 += nb_max) {
      const std::int64_t nb = nb_max < s.batch - n0 ? nb_max : s.batch - n0;
      unfold(g, x.data(), n0, nb, col);
      if (has_bias) {
        Kokkos::parallel_for(kLabelBias, range(nb * oc), KOKKOS_LAMBDA(const std::int64_t r) {
          const T bias = bp[r % oc];
          T* row = yp + (n0 * oc + r) * p;
          for (std::int64_t e = 0; e < p; ++e) row[e] = bias;
        });
      }
      for (std::int64_t n = 0; n < nb; ++n) {
        gemm<T>(Trans::N, Trans::N, T(1), w2, CView2<T>(col + n * g.k * p, g.k, p),
                has_bias ? T(1) : T(0), View2<T>(yp + (n0 + n) * oc * p, oc, p));
      }
    }
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
  if constexpr (is_half_v<T>) {
    conv2d_backward_half(s, x, w, dy, dx, dw, db);
  } else {
    const Geometry g(s);
    const std::int64_t oc = g.oc, p = g.p, batch = s.batch;
    const T* dyp = dy.data();
    if (has_db) {
      T* dbp = db.data();
      Kokkos::parallel_for(kLabelBiasGrad, range(oc), KOKKOS_LAMBDA(const std::int64_t o) {
        T acc = T(0);
        for (std::int64_t n = 0; n < batch; ++n) {
          const T* row = dyp + (n * oc + o) * p;
          for (std::int64_t e = 0; e < p; ++e) acc += row[e];
        }
        dbp[o] += acc;
      });
    }
    const std::int64_t nb_max = conv2d_samples_per_block(s);
    const CView2<T> w2(w.data(), g.oc, g.k);
    const View2<T> dw2(dw.data(), g.oc, g.k);
    T* col = workspace.data();
    for (std::int64_t n0 = 0; n0 < batch; n0 += nb_max) {
      const std::int64_t nb = nb_max < batch - n0 ? nb_max : batch - n0;
      unfold(g, x.data(), n0, nb, col);
      for (std::int64_t n = 0; n < nb; ++n) {
        const CView2<T> dy_n(dyp + (n0 + n) * oc * p, oc, p);
        const View2<T> col_n(col + n * g.k * p, g.k, p);
        gemm<T>(Trans::N, Trans::T, T(1), dy_n, CView2<T>(col_n), T(1), dw2);  // dw += dy_n col_n^T
        if (has_dx) gemm<T>(Trans::T, Trans::N, T(1), w2, dy_n, T(0), col_n);  // dcol_n = w^T dy_n
      }
      if (has_dx) fold(g, col, n0, nb, dx.data());
    }
  }
}

#define SHARDTRAIN_INSTANTIATE_CONV2D(T)                                                     \
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
