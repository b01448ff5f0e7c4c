// Device test of the CNN through CudaModelOps (labels gpu;mpi, one GPU; built in
// CI, never run here -- no machine here has a GPU): Cnn on a CudaBackend (cuDNN
// convolutions, the CUDA max-pool and dropout kernels) against the same Cnn on
// the host, dropout on, over two micro-batches of different sizes (4 then 3:
// two cuDNN convolution shapes per layer, gradients accumulating):
//  - fp32: summed loss relative 1e-5, every tensor's gradient and the logits of
//    the last micro-batch relative L2 1e-4 (the dropout masks are bitwise the
//    host's, so the error is the convolutions' and GEMMs' summation order);
//  - fp16 / bf16 storage against the host in the same storage type: loss 2e-2,
//    gradients 3e-2;
//  - two device runs: bitwise the same loss, gradients and logits (cuDNN's
//    deterministic backward algorithms, no atomics in pool / dropout).
// Without a device the NcclCommunicator constructor throws and every test
// fails: it never skips.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "core/memory.hpp"
#include "parallel/nccl/nccl_communicator.hpp"
#include "model/cnn.hpp"

namespace shardtrain {
namespace {

CnnDims dims() {
  CnnDims d;
  d.in_channels = 2;
  d.height = d.width = 12;
  d.convs = {{6, 3, 1}, {8, 3, 0}};  // 12 -> 12 -> pool 6 -> 4 -> pool 2
  d.pool = 2;
  d.hidden = {20};
  d.classes = 5;
  d.dropout = 0.3;
  d.max_batch = 4;
  d.dropout_seed = 31;
  return d;
}

struct Device {
  Device() : nccl(MPI_COMM_WORLD), backend(nccl) {}
  NcclCommunicator nccl;
  CudaBackend backend;
};

struct Result {
  double loss = 0;
  std::vector<float> grads, logits;
};

// Forward/backward of 4 + 3 samples (training), as fp32, on `backend` (nullptr: host).
template <class T>
Result run(Backend* backend) {
  const CnnDims d = dims();
  ParamLayout layout = cnn_layout(d);
  layout.finalize(1);
  const std::size_t n = static_cast<std::size_t>(layout.padded_size());
  std::vector<T> params(n), zeros(n, T(0.0f));
  cnn_init_params<T>(layout, 3, params.data(), 0, layout.padded_size());
  MemoryTracker memory;
  MemorySpace* space = backend ? backend->memory() : nullptr;
  TrackedBuffer<T> p(memory, MemCategory::Parameters, n, space), g(memory, MemCategory::Gradients, n, space);
  Backend& be = backend ? *backend : host_backend();
  be.copy_from_host(p.data(), params.data(), n * sizeof(T));
  be.copy_from_host(g.data(), zeros.data(), n * sizeof(T));
  const std::int64_t pixels = d.in_channels * d.height * d.width;
  std::vector<float> inputs(7 * pixels);
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& v : inputs) v = u(gen);
  const std::vector<TokenIndex> labels{0, 4, -1, 2, 1, 3, 0};
  Cnn<T> model(d, layout, memory, backend);
  model.bind(p.data(), g.data());
  Result r;
  for (const auto& [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 4}, {4, 3}}) {
    SampleBatch b;
    b.batch = count;
    b.values = inputs.data() + first * pixels;
    b.labels = labels.data() + first;
    b.training = true;
    b.first_sample = 100 + static_cast<std::uint64_t>(first);
    r.loss += model.forward(b);
    model.backward(T(1.0f / 6));
  }
  model.logits(r.logits);
  std::vector<T> host(n);
  be.copy_to_host(host.data(), g.data(), n * sizeof(T));
  r.grads.resize(n);
  for (std::size_t i = 0; i < n; ++i) r.grads[i] = static_cast<float>(static_cast<compute_t<T>>(host[i]));
  return r;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b, std::int64_t lo, std::int64_t hi) {
  double num = 0, den = 0;
  for (std::int64_t i = lo; i < hi; ++i) {
    num += (a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void expect_matches(const Result& got, const Result& want, double loss_tol, double grad_tol, const char* what) {
  EXPECT_NEAR(got.loss, want.loss, loss_tol * std::abs(want.loss)) << what;
  ParamLayout layout = cnn_layout(dims());
  layout.finalize(1);
  for (const auto& e : layout.entries())
    EXPECT_LT(rel_l2(got.grads, want.grads, e.offset, e.offset + e.numel), grad_tol) << e.name << " " << what;
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  EXPECT_LT(rel_l2(got.logits, want.logits, 0, static_cast<std::int64_t>(want.logits.size())), grad_tol) << what;
}

TEST(DeviceCnn, Fp32MatchesTheHostModelWithDropout) {
  Device dev;
  expect_matches(run<float>(&dev.backend), run<float>(nullptr), 1e-5, 1e-4, "fp32");
}

// Against the host model in the same storage type: both round every activation to
// T at the same points, so what is left is the summation order. (Against the fp32
// host, conv.0.weight's gradient differed by 3.7% relative in fp16 and bf16 alike,
// on an H100 on 2026-11-28. Alike: so not the 16-bit rounding itself, which is 8x
// coarser in bf16; the likely cause is a max-pool or ReLU decision that flips where
// inputs rounded to 16 bits tie or change sign, which a same-type host run shares.)
TEST(DeviceCnn, SixteenBitStorageMatchesTheHostWithinRounding) {
  Device dev;
  expect_matches(run<f16>(&dev.backend), run<f16>(nullptr), 2e-2, 3e-2, "fp16");
  expect_matches(run<bf16>(&dev.backend), run<bf16>(nullptr), 2e-2, 3e-2, "bf16");
}

TEST(DeviceCnn, RunsAreBitwiseReproducible) {
  Device dev;
  const Result a = run<float>(&dev.backend), b = run<float>(&dev.backend);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.grads, b.grads);
  EXPECT_EQ(a.logits, b.logits);
}

}  // namespace
}  // namespace shardtrain
