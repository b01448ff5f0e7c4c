// Device tests of CudnnSdpa (kernels/cuda/cudnn_sdpa.cuh: causal attention
// through cuDNN's fused SDPA graphs, built as cudnn-frontend v1.19.0 lowers its
// SDPA nodes; kernels/cuda/cudnn_graph.hpp) against our CUDA attention kernels
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
//
// Stream discipline: everything runs on ONE stream created with
// cudaStreamNonBlocking, so work that CudnnSdpa (or this test) put on the legacy
// default stream would not be ordered with it; uploads and downloads are
// cudaMemcpyAsync on that stream followed by cudaStreamSynchronize (StreamBuffer
// below: copies ordered on the test's own stream). Outputs (out, stats, dqkv) are pre-filled with NaN, so anything left
// unwritten fails; the whole workspace is pre-filled with 0xFF bytes (NaN as
// fp32), so the backward only passes if softmax_sum is written before it is read.
// A second backward reuses the first one's workspace as it was left (stale
// softmax_sum) and must give BITWISE the same dqkv: the backward is the
// deterministic graph (no fp32 dQ accumulate across key blocks) on an engine not
// noted NONDETERMINISTIC; at T = 1024 (the GPT-2-sized shape) there are many key
// blocks whose order could vary, so this is the repeatability check.
// Causality: new q, k, v at the last position leave every earlier output row
// bit-identical.
// Shapes: D = 16, 32, 64 (multiples of 8, <= 128: cuDNN's flash limits), T not
// a multiple of 8 or 64, and a GPT-2-sized layer: B=4, H=12, T=1024, D=64.
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
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/cudnn_graph.hpp"
#include "core/cuda_check.hpp"
#include "device_buffer.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cudnn_sdpa.cuh"

namespace shardtrain {
namespace {

// A device allocation of n elements of T whose copies are ordered on a given
// stream: cudaMemcpyAsync on it, then cudaStreamSynchronize.
template <class T>
class StreamBuffer {
 public:
  StreamBuffer(cudaStream_t stream, std::size_t n) : m_stream(stream), m_size(n) {
    SHARDTRAIN_CUDA_CHECK(cudaMalloc(&m_data, std::max<std::size_t>(n, 1) * sizeof(T)));
  }
  StreamBuffer(cudaStream_t stream, const std::vector<T>& host) : StreamBuffer(stream, host.size()) {
    upload(host);
  }
  ~StreamBuffer() { cudaFree(m_data); }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;

  T* data() { return static_cast<T*>(m_data); }
  std::size_t size() const { return m_size; }
  void upload(const std::vector<T>& host) {
    SHARDTRAIN_CUDA_CHECK(
        cudaMemcpyAsync(m_data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, m_stream));
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream));
  }
  // Every byte set to `byte`, ordered on the stream (not synchronized).
  void fill_bytes(int byte) {
    SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(m_data, byte, m_size * sizeof(T), m_stream));
  }
  std::vector<T> download() const {
    std::vector<T> host(m_size);
    SHARDTRAIN_CUDA_CHECK(
        cudaMemcpyAsync(host.data(), m_data, m_size * sizeof(T), cudaMemcpyDeviceToHost, m_stream));
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream));
    return host;
  }

 private:
  cudaStream_t m_stream = nullptr;
  void* m_data = nullptr;
  std::size_t m_size = 0;
};

using test::random_values;  // tests/gpu/device_buffer.hpp

template <class D>
std::vector<D> nan_values(std::size_t n) {
  return std::vector<D>(n, static_cast<D>(std::numeric_limits<float>::quiet_NaN()));
}

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

// stats(b, h, t) = logsumexp_{s <= t} (q_t . k_s / sqrt(D)) in float64.
template <class D>
std::vector<float> host_stats(const std::vector<D>& qkv, std::int64_t nb, std::int64_t nt,
                              std::int64_t nc, std::int64_t nh) {
  const std::int64_t hd = nc / nh;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<float> stats(static_cast<std::size_t>(nb * nh * nt));
  std::vector<double> row(static_cast<std::size_t>(nt)), qrow(static_cast<std::size_t>(hd));
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t h = 0; h < nh; ++h)
      for (std::int64_t t = 0; t < nt; ++t) {
        for (std::int64_t d = 0; d < hd; ++d)
          qrow[static_cast<std::size_t>(d)] =
              static_cast<float>(qkv[static_cast<std::size_t>((b * nt + t) * 3 * nc + h * hd + d)]);
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t s = 0; s <= t; ++s) {
          double dot = 0.0;
          const std::size_t k0 = static_cast<std::size_t>((b * nt + s) * 3 * nc + nc + h * hd);
          for (std::int64_t d = 0; d < hd; ++d)
            dot += qrow[static_cast<std::size_t>(d)] * static_cast<float>(qkv[k0 + static_cast<std::size_t>(d)]);
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
    SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
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
  cudaStream_t stream = this->m_stream;
  const cuda::AttentionShape shapes[] = {
      {2, 37, 48, 3}, {1, 70, 64, 2}, {2, 65, 128, 2},
      {4, 1024, 768, 12},  // GPT-2 small's attention: H=12, D=64, T=1024
  };
  bool described = false;
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
    StreamBuffer<unsigned char> d_ref_ws(stream, ref_ws_bytes);
    StreamBuffer<D> d_qkv(stream, qkv), d_dout(stream, dout),
        d_saved(stream, nan_values<D>(static_cast<std::size_t>(cuda::attention_saved_elems(cs)))),
        d_out_ref(stream, nan_values<D>(out_n)), d_dqkv_ref(stream, nan_values<D>(qkv_n));
    cuda::attention_forward<D>(this->m_cublas, stream, cs, d_qkv.data(), d_saved.data(), d_ref_ws.data(),
                               ref_ws_bytes, d_out_ref.data());
    cuda::attention_backward<D>(this->m_cublas, stream, cs, d_dout.data(), d_saved.data(), d_ref_ws.data(),
                                ref_ws_bytes, d_dqkv_ref.data());
    const auto out_ref = d_out_ref.download();
    const auto dqkv_ref = d_dqkv_ref.download();

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
    if (!described) {
      std::printf("%s%s", cudnn::describe(sdpa.forward_graph()).c_str(),
                  cudnn::describe(sdpa.backward_graph()).c_str());
      described = true;
    }
    // The workspace holds the backward graph's prefix (softmax_sum; no dQ_accum).
    const cudnn::SdpaGraph& bwd = sdpa.backward_graph();
    ASSERT_FALSE(bwd.tensor("softmax_sum").is_virtual);
    ASSERT_EQ(bwd.find("dQ_accum"), nullptr);
    ASSERT_GE(static_cast<std::int64_t>(sdpa.workspace_bytes()), bwd.workspace_prefix_bytes);
    StreamBuffer<unsigned char> d_ws(stream, sdpa.workspace_bytes());
    d_ws.fill_bytes(0xFF);  // NaN as fp32: nothing in it may be read before it is written or zeroed
    StreamBuffer<D> d_out(stream, nan_values<D>(out_n)), d_dqkv(stream, nan_values<D>(qkv_n)),
        d_dqkv2(stream, nan_values<D>(qkv_n));
    StreamBuffer<float> d_stats(stream, std::vector<float>(stats_n, std::numeric_limits<float>::quiet_NaN()));
    sdpa.forward<D>(stream, d_qkv.data(), d_out.data(), d_stats.data(), d_ws.data());
    sdpa.backward<D>(stream, d_qkv.data(), d_out.data(), d_dout.data(), d_stats.data(), d_dqkv.data(),
                     d_ws.data());
    // Again, on the workspace exactly as the first backward left it.
    sdpa.backward<D>(stream, d_qkv.data(), d_out.data(), d_dout.data(), d_stats.data(), d_dqkv2.data(),
                     d_ws.data());
    this->sync();

    const auto out = d_out.download();
    EXPECT_REL(out, out_ref, Bound<D>::tol, "cudnn sdpa out" + tag);
    EXPECT_REL(d_dqkv.download(), dqkv_ref, Bound<D>::tol, "cudnn sdpa dqkv" + tag);
    const auto dqkv1 = d_dqkv.download(), dqkv2 = d_dqkv2.download();
    EXPECT_REL(dqkv2, dqkv_ref, Bound<D>::tol, "cudnn sdpa dqkv, reused workspace" + tag);
    EXPECT_EQ(std::memcmp(dqkv1.data(), dqkv2.data(), qkv_n * sizeof(D)), 0)
        << "two backward runs differ bitwise" << tag;
    EXPECT_REL(d_stats.download(), host_stats(qkv, nb, nt, nc, nh), 1e-3, "cudnn sdpa stats" + tag);

    // Causality: new q, k, v at the last position change no earlier output row.
    std::vector<D> qkv2 = qkv;
    for (std::int64_t b = 0; b < nb; ++b)
      for (std::int64_t j = 0; j < 3 * nc; ++j)
        qkv2[static_cast<std::size_t>((b * nt + nt - 1) * 3 * nc + j)] = static_cast<D>(1.5f);
    StreamBuffer<D> d_qkv2(stream, qkv2), d_out2(stream, nan_values<D>(out_n));
    sdpa.forward<D>(stream, d_qkv2.data(), d_out2.data(), d_stats.data(), d_ws.data());
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
  StreamBuffer<D> d_qkv(this->m_stream, 16 * 96), d_out(this->m_stream, 16 * 32);
  StreamBuffer<float> d_stats(this->m_stream, 2 * 16);
  StreamBuffer<unsigned char> d_ws(this->m_stream, sdpa.workspace_bytes());
  EXPECT_THROW(
      sdpa.forward<D>(this->m_stream, d_qkv.data(), d_out.data(), d_stats.data(), d_ws.data()), Error);
}

}  // namespace
}  // namespace shardtrain

int main(int argc, char** argv) {
  if (shardtrain::test::no_device("gpu_cudnn_sdpa_test")) return 1;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
