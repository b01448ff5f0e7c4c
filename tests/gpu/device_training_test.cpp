// Device tests of the CUDA backend as the trainer uses it (labels gpu;mpi, one
// GPU per rank; built in CI, never run here -- no machine here has a GPU):
//  - the GPT on the device (CudaBackend + CudaModelOps) against the same GPT on
//    the host: loss and every parameter's gradient, fp32 (relative 1e-4) and
//    fp16/bf16 storage against fp32 host (relative L2 3e-2), and bitwise the
//    same gradients under two recompute schedules on the device;
//  - training steps through the ZeRO engine on NcclCommunicator, every stage,
//    against the host engine on MpiCommunicator: per-step loss and gradient
//    norm within 1e-4 relative.
// Without a device the NcclCommunicator constructor throws ("no CUDA device
// available to rank R ...") and every test fails: it never skips.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "config/run_config.hpp"
#include "core/memory.hpp"
#include "dist/mpi/mpi_communicator.hpp"
#include "dist/nccl/nccl_communicator.hpp"
#include "dist/zero_engine.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "plan/recompute.hpp"

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
std::pair<double, std::vector<float>> gradients(Backend* backend, const std::string& policy = "none") {
  const GptDims d = dims();
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
  const auto [loss_a, grad_a] = gradients<float>(&dev.backend, "none");
  const auto [loss_b, grad_b] = gradients<float>(&dev.backend, "sqrt");
  EXPECT_EQ(loss_a, loss_b);
  EXPECT_EQ(grad_a, grad_b);
}

// Per-step (loss, squared gradient norm) of `steps` fp32 training steps.
std::vector<std::pair<double, double>> train(Communicator& comm, Backend* backend, int stage) {
  const GptDims d = dims();
  ParamLayout layout = gpt_layout(d);
  layout.finalize(comm.size());
  MemoryTracker memory;
  ZeroEngine<float> engine(layout, {stage, true, 0.0}, comm, memory, backend);
  Backend& be = backend ? *backend : host_backend();
  const auto [plo, phi] = engine.stored_param_range();
  std::vector<float> init(static_cast<std::size_t>(phi - plo));
  gpt_init_params<float>(layout, d, 0.05, 11, init.data(), plo, phi);
  be.copy_from_host(engine.stored_params(), init.data(), init.size() * sizeof(float));
  Gpt<float> model(d, layout, 1e-5, memory, nullptr, backend);
  model.bind(engine);
  const auto [olo, ohi] = engine.optimizer_range();
  OptimConfig oc;
  AdamW adam(oc, layout, olo, ohi, memory, false, be.memory());
  std::vector<std::pair<double, double>> out;
  for (int step = 0; step < 4; ++step) {
    engine.begin_step();
    const Batch b = batch_for(d, step * comm.size() + comm.rank());
    double loss = model.forward(b.tokens.data(), b.targets.data(), d.max_batch);
    model.backward(1.0f / 64);
    const double norm2 = engine.finish_gradients();
    loss = comm.all_reduce_value(loss);
    engine.apply_optimizer(adam, 1e-3, 1.0f, step);
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
