// Device tests of CudnnSdpa (kernels/cuda/cudnn_sdpa.cuh: causal attention
// through cuDNN's fused SDPA graphs) against our CUDA attention kernels
// (kernels/cuda/attention.cuh: cuBLAS batched GEMMs + causal softmax), for
// __half and __nv_bfloat16 (cuDNN's flash engines take no fp32).
//
// Method: the same random qkv (B, T, 3C) and dout (B, T, C), rounded to the
// storage type once, go through both implementations. Compared as
//   relative error = ||cudnn - ours||_2 / ||ours||_2   over the whole buffer,
// with fp16 <= 1e-2 and bf16 <= 2e-2 (the bounds of gpu_gemm_kernels_test's
// attention: both sides accumulate in fp32 and round to 16 bits, in different
// orders; cuDNN also rounds P to 16 bits before P V, as our kernel does).
// stats (B, H, T) fp32 (max + log sum exp of each scaled, masked score row; our
// kernel has no such output) is compared with a float64 host computation from
// the same rounded inputs, relative L2 <= 1e-3 (fp32 scores, no 16-bit rounding).
// Outputs are pre-filled with NaN, so anything left unwritten fails. Causality:
// new q, k, v at the last position leave every earlier output row bit-identical.
// Shapes: D = 16, 32, 64 (multiples of 8, <= 128: cuDNN's flash limits), T not
// a multiple of 8 or 64.
//
// Without a CUDA device main() prints why and returns 1: this test never skips.
// It has never run here (no GPU): it is compiled and linked in CI only.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cudnn_graph.hpp"
#include "core/cuda_check.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cudnn_sdpa.cuh"
#include "device_buffer.hpp"

namespace shardtrain {
namespace {

using shardtrain::test::DeviceBuffer;
using shardtrain::test::random_values;

template <class D>
struct Bound;
template <>
struct Bound<__half> {
  static constexpr double tol = 1e-2;
};
template <>
struct Bound<__nv_bfloat16> {
  static constexpr double tol = 2e-2;
};

template <class H>
double rel_l2(const std::vector<H>& got, const std::vector<H>& want) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<float>(got[i]), w = static_cast<float>(want[i]);
    num += (g - w) * (g - w);
    den += w * w;
  }
  if (den == 0.0) return std::sqrt(num);
  return std::sqrt(num / den);  // NaN in `got` gives NaN, which fails EXPECT_LE
}

#define EXPECT_REL(got, want, tol, what)                                                   \
  do {                                                                                     \
    const double e_ = rel_l2(got, want);                                                   \
    std::printf("[gpu-error] %s: %.3e (bound %.1e)\n", std::string(what).c_str(), e_, tol); \
    EXPECT_LE(e_, tol) << what;                                                            \
  } while (0)

template <class D>
std::vector<D> nan_values(std::size_t n) {
  return std::vector<D>(n, static_cast<D>(std::numeric_limits<float>::quiet_NaN()));
}

// stats(b, h, t) = logsumexp_{s <= t} (q_t . k_s / sqrt(D)) in float64.
template <class D>
std::vector<float> host_stats(const std::vector<D>& qkv, std::int64_t nb, std::int64_t nt,
                              std::int64_t nc, std::int64_t nh) {
  const std::int64_t hd = nc / nh;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<float> stats(static_cast<std::size_t>(nb * nh * nt));
  std::vector<double> row(static_cast<std::size_t>(nt));
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t h = 0; h < nh; ++h)
      for (std::int64_t t = 0; t < nt; ++t) {
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t s = 0; s <= t; ++s) {
          double dot = 0.0;
          for (std::int64_t d = 0; d < hd; ++d) {
            const double q = static_cast<float>(qkv[static_cast<std::size_t>((b * nt + t) * 3 * nc + h * hd + d)]);
            const double k = static_cast<float>(qkv[static_cast<std::size_t>((b * nt + s) * 3 * nc + nc + h * hd + d)]);
            dot += q * k;
          }
          row[static_cast<std::size_t>(s)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        double sum = 0.0;
        for (std::int64_t s = 0; s <= t; ++s) sum += std::exp(row[static_cast<std::size_t>(s)] - mx);
        stats[static_cast<std::size_t>((b * nh + h) * nt + t)] = static_cast<float>(mx + std::log(sum));
      }
  return stats;
}

template <class D>
class CudnnSdpaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SHARDTRAIN_CUDA_CHECK(cudaStreamCreate(&m_stream));
    SHARDTRAIN_CUBLAS_CHECK(cublasCreate(&m_cublas));
    SHARDTRAIN_CUDNN_CHECK(cudnnCreate(&m_cudnn));
  }
  void TearDown() override {
    if (m_cudnn != nullptr) cudnnDestroy(m_cudnn);
    if (m_cublas != nullptr) cublasDestroy(m_cublas);
    if (m_stream != nullptr) cudaStreamDestroy(m_stream);
  }
  void sync() { SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream)); }

  cudaStream_t m_stream = nullptr;
  cublasHandle_t m_cublas = nullptr;
  cudnnHandle_t m_cudnn = nullptr;
};

using DeviceTypes = ::testing::Types<__half, __nv_bfloat16>;
TYPED_TEST_SUITE(CudnnSdpaTest, DeviceTypes);

TYPED_TEST(CudnnSdpaTest, ForwardAndBackwardMatchOurAttentionKernels) {
  using D = TypeParam;
  const cuda::AttentionShape shapes[] = {{2, 37, 48, 3}, {1, 70, 64, 2}, {2, 65, 128, 2}};
  for (const cuda::AttentionShape& cs : shapes) {
    const std::int64_t nb = cs.batch, nt = cs.seq_len, nc = cs.channels, nh = cs.n_head;
    const std::string tag = " B" + std::to_string(nb) + " T" + std::to_string(nt) + " C" +
                            std::to_string(nc) + " H" + std::to_string(nh);
    const std::size_t qkv_n = static_cast<std::size_t>(nb * nt * 3 * nc);
    const std::size_t out_n = static_cast<std::size_t>(nb * nt * nc);
    const std::size_t stats_n = static_cast<std::size_t>(nb * nh * nt);
    const auto qkv = random_values<D>(qkv_n, 51, -2.0f, 2.0f);
    const auto dout = random_values<D>(out_n, 52);

    // Ours: cuBLAS batched GEMMs + causal softmax, saving the probabilities.
    const std::size_t ref_ws_bytes = cuda::attention_workspace_bytes<D>(cs);
    DeviceBuffer<unsigned char> d_ref_ws(ref_ws_bytes);
    DeviceBuffer<D> d_qkv(qkv), d_dout(dout),
        d_saved(nan_values<D>(static_cast<std::size_t>(cuda::attention_saved_elems(cs)))),
        d_out_ref(nan_values<D>(out_n)), d_dqkv_ref(nan_values<D>(qkv_n));
    cuda::attention_forward<D>(this->m_cublas, this->m_stream, cs, d_qkv.data(), d_saved.data(),
                               d_ref_ws.data(), ref_ws_bytes, d_out_ref.data());
    cuda::attention_backward<D>(this->m_cublas, this->m_stream, cs, d_dout.data(), d_saved.data(),
                                d_ref_ws.data(), ref_ws_bytes, d_dqkv_ref.data());
    this->sync();

    // cuDNN: the fused SDPA graphs, saving only the statistics.
    cudnn::SdpaShape shape;
    shape.batch = nb;
    shape.seq_len = nt;
    shape.channels = nc;
    shape.n_head = nh;
    shape.dtype = cuda::cudnn_sdpa_dtype<D>();
    shape.causal = true;
    shape.training = true;
    const cuda::CudnnSdpa sdpa(this->m_cudnn, shape);
    std::printf("%s", cudnn::describe(sdpa.forward_graph()).c_str());
    DeviceBuffer<unsigned char> d_ws(sdpa.workspace_bytes());
    DeviceBuffer<D> d_out(nan_values<D>(out_n)), d_dqkv(nan_values<D>(qkv_n));
    DeviceBuffer<float> d_stats(std::vector<float>(stats_n, std::numeric_limits<float>::quiet_NaN()));
    sdpa.forward<D>(this->m_stream, d_qkv.data(), d_out.data(), d_stats.data(), d_ws.data());
    sdpa.backward<D>(this->m_stream, d_qkv.data(), d_out.data(), d_dout.data(), d_stats.data(),
                     d_dqkv.data(), d_ws.data());
    this->sync();

    const auto out = d_out.download();
    EXPECT_REL(out, d_out_ref.download(), Bound<D>::tol, "cudnn sdpa out" + tag);
    EXPECT_REL(d_dqkv.download(), d_dqkv_ref.download(), Bound<D>::tol, "cudnn sdpa dqkv" + tag);
    EXPECT_REL(d_stats.download(), host_stats(qkv, nb, nt, nc, nh), 1e-3, "cudnn sdpa stats" + tag);

    // Causality: new q, k, v at the last position change no earlier output row.
    std::vector<D> qkv2 = qkv;
    for (std::int64_t b = 0; b < nb; ++b)
      for (std::int64_t j = 0; j < 3 * nc; ++j)
        qkv2[static_cast<std::size_t>((b * nt + nt - 1) * 3 * nc + j)] = static_cast<D>(1.5f);
    DeviceBuffer<D> d_qkv2(qkv2), d_out2(nan_values<D>(out_n));
    sdpa.forward<D>(this->m_stream, d_qkv2.data(), d_out2.data(), d_stats.data(), d_ws.data());
    this->sync();
    const auto out2 = d_out2.download();
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::size_t begin = static_cast<std::size_t>(b * nt * nc);
      const std::size_t end = begin + static_cast<std::size_t>((nt - 1) * nc);
      EXPECT_EQ(std::memcmp(out2.data() + begin, out.data() + begin, (end - begin) * sizeof(D)), 0)
          << "rows before the last position changed in sequence " << b << tag;
    }
  }
}

TYPED_TEST(CudnnSdpaTest, RefusesTheWrongStorageType) {
  using D = TypeParam;
  cudnn::SdpaShape shape;
  shape.batch = 1;
  shape.seq_len = 16;
  shape.channels = 32;
  shape.n_head = 2;
  shape.dtype = std::is_same_v<D, __half> ? cudnn::DataType::BFloat16 : cudnn::DataType::Half;
  const cuda::CudnnSdpa sdpa(this->m_cudnn, shape);
  DeviceBuffer<D> d_qkv(16 * 96), d_out(16 * 32);
  DeviceBuffer<float> d_stats(2 * 16);
  DeviceBuffer<unsigned char> d_ws(sdpa.workspace_bytes());
  EXPECT_THROW(sdpa.forward<D>(this->m_stream, d_qkv.data(), d_out.data(), d_stats.data(), d_ws.data()),
               Error);
}

}  // namespace
}  // namespace shardtrain

int main(int argc, char** argv) {
  if (shardtrain::test::no_device("gpu_cudnn_sdpa_test")) return 1;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
