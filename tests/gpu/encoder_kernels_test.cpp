// Device tests of the encoder classifier's CUDA ops against the Kokkos host
// kernels, for T = float, __half, __nv_bfloat16:
//  - kernels/cuda/attention.cuh bidirectional and causal with a key padding mask
//    (lengths mixed incl. 1 and T) against kernels/attention.hpp: out, probs and
//    dqkv by relative L2 error (the bounds of gemm_kernels_test.cpp's attention),
//    probs exactly 0 where masked, dK / dV rows of padded keys exactly 0, and
//    changing q, k, v at padded positions leaves every valid output row bitwise
//    unchanged;
//  - kernels/cuda/seq_pool.cuh against kernels/seq_pool.hpp, bitwise (the same
//    fp32 operations in the same order), also at GPT-2 124M's B 16, T 1024, C 768.
// Method as gemm_kernels_test.cpp: inputs rounded to T once, outputs pre-filled
// with NaN on both sides. Without a CUDA device main() prints why and returns 1.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "device_buffer.hpp"
#include "device_compare.hpp"
#include "kernels/attention.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/seq_pool.cuh"
#include "core/half.hpp"
#include "kernels/half_scratch.hpp"
#include "kernels/seq_pool.hpp"

namespace shardtrain {
namespace {

using shardtrain::test::DeviceBuffer;
using shardtrain::test::random_values;

using shardtrain::test::Host;
using shardtrain::test::nan_values;

template <class D>
class EncoderKernels : public shardtrain::test::StreamTest {};

using DeviceTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(EncoderKernels, DeviceTypes);

TYPED_TEST(EncoderKernels, MaskedAttentionMatchesHost) {
  using D = TypeParam;
  using H = typename Host<D>::type;
  const std::vector<std::int32_t> lengths{37, 1, 20};
  for (const bool causal : {false, true}) {
    const AttentionShape s{3, 37, 24, 3, causal};
    const std::int64_t nb = s.batch, nt = s.seq_len, nc = s.channels, nh = s.n_head;
    const std::string tag = causal ? " causal" : " bidirectional";
    const cuda::AttentionShape cs{nb, nt, nc, nh, causal};
    const std::size_t qkv_n = static_cast<std::size_t>(nb * nt * 3 * nc), out_n = static_cast<std::size_t>(nb * nt * nc);
    const std::size_t saved_n = static_cast<std::size_t>(attention_saved_elems(s));
    const auto qkv = random_values<H>(qkv_n, 51, -2.0f, 2.0f);
    const auto dout = random_values<H>(out_n, 52);
    const CView1<std::int32_t> hl(lengths.data(), lengths.size());

    std::vector<H> saved_want = nan_values<H>(saved_n), out_want = nan_values<H>(out_n),
                   dqkv_want = nan_values<H>(qkv_n);
    std::vector<H> ws = nan_values<H>(static_cast<std::size_t>(attention_workspace_elems(s)));
    attention_forward<H>(s, CView3<H>(qkv.data(), nb, nt, 3 * nc), View1<H>(saved_want.data(), saved_n),
                         View1<H>(ws.data(), ws.size()), View3<H>(out_want.data(), nb, nt, nc), hl);
    attention_backward<H>(s, CView3<H>(dout.data(), nb, nt, nc), CView1<H>(saved_want.data(), saved_n),
                          View1<H>(ws.data(), ws.size()), View3<H>(dqkv_want.data(), nb, nt, 3 * nc), hl);

    const std::size_t ws_bytes = cuda::attention_workspace_bytes<D>(cs);
    DeviceBuffer<unsigned char> d_ws(ws_bytes);
    DeviceBuffer<std::int32_t> d_len(lengths);
    DeviceBuffer<D> d_qkv(qkv), d_dout(dout), d_saved(nan_values<H>(saved_n)), d_out(nan_values<H>(out_n)),
        d_dqkv(nan_values<H>(qkv_n));
    cuda::attention_forward<D>(this->m_handle, this->m_stream, cs, d_qkv.data(), d_saved.data(), d_ws.data(),
                               ws_bytes, d_out.data(), d_len.data());
    cuda::attention_backward<D>(this->m_handle, this->m_stream, cs, d_dout.data(), d_saved.data(), d_ws.data(),
                                ws_bytes, d_dqkv.data(), d_len.data());
    this->sync();
    const auto saved_got = d_saved.template download<H>();
    const auto out_got = d_out.template download<H>();
    const auto dqkv_got = d_dqkv.template download<H>();
    const std::size_t qkv_saved = static_cast<std::size_t>(3 * nb * nt * nc);
    const std::vector<H> probs_got(saved_got.begin() + qkv_saved, saved_got.end());
    const std::vector<H> probs_want(saved_want.begin() + qkv_saved, saved_want.end());
    EXPECT_REL(probs_got, probs_want, Host<D>::attention_tol, "masked attention probs" + tag);
    EXPECT_REL(out_got, out_want, Host<D>::attention_tol, "masked attention out" + tag);
    EXPECT_REL(dqkv_got, dqkv_want, Host<D>::attention_tol, "masked attention dqkv" + tag);

    std::int64_t bad = 0;
    for (std::int64_t b = 0; b < nb; ++b) {
      for (std::int64_t h = 0; h < nh; ++h)
        for (std::int64_t t = 0; t < nt; ++t)
          for (std::int64_t j = 0; j < nt; ++j)
            if ((j >= lengths[b] || (causal && j > t)) &&
                to_float(probs_got[static_cast<std::size_t>(((b * nh + h) * nt + t) * nt + j)]) != 0.0f)
              ++bad;
      for (std::int64_t t = lengths[b]; t < nt; ++t)  // dK, dV of padded keys
        for (std::int64_t j = nc; j < 3 * nc; ++j)
          if (to_float(dqkv_got[static_cast<std::size_t>((b * nt + t) * 3 * nc + j)]) != 0.0f) ++bad;
    }
    EXPECT_EQ(bad, 0) << "masked probabilities or padded-key gradients not 0" << tag;

    // New q, k, v at padded positions change no valid output row.
    std::vector<H> qkv2 = qkv;
    for (std::int64_t b = 0; b < nb; ++b)
      for (std::int64_t t = lengths[b]; t < nt; ++t)
        for (std::int64_t j = 0; j < 3 * nc; ++j) qkv2[static_cast<std::size_t>((b * nt + t) * 3 * nc + j)] = from_float<H>(3.0f);
    DeviceBuffer<D> d_qkv2(qkv2), d_out2(nan_values<H>(out_n));
    cuda::attention_forward<D>(this->m_handle, this->m_stream, cs, d_qkv2.data(), d_saved.data(), d_ws.data(),
                               ws_bytes, d_out2.data(), d_len.data());
    this->sync();
    const auto out2 = d_out2.template download<H>();
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::size_t begin = static_cast<std::size_t>(b * nt * nc), n = static_cast<std::size_t>(lengths[b] * nc);
      EXPECT_EQ(std::memcmp(out2.data() + begin, out_got.data() + begin, n * sizeof(H)), 0)
          << "valid rows changed with the padding, sequence " << b << tag;
    }
  }
}

// Mean pooling forward and backward against the host kernel, bitwise, with and
// without lengths; outputs NaN-prefilled on both sides.
template <class D>
void check_seq_mean_pool(cudaStream_t stream, std::int64_t nb, std::int64_t nt, std::int64_t nc,
                         const std::vector<std::int32_t>& lengths, const std::string& tag) {
  using H = typename Host<D>::type;
  const auto x = random_values<H>(static_cast<std::size_t>(nb * nt * nc), 61);
  const auto dy = random_values<H>(static_cast<std::size_t>(nb * nc), 62);
  for (const bool with_lengths : {true, false}) {
    const CView1<std::int32_t> hl = with_lengths ? CView1<std::int32_t>(lengths.data(), lengths.size()) : CView1<std::int32_t>();
    std::vector<H> y_want = nan_values<H>(static_cast<std::size_t>(nb * nc)),
                   dx_want = nan_values<H>(static_cast<std::size_t>(nb * nt * nc));
    seq_mean_pool_forward<H>(CView3<H>(x.data(), nb, nt, nc), hl, View2<H>(y_want.data(), nb, nc));
    seq_mean_pool_backward<H>(CView2<H>(dy.data(), nb, nc), hl, View3<H>(dx_want.data(), nb, nt, nc));
    DeviceBuffer<std::int32_t> d_len(lengths);
    DeviceBuffer<D> d_x(x), d_dy(dy), d_y(nan_values<H>(y_want.size())), d_dx(nan_values<H>(dx_want.size()));
    const std::int32_t* dl = with_lengths ? d_len.data() : nullptr;
    cuda::seq_mean_pool_forward<D>(d_x.data(), dl, d_y.data(), nb, nt, nc, stream);
    cuda::seq_mean_pool_backward<D>(d_dy.data(), dl, d_dx.data(), nb, nt, nc, stream);
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto y_got = d_y.template download<H>();
    const auto dx_got = d_dx.template download<H>();
    EXPECT_EQ(std::memcmp(y_got.data(), y_want.data(), y_want.size() * sizeof(H)), 0) << "seq_mean_pool_forward" << tag;
    EXPECT_EQ(std::memcmp(dx_got.data(), dx_want.data(), dx_want.size() * sizeof(H)), 0) << "seq_mean_pool_backward" << tag;
  }
}

TYPED_TEST(EncoderKernels, SeqMeanPoolMatchesHostBitwise) {
  check_seq_mean_pool<TypeParam>(this->m_stream, 3, 29, 40, {1, 29, 13}, "");
}

// GPT-2 124M activations (B 16, T 1024, C 768), lengths from 1 to T: offsets
// (b T + t) C up to 12.6M and the full-length sums; complete host comparison.
TYPED_TEST(EncoderKernels, SeqMeanPoolAtGpt2SizeMatchesHostBitwise) {
  std::vector<std::int32_t> lengths(16);
  for (std::size_t b = 0; b < lengths.size(); ++b) lengths[b] = static_cast<std::int32_t>(1 + (b * 977) % 1024);
  lengths.back() = 1024;
  check_seq_mean_pool<TypeParam>(this->m_stream, 16, 1024, 768, lengths, " (GPT-2 size)");
}

}  // namespace
}  // namespace shardtrain

int main(int argc, char** argv) {
  if (shardtrain::test::no_device("gpu_encoder_kernels_test")) return 1;
  ::testing::InitGoogleTest(&argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  std::vector<float> scratch(std::size_t{1} << 22);  // the host 16-bit kernels' fp32 tiles
  shardtrain::half_scratch_bind(scratch.data(), scratch.size());
  const int result = RUN_ALL_TESTS();
  shardtrain::half_scratch_bind(nullptr, 0);
  return result;
}
