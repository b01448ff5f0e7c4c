// Device tests of the CNN's CUDA ops (kernels/cuda/pool.cuh, dropout.cuh)
// against the Kokkos host kernels (kernels/pool.hpp, dropout.hpp), for T =
// float, f16, bf16. Both ops are exact by construction (a stored input value,
// sums in the host's order, one rounded multiply with the same mask), so every
// output is compared BITWISE:
//  - max-pool forward y and int32 argmax, backward dx (outputs start as NaN /
//    -1 on the device, DeviceBuffer(n): every element must be written), for non-overlapping (k 2, s 2, odd remainder),
//    overlapping (k 3, s 2) and gapped (k 2, s 3) windows, inputs with many ties
//    (first maximum wins) and NaNs (NaN propagates);
//  - dropout forward and backward (the same mask), in place too, at an offset
//    past 2^32, and the identity of eval mode and p = 0;
//  - one large shape each (pool: 16 x 64 x 224 x 224; dropout: GPT-2 124M's MLP
//    activation, 50.3M elements), compared completely.
// Streams are non-blocking, as the trainer's.
// Without a CUDA device every test FAILS in SetUp: these tests never skip.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "device_buffer.hpp"
#include "device_compare.hpp"
#include "kernels/cuda/dropout.cuh"
#include "kernels/cuda/pool.cuh"
#include "kernels/dropout.hpp"
#include "core/half.hpp"
#include "kernels/pool.hpp"

namespace shardtrain {
namespace {

using shardtrain::test::DeviceBuffer;
using shardtrain::test::random_values;

template <class H>
bool bitwise_equal(const std::vector<H>& a, const std::vector<H>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(H)) == 0;
}

using shardtrain::test::StorageTypes;

template <class P>
class CnnKernels : public ::testing::Test {
 protected:
  using Host = typename P::Host;
  using Dev = typename P::Dev;

  void SetUp() override {
    ASSERT_CUDA_DEVICE();
    SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (m_stream != nullptr) cudaStreamDestroy(m_stream);
  }
  template <class B>
  Dev* dev(B& buffer) {
    return buffer.template as<Dev>();
  }
  cudaStream_t m_stream = nullptr;
};
TYPED_TEST_SUITE(CnnKernels, StorageTypes);

// Values from {-2, -1, 0, 1, 2} (many ties in every window) and a few NaNs.
template <class H>
std::vector<H> tied_values(std::size_t n, unsigned seed) {
  const auto u = random_values<float>(n, seed, 0.0f, 5.0f);
  std::vector<H> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<H>(std::floor(u[i]) - 2.0f);
  for (std::size_t i = 7; i < n; i += 97) v[i] = static_cast<H>(std::numeric_limits<float>::quiet_NaN());
  return v;
}

TYPED_TEST(CnnKernels, MaxPoolMatchesHostBitwise) {
  using H = typename TestFixture::Host;
  // The last shape is large (16 x 64 x 224 x 224 = 51M inputs, an ImageNet-sized
  // batch): plane offsets and the grid at full size, compared completely.
  const Pool2dShape shapes[] = {
      {2, 3, 9, 11, 2, 2}, {2, 3, 9, 11, 3, 2}, {2, 3, 9, 11, 2, 3}, {16, 64, 224, 224, 2, 2}};
  unsigned seed = 40;
  for (const Pool2dShape& s : shapes) {
    const std::int64_t oh = s.out_h(), ow = s.out_w();
    const std::size_t nin = s.batch * s.channels * s.height * s.width, nout = s.batch * s.channels * oh * ow;
    const auto x = tied_values<H>(nin, ++seed);
    const auto dy = random_values<H>(nout, ++seed);
    std::vector<H> y(nout), dx(nin);
    std::vector<std::int32_t> argmax(nout);
    max_pool2d_forward<H>(s, CView4<H>(x.data(), s.batch, s.channels, s.height, s.width),
                          View4<H>(y.data(), s.batch, s.channels, oh, ow),
                          View4<std::int32_t>(argmax.data(), s.batch, s.channels, oh, ow));
    max_pool2d_backward<H>(s, CView4<H>(dy.data(), s.batch, s.channels, oh, ow),
                           CView4<std::int32_t>(argmax.data(), s.batch, s.channels, oh, ow),
                           View4<H>(dx.data(), s.batch, s.channels, s.height, s.width));

    DeviceBuffer<H> d_x(x), d_y(nout), d_dy(dy), d_dx(nin);  // outputs NaN-poisoned
    DeviceBuffer<std::int32_t> d_argmax(nout);
    cuda::max_pool2d_forward(s, this->dev(d_x), this->dev(d_y), d_argmax.data(), this->m_stream);
    cuda::max_pool2d_backward(s, this->dev(d_dy), d_argmax.data(), this->dev(d_dx), this->m_stream);
    const std::string what = "kernel " + std::to_string(s.kernel) + " stride " + std::to_string(s.stride);
    EXPECT_TRUE(bitwise_equal(d_y.download(), y)) << "pool y, " << what;
    EXPECT_TRUE(bitwise_equal(d_argmax.download(), argmax)) << "pool argmax, " << what;
    EXPECT_TRUE(bitwise_equal(d_dx.download(), dx)) << "pool dx (overwritten), " << what;
  }
}

// The second size is GPT-2 124M's MLP activation, B T 4C = 16 x 1024 x 3072
// (50.3M elements), compared completely.
TYPED_TEST(CnnKernels, DropoutMatchesHostBitwise) {
  using H = typename TestFixture::Host;
  for (const std::int64_t n : {std::int64_t{10007}, std::int64_t{16} * 1024 * 3072}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto x = random_values<H>(n, 50);
    const auto dy = random_values<H>(n, 51);
    DropoutParams p;
    p.p = 0.3;
    p.seed = 1234;
    p.stream = 0xC440D001;
    p.offset = (std::uint64_t{1} << 32) + 17;  // counters past 32 bits
    std::vector<H> y(n), dx(n);
    dropout_forward<H>(p, CView1<H>(x.data(), n), View1<H>(y.data(), n));
    dropout_backward<H>(p, CView1<H>(dy.data(), n), View1<H>(dx.data(), n));

    DeviceBuffer<H> d_x(x), d_y(n), d_dy(dy), d_dx(n);
    cuda::dropout_forward(p, this->dev(d_x), this->dev(d_y), n, this->m_stream);
    cuda::dropout_backward(p, this->dev(d_dy), this->dev(d_dx), n, this->m_stream);
    EXPECT_TRUE(bitwise_equal(d_y.download(), y)) << "dropout y";
    EXPECT_TRUE(bitwise_equal(d_dx.download(), dx)) << "dropout dx";
    cuda::dropout_forward(p, this->dev(d_x), this->dev(d_x), n, this->m_stream);
    EXPECT_TRUE(bitwise_equal(d_x.download(), y)) << "dropout y in place";
    std::int64_t dropped = 0;
    for (const H& v : y) dropped += static_cast<float>(static_cast<compute_t<H>>(v)) == 0.0f ? 1 : 0;
    EXPECT_GT(dropped, n / 5) << "the mask drops about 30%";
    EXPECT_LT(dropped, n * 2 / 5);

    for (const bool eval : {true, false}) {  // eval mode, then p = 0: the identity
      DropoutParams q = p;
      q.training = !eval;
      if (!eval) q.p = 0.0;
      DeviceBuffer<H> d_in(x), d_out(n);
      cuda::dropout_forward(q, this->dev(d_in), this->dev(d_out), n, this->m_stream);
      EXPECT_TRUE(bitwise_equal(d_out.download(), x)) << (eval ? "eval mode" : "p = 0");
    }
  }
}

}  // namespace
}  // namespace shardtrain
