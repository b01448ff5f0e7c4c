// Device test of CudnnConv2d (kernels/cuda/cudnn_conv.cuh), label gpu, one device;
// built in CI, never run here (no GPU). Forward, dx, dw (accumulated onto a
// non-zero start) and db (likewise) against a float64 direct convolution on the
// host, for float (relative 1e-4), __half and __nv_bfloat16 storage (relative
// L2 1e-2 / 2e-2, inputs rounded to the storage type first), on a shape whose
// numbers do not coincide (stride 2, padding 1, a 3x2 kernel) and on the two
// LeNet layers; the backward is bitwise repeatable (deterministic algorithms).
// Outputs the op overwrites (y, dx) are NaN-prefilled; the stream is
// non-blocking, as the trainer's.
// The bias is our own kernels (conv_bias.cuh), not cuDNN's legacy
// cudnnAddTensor / cudnnConvolutionBackwardBias: with zero weights y must be
// exactly b in every position (catches a wrong channel index in the bias add),
// db must be bitwise repeatable, and bf16 runs at all (the legacy calls need not
// support it). Math type: each pass's descriptor holds the math type of its
// chosen algorithm (catches an unset descriptor), and fp32 is FMA only (no TF32).
// Without a device main() prints why and exits 1: it never skips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/cuda/cudnn_conv.cuh"
#include "device_buffer.hpp"

namespace shardtrain {
namespace {

using cuda::ConvShape;
using test::DeviceBuffer;
using test::random_values;

struct Ref {
  std::vector<double> y, dx, dw, db;
};

// Direct cross-correlation in double; dw and db start at `start`.
Ref reference(const ConvShape& s, const std::vector<double>& x, const std::vector<double>& w,
              const std::vector<double>& b, const std::vector<double>& dy, double start) {
  const std::int64_t oh = s.out_h(), ow = s.out_w();
  Ref r;
  r.y.assign(s.batch * s.out_channels * oh * ow, 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), start);
  r.db.assign(s.out_channels, start);
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t o = 0; o < s.out_channels; ++o)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          const std::int64_t yi = ((n * s.out_channels + o) * oh + i) * ow + j;
          double acc = b[o];
          for (std::int64_t c = 0; c < s.in_channels; ++c)
            for (std::int64_t p = 0; p < s.kernel_h; ++p)
              for (std::int64_t q = 0; q < s.kernel_w; ++q) {
                const std::int64_t h = i * s.stride - s.padding + p, v = j * s.stride - s.padding + q;
                if (h < 0 || h >= s.height || v < 0 || v >= s.width) continue;
                const std::int64_t xi = ((n * s.in_channels + c) * s.height + h) * s.width + v;
                const std::int64_t wi = ((o * s.in_channels + c) * s.kernel_h + p) * s.kernel_w + q;
                acc += x[xi] * w[wi];
                r.dx[xi] += dy[yi] * w[wi];
                r.dw[wi] += dy[yi] * x[xi];
              }
          r.y[yi] = acc;
          r.db[o] += dy[yi];
        }
  return r;
}

template <class T>
double rel_l2(const std::vector<T>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(static_cast<float>(got[i]));
    num += (g - want[i]) * (g - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

template <class T>
std::vector<T> nans(std::size_t n) {
  return std::vector<T>(n, T(std::numeric_limits<float>::quiet_NaN()));
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// A cuDNN handle and a non-blocking stream (as the trainer's), destroyed in
// reverse order; failures there are reported, never thrown from a destructor.
struct CudnnOnStream {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  CudnnOnStream() {
    SHARDTRAIN_CUDNN_CHECK(cudnnCreate(&handle));
    SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  ~CudnnOnStream() {
    SHARDTRAIN_CUDA_WARN(cudaStreamDestroy(stream));
    if (cudnnDestroy(handle) != CUDNN_STATUS_SUCCESS) ADD_FAILURE() << "cudnnDestroy failed";
  }
  CudnnOnStream(const CudnnOnStream&) = delete;
  CudnnOnStream& operator=(const CudnnOnStream&) = delete;
};

template <class T>
void check(const ConvShape& s, double tol) {
  const CudnnOnStream cs;
  cudnnHandle_t handle = cs.handle;
  cudaStream_t stream = cs.stream;
  {
    cuda::CudnnConv2d<T> conv(handle, s);
    const std::size_t nx = s.batch * s.in_channels * s.height * s.width;
    const std::size_t nw = s.out_channels * s.in_channels * s.kernel_h * s.kernel_w;
    const std::size_t ny = s.batch * s.out_channels * s.out_h() * s.out_w();
    const auto x = random_values<T>(nx, 1), w = random_values<T>(nw, 2), b = random_values<T>(s.out_channels, 3);
    const auto dy = random_values<T>(ny, 4);
    const Ref ref = reference(s, widen(x), widen(w), widen(b), widen(dy), 0.5);
    DeviceBuffer<T> d_x(x), d_w(w), d_b(b), d_dy(dy), d_y(nans<T>(ny)), d_dx(nans<T>(nx));
    DeviceBuffer<unsigned char> ws(conv.workspace_bytes());
    std::vector<T> halfs_w(nw, T(0.5f)), halfs_b(s.out_channels, T(0.5f));
    DeviceBuffer<T> d_dw(halfs_w), d_db(halfs_b);
    conv.forward(stream, d_x.data(), d_w.data(), d_b.data(), d_y.data(), ws.data());
    conv.backward(stream, d_x.data(), d_w.data(), d_dy.data(), d_dx.data(), d_dw.data(), d_db.data(), ws.data());
    EXPECT_LT(rel_l2(d_y.download(), ref.y), tol) << "forward";
    const auto dx1 = d_dx.download(), dw1 = d_dw.download();
    EXPECT_LT(rel_l2(dx1, ref.dx), tol) << "dx";
    EXPECT_LT(rel_l2(dw1, ref.dw), tol) << "dw (accumulated onto 0.5)";
    EXPECT_LT(rel_l2(d_db.download(), ref.db), tol) << "db (accumulated onto 0.5)";
    // Determinism: the same backward again gives the same dx bit for bit, and dw
    // accumulates exactly the same increment once more.
    const auto db1 = d_db.download();
    d_dw.upload(halfs_w);
    d_db.upload(halfs_b);
    d_dx.upload(nans<T>(nx));
    conv.backward(stream, d_x.data(), d_w.data(), d_dy.data(), d_dx.data(), d_dw.data(), d_db.data(), ws.data());
    const auto dx2 = d_dx.download(), dw2 = d_dw.download();
    for (std::size_t i = 0; i < nx; ++i) ASSERT_EQ(static_cast<float>(dx1[i]), static_cast<float>(dx2[i])) << i;
    for (std::size_t i = 0; i < nw; ++i) ASSERT_EQ(static_cast<float>(dw1[i]), static_cast<float>(dw2[i])) << i;
    EXPECT_TRUE(same_bits(d_db.download(), db1)) << "db not bitwise repeatable";

    // Bias add alone: with zero weights, y[n, o, :] is exactly b[o].
    DeviceBuffer<T> d_zero_w(std::vector<T>(nw, T(0.0f))), d_y0(nans<T>(ny));
    conv.forward(stream, d_x.data(), d_zero_w.data(), d_b.data(), d_y0.data(), ws.data());
    const auto y0 = d_y0.download();
    const std::size_t plane = static_cast<std::size_t>(s.out_h() * s.out_w());
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < ny; ++i)
      if (static_cast<float>(y0[i]) != static_cast<float>(b[(i / plane) % s.out_channels])) ++wrong;
    EXPECT_EQ(wrong, 0u) << "bias add: y != b with zero weights";

    // Each pass runs with the math type of the algorithm it was given; fp32 never with TF32.
    for (const cuda::ConvPass pass :
         {cuda::ConvPass::Forward, cuda::ConvPass::BackwardData, cuda::ConvPass::BackwardFilter}) {
      EXPECT_EQ(conv.descriptor_math_type(pass), conv.chosen_math_type(pass)) << "pass " << static_cast<int>(pass);
      if constexpr (std::is_same_v<T, float>) {
        EXPECT_EQ(conv.chosen_math_type(pass), CUDNN_FMA_MATH) << "pass " << static_cast<int>(pass);
      }
    }
  }
}

// A large layer: the full float64 reference would take minutes single-threaded
// (7.4G multiply-adds per pass at 16 x 64 x 112 x 112, 64 filters of 3 x 3), so
// y and dx are compared at 4096 sampled elements and dw at 64 sampled weights
// (first and last always included), db completely; every element of y and dx
// must have been written (no NaN left of the prefill).
template <class T>
void check_large(const ConvShape& s, double tol) {
  const CudnnOnStream cs;
  cudnnHandle_t handle = cs.handle;
  cudaStream_t stream = cs.stream;
  {
    cuda::CudnnConv2d<T> conv(handle, s);
    const std::int64_t oh = s.out_h(), ow = s.out_w();
    const std::size_t nx = s.batch * s.in_channels * s.height * s.width;
    const std::size_t nw = s.out_channels * s.in_channels * s.kernel_h * s.kernel_w;
    const std::size_t ny = s.batch * s.out_channels * oh * ow;
    const auto x = random_values<T>(nx, 11), w = random_values<T>(nw, 12, -0.2f, 0.2f);
    const auto b = random_values<T>(s.out_channels, 13), dy = random_values<T>(ny, 14);
    DeviceBuffer<T> d_x(x), d_w(w), d_b(b), d_dy(dy), d_y(nans<T>(ny)), d_dx(nans<T>(nx));
    DeviceBuffer<T> d_dw(std::vector<T>(nw, T(0.5f))), d_db(std::vector<T>(s.out_channels, T(0.5f)));
    DeviceBuffer<unsigned char> ws(conv.workspace_bytes());
    conv.forward(stream, d_x.data(), d_w.data(), d_b.data(), d_y.data(), ws.data());
    conv.backward(stream, d_x.data(), d_w.data(), d_dy.data(), d_dx.data(), d_dw.data(), d_db.data(), ws.data());
    const auto y = d_y.download(), dx = d_dx.download(), dw = d_dw.download(), db = d_db.download();
    std::size_t nan_y = 0, nan_dx = 0;
    for (const T& v : y) nan_y += std::isnan(static_cast<float>(v)) ? 1 : 0;
    for (const T& v : dx) nan_dx += std::isnan(static_cast<float>(v)) ? 1 : 0;
    EXPECT_EQ(nan_y, 0u) << "y elements not written";
    EXPECT_EQ(nan_dx, 0u) << "dx elements not written";

    const std::vector<double> xd = widen(x), wd = widen(w), bd = widen(b), dyd = widen(dy);
    const auto at = [](std::int64_t i, std::int64_t stride_of, std::int64_t extent) { return (i / stride_of) % extent; };
    const auto sample = [](std::size_t total, std::size_t count) {
      std::vector<std::size_t> idx{0, total - 1};
      for (std::size_t k = 1; idx.size() < count; ++k) idx.push_back((k * 2654435761u) % total);
      return idx;
    };
    std::vector<T> got;
    std::vector<double> want;
    for (const std::size_t yi : sample(ny, 4096)) {  // y = b + sum over c, p, q of x w
      const std::int64_t i64 = static_cast<std::int64_t>(yi);
      const std::int64_t n = i64 / (s.out_channels * oh * ow), o = at(i64, oh * ow, s.out_channels);
      const std::int64_t i = at(i64, ow, oh), j = i64 % ow;
      double acc = bd[o];
      for (std::int64_t c = 0; c < s.in_channels; ++c)
        for (std::int64_t p = 0; p < s.kernel_h; ++p)
          for (std::int64_t q = 0; q < s.kernel_w; ++q) {
            const std::int64_t h = i * s.stride - s.padding + p, v = j * s.stride - s.padding + q;
            if (h < 0 || h >= s.height || v < 0 || v >= s.width) continue;
            acc += xd[((n * s.in_channels + c) * s.height + h) * s.width + v] *
                   wd[((o * s.in_channels + c) * s.kernel_h + p) * s.kernel_w + q];
          }
      got.push_back(y[yi]);
      want.push_back(acc);
    }
    EXPECT_LT(rel_l2(got, want), tol) << "forward (4096 sampled elements)";
    got.clear();
    want.clear();
    for (const std::size_t xi : sample(nx, 4096)) {  // dx = sum over o, p, q of dy w where the window covers x
      const std::int64_t i64 = static_cast<std::int64_t>(xi);
      const std::int64_t n = i64 / (s.in_channels * s.height * s.width), c = at(i64, s.height * s.width, s.in_channels);
      const std::int64_t h = at(i64, s.width, s.height), v = i64 % s.width;
      double acc = 0.0;
      for (std::int64_t o = 0; o < s.out_channels; ++o)
        for (std::int64_t p = 0; p < s.kernel_h; ++p)
          for (std::int64_t q = 0; q < s.kernel_w; ++q) {
            const std::int64_t ii = h + s.padding - p, jj = v + s.padding - q;
            if (ii < 0 || jj < 0 || ii % s.stride != 0 || jj % s.stride != 0) continue;
            const std::int64_t i = ii / s.stride, j = jj / s.stride;
            if (i >= oh || j >= ow) continue;
            acc += dyd[((n * s.out_channels + o) * oh + i) * ow + j] *
                   wd[((o * s.in_channels + c) * s.kernel_h + p) * s.kernel_w + q];
          }
      got.push_back(dx[xi]);
      want.push_back(acc);
    }
    EXPECT_LT(rel_l2(got, want), tol) << "dx (4096 sampled elements)";
    got.clear();
    want.clear();
    for (const std::size_t wi : sample(nw, 64)) {  // dw = 0.5 + sum over n, i, j of dy x
      const std::int64_t i64 = static_cast<std::int64_t>(wi);
      const std::int64_t o = i64 / (s.in_channels * s.kernel_h * s.kernel_w);
      const std::int64_t c = at(i64, s.kernel_h * s.kernel_w, s.in_channels);
      const std::int64_t p = at(i64, s.kernel_w, s.kernel_h), q = i64 % s.kernel_w;
      double acc = 0.5;
      for (std::int64_t n = 0; n < s.batch; ++n)
        for (std::int64_t i = 0; i < oh; ++i)
          for (std::int64_t j = 0; j < ow; ++j) {
            const std::int64_t h = i * s.stride - s.padding + p, v = j * s.stride - s.padding + q;
            if (h < 0 || h >= s.height || v < 0 || v >= s.width) continue;
            acc += dyd[((n * s.out_channels + o) * oh + i) * ow + j] *
                   xd[((n * s.in_channels + c) * s.height + h) * s.width + v];
          }
      got.push_back(dw[wi]);
      want.push_back(acc);
    }
    EXPECT_LT(rel_l2(got, want), tol) << "dw (64 sampled weights, accumulated onto 0.5)";
    std::vector<double> db_want(s.out_channels, 0.5);
    for (std::size_t i = 0; i < ny; ++i) db_want[(i / (oh * ow)) % s.out_channels] += dyd[i];
    EXPECT_LT(rel_l2(db, db_want), tol) << "db (complete, accumulated onto 0.5)";
  }
}

const ConvShape kOdd{3, 2, 7, 6, 5, 3, 2, 2, 1};
const ConvShape kLeNet1{8, 1, 28, 28, 6, 5, 5, 1, 2};
const ConvShape kLeNet2{8, 6, 14, 14, 16, 5, 5, 1, 0};

TEST(CudnnConv2d, Fp32MatchesDirectConvolution) {
  for (const auto& s : {kOdd, kLeNet1, kLeNet2}) check<float>(s, 1e-4);
}
TEST(CudnnConv2d, Fp16MatchesWithinRounding) {
  for (const auto& s : {kOdd, kLeNet1, kLeNet2}) check<__half>(s, 1e-2);
}
TEST(CudnnConv2d, Bf16MatchesWithinRounding) {
  for (const auto& s : {kOdd, kLeNet1, kLeNet2}) check<__nv_bfloat16>(s, 2e-2);
}
const ConvShape kLarge{16, 64, 112, 112, 64, 3, 3, 1, 1};

TEST(CudnnConv2d, LargeLayerMatchesSampledReference) {
  check_large<float>(kLarge, 1e-4);
  check_large<__half>(kLarge, 1e-2);
  check_large<__nv_bfloat16>(kLarge, 2e-2);
}

// More than 2^31 - 1 elements in one tensor: refused with our message before any
// cuDNN call (the legacy API's descriptors are int-sized).
TEST(CudnnConv2d, RefusesATensorPastTwoToThe31Elements) {
  cudnnHandle_t handle = nullptr;
  SHARDTRAIN_CUDNN_CHECK(cudnnCreate(&handle));
  try {
    cuda::CudnnConv2d<__nv_bfloat16> conv(handle, ConvShape{4096, 64, 112, 112, 64, 3, 3, 1, 1});
    ADD_FAILURE() << "a 3.3G-element input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("split the batch"), std::string::npos) << e.what();
  }
  SHARDTRAIN_CUDNN_CHECK(cudnnDestroy(handle));
}

TEST(CudnnConv2d, RefusesAKernelLargerThanThePaddedInput) {
  cudnnHandle_t handle = nullptr;
  SHARDTRAIN_CUDNN_CHECK(cudnnCreate(&handle));
  EXPECT_THROW(cuda::CudnnConv2d<float>(handle, ConvShape{1, 1, 4, 4, 1, 7, 7, 1, 1}), Error);
  SHARDTRAIN_CUDNN_CHECK(cudnnDestroy(handle));
}

}  // namespace
}  // namespace shardtrain

int main(int argc, char** argv) {
  if (shardtrain::test::no_device("gpu_cudnn_conv_test")) return 1;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
