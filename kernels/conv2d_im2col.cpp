// shardtrain/kernels/conv2d_im2col.cpp
// Owns the im2col + GEMM convolution (conv2d_im2col.hpp): conv2d<double> and the
// fp32 core of the 16-bit tile path of conv2d.cpp.
// Invariants:
//  - The workspace holds the im2col ("unfold") matrices of one block of samples,
//    laid out (nb, K, P) with K = IC*KH*KW rows and P = OH*OW columns per sample
//    (row k = (c*KH + p)*KW + q, column i*OW + j), so every per-sample matrix is a
//    contiguous LayoutRight (K, P) view and every GEMM lands in gemm.hpp's BLAS /
//    oneDNN call. nb = conv2d_samples_per_block(s): it never grows with the batch.
//  - forward: per block, unfold (parallel over the nb*K rows), bias rows of y
//    (parallel over nb*OC rows), then per sample y_n(OC, P) = w(OC, K) col_n(K, P)
//    with beta = 1 onto the bias (beta = 0 without bias). y is OVERWRITTEN.
//  - backward: db += per channel, summed over samples then pixels in index order
//    (parallel over channels). Per block: unfold x; per sample in order
//    dw(OC, K) += dy_n(OC, P) col_n(K, P)^T, then (dx requested) col_n is
//    overwritten by dcol_n = w^T dy_n; after the block, "fold" (col2im) sums each
//    dx plane serially in (p, q, i, j) order (parallel over the nb*IC planes, so
//    no two work items touch the same element: no atomics). dx OVERWRITTEN, dw, db
//    ACCUMULATED. Every sum has a fixed order: results are bitwise reproducible,
//    and equal to a loop over single samples (dw included).
//  - Kernel labels: "Conv::unfold", "Conv::fold", "Conv::forward_bias",
//    "Conv::backward_bias" (the label convention allows no digits, hence "Conv";
//    unfold / fold are PyTorch's names for im2col / col2im).
//  - No checks here: conv2d.cpp checks shapes, contiguity and the workspace.
#include "kernels/conv2d_im2col.hpp"

#include <string>

#include "kernels/conv2d.hpp"
#include "kernels/gemm.hpp"

namespace shardtrain {
namespace {

const std::string kLabelUnfold = "Conv::unfold";
const std::string kLabelFold = "Conv::fold";
const std::string kLabelBias = "Conv::forward_bias";
const std::string kLabelBiasGrad = "Conv::backward_bias";

// Elements of the im2col matrices of one block (1 MiB of floats): LeNet layer 1
// (K = 25, P = 784) gets 13 samples per block, layer 2 (K = 150, P = 100) 17.
constexpr std::int64_t kConvColBudget = std::int64_t{1} << 18;

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

}  // namespace

std::int64_t conv2d_samples_per_block(const Conv2dShape& s) {
  conv2d_check_shape(s);
  const std::int64_t per_sample = s.col_rows() * s.out_h() * s.out_w();
  std::int64_t nb = kConvColBudget / per_sample;
  if (nb < 1) nb = 1;
  return nb < s.batch ? nb : s.batch;
}

std::int64_t conv2d_im2col_elems(const Conv2dShape& s) {
  return conv2d_samples_per_block(s) * s.col_rows() * s.out_h() * s.out_w();
}

// y = conv(x, w) (+ b when b != nullptr); col: im2col_elems(s) elements. T: float, double.
template <class T>
void conv2d_im2col_forward(const Conv2dShape& s, const T* x, const T* w, const T* b, T* col, T* y) {
  const Geometry g(s);
  const std::int64_t nb_max = conv2d_samples_per_block(s);
  const CView2<T> w2(w, g.oc, g.k);
  const std::int64_t oc = g.oc, p = g.p;
  for (std::int64_t n0 = 0; n0 < s.batch; n0 += nb_max) {
    const std::int64_t nb = nb_max < s.batch - n0 ? nb_max : s.batch - n0;
    unfold(g, x, n0, nb, col);
    if (b) {
      Kokkos::parallel_for(kLabelBias, range(nb * oc), KOKKOS_LAMBDA(const std::int64_t r) {
        const T bias = b[r % oc];
        T* row = y + (n0 * oc + r) * p;
        for (std::int64_t e = 0; e < p; ++e) row[e] = bias;
      });
    }
    for (std::int64_t n = 0; n < nb; ++n) {
      gemm<T>(Trans::N, Trans::N, T(1), w2, CView2<T>(col + n * g.k * p, g.k, p), b ? T(1) : T(0),
              View2<T>(y + (n0 + n) * oc * p, oc, p));
    }
  }
}

// dx = conv_transpose(dy, w) (dx != nullptr), dw += ..., db += ... (db != nullptr).
template <class T>
void conv2d_im2col_backward(const Conv2dShape& s, const T* x, const T* w, const T* dy, T* col, T* dx, T* dw,
                     T* db) {
  const Geometry g(s);
  const std::int64_t oc = g.oc, p = g.p, batch = s.batch;
  if (db) {
    Kokkos::parallel_for(kLabelBiasGrad, range(oc), KOKKOS_LAMBDA(const std::int64_t o) {
      T acc = T(0);
      for (std::int64_t n = 0; n < batch; ++n) {
        const T* row = dy + (n * oc + o) * p;
        for (std::int64_t e = 0; e < p; ++e) acc += row[e];
      }
      db[o] += acc;
    });
  }
  const std::int64_t nb_max = conv2d_samples_per_block(s);
  const CView2<T> w2(w, g.oc, g.k);
  const View2<T> dw2(dw, g.oc, g.k);
  for (std::int64_t n0 = 0; n0 < batch; n0 += nb_max) {
    const std::int64_t nb = nb_max < batch - n0 ? nb_max : batch - n0;
    unfold(g, x, n0, nb, col);
    for (std::int64_t n = 0; n < nb; ++n) {
      const CView2<T> dy_n(dy + (n0 + n) * oc * p, oc, p);
      const View2<T> col_n(col + n * g.k * p, g.k, p);
      gemm<T>(Trans::N, Trans::T, T(1), dy_n, CView2<T>(col_n), T(1), dw2);  // dw += dy_n col_n^T
      if (dx) gemm<T>(Trans::T, Trans::N, T(1), w2, dy_n, T(0), col_n);      // dcol_n = w^T dy_n
    }
    if (dx) fold(g, col, n0, nb, dx);
  }
}

template void conv2d_im2col_forward<float>(const Conv2dShape&, const float*, const float*, const float*, float*,
                                           float*);
template void conv2d_im2col_forward<double>(const Conv2dShape&, const double*, const double*, const double*,
                                            double*, double*);
template void conv2d_im2col_backward<float>(const Conv2dShape&, const float*, const float*, const float*, float*,
                                            float*, float*, float*);
template void conv2d_im2col_backward<double>(const Conv2dShape&, const double*, const double*, const double*,
                                             double*, double*, double*, double*);

}  // namespace shardtrain
