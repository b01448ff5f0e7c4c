// This file is long because both paths (oneDNN, im2col) are checked in every type, gradients included.
// Tests conv2d_forward / conv2d_backward on both paths: oneDNN (float; bf16 on
// CPUs with native bf16) and im2col + GEMM (double; f16; bf16 without native
// bf16, run as kernels_conv2d_test_no_bf16_isa under DNNL_MAX_CPU_ISA=AVX512_CORE).
// Output-size arithmetic and the workspaces, bounded for any batch (im2col block;
// oneDNN scratchpad + staging, and no smaller batch needing more); forward (bias /
// no bias) and backward (dx, dw, db; dw / db pre-filled with non-zero values, dx
// NaN-filled; empty dx / db) against a direct 7-loop convolution in long double
// on shapes whose dimensions all differ (stride 2 with padding, stride 1 with
// padding 2, stride 3 > kernel so some inputs are never read) and the LeNet shapes
// (1x28x28 -> 6 @ 5x5 pad 2; 6x14x14 -> 16 @ 5x5), in double and float; float64
// central-difference checks of dx, dw, db; dx OVERWRITTEN, dw / db ACCUMULATED;
// bitwise determinism of two identical calls (backward weights included) on both
// paths and per-sample outputs independent of the batch around them (im2col: also
// of its sample blocking, dw included; oneDNN: y and dx, dw within fp32 rounding
// of a per-sample sum); one oneDNN primitive entry per shape; f16 / bf16 against
// fp32; shape / workspace errors. A DISABLED_ timing test (the MNIST LeNet's
// convs, batch 64, forward + backward; oneDNN and im2col) prints medians of 10
// runs, wall and CPU time.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/conv2d_im2col.hpp"
#include "kernels/cpu_compute.hpp"
#include "kernels/dnnl_context.hpp"
#include "kernels/dnnl_conv.hpp"
#include "kernels/half_scratch.hpp"

namespace shardtrain {
namespace {

using test::cast_vector;
using test::cview1;
using test::cview4;
using test::view1;
using test::view4;

//                         N  IC  H  W  OC KH KW stride pad
const Conv2dShape kOdd{3, 2, 7, 8, 5, 3, 2, 2, 1};         // -> 4 x 5
const Conv2dShape kBrief{3, 2, 7, 6, 5, 3, 2, 2, 1};       // -> 4 x 4
const Conv2dShape kPad2{2, 3, 6, 5, 4, 2, 3, 1, 2};        // -> 9 x 7
const Conv2dShape kStride3{2, 2, 8, 7, 3, 2, 2, 3, 0};     // -> 3 x 2, rows/cols skipped
const Conv2dShape kLeNet1{2, 1, 28, 28, 6, 5, 5, 1, 2};    // -> 28 x 28
const Conv2dShape kLeNet2{3, 6, 14, 14, 16, 5, 5, 1, 0};   // -> 10 x 10
// Large images: oneDNN runs 4 samples per call (2^18 elements of layout copies
// per sample), so batch 9 is 3 blocks (4, 4, 1).
const Conv2dShape kBlocks{9, 1, 256, 256, 2, 3, 3, 1, 1};  // -> 256 x 256

std::string shape_label(const Conv2dShape& s) {
  return "N=" + std::to_string(s.batch) + " IC=" + std::to_string(s.in_channels) + " " +
         std::to_string(s.height) + "x" + std::to_string(s.width) + " OC=" + std::to_string(s.out_channels) +
         " k=" + std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) +
         " stride=" + std::to_string(s.stride) + " pad=" + std::to_string(s.padding);
}

std::int64_t x_elems(const Conv2dShape& s) { return s.batch * s.in_channels * s.height * s.width; }
std::int64_t y_elems(const Conv2dShape& s) { return s.batch * s.out_channels * s.out_h() * s.out_w(); }
std::int64_t w_elems(const Conv2dShape& s) { return s.out_channels * s.col_rows(); }

// Direct convolution: y[n][o][i][j] = b[o] + sum w[o][c][p][q] x[n][c][i*s-pad+p][j*s-pad+q].
std::vector<double> naive_conv(const Conv2dShape& s, const std::vector<double>& x,
                               const std::vector<double>& w, const std::vector<double>& b) {
  const std::int64_t oh = s.out_h(), ow = s.out_w();
  std::vector<double> y(y_elems(s));
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t o = 0; o < s.out_channels; ++o)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          long double acc = b.empty() ? 0.0L : b[o];
          for (std::int64_t c = 0; c < s.in_channels; ++c)
            for (std::int64_t p = 0; p < s.kernel_h; ++p)
              for (std::int64_t q = 0; q < s.kernel_w; ++q) {
                const std::int64_t ih = i * s.stride - s.padding + p;
                const std::int64_t iw = j * s.stride - s.padding + q;
                if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
                acc += static_cast<long double>(
                           w[((o * s.in_channels + c) * s.kernel_h + p) * s.kernel_w + q]) *
                       x[((n * s.in_channels + c) * s.height + ih) * s.width + iw];
              }
          y[((n * s.out_channels + o) * oh + i) * ow + j] = static_cast<double>(acc);
        }
  return y;
}

// Bound of the max scaled error of dw / db, which sum L = N*OH*OW products per
// element: `tol` plus 4 sqrt(L) units of roundoff of T. Measured in fp32 on
// oneDNN: 3.5e-6 at L = 23520 (LeNet layer 1, N = 30), 3.7e-5 at L = 589824
// (kBlocks); in double on im2col 5.2e-14 at kBlocks.
template <class T>
double sum_tolerance(const Conv2dShape& s, double tol) {
  const double l = static_cast<double>(s.batch * s.out_h() * s.out_w());
  return tol + 4.0 * std::numeric_limits<T>::epsilon() / 2 * std::sqrt(l);
}

// Direct gradients of loss = sum(y * dy): dx, dw, db (no pre-fill).
struct DirectGrads {
  std::vector<double> dx, dw, db;
};
DirectGrads naive_conv_grads(const Conv2dShape& s, const std::vector<double>& x,
                             const std::vector<double>& w, const std::vector<double>& dy) {
  const std::int64_t oh = s.out_h(), ow = s.out_w();
  std::vector<long double> dx(x_elems(s), 0.0L), dw(w_elems(s), 0.0L), db(s.out_channels, 0.0L);
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t o = 0; o < s.out_channels; ++o)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          const long double g = dy[((n * s.out_channels + o) * oh + i) * ow + j];
          db[o] += g;
          for (std::int64_t c = 0; c < s.in_channels; ++c)
            for (std::int64_t p = 0; p < s.kernel_h; ++p)
              for (std::int64_t q = 0; q < s.kernel_w; ++q) {
                const std::int64_t ih = i * s.stride - s.padding + p;
                const std::int64_t iw = j * s.stride - s.padding + q;
                if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
                const std::int64_t xi = ((n * s.in_channels + c) * s.height + ih) * s.width + iw;
                const std::int64_t wi = ((o * s.in_channels + c) * s.kernel_h + p) * s.kernel_w + q;
                dx[xi] += g * w[wi];
                dw[wi] += g * x[xi];
              }
        }
  auto to_double = [](const std::vector<long double>& v) { return std::vector<double>(v.begin(), v.end()); };
  return {to_double(dx), to_double(dw), to_double(db)};
}

struct Data {
  Conv2dShape s;
  std::vector<double> x, w, b, r;  // r: loss weights = dy
  explicit Data(const Conv2dShape& shape, std::uint64_t seed = 100)
      : s(shape), x(test::random_vector(x_elems(shape), seed)),
        w(test::random_vector(w_elems(shape), seed + 1)),
        b(test::random_vector(shape.out_channels, seed + 2)),
        r(test::random_vector(y_elems(shape), seed + 3)) {}
};

template <class T>
std::vector<T> forward(const Conv2dShape& s, const std::vector<T>& x, const std::vector<T>& w,
                       const std::vector<T>* b) {
  std::vector<T> ws(conv2d_workspace_elems<T>(s), T(std::numeric_limits<float>::quiet_NaN()));
  std::vector<T> y(y_elems(s), T(std::numeric_limits<float>::quiet_NaN()));  // overwritten
  conv2d_forward<T>(s, cview4(x, s.batch, s.in_channels, s.height, s.width),
                    cview4(w, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
                    b ? cview1(*b) : CView1<T>(), view1(ws),
                    view4(y, s.batch, s.out_channels, s.out_h(), s.out_w()));
  return y;
}

// dx (when given) overwritten, dw / db (when db non-empty) accumulated.
template <class T>
void backward(const Conv2dShape& s, const std::vector<T>& x, const std::vector<T>& w,
              const std::vector<T>& dy, std::vector<T>* dx, std::vector<T>& dw,
              std::vector<T>* db) {
  std::vector<T> ws(conv2d_workspace_elems<T>(s), T(std::numeric_limits<float>::quiet_NaN()));
  conv2d_backward<T>(s, cview4(x, s.batch, s.in_channels, s.height, s.width),
                     cview4(w, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
                     cview4(dy, s.batch, s.out_channels, s.out_h(), s.out_w()), view1(ws),
                     dx ? view4(*dx, s.batch, s.in_channels, s.height, s.width) : View4<T>(),
                     view4(dw, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
                     db ? view1(*db) : View1<T>());
}

TEST(Conv2d, OutputSizesAndBoundedWorkspace) {
  EXPECT_EQ(kOdd.out_h(), 4);
  EXPECT_EQ(kOdd.out_w(), 5);
  EXPECT_EQ(kPad2.out_h(), 9);
  EXPECT_EQ(kPad2.out_w(), 7);
  EXPECT_EQ(kStride3.out_h(), 3);
  EXPECT_EQ(kStride3.out_w(), 2);
  EXPECT_EQ(kLeNet1.out_h(), 28);
  EXPECT_EQ(kLeNet2.out_h(), 10);
  // double (im2col): 2^18 / (25 * 784) = 13 samples per block; the workspace
  // stops growing there.
  Conv2dShape s = kLeNet1;
  s.batch = 64;
  EXPECT_EQ(conv2d_samples_per_block(s), 13);
  EXPECT_EQ(conv2d_workspace_elems<double>(s), 13 * 25 * 784);
  s.batch = 100000;
  EXPECT_EQ(conv2d_workspace_elems<double>(s), 13 * 25 * 784);
  s.batch = 5;
  EXPECT_EQ(conv2d_workspace_elems<double>(s), 5 * 25 * 784);
  s.batch = 0;
  for (std::int64_t e : {conv2d_workspace_elems<double>(s), conv2d_workspace_elems<float>(s),
                         conv2d_workspace_elems<bf16>(s), conv2d_workspace_elems<f16>(s)})
    EXPECT_EQ(e, 0);
  // f16 converts samples in the 16-bit scratch arena and takes no workspace.
  s.batch = 64;
  EXPECT_EQ(conv2d_workspace_elems<f16>(s), 0);
  EXPECT_EQ(conv2d_workspace_elems<bf16>(s) == 0, !cpu_bf16_native());
}

// oneDNN's workspace: at least the fp32 dw / db staging, the same for batch 10^5
// and 10^6 (bounded by the shape: one block of samples), and no smaller batch
// needs more than a larger one (the model sizes it once, at its max micro-batch).
template <class T>
void check_dnnl_workspace_bounded() {
  for (Conv2dShape s : {kOdd, kPad2, kStride3, kLeNet1, kLeNet2, Conv2dShape{64, 1, 28, 28, 20, 5, 5, 1, 0},
                        Conv2dShape{64, 20, 12, 12, 50, 5, 5, 1, 0}}) {
    s.batch = 64;
    const std::int64_t at64 = conv2d_workspace_elems<T>(s);
    const std::int64_t staging = static_cast<std::int64_t>(sizeof(float) / sizeof(T)) * s.out_channels * (s.col_rows() + 1);
    EXPECT_GE(at64, staging);
    for (std::int64_t n = 1; n < 64; ++n) {
      Conv2dShape small = s;
      small.batch = n;
      EXPECT_LE(conv2d_workspace_elems<T>(small), at64) << shape_label(small);
    }
    // Beyond one block of samples the need stops growing.
    Conv2dShape big = s, bigger = s;
    big.batch = 100000;
    bigger.batch = 1000000;
    EXPECT_GE(conv2d_workspace_elems<T>(big), at64) << shape_label(big);
    EXPECT_EQ(conv2d_workspace_elems<T>(bigger), conv2d_workspace_elems<T>(big)) << shape_label(bigger);
    std::cout << "[dnnl] " << type_name<T>() << " " << shape_label(s) << ": " << dnnl_conv_impl(s, dnnl_type<T>())
              << ", workspace " << at64 * static_cast<std::int64_t>(sizeof(T)) << " bytes" << std::endl;
  }
}

TEST(Conv2d, DnnlWorkspaceBoundedForAnyBatch) {
  check_dnnl_workspace_bounded<float>();
  if (cpu_bf16_native()) check_dnnl_workspace_bounded<bf16>();
}

TEST(Conv2d, ForwardMatchesDirectConvolution) {
  Conv2dShape many = kLeNet1;
  many.batch = 30;  // 3 im2col blocks of up to 13 samples, the last one ragged
  for (const Conv2dShape& s : {kOdd, kBrief, kPad2, kStride3, kLeNet1, kLeNet2, many, kBlocks}) {
    const Data d(s);
    for (bool bias : {true, false}) {
      const auto ref = naive_conv(s, d.x, d.w, bias ? d.b : std::vector<double>{});
      const std::string label = "N=" + std::to_string(s.batch) + " IC=" +
                                std::to_string(s.in_channels) + " H=" + std::to_string(s.height) +
                                " bias=" + std::to_string(bias);
      EXPECT_LE(test::max_scaled_error(forward<double>(s, d.x, d.w, bias ? &d.b : nullptr), ref),
                1e-14)
          << label;
      const auto xf = cast_vector<float>(d.x), wf = cast_vector<float>(d.w),
                 bf = cast_vector<float>(d.b);
      EXPECT_LE(test::max_scaled_error(forward<float>(s, xf, wf, bias ? &bf : nullptr), ref), 2e-6)
          << label;
    }
  }
  // One hand-computed value: 1 channel, 3x3 ones kernel over 1..16 (4x4), pad 1,
  // stride 2: y[0][0] = 1+2+5+6 = 14, y[1][1] = 6+7+8+10+11+12+14+15+16 = 99.
  const Conv2dShape s{1, 1, 4, 4, 1, 3, 3, 2, 1};
  std::vector<double> x(16), w(9, 1.0), b = {0.5};
  for (int i = 0; i < 16; ++i) x[i] = i + 1;
  const auto y = forward<double>(s, x, w, &b);
  ASSERT_EQ(y.size(), 4u);
  EXPECT_EQ(y[0], 14.5);
  EXPECT_EQ(y[3], 99.5);
}

// Backward against the direct gradients: dx OVERWRITTEN (NaN-filled before), dw
// and db ACCUMULATED onto non-zero values, empty dx / db skipped (db untouched).
// T = float runs on oneDNN, T = double on im2col. dw / db sum L = N*OH*OW
// products per element, so their bound grows as sqrt(L) (sum_tolerance).
template <class T>
void check_backward_direct(const Conv2dShape& s, double tol) {
  const double tol_sum = sum_tolerance<T>(s, tol);
  const Data d(s, 55);
  const DirectGrads ref = naive_conv_grads(s, d.x, d.w, d.r);
  const auto dw0 = test::random_vector(w_elems(s), 56, -4.0, 4.0), db0 = test::random_vector(s.out_channels, 57, -4.0, 4.0);
  std::vector<double> dw_want(dw0), db_want(db0);
  for (std::size_t i = 0; i < dw_want.size(); ++i) dw_want[i] += ref.dw[i];
  for (std::size_t i = 0; i < db_want.size(); ++i) db_want[i] += ref.db[i];
  const auto x = cast_vector<T>(d.x), w = cast_vector<T>(d.w), dy = cast_vector<T>(d.r);
  for (bool with_dx : {true, false})
    for (bool with_db : {true, false}) {
      const std::string label = std::string(type_name<T>()) + " " + shape_label(s) + (with_dx ? "" : " empty-dx") +
                                (with_db ? "" : " empty-db");
      std::vector<T> dx(x.size(), T(std::numeric_limits<float>::quiet_NaN()));
      std::vector<T> dw = cast_vector<T>(dw0), db = cast_vector<T>(db0);
      backward<T>(s, x, w, dy, with_dx ? &dx : nullptr, dw, with_db ? &db : nullptr);
      if (with_dx) EXPECT_LE(test::max_scaled_error(dx, ref.dx), tol) << label << " dx";
      else for (const T& v : dx) ASSERT_TRUE(std::isnan(static_cast<double>(v))) << label << ": dx written";
      EXPECT_LE(test::max_scaled_error(dw, dw_want), tol_sum) << label << " dw";
      if (with_db) EXPECT_LE(test::max_scaled_error(db, db_want), tol_sum) << label << " db";
      else EXPECT_EQ(db, cast_vector<T>(db0)) << label << ": db written";
    }
}

TEST(Conv2d, BackwardMatchesDirectGradients) {
  Conv2dShape many = kLeNet1;
  many.batch = 30;
  ASSERT_EQ(dnnl_conv_samples_per_block(kBlocks), 4);  // several oneDNN blocks, the last ragged
  for (const Conv2dShape& s : {kOdd, kBrief, kPad2, kStride3, kLeNet1, kLeNet2, many, kBlocks}) {
    check_backward_direct<double>(s, 1e-14);
    check_backward_direct<float>(s, 2e-6);
  }
}

// Gradients of loss = sum(conv2d_forward(x, w, b) * r) by central differences
// through the real forward.
void check_gradients(const Conv2dShape& s, bool bias, const std::string& label) {
  const Data d(s, 7);
  auto loss_of = [&](const std::vector<double>& x, const std::vector<double>& w,
                     const std::vector<double>& b) {
    return test::weighted_sum(forward<double>(s, x, w, bias ? &b : nullptr), d.r);
  };
  std::vector<double> dx(x_elems(s), 123.0), dw(w_elems(s), 0.0), db(s.out_channels, 0.0);
  backward<double>(s, d.x, d.w, d.r, &dx, dw, bias ? &db : nullptr);
  EXPECT_TRUE(test::gradient_ok(label + " dx", test::gradcheck([&](std::span<const double> v) {
    return loss_of(std::vector<double>(v.begin(), v.end()), d.w, d.b);
  }, d.x, dx)));
  EXPECT_TRUE(test::gradient_ok(label + " dw", test::gradcheck([&](std::span<const double> v) {
    return loss_of(d.x, std::vector<double>(v.begin(), v.end()), d.b);
  }, d.w, dw)));
  if (bias) {
    EXPECT_TRUE(test::gradient_ok(label + " db", test::gradcheck([&](std::span<const double> v) {
      return loss_of(d.x, d.w, std::vector<double>(v.begin(), v.end()));
    }, d.b, db)));
  } else {
    for (double v : db) EXPECT_EQ(v, 0.0);
  }
}

TEST(Conv2d, GradientsStride2Padding1) { check_gradients(kOdd, true, "conv stride2 pad1"); }
TEST(Conv2d, GradientsWithoutBias) { check_gradients(kOdd, false, "conv no-bias"); }
TEST(Conv2d, GradientsStride1Padding2) { check_gradients(kPad2, true, "conv stride1 pad2"); }
TEST(Conv2d, GradientsStrideAboveKernel) {
  // Inputs in rows / columns no window reaches get an exact zero gradient.
  check_gradients(kStride3, true, "conv stride3 > kernel");
  const Data d(kStride3);
  std::vector<double> dx(x_elems(kStride3), 9.0), dw(w_elems(kStride3), 0.0);
  backward<double>(kStride3, d.x, d.w, d.r, &dx, dw, nullptr);
  // Windows cover rows {0,1, 3,4, 6,7} and columns {0,1, 3,4}: rows 2, 5 and
  // columns 2, 5, 6 are never read; everything else is.
  for (std::int64_t nc = 0; nc < kStride3.batch * kStride3.in_channels; ++nc)
    for (std::int64_t ih = 0; ih < kStride3.height; ++ih)
      for (std::int64_t iw = 0; iw < kStride3.width; ++iw) {
        const bool read = ih % 3 != 2 && iw % 3 != 2 && iw != 6;
        const double g = dx[(nc * kStride3.height + ih) * kStride3.width + iw];
        if (read) EXPECT_NE(g, 0.0) << ih << "," << iw;
        else EXPECT_EQ(g, 0.0) << ih << "," << iw;
      }
}
TEST(Conv2d, GradientsLeNetLayer1) {
  Conv2dShape s = kLeNet1;
  s.batch = 1;
  s.height = s.width = 12;  // the LeNet kernel and padding on a smaller image
  check_gradients(s, true, "conv lenet1 5x5 pad2");
}
TEST(Conv2d, GradientsLeNetLayer2) {
  Conv2dShape s = kLeNet2;
  s.batch = 1;
  check_gradients(s, true, "conv lenet2 6x14x14->16x10x10");
}

TEST(Conv2d, BackwardOverwritesDxAndAccumulatesDwDb) {
  const Data d(kOdd);
  std::vector<double> dx1(x_elems(kOdd), 0.0), dw1(w_elems(kOdd), 0.0), db1(5, 0.0);
  backward<double>(kOdd, d.x, d.w, d.r, &dx1, dw1, &db1);
  std::vector<double> dx2(x_elems(kOdd), 5.0), dw2(w_elems(kOdd), 0.0), db2(5, 0.0);
  backward<double>(kOdd, d.x, d.w, d.r, &dx2, dw2, &db2);
  backward<double>(kOdd, d.x, d.w, d.r, &dx2, dw2, &db2);
  EXPECT_EQ(dx2, dx1);  // overwritten, not doubled
  for (std::size_t i = 0; i < dw1.size(); ++i) EXPECT_DOUBLE_EQ(dw2[i], 2.0 * dw1[i]);
  for (std::size_t i = 0; i < db1.size(); ++i) EXPECT_DOUBLE_EQ(db2[i], 2.0 * db1[i]);
  std::vector<double> dw3(w_elems(kOdd), 1.0), db3(5, -2.0);
  backward<double>(kOdd, d.x, d.w, d.r, &dx2, dw3, &db3);
  for (std::size_t i = 0; i < dw1.size(); ++i) EXPECT_NEAR(dw3[i], 1.0 + dw1[i], 1e-14);
  for (std::size_t i = 0; i < db1.size(); ++i) EXPECT_NEAR(db3[i], -2.0 + db1[i], 1e-14);
  // db is the plain sum of dy per channel.
  for (std::int64_t o = 0; o < 5; ++o) {
    double sum = 0.0;
    for (std::int64_t n = 0; n < 3; ++n)
      for (std::int64_t e = 0; e < 20; ++e) sum += d.r[(n * 5 + o) * 20 + e];
    EXPECT_NEAR(db1[o], sum, 1e-13);
  }
}

TEST(Conv2d, EmptyDxAndDbAreSkipped) {
  const Data d(kPad2);
  std::vector<double> dx(x_elems(kPad2)), dw_ref(w_elems(kPad2), 0.0), db_ref(4, 0.0);
  backward<double>(kPad2, d.x, d.w, d.r, &dx, dw_ref, &db_ref);
  std::vector<double> dw(w_elems(kPad2), 0.0);
  backward<double>(kPad2, d.x, d.w, d.r, nullptr, dw, nullptr);
  EXPECT_EQ(dw, dw_ref);
}

// Two identical calls give the same bits (y, dx, dw, db), and each sample's y and
// dx are the bits of a call on that sample alone. dw summed over the batch in one
// call: im2col adds sample after sample (and block after block), so it equals a
// per-sample loop bit for bit; oneDNN sums the batch in its own order, so it
// matches the per-sample loop to fp32 rounding.
// Bitwise equality for any storage type (bf16 has no operator==).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

enum class DwAgainstSamples { bitwise, close, unchecked };

template <class T>
void check_deterministic_per_sample(const Conv2dShape& s, DwAgainstSamples dw_check) {
  const Data d(s, 21);
  const auto x = cast_vector<T>(d.x), w = cast_vector<T>(d.w), b = cast_vector<T>(d.b),
             dy = cast_vector<T>(d.r);
  auto run = [&](std::vector<T>& y, std::vector<T>& dx, std::vector<T>& dw, std::vector<T>& db) {
    y = forward<T>(s, x, w, &b);
    dx.assign(x.size(), T(0.0f));
    dw.assign(w.size(), T(0.0f));
    db.assign(b.size(), T(0.0f));
    backward<T>(s, x, w, dy, &dx, dw, &db);
  };
  std::vector<T> y1, dx1, dw1, db1, y2, dx2, dw2, db2;
  run(y1, dx1, dw1, db1);
  run(y2, dx2, dw2, db2);
  const std::string t = type_name<T>();
  EXPECT_TRUE(same_bits(y1, y2)) << t;
  EXPECT_TRUE(same_bits(dx1, dx2)) << t;
  EXPECT_TRUE(same_bits(dw1, dw2)) << t << ": backward weights not reproducible";
  EXPECT_TRUE(same_bits(db1, db2)) << t;

  Conv2dShape s1 = s;
  s1.batch = 1;
  const std::int64_t xs = x_elems(s1), ys = y_elems(s1);
  std::vector<T> dw_seq(w.size(), T(0.0f));
  for (std::int64_t n = 0; n < s.batch; ++n) {
    const std::vector<T> xn(x.begin() + n * xs, x.begin() + (n + 1) * xs);
    const std::vector<T> dyn(dy.begin() + n * ys, dy.begin() + (n + 1) * ys);
    const auto yn = forward<T>(s1, xn, w, &b);
    EXPECT_EQ(std::memcmp(yn.data(), y1.data() + n * ys, yn.size() * sizeof(T)), 0) << t << " sample " << n;
    std::vector<T> dxn(xs);
    backward<T>(s1, xn, w, dyn, &dxn, dw_seq, nullptr);
    EXPECT_EQ(std::memcmp(dxn.data(), dx1.data() + n * xs, dxn.size() * sizeof(T)), 0) << t << " sample " << n;
  }
  if (dw_check == DwAgainstSamples::bitwise) {
    EXPECT_TRUE(same_bits(dw_seq, dw1)) << t;  // dw += per sample, in sample order, in both cases
  }
  if constexpr (!is_half_v<T>) {
    if (dw_check == DwAgainstSamples::close) {
      EXPECT_LE(test::max_scaled_error(dw_seq, dw1), sum_tolerance<T>(s, 0.0)) << t;
    }
  }
}

TEST(Conv2d, Im2colDeterministicAndIndependentOfBlocking) {
  Conv2dShape s = kLeNet1;
  s.batch = 30;
  ASSERT_LT(conv2d_samples_per_block(s), s.batch);  // several im2col blocks, the last ragged
  check_deterministic_per_sample<double>(s, DwAgainstSamples::bitwise);
}
TEST(Conv2d, DnnlDeterministicAndPerSampleIndependent) {
  Conv2dShape s = kLeNet1;
  s.batch = 30;  // one oneDNN block
  ASSERT_LT(dnnl_conv_samples_per_block(kBlocks), kBlocks.batch);  // several, the last ragged
  for (const Conv2dShape& shape : {s, kBlocks}) {
    check_deterministic_per_sample<float>(shape, DwAgainstSamples::close);
    // bf16 dw of a per-sample loop is rounded after every sample: not comparable.
    if (cpu_bf16_native()) check_deterministic_per_sample<bf16>(shape, DwAgainstSamples::unchecked);
  }
}

// One cache entry per (shape, type, bias): repeating a call adds none, nor does
// a call after conv2d_warm_up of its shape (the warm-up made what it runs).
TEST(Conv2d, DnnlPrimitivesCachedPerShape) {
  {
    Conv2dShape s = kOdd;
    s.out_channels = 7;  // a shape no other test runs
    conv2d_warm_up<float>(s);
    const std::size_t warmed = dnnl_conv_cache_size();
    const Data d(s, 62);
    const auto x = cast_vector<float>(d.x), w = cast_vector<float>(d.w), b = cast_vector<float>(d.b),
               dy = cast_vector<float>(d.r);
    std::vector<float> dx(x.size()), dw(w.size(), 0.0f), db(b.size(), 0.0f);
    forward<float>(s, x, w, &b);
    backward<float>(s, x, w, dy, &dx, dw, &db);
    EXPECT_EQ(dnnl_conv_cache_size(), warmed);
  }
  const Data d(kPad2, 61);
  const auto x = cast_vector<float>(d.x), w = cast_vector<float>(d.w), b = cast_vector<float>(d.b),
             dy = cast_vector<float>(d.r);
  std::vector<float> dx(x.size()), dw(w.size(), 0.0f), db(b.size(), 0.0f);
  forward<float>(kPad2, x, w, &b);
  backward<float>(kPad2, x, w, dy, &dx, dw, &db);
  const std::size_t entries = dnnl_conv_cache_size();
  forward<float>(kPad2, x, w, &b);
  backward<float>(kPad2, x, w, dy, &dx, dw, &db);
  EXPECT_EQ(dnnl_conv_cache_size(), entries);
}

TEST(Conv2d, FloatBackwardMatchesDouble) {
  const Data d(kLeNet2);
  std::vector<double> dx(x_elems(kLeNet2)), dw(w_elems(kLeNet2), 0.0), db(16, 0.0);
  backward<double>(kLeNet2, d.x, d.w, d.r, &dx, dw, &db);
  const auto x = cast_vector<float>(d.x), w = cast_vector<float>(d.w), r = cast_vector<float>(d.r);
  std::vector<float> dxf(x.size()), dwf(w.size(), 0.0f), dbf(16, 0.0f);
  backward<float>(kLeNet2, x, w, r, &dxf, dwf, &dbf);
  EXPECT_LE(test::max_scaled_error(dxf, dx), 2e-6);
  EXPECT_LE(test::max_scaled_error(dwf, dw), 2e-6);
  EXPECT_LE(test::max_scaled_error(dbf, db), 2e-6);
}

// ||a16 - a32|| / ||a32|| over a buffer.
template <class H>
double rel_l2(const std::vector<H>& got, const std::vector<float>& want) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = to_float(got[i]), w = want[i];
    num += (g - w) * (g - w);
    den += w * w;
  }
  return std::isnan(num) ? INFINITY : std::sqrt(num / den);
}

template <class H>
void check_half(double bound) {
  const Conv2dShape s = kLeNet2;
  const Data d(s, 41);
  auto round16 = [](const std::vector<double>& v) {
    std::vector<H> h(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) h[i] = H(static_cast<float>(v[i]));
    return h;
  };
  auto widen = [](const std::vector<H>& v) {
    std::vector<float> f(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) f[i] = to_float(v[i]);
    return f;
  };
  const auto x = round16(d.x), w = round16(d.w), b = round16(d.b), dy = round16(d.r);
  const auto dw0 = round16(test::random_vector(w.size(), 42)),
             db0 = round16(test::random_vector(b.size(), 43));
  // fp32 reference on the same (rounded) values.
  const auto xf = widen(x), wf = widen(w), bf = widen(b), dyf = widen(dy);
  const auto yf = forward<float>(s, xf, wf, &bf);
  std::vector<float> dxf(xf.size()), dwf = widen(dw0), dbf = widen(db0);
  backward<float>(s, xf, wf, dyf, &dxf, dwf, &dbf);

  std::vector<float> scratch(conv2d_half_scratch_elems(s), std::numeric_limits<float>::quiet_NaN());
  const bool native = std::is_same_v<H, bf16> && cpu_bf16_native();
  half_scratch_bind(scratch.data(), scratch.size() - 1);
  if (native) {
    EXPECT_NO_THROW(forward<H>(s, x, w, &b));  // oneDNN: no 16-bit scratch
  } else {
    EXPECT_THROW(forward<H>(s, x, w, &b), Error);  // one float short
  }
  half_scratch_bind(scratch.data(), scratch.size());
  const auto y = forward<H>(s, x, w, &b);
  std::vector<H> dx(x.size(), H(std::numeric_limits<float>::quiet_NaN())), dw = dw0, db = db0;
  backward<H>(s, x, w, dy, &dx, dw, &db);
  half_scratch_bind(nullptr, 0);
  if (native) {  // bitwise reproducible, backward weights included
    const auto y2 = forward<H>(s, x, w, &b);
    std::vector<H> dx2(x.size()), dw2 = dw0, db2 = db0;
    backward<H>(s, x, w, dy, &dx2, dw2, &db2);
    auto bits = [](const std::vector<H>& v) {
      std::vector<std::uint16_t> out(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i].bits;
      return out;
    };
    EXPECT_EQ(bits(y2), bits(y));
    EXPECT_EQ(bits(dx2), bits(dx));
    EXPECT_EQ(bits(dw2), bits(dw));
    EXPECT_EQ(bits(db2), bits(db));
  }
  const std::string t = type_name<H>();
  std::cout << "[half-error] " << t << (native ? " (oneDNN)" : " (im2col tiles)") << " conv2d y=" << rel_l2(y, yf) << " dx=" << rel_l2(dx, dxf)
            << " dw=" << rel_l2(dw, dwf) << " db=" << rel_l2(db, dbf) << std::endl;
  EXPECT_LE(rel_l2(y, yf), bound) << t;
  EXPECT_LE(rel_l2(dx, dxf), bound) << t;
  EXPECT_LE(rel_l2(dw, dwf), bound) << t;
  EXPECT_LE(rel_l2(db, dbf), bound) << t;
}

TEST(Conv2d, HalfMatchesFloat) {
  check_half<f16>(1e-2);
  check_half<bf16>(2e-2);
}

TEST(Conv2d, ShapeErrorsThrow) {
  const Data d(kOdd);
  std::vector<double> y(y_elems(kOdd)), ws(conv2d_workspace_elems<double>(kOdd));
  const auto x4 = cview4(d.x, 3, 2, 7, 8);
  const auto w4 = cview4(d.w, 5, 2, 3, 2);
  EXPECT_NO_THROW(conv2d_forward<double>(kOdd, x4, w4, cview1(d.b), view1(ws), view4(y, 3, 5, 4, 5)));
  std::vector<double> small(ws.size() - 1);
  EXPECT_THROW(conv2d_forward<double>(kOdd, x4, w4, cview1(d.b), view1(small), view4(y, 3, 5, 4, 5)),
               Error);
  EXPECT_THROW(conv2d_forward<double>(kOdd, x4, w4, cview1(d.b), view1(ws), view4(y, 3, 5, 5, 4)),
               Error);
  std::vector<double> bad_b(6);
  EXPECT_THROW(conv2d_forward<double>(kOdd, x4, w4, cview1(bad_b), view1(ws), view4(y, 3, 5, 4, 5)),
               Error);
  EXPECT_THROW(conv2d_forward<double>(kOdd, cview4(d.x, 3, 2, 8, 7), w4, cview1(d.b), view1(ws),
                                      view4(y, 3, 5, 4, 5)),
               Error);
  Conv2dShape too_big = kOdd;
  too_big.kernel_h = 10;  // 7 + 2 < 10
  EXPECT_THROW(conv2d_workspace_elems<double>(too_big), Error);
  EXPECT_THROW(conv2d_workspace_elems<float>(too_big), Error);
  Conv2dShape no_stride = kOdd;
  no_stride.stride = 0;
  EXPECT_THROW(conv2d_check_shape(no_stride), Error);
  std::vector<double> dw(w_elems(kOdd)), dx_bad(x_elems(kOdd) + 8);
  EXPECT_THROW(conv2d_backward<double>(kOdd, x4, w4, cview4(d.r, 3, 5, 4, 5), view1(ws),
                                       view4(dx_bad, 3, 2, 8, 8), view4(dw, 5, 2, 3, 2),
                                       View1<double>()),
               Error);
  // oneDNN path: a workspace one element short throws before anything is written.
  const auto xf = cast_vector<float>(d.x), wf = cast_vector<float>(d.w), bf = cast_vector<float>(d.b),
             dyf = cast_vector<float>(d.r);
  std::vector<float> wsf(conv2d_workspace_elems<float>(kOdd) - 1), yf(y_elems(kOdd), 7.0f), dwf(wf.size(), 7.0f);
  EXPECT_THROW(conv2d_forward<float>(kOdd, cview4(xf, 3, 2, 7, 8), cview4(wf, 5, 2, 3, 2), cview1(bf), view1(wsf),
                                     view4(yf, 3, 5, 4, 5)),
               Error);
  EXPECT_THROW(conv2d_backward<float>(kOdd, cview4(xf, 3, 2, 7, 8), cview4(wf, 5, 2, 3, 2),
                                      cview4(dyf, 3, 5, 4, 5), view1(wsf), View4<float>(), view4(dwf, 5, 2, 3, 2),
                                      View1<float>()),
               Error);
  for (float v : yf) ASSERT_EQ(v, 7.0f);
  for (float v : dwf) ASSERT_EQ(v, 7.0f);
}

// Run with --gtest_also_run_disabled_tests: the convs of inputs/mnist_cnn.toml
// (1x28x28 -> 20 @ 5x5; 20x12x12 -> 50 @ 5x5) at its micro-batch 64, forward +
// backward (dx skipped for the first layer, as the model does): fp32 on oneDNN and
// on the im2col path (what conv2d<float> ran before oneDNN), and bf16 (oneDNN on
// CPUs with native bf16; the im2col tile path under DNNL_MAX_CPU_ISA=AVX512_CORE).
// Prints the median over 10 runs of wall time and of the thread's CPU time (with
// one oneDNN thread the work runs on the calling thread, so the CPU time does not
// count time the thread waited for a core on a busy machine).
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

template <class T>
void time_mnist_convs(bool im2col) {
  for (const Conv2dShape& s : {Conv2dShape{64, 1, 28, 28, 20, 5, 5, 1, 0}, Conv2dShape{64, 20, 12, 12, 50, 5, 5, 1, 0}}) {
    const Data d(s, 5);
    const auto x = cast_vector<T>(d.x), w = cast_vector<T>(d.w), b = cast_vector<T>(d.b), dy = cast_vector<T>(d.r);
    const std::int64_t ws_elems = im2col ? conv2d_im2col_elems(s) : conv2d_workspace_elems<T>(s);
    std::vector<T> ws(static_cast<std::size_t>(ws_elems)), y(y_elems(s)), dx(x.size()), dw(w.size()), db(b.size());
    const auto X = cview4(x, s.batch, s.in_channels, s.height, s.width);
    const auto W = cview4(w, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w);
    const bool with_dx = s.in_channels > 1;
    std::vector<float> scratch(static_cast<std::size_t>(conv2d_half_scratch_elems(s)));
    if (is_half_v<T>) half_scratch_bind(scratch.data(), scratch.size());  // the tile path's
    std::vector<double> wall, cpu;
    for (int rep = 0; rep < 11; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = thread_cpu_ms();
      if constexpr (std::is_same_v<T, float>) {
        if (im2col) {
          conv2d_im2col_forward<float>(s, x.data(), w.data(), b.data(), ws.data(), y.data());
          conv2d_im2col_backward<float>(s, x.data(), w.data(), dy.data(), ws.data(), with_dx ? dx.data() : nullptr,
                                        dw.data(), db.data());
        }
      }
      if (!im2col) {
        conv2d_forward<T>(s, X, W, cview1(b), view1(ws), view4(y, s.batch, s.out_channels, s.out_h(), s.out_w()));
        conv2d_backward<T>(s, X, W, cview4(dy, s.batch, s.out_channels, s.out_h(), s.out_w()), view1(ws),
                           with_dx ? view4(dx, s.batch, s.in_channels, s.height, s.width) : View4<T>(),
                           view4(dw, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w), view1(db));
      }
      const double c1 = thread_cpu_ms();
      const auto t1 = std::chrono::steady_clock::now();
      if (rep > 0) {
        wall.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        cpu.push_back(c1 - c0);
      }
    }
    half_scratch_bind(nullptr, 0);
    std::sort(wall.begin(), wall.end());
    std::sort(cpu.begin(), cpu.end());
    const double flops = 2.0 * static_cast<double>(y_elems(s) * s.col_rows()) * (with_dx ? 3 : 2);
    const bool native = !std::is_same_v<T, bf16> || cpu_bf16_native();
    std::cout << "[timing] conv2d " << type_name<T>() << (im2col || !native ? " im2col" : " oneDNN") << " "
              << shape_label(s) << " fwd+bwd" << (with_dx ? " (with dx)" : " (no dx)") << ": median wall "
              << (wall[4] + wall[5]) / 2 << " ms (min " << wall[0] << ", max " << wall[9] << "), median CPU "
              << (cpu[4] + cpu[5]) / 2 << " ms (min " << cpu[0] << "), " << flops / ((cpu[4] + cpu[5]) / 2 * 1e6)
              << " GFLOP/s of CPU time" << std::endl;
  }
}

TEST(Conv2d, DISABLED_TimingMnistConvsBatch64) {
  time_mnist_convs<float>(false);
  time_mnist_convs<float>(true);
  time_mnist_convs<bf16>(false);
}

}  // namespace
}  // namespace shardtrain
