// Device tests of the CUDA backend as the trainer uses it (labels gpu;mpi, one
// GPU per rank; built in CI, never run here -- no machine here has a GPU):
//  - the GPT on the device (CudaBackend + CudaModelOps) against the same GPT on
//    the host: loss and every parameter's gradient, fp32 (relative 1e-4) and
//    fp16/bf16 storage against fp32 host (relative L2 3e-2), and bitwise the
//    same gradients under two recompute schedules on the device; the same with
//    cuDNN's fused attention (model.attention = "fused") and with our tiled
//    attention (model.attention = "flash", fp32 too); both bitwise repeatable over
//    two runs at T = 1024 (32 key tiles of 32: dQ summed over many key blocks);
//    the same with the Linear layers through cuBLASLt (model.gemm = "cublaslt"),
//    against the host and the cuBLAS backend, bitwise repeatable at T = 1024; and
//    with the MLP's GELU in cuBLASLt's epilogues (model.gelu = "epilogue") likewise;
//  - the backend's vector kernels (norm, inf/NaN scan, accumulate, widen,
//    narrow, AdamW) against the host backend's;
//  - training steps through the ZeRO engine on NcclCommunicator, every stage,
//    against the host engine on MpiCommunicator: per-step loss and gradient
//    norm within 1e-4 relative.
// Without a device the NcclCommunicator constructor throws ("no CUDA device
// available to rank R ...") and every test fails: it never skips.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "config/run_config.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "kernels/cuda/lt_linear.cuh"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/nccl/nccl_communicator.hpp"
#include "parallel/zero_engine.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "model/recompute.hpp"

namespace shardtrain {
namespace {

GptDims dims() {
  GptDims d;
  d.n_layer = 3;
  d.channels = 48;
  d.n_head = 3;
  d.seq_len = 24;
  d.vocab = 67;
  d.max_batch = 3;
  return d;
}

// The repeatability shape: T = 1024 (many key tiles per query block in cuDNN's and
// our kernels), GPT-2's head width 64.
GptDims long_dims() {
  GptDims d = dims();
  d.n_layer = 2;
  d.channels = 128;
  d.n_head = 2;
  d.seq_len = 1024;
  d.max_batch = 2;
  return d;
}

struct Batch {
  std::vector<TokenIndex> tokens, targets;
};
Batch batch_for(const GptDims& d, int seed) {
  Batch b;
  for (std::int64_t i = 0; i < d.max_batch * d.seq_len; ++i) {
    b.tokens.push_back(static_cast<TokenIndex>((i * 7 + seed * 13) % d.vocab));
    b.targets.push_back(i % 11 == 0 ? -1 : static_cast<TokenIndex>((i * 5 + seed) % d.vocab));
  }
  return b;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b, std::int64_t lo, std::int64_t hi) {
  double num = 0, den = 0;
  for (std::int64_t i = lo; i < hi; ++i) {
    num += (a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Device {
  Device() : nccl(MPI_COMM_WORLD), backend(nccl) {}
  NcclCommunicator nccl;
  CudaBackend backend;
};

// Loss and gradients (as fp32) of one forward/backward of a T model on `backend` (nullptr: host).
template <class T>
std::pair<double, std::vector<float>> gradients(Backend* backend, RecomputePolicy policy = RecomputePolicy::None,
                                                AttentionImpl attention = AttentionImpl::Unfused,
                                                GptDims d = dims()) {
  d.fused_attention = attention == AttentionImpl::Fused;
  d.flash_attention = attention == AttentionImpl::Flash;
  ParamLayout layout = gpt_layout(d);
  layout.finalize(1);
  const std::size_t n = static_cast<std::size_t>(layout.padded_size());
  std::vector<T> params(n);
  gpt_init_params<T>(layout, d, 0.05, 11, params.data(), 0, layout.padded_size());
  MemoryTracker memory;
  MemorySpace* space = backend ? backend->memory() : nullptr;
  TrackedBuffer<T> p(memory, MemCategory::Parameters, n, space), g(memory, MemCategory::Gradients, n, space);
  Backend& be = backend ? *backend : host_backend();
  be.copy_from_host(p.data(), params.data(), n * sizeof(T));
  const auto schedule = make_recompute_schedule(policy, gpt_chain_costs(d, sizeof(T)));
  Gpt<T> model(d, layout, 1e-5, memory, &*schedule, backend);
  model.bind(p.data(), g.data());
  const Batch b = batch_for(d, 1);
  const double loss = model.forward(b.tokens.data(), b.targets.data(), d.max_batch);
  model.backward(T(1.0f / 64));
  std::vector<T> host(n);
  be.copy_to_host(host.data(), g.data(), n * sizeof(T));
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(host[i]);
  return {loss, out};
}

TEST(DeviceGpt, Fp32MatchesTheHostModel) {
  Device dev;
  const auto [host_loss, host_grad] = gradients<float>(nullptr);
  const auto [dev_loss, dev_grad] = gradients<float>(&dev.backend);
  EXPECT_NEAR(dev_loss, host_loss, 1e-5 * std::abs(host_loss));
  ParamLayout layout = gpt_layout(dims());
  layout.finalize(1);
  for (const auto& e : layout.entries())
    EXPECT_LT(rel_l2(dev_grad, host_grad, e.offset, e.offset + e.numel), 1e-4) << e.name;
}

TEST(DeviceGpt, SixteenBitStorageMatchesTheHostWithinRounding) {
  Device dev;
  const auto [host_loss, host_grad] = gradients<float>(nullptr);
  ParamLayout layout = gpt_layout(dims());
  layout.finalize(1);
  for (int kind = 0; kind < 2; ++kind) {
    const auto [loss, grad] = kind == 0 ? gradients<f16>(&dev.backend) : gradients<bf16>(&dev.backend);
    EXPECT_NEAR(loss, host_loss, 2e-2 * std::abs(host_loss)) << (kind == 0 ? "fp16" : "bf16");
    for (const auto& e : layout.entries())
      EXPECT_LT(rel_l2(grad, host_grad, e.offset, e.offset + e.numel), 3e-2) << e.name << (kind == 0 ? " fp16" : " bf16");
  }
}

TEST(DeviceGpt, RecomputeGivesBitwiseTheSameGradients) {
  Device dev;
  const auto [loss_a, grad_a] = gradients<float>(&dev.backend, RecomputePolicy::None);
  const auto [loss_b, grad_b] = gradients<float>(&dev.backend, RecomputePolicy::Sqrt);
  EXPECT_EQ(loss_a, loss_b);
  EXPECT_EQ(grad_a, grad_b);
}

// model.attention = "fused" (cuDNN's flash attention through CudaModelOps, the saved
// qkv and statistics in the block's buffers): fp16 and bf16 against the fp32 host
// model within the 16-bit bounds above, and against the unfused device model in the
// same type; repeatable bit for bit, and the same under recompute (the block's
// forward re-run before its backward); fp32 refused with a message.
TEST(DeviceGpt, FusedAttentionMatchesTheHostAndTheUnfusedKernels) {
  Device dev;
  const auto [host_loss, host_grad] = gradients<float>(nullptr);
  ParamLayout layout = gpt_layout(dims());
  layout.finalize(1);
  for (int kind = 0; kind < 2; ++kind) {
    const char* what = kind == 0 ? " fp16" : " bf16";
    const auto [loss, grad] = kind == 0 ? gradients<f16>(&dev.backend, RecomputePolicy::None, AttentionImpl::Fused)
                                        : gradients<bf16>(&dev.backend, RecomputePolicy::None, AttentionImpl::Fused);
    const auto [unfused_loss, unfused_grad] =
        kind == 0 ? gradients<f16>(&dev.backend) : gradients<bf16>(&dev.backend);
    EXPECT_NEAR(loss, host_loss, 2e-2 * std::abs(host_loss)) << what;
    EXPECT_NEAR(loss, unfused_loss, 2e-2 * std::abs(unfused_loss)) << what;
    for (const auto& e : layout.entries()) {
      EXPECT_LT(rel_l2(grad, host_grad, e.offset, e.offset + e.numel), 3e-2) << e.name << what << " vs host";
      EXPECT_LT(rel_l2(grad, unfused_grad, e.offset, e.offset + e.numel), 3e-2) << e.name << what << " vs unfused";
    }
  }
}

// Bitwise repeatability at T = 1024 (a single 24-token tile has no order across
// key blocks to vary); recompute on the short shape.
TEST(DeviceGpt, FusedAttentionIsRepeatableAndRecomputes) {
  Device dev;
  const auto [loss_l, grad_l] = gradients<bf16>(&dev.backend, RecomputePolicy::None, AttentionImpl::Fused, long_dims());
  const auto [loss_m, grad_m] = gradients<bf16>(&dev.backend, RecomputePolicy::None, AttentionImpl::Fused, long_dims());
  EXPECT_EQ(loss_l, loss_m);
  EXPECT_EQ(grad_l, grad_m) << "two fused runs at T = 1024 differ: cuDNN's backward is not deterministic here";
  const auto [loss_a, grad_a] = gradients<bf16>(&dev.backend, RecomputePolicy::None, AttentionImpl::Fused);
  const auto [loss_c, grad_c] = gradients<bf16>(&dev.backend, RecomputePolicy::Sqrt, AttentionImpl::Fused);
  EXPECT_EQ(loss_a, loss_c);
  EXPECT_EQ(grad_a, grad_c) << "recompute changed the fused gradients";
  EXPECT_THROW(gradients<float>(&dev.backend, RecomputePolicy::None, AttentionImpl::Fused), Error) << "fp32 fused attention must be refused";
}

// model.attention = "flash" (our tiled kernels through CudaModelOps, the saved qkv
// and log-sum-exp in the block's buffers): fp32 against the fp32 host model within
// 1e-4 (as the unfused device model), fp16 and bf16 within the 16-bit bounds and
// against the unfused device model in the same type.
TEST(DeviceGpt, FlashAttentionMatchesTheHostAndTheUnfusedKernels) {
  Device dev;
  const auto [host_loss, host_grad] = gradients<float>(nullptr);
  ParamLayout layout = gpt_layout(dims());
  layout.finalize(1);
  const auto [f32_loss, f32_grad] = gradients<float>(&dev.backend, RecomputePolicy::None, AttentionImpl::Flash);
  EXPECT_NEAR(f32_loss, host_loss, 1e-5 * std::abs(host_loss));
  for (const auto& e : layout.entries())
    EXPECT_LT(rel_l2(f32_grad, host_grad, e.offset, e.offset + e.numel), 1e-4) << e.name << " fp32 flash";
  for (int kind = 0; kind < 2; ++kind) {
    const char* what = kind == 0 ? " fp16" : " bf16";
    const auto [loss, grad] = kind == 0 ? gradients<f16>(&dev.backend, RecomputePolicy::None, AttentionImpl::Flash)
                                        : gradients<bf16>(&dev.backend, RecomputePolicy::None, AttentionImpl::Flash);
    const auto [unfused_loss, unfused_grad] =
        kind == 0 ? gradients<f16>(&dev.backend) : gradients<bf16>(&dev.backend);
    EXPECT_NEAR(loss, host_loss, 2e-2 * std::abs(host_loss)) << what;
    EXPECT_NEAR(loss, unfused_loss, 2e-2 * std::abs(unfused_loss)) << what;
    for (const auto& e : layout.entries()) {
      EXPECT_LT(rel_l2(grad, host_grad, e.offset, e.offset + e.numel), 3e-2) << e.name << what << " vs host";
      EXPECT_LT(rel_l2(grad, unfused_grad, e.offset, e.offset + e.numel), 3e-2) << e.name << what << " vs unfused";
    }
  }
}

TEST(DeviceGpt, FlashAttentionIsRepeatableAndRecomputes) {
  Device dev;
  const auto [loss_a, grad_a] = gradients<bf16>(&dev.backend, RecomputePolicy::None, AttentionImpl::Flash, long_dims());
  const auto [loss_b, grad_b] = gradients<bf16>(&dev.backend, RecomputePolicy::None, AttentionImpl::Flash, long_dims());
  EXPECT_EQ(loss_a, loss_b);
  EXPECT_EQ(grad_a, grad_b) << "two flash runs at T = 1024 differ";
  const auto [loss_c, grad_c] = gradients<float>(&dev.backend, RecomputePolicy::None, AttentionImpl::Flash);
  const auto [loss_d, grad_d] = gradients<float>(&dev.backend, RecomputePolicy::Sqrt, AttentionImpl::Flash);
  EXPECT_EQ(loss_c, loss_d);
  EXPECT_EQ(grad_c, grad_d) << "recompute changed the flash gradients";
}

// model.gemm = "cublaslt": the backend's Linear layers through cuBLASLt with the
// bias epilogues (kernels/cuda/lt_linear.cuh). fp32 against the host model (1e-4),
// fp16 / bf16 against the host (3e-2) and against the cuBLAS backend in the same
// type; two bf16 runs at T = 1024 bitwise equal (the cached algorithms, no split-K),
// and the same under recompute. The small GPT's vocabulary (67) leaves the LM head's
// 16-bit rows unaligned, so some of its calls may take the cuBLAS path: the
// repeatability shape's blocks (C 128) must not.
TEST(DeviceGpt, CublasLtLinearMatchesTheHostAndIsRepeatable) {
  Device dev;
  NcclCommunicator& nccl = dev.nccl;
  CudaBackend lt(nccl, GemmImpl::Cublaslt);
  ASSERT_NE(lt.lt(), nullptr);
  ASSERT_EQ(dev.backend.lt(), nullptr) << "the default backend must keep the cuBLAS path";
  const auto [host_loss, host_grad] = gradients<float>(nullptr);
  ParamLayout layout = gpt_layout(dims());
  layout.finalize(1);
  const auto [f32_loss, f32_grad] = gradients<float>(&lt);
  EXPECT_NEAR(f32_loss, host_loss, 1e-5 * std::abs(host_loss));
  for (const auto& e : layout.entries())
    EXPECT_LT(rel_l2(f32_grad, host_grad, e.offset, e.offset + e.numel), 1e-4) << e.name << " fp32 cublaslt";
  for (int kind = 0; kind < 2; ++kind) {
    const char* what = kind == 0 ? " fp16" : " bf16";
    const auto [loss, grad] = kind == 0 ? gradients<f16>(&lt) : gradients<bf16>(&lt);
    const auto [base_loss, base_grad] = kind == 0 ? gradients<f16>(&dev.backend) : gradients<bf16>(&dev.backend);
    EXPECT_NEAR(loss, host_loss, 2e-2 * std::abs(host_loss)) << what;
    EXPECT_NEAR(loss, base_loss, 2e-2 * std::abs(base_loss)) << what;
    for (const auto& e : layout.entries()) {
      EXPECT_LT(rel_l2(grad, host_grad, e.offset, e.offset + e.numel), 3e-2) << e.name << what << " vs host";
      EXPECT_LT(rel_l2(grad, base_grad, e.offset, e.offset + e.numel), 3e-2) << e.name << what << " vs cublas";
    }
  }
  const std::int64_t before = lt.lt()->fallbacks();
  const auto [loss_a, grad_a] = gradients<bf16>(&lt, RecomputePolicy::None, AttentionImpl::Unfused, long_dims());
  const auto [loss_b, grad_b] = gradients<bf16>(&lt, RecomputePolicy::Sqrt, AttentionImpl::Unfused, long_dims());
  const auto [loss_c, grad_c] = gradients<bf16>(&lt, RecomputePolicy::None, AttentionImpl::Unfused, long_dims());
  EXPECT_EQ(loss_a, loss_c);
  EXPECT_EQ(grad_a, grad_c) << "two cublaslt runs at T = 1024 differ";
  EXPECT_EQ(loss_a, loss_b);
  EXPECT_EQ(grad_a, grad_b) << "recompute changed the cublaslt gradients";
  // Only the LM head (vocabulary 67: unaligned 16-bit rows) may have fallen back:
  // forward and backward, per run, at most one each.
  EXPECT_LE(lt.lt()->fallbacks() - before, 3 * 2) << "the blocks' Linear layers took the cuBLAS path";
}

// model.gelu = "epilogue" (GptDims::gelu_epilogue) on a cuBLASLt backend: the blocks'
// MLP GELU in cuBLASLt's epilogues (GELU_AUX_BIAS forward, DGELU backward;
// kernels/cuda/lt_linear.cuh). fp32 against the host model (1e-4); fp16 / bf16
// against the host (3e-2) and against the same backend with the separate GELU pass;
// two bf16 runs at T = 1024 bitwise equal, and the same under recompute (fc_pre
// rewritten by the recomputed forward's aux output); at that shape (4C = 512, every
// buffer 16-byte aligned) the blocks must take the epilogues: no GELU fallback.
TEST(DeviceGpt, GeluEpilogueMatchesTheHostAndIsRepeatable) {
  Device dev;
  CudaBackend lt(dev.nccl, GemmImpl::Cublaslt);
  ASSERT_NE(lt.lt(), nullptr);
  GptDims fused = dims();
  fused.gelu_epilogue = true;
  const auto [host_loss, host_grad] = gradients<float>(nullptr);
  ParamLayout layout = gpt_layout(dims());
  layout.finalize(1);
  const auto [f32_loss, f32_grad] = gradients<float>(&lt, RecomputePolicy::None, AttentionImpl::Unfused, fused);
  EXPECT_NEAR(f32_loss, host_loss, 1e-5 * std::abs(host_loss));
  for (const auto& e : layout.entries())
    EXPECT_LT(rel_l2(f32_grad, host_grad, e.offset, e.offset + e.numel), 1e-4) << e.name << " fp32 gelu epilogue";
  for (int kind = 0; kind < 2; ++kind) {
    const char* what = kind == 0 ? " fp16" : " bf16";
    const auto [loss, grad] = kind == 0 ? gradients<f16>(&lt, RecomputePolicy::None, AttentionImpl::Unfused, fused)
                                        : gradients<bf16>(&lt, RecomputePolicy::None, AttentionImpl::Unfused, fused);
    const auto [base_loss, base_grad] = kind == 0 ? gradients<f16>(&lt) : gradients<bf16>(&lt);
    EXPECT_NEAR(loss, host_loss, 2e-2 * std::abs(host_loss)) << what;
    EXPECT_NEAR(loss, base_loss, 2e-2 * std::abs(base_loss)) << what;
    for (const auto& e : layout.entries()) {
      EXPECT_LT(rel_l2(grad, host_grad, e.offset, e.offset + e.numel), 3e-2) << e.name << what << " vs host";
      EXPECT_LT(rel_l2(grad, base_grad, e.offset, e.offset + e.numel), 3e-2) << e.name << what << " vs separate";
    }
  }
  GptDims long_fused = long_dims();
  long_fused.gelu_epilogue = true;
  const std::int64_t before = lt.lt()->gelu_fallbacks();
  const auto [loss_a, grad_a] = gradients<bf16>(&lt, RecomputePolicy::None, AttentionImpl::Unfused, long_fused);
  const auto [loss_b, grad_b] = gradients<bf16>(&lt, RecomputePolicy::Sqrt, AttentionImpl::Unfused, long_fused);
  const auto [loss_c, grad_c] = gradients<bf16>(&lt, RecomputePolicy::None, AttentionImpl::Unfused, long_fused);
  EXPECT_EQ(loss_a, loss_c);
  EXPECT_EQ(grad_a, grad_c) << "two gelu-epilogue runs at T = 1024 differ";
  EXPECT_EQ(loss_a, loss_b);
  EXPECT_EQ(grad_a, grad_b) << "recompute changed the gelu-epilogue gradients";
  EXPECT_EQ(lt.lt()->gelu_fallbacks() - before, 0)
      << "the blocks' MLP ran the unfused GELU path (cuBLASLt refused the GELU epilogues, or fc_pre / its "
         "gradient were not 16-byte aligned)";
}

// The CUDA backend's vector kernels (kernels/cuda/vector_reduce, elementwise,
// adamw) against the host backend's, on a layout with padding and decayed and
// undecayed tensors, for every storage type.
template <class P>
void check_vector_ops(Backend& dev) {
  ParamLayout layout(8);
  layout.add("w", {37, 5}, true, 0);
  layout.add("b", {13}, false, 0);
  layout.add("v", {301}, true, 1);
  layout.finalize(3);
  const std::int64_t n = layout.padded_size(), lo = 5, hi = n - 7;
  auto host_vals = [&](unsigned seed) {
    std::vector<P> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[i] = P(std::sin(0.37f * float(i + seed)) * 0.5f);
    return v;
  };
  MemoryTracker memory;
  VectorOps<P>& h = host_backend().vector_ops<P>();
  VectorOps<P>& d = dev.vector_ops<P>();
  auto upload = [&](const auto& v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    TrackedBuffer<T> b(memory, MemCategory::Workspace, v.size(), dev.memory());
    dev.copy_from_host(b.data(), v.data(), v.size() * sizeof(T));
    return b;
  };
  auto download = [&](const auto& b) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(b.data())>>;
    std::vector<T> v(b.size());
    dev.copy_to_host(v.data(), b.data(), v.size() * sizeof(T));
    return v;
  };
  const std::vector<P> g = host_vals(1);
  auto dg = upload(g);
  const double want = h.sum_of_squares(layout, g.data() + lo, lo, hi);
  EXPECT_NEAR(d.sum_of_squares(layout, dg.data() + lo, lo, hi), want, 1e-12 * want);
  EXPECT_EQ(d.first_non_finite(dg.data(), n), -1);
  std::vector<P> bad = g;
  bad[200] = P(std::numeric_limits<float>::quiet_NaN());
  bad[301] = P(std::numeric_limits<float>::infinity());
  auto dbad = upload(bad);
  EXPECT_EQ(d.first_non_finite(dbad.data(), n), h.first_non_finite(bad.data(), n));
  d.set_inf(dbad.data() + 3);
  EXPECT_EQ(d.first_non_finite(dbad.data(), n), 3);
  // accumulate, widen, narrow: bitwise the host's (one fp32 add or conversion per element).
  std::vector<P> acc = host_vals(2);
  auto dacc = upload(acc);
  h.accumulate(g.data(), acc.data(), n);
  d.accumulate(dg.data(), dacc.data(), n);
  const auto acc_dev = download(dacc);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(float(acc_dev[i]), float(acc[i])) << i;
  std::vector<float> wide(static_cast<std::size_t>(n));
  h.widen(g.data(), wide.data(), n);
  TrackedBuffer<float> dwide(memory, MemCategory::Workspace, static_cast<std::size_t>(n), dev.memory());
  const std::vector<float> nans(static_cast<std::size_t>(n), std::numeric_limits<float>::quiet_NaN());
  dev.copy_from_host(dwide.data(), nans.data(), nans.size() * sizeof(float));  // every element must be written
  d.widen(dg.data(), dwide.data(), n);
  EXPECT_EQ(download(dwide), wide);
  for (auto& x : wide) x *= 1.001f;
  std::vector<P> narrow(static_cast<std::size_t>(n));
  h.narrow(wide.data(), narrow.data(), n);
  auto dnarrow = upload(narrow);
  d.fill_zero(dnarrow.data(), n);
  for (const P& x : download(dnarrow)) ASSERT_EQ(float(x), 0.0f) << "fill_zero";
  dev.copy_from_host(dwide.data(), wide.data(), wide.size() * sizeof(float));
  dnarrow = upload(std::vector<P>(static_cast<std::size_t>(n), P(std::numeric_limits<float>::quiet_NaN())));
  d.narrow(dwide.data(), dnarrow.data(), n);
  const auto narrow_dev = download(dnarrow);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(float(narrow_dev[i]), float(narrow[i])) << i;
  // AdamW over [lo, hi): fp32 state within 1e-6 relative of the host's.
  AdamWUpdate u;
  u.lo = lo;
  u.hi = hi;
  u.lr = 1e-2;
  u.weight_decay = 0.1;
  u.grad_scale = 0.5f;
  const bool master = !std::is_same_v<P, float>;
  std::vector<P> params = host_vals(3);
  std::vector<float> w(static_cast<std::size_t>(n)), m(w.size(), 0.0f), v(w.size(), 0.0f);
  h.widen(params.data(), w.data(), n);
  auto dp = upload(params);
  auto dw = upload(w), dm = upload(m), dv = upload(v);
  for (int step = 0; step < 3; ++step) {
    u.step = step;
    h.adamw(layout, u, params.data() + lo, g.data() + lo, master ? w.data() + lo : nullptr, m.data() + lo, v.data() + lo);
    d.adamw(layout, u, dp.data() + lo, dg.data() + lo, master ? dw.data() + lo : nullptr, dm.data() + lo, dv.data() + lo);
  }
  const auto w_dev = master ? download(dw) : std::vector<float>();
  const auto p_dev = download(dp);
  const auto m_dev = download(dm);
  for (std::int64_t i = 0; i < n; ++i) {
    const float want_w = master ? w[i] : float(params[i]);
    const float got_w = master ? w_dev[i] : float(p_dev[i]);
    ASSERT_NEAR(got_w, want_w, 1e-6f * std::max(1.0f, std::abs(want_w))) << i;
    ASSERT_NEAR(m_dev[i], m[i], 1e-6f * std::max(1e-3f, std::abs(m[i]))) << i;
  }
}

TEST(DeviceVectorOps, MatchTheHostBackend) {
  Device dev;
  check_vector_ops<float>(dev.backend);
  check_vector_ops<f16>(dev.backend);
  check_vector_ops<bf16>(dev.backend);
}

// train.device_kernels = "candidate": the gradient norm's sums of squares and AdamW
// over a range in one launch each. Against the host backend as above, and bitwise
// against the default backend's per-tensor launches on the small GPT's layout
// (many tensors, alignment padding between them) over rank 1's shard of 3: the
// norm exactly equal, every byte of params, master weights, m and v equal after
// three steps (the padding left alone by both). A planted error (the segment
// search off by one, a piece's partials at the wrong row) fails the bitwise part.
template <class P>
void check_one_launch_bitwise(Backend& validated, Backend& candidate) {
  ParamLayout layout = gpt_layout(dims());
  layout.finalize(3);
  const auto [lo, hi] = layout.shard_range(1);
  const std::int64_t n = layout.padded_size();
  MemoryTracker memory;
  auto values = [&](unsigned seed) {
    std::vector<P> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[i] = P(std::sin(0.37f * float(i + seed)) * 0.5f);
    return v;
  };
  auto upload = [&](Backend& be, const auto& v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    TrackedBuffer<T> b(memory, MemCategory::Workspace, v.size(), be.memory());
    be.copy_from_host(b.data(), v.data(), v.size() * sizeof(T));
    return b;
  };
  auto download = [&](Backend& be, const auto& b) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(b.data())>>;
    std::vector<T> v(b.size());
    be.copy_to_host(v.data(), b.data(), v.size() * sizeof(T));
    return v;
  };
  const std::vector<P> g = values(1);
  auto g_a = upload(validated, g);
  auto g_b = upload(candidate, g);
  const double sum_a = validated.vector_ops<P>().sum_of_squares(layout, g_a.data() + lo, lo, hi);
  const double sum_b = candidate.vector_ops<P>().sum_of_squares(layout, g_b.data() + lo, lo, hi);
  EXPECT_EQ(sum_a, sum_b) << "one-launch sum of squares";
  EXPECT_GT(sum_a, 0.0);
  AdamWUpdate u;
  u.lo = lo;
  u.hi = hi;
  u.lr = 1e-2;
  u.weight_decay = 0.1;
  u.grad_scale = 0.5f;
  const bool master = !std::is_same_v<P, float>;
  const std::vector<P> params = values(3);
  std::vector<float> w(static_cast<std::size_t>(n)), mv(w.size(), 0.0f);
  host_backend().vector_ops<P>().widen(params.data(), w.data(), n);
  auto p_a = upload(validated, params), p_b = upload(candidate, params);
  auto w_a = upload(validated, w), w_b = upload(candidate, w);
  auto m_a = upload(validated, mv), m_b = upload(candidate, mv);
  auto v_a = upload(validated, mv), v_b = upload(candidate, mv);
  for (int step = 0; step < 3; ++step) {
    u.step = step;
    validated.vector_ops<P>().adamw(layout, u, p_a.data() + lo, g_a.data() + lo, master ? w_a.data() + lo : nullptr,
                                    m_a.data() + lo, v_a.data() + lo);
    candidate.vector_ops<P>().adamw(layout, u, p_b.data() + lo, g_b.data() + lo, master ? w_b.data() + lo : nullptr,
                                    m_b.data() + lo, v_b.data() + lo);
  }
  auto bytes_equal = [](const auto& a, const auto& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
  };
  EXPECT_TRUE(bytes_equal(download(validated, p_a), download(candidate, p_b))) << "params";
  EXPECT_TRUE(bytes_equal(download(validated, w_a), download(candidate, w_b))) << "master weights";
  EXPECT_TRUE(bytes_equal(download(validated, m_a), download(candidate, m_b))) << "exp_avg";
  EXPECT_TRUE(bytes_equal(download(validated, v_a), download(candidate, v_b))) << "exp_avg_sq";
  EXPECT_FALSE(bytes_equal(download(validated, m_a), mv)) << "AdamW changed nothing";
}

TEST(DeviceVectorOps, CandidateOneLaunchKernelsMatchTheHostAndThePerTensorLaunchesBitwise) {
  Device dev;
  CudaBackend candidate(dev.nccl, GemmImpl::Cublas, DeviceKernels::Candidate);
  check_vector_ops<float>(candidate);
  check_vector_ops<f16>(candidate);
  check_vector_ops<bf16>(candidate);
  check_one_launch_bitwise<float>(dev.backend, candidate);
  check_one_launch_bitwise<f16>(dev.backend, candidate);
  check_one_launch_bitwise<bf16>(dev.backend, candidate);
}

// Per-step (loss, squared gradient norm) of `steps` fp32 training steps.
std::vector<std::pair<double, double>> train(Communicator& comm, Backend* backend, int stage) {
  const GptDims d = dims();
  ParamLayout layout = gpt_layout(d);
  layout.finalize(comm.size());
  MemoryTracker memory;
  ModelState<float> state(layout, stage, comm.rank(), memory, backend);
  ZeroEngine<float> engine(state, {true, 0.0}, comm, memory);
  Backend& be = state.backend();
  const auto [plo, phi] = state.param_range();
  std::vector<float> init(static_cast<std::size_t>(phi - plo));
  gpt_init_params<float>(layout, d, 0.05, 11, init.data(), plo, phi);
  be.copy_from_host(state.params().data(), init.data(), init.size() * sizeof(float));
  Gpt<float> model(d, layout, 1e-5, memory, nullptr, backend);
  model.bind(engine);
  OptimConfig oc;
  const AdamW adam(oc, layout);
  std::vector<std::pair<double, double>> out;
  for (int step = 0; step < 4; ++step) {
    engine.begin_step();
    const Batch b = batch_for(d, step * comm.size() + comm.rank());
    double loss = model.forward(b.tokens.data(), b.targets.data(), d.max_batch);
    model.backward(1.0f / 64);
    const double norm2 = engine.finish_gradients();
    loss = comm.all_reduce_value(loss);
    adam.step(be.vector_ops<float>(), state.optimizer_view(), 1e-3, 1.0f, step);
    engine.params_updated();
    out.emplace_back(loss, norm2);
  }
  return out;
}

TEST(DeviceTraining, EveryZeroStageOnNcclMatchesTheHostEngine) {
  Device dev;
  MpiCommunicator mpi(MPI_COMM_WORLD);
  for (int stage = 0; stage <= 3; ++stage) {
    const auto host = train(mpi, nullptr, stage);
    const auto device = train(dev.nccl, &dev.backend, stage);
    for (std::size_t s = 0; s < host.size(); ++s) {
      EXPECT_NEAR(device[s].first, host[s].first, 1e-4 * std::abs(host[s].first)) << "stage " << stage << " step " << s;
      EXPECT_NEAR(device[s].second, host[s].second, 1e-4 * host[s].second) << "stage " << stage << " step " << s;
    }
  }
}

}  // namespace
}  // namespace shardtrain
