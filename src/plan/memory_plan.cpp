// The memory plan: per-category bytes per rank from config, vocabulary and rank count.
#include "plan/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "config/parse.hpp"  // resolve_attention
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/state_vectors.hpp"
#include "parallel/device_context.hpp"  // computes_on_cuda
#include "parallel/zero_engine.hpp"

namespace shardtrain {

namespace {

// The schedule of a chain of blocks for the config's recompute policy:
// recompute.budget_mb bounds the whole Activations category, of which
// `kept_bytes` (the embeddings and the head) are always kept.
RecomputeSchedule plan_recompute(const RunConfig& c, const ChainCosts& chain, std::int64_t kept_bytes) {
  const std::int64_t budget = static_cast<std::int64_t>(c.recompute.budget_mb * kMiB);
  auto schedule = make_recompute_schedule(c.recompute.policy, chain, budget - kept_bytes);
  if (!schedule) {
    const std::int64_t least = kept_bytes + min_recompute_peak(chain);
    throw InputError(fmt::format(
        "{}: recompute.budget_mb = {} MiB cannot be met: even with maximal recomputation the "
        "activations need {:.2f} MiB per rank ({:.2f} MiB for the embeddings and the head, which are "
        "always kept); raise recompute.budget_mb, lower train.micro_batch or model.seq_len, or use "
        "more ranks",
        c.source_name, c.recompute.budget_mb, static_cast<double>(least) / kMiB,
        static_cast<double>(kept_bytes) / kMiB));
  }
  return std::move(*schedule);
}

}  // namespace

std::int64_t ProcessMemory::fixed() const {
  std::int64_t m = 0;
  for (auto b : before_model) m = std::max(m, b);
  return m;
}

std::int64_t ProcessMemory::scratch_of(int r) const {
  auto at = [r](const std::vector<std::int64_t>& v) {
    return r >= 0 && r < static_cast<int>(v.size()) ? v[static_cast<std::size_t>(r)] : std::int64_t{0};
  };
  return std::max(at(collective_scratch), at(io_scratch));
}

std::int64_t ProcessMemory::scratch() const {
  std::int64_t m = 0;
  const int n = static_cast<int>(std::max(collective_scratch.size(), io_scratch.size()));
  for (int r = 0; r < n; ++r) m = std::max(m, scratch_of(r));
  return m;
}

std::int64_t MemoryPlan::total() const {
  std::int64_t t = 0;
  for (auto b : bytes) t += b;
  return t;
}

GptDims gpt_dims(const RunConfig& c, std::int64_t vocab, int world) {
  GptDims d;
  d.n_layer = c.model.n_layer;
  d.channels = c.model.d_model;
  d.n_head = c.model.n_head;
  d.seq_len = c.model.seq_len;
  d.vocab = vocab;
  d.max_batch = std::min<std::int64_t>(c.train.micro_batch, (c.train.batch_size + world - 1) / world);
  // "auto" becomes "fused" or "unfused" here, the one place the model's attention is chosen.
  const AttentionImpl attention = resolve_attention(c, computes_on_cuda(c.train.device));
  d.fused_attention = attention == AttentionImpl::Fused;
  d.flash_attention = attention == AttentionImpl::Flash;
  d.gelu_epilogue = c.model.gelu == GeluImpl::Epilogue;  // the same buffers either way: nothing to size
  return d;
}

namespace {

// Parameters, gradients, optimizer state and communication buckets of `layout`
// (finalized here for `world`) at the config's stage and precision.
MemoryPlan plan_model_state(const RunConfig& c, ParamLayout& layout, int world) {
  MemoryPlan p;
  p.world = world;
  p.zero_stage = c.parallel.zero_stage;
  p.precision = c.precision.mode;
  p.model = c.model.type;
  layout.finalize(world);
  p.num_parameters = layout.num_parameters();
  p.padded_parameters = layout.padded_size();

  // f: bytes of a stored element (parameters, gradients, activations); the
  // state vectors a stage keeps are ModelState's table (core/state_vectors.hpp):
  // the optimizer keeps m and v in fp32, plus fp32 master weights for 16-bit models.
  const DType compute = precision_dtype(c.precision.mode);
  p.element_bytes = static_cast<std::int64_t>(dtype_size(compute));
  const std::int64_t psi = layout.padded_size(), shard = layout.shard_size(), f = p.element_bytes;
  const int s = p.zero_stage;
  for (StateVector v : kStateVectors) p.bytes[static_cast<int>(category(v))] += stage_bytes(v, compute, s, psi, shard);
  auto set = [&p](MemCategory cat, std::int64_t b) { p.bytes[static_cast<int>(cat)] = b; };
  set(MemCategory::Communication,
      f * zero_bucket_elems(layout, s, c.parallel.bucket_mb, static_cast<std::size_t>(f)));
  // checkpoint.async with a schedule: the staged copy of the checkpoint's state
  // shard (master, both moments and the 16-bit copy), session/background_checkpoint.hpp.
  const bool staged = c.checkpoint.async && (c.checkpoint.every_steps > 0 || c.checkpoint.every_minutes > 0);
  set(MemCategory::CheckpointStaging,
      staged ? static_cast<std::int64_t>(saved_bytes_per_element(compute)) * shard : 0);
  p.batch_size = c.train.batch_size;
  return p;
}

}  // namespace

MemoryPlan plan_gpt_memory(const RunConfig& c, std::int64_t vocab, int world) {
  const GptDims dims = gpt_dims(c, vocab, world);
  ParamLayout layout = gpt_layout(dims);
  MemoryPlan p = plan_model_state(c, layout, world);
  p.dims = dims;
  p.max_batch = dims.max_batch;
  const bool half = c.precision.mode != PrecisionMode::Fp32;
  const std::int64_t f = p.element_bytes, f32 = sizeof(float);
  auto set = [&p](MemCategory cat, std::int64_t b) { p.bytes[static_cast<int>(cat)] = b; };
  const auto acts = gpt_activation_plan(p.dims);
  // Recompute: the blocks' schedule for the policy (budget_mb bounds the whole
  // Activations category; the head is always kept).
  const ChainCosts chain = gpt_chain_costs(p.dims, f);
  const std::int64_t head = f * acts.head;
  p.activations_none = head + make_recompute_schedule(RecomputePolicy::None, chain)->peak_bytes;
  p.recompute = plan_recompute(c, chain, head);
  {
    double one_pass = chain.other_forward_flops;
    for (double fl : chain.forward_flops) one_pass += fl;
    p.forward_flops_per_sequence = one_pass / static_cast<double>(p.dims.max_batch);
    p.step_flops = p.forward_flops_per_sequence * static_cast<double>(p.batch_size) * (3.0 + p.recompute.extra_flops);
  }
  set(MemCategory::Activations, f * gpt_activation_elems(p.dims, p.recompute));
  // 16-bit kernels convert tiles to fp32 in a scratch arena (kernels/half_scratch.hpp).
  set(MemCategory::Workspace, f * acts.workspace + (half ? f32 * acts.half_scratch : 0));
  const std::int64_t mb = p.dims.max_batch, t = p.dims.seq_len;
  set(MemCategory::Data, static_cast<std::int64_t>(sizeof(TokenIndex)) * (mb * (t + 1) + 2 * mb * t));
  return p;
}

MemoryPlan plan_classifier_memory(const RunConfig& c, ParamLayout layout, const ClassifierCosts& costs,
                                  std::int64_t data_bytes, std::int64_t max_batch, int world) {
  MemoryPlan p = plan_model_state(c, layout, world);
  p.max_batch = max_batch;
  auto set = [&p](MemCategory cat, std::int64_t b) { p.bytes[static_cast<int>(cat)] = b; };
  std::int64_t activations = costs.activation_bytes;
  if (costs.has_chain()) {
    // The model's chain of blocks (the encoder's) runs by the schedule, as the GPT's.
    p.recompute = plan_recompute(c, costs.chain, costs.kept_activation_bytes);
    activations = costs.kept_activation_bytes + p.recompute.peak_bytes;
  } else if (c.recompute.policy != RecomputePolicy::None) {
    throw InputError(fmt::format(
        "{}: recompute.policy = \"{}\": model.type = \"{}\" has no chain of blocks to recompute; activation "
        "recompute runs the transformer blocks of model.type = \"gpt\" and \"encoder_classifier\"; use \"none\"",
        c.source_name, name_of(c.recompute.policy), name_of(c.model.type)));
  }
  set(MemCategory::Activations, activations);
  set(MemCategory::Workspace, costs.workspace_bytes);
  set(MemCategory::Data, data_bytes);
  p.activations_none = costs.activation_bytes;
  p.forward_flops_per_sequence = costs.forward_flops;
  p.step_flops = costs.forward_flops * static_cast<double>(p.batch_size) * (3.0 + p.recompute.extra_flops);
  return p;
}

std::string format_plan(const MemoryPlan& p) {
  std::string out = fmt::format(
      "memory plan per rank: {} ranks, ZeRO stage {}, {}, {} parameters ({} padded), micro-batch {}\n",
      p.world, p.zero_stage, name_of(p.precision), p.num_parameters, p.padded_parameters, p.max_batch);
  for (int c = 0; c < MemoryTracker::kCategories; ++c)
    out += fmt::format("  {:<16} {:>12.3f} MiB\n", to_string(static_cast<MemCategory>(c)),
                       static_cast<double>(p.bytes[c]) / kMiB);
  out += fmt::format("  {:<16} {:>12.3f} MiB\n", "total", static_cast<double>(p.total()) / kMiB);
  if (p.data_in_memory > 0)
    out += fmt::format("  data holds the data set in memory: {:.3f} MiB (data.in_memory; \"off\" reads each micro-batch "
                       "from the file instead)\n",
                       static_cast<double>(p.data_in_memory) / kMiB);
  if (p.process.measured()) {
    auto per_rank = [](const std::vector<std::int64_t>& v) {
      std::string t;
      for (auto b : v) t += fmt::format(" {:.1f}", static_cast<double>(b) / kMiB);
      return t;
    };
    out += fmt::format("process RSS before the model per rank (MiB):{}\n", per_rank(p.process.before_model));
    if (!p.process.collective_scratch.empty())
      out += fmt::format("MPI collective scratch per rank (MiB, VmHWM rise in one probe of the step's gradient "
                         "collective):{}\n", per_rank(p.process.collective_scratch));
    if (!p.process.io_scratch.empty())
      out += fmt::format("checkpoint I/O scratch per rank (MiB, VmHWM rise in one probe file written as a checkpoint "
                         "is):{}\n", per_rank(p.process.io_scratch));
    out += fmt::format("predicted process peak per rank: {:.1f} MiB = {:.1f} before the model (max over {} ranks) + "
                       "{:.1f} tracked + {:.1f} scratch (the larger of collective and checkpoint I/O)\n",
                       static_cast<double>(p.process_peak()) / kMiB, static_cast<double>(p.process.fixed()) / kMiB,
                       p.process.before_model.size(), static_cast<double>(p.total()) / kMiB,
                       static_cast<double>(p.process.scratch()) / kMiB);
  }
  const bool gpt = p.model == ModelType::Gpt;
  if (!p.recompute.ops.empty()) {  // a model with a chain of blocks: the GPT, the encoder classifier
    out += format_schedule(p.recompute);
    out += fmt::format("  activations {:.3f} MiB per rank (policy \"none\" would need {:.3f} MiB)\n",
                       static_cast<double>(p.of(MemCategory::Activations)) / kMiB,
                       static_cast<double>(p.activations_none) / kMiB);
    out += fmt::format("compute per step: {:.4g} GFLOP for the global batch of {} {} ({:.4g} MFLOP forward per "
                       "{}; x (3 + {:.3f} recomputed) for forward, backward and recompute), {:.4g} GFLOP per "
                       "rank\n",
                       p.step_flops / 1e9, p.batch_size, gpt ? "sequences" : "samples",
                       p.forward_flops_per_sequence / 1e6, gpt ? "sequence" : "sample", p.recompute.extra_flops,
                       p.step_flops / 1e9 / p.world);
  } else {
    out += fmt::format("  activations kept whole ({} has no recompute schedule)\n", name_of(p.model));
    out += fmt::format("compute per step: {:.4g} GFLOP for the global batch of {} samples ({:.4g} MFLOP forward per "
                       "sample; x 3 for forward and backward), {:.4g} GFLOP per rank\n",
                       p.step_flops / 1e9, p.batch_size, p.forward_flops_per_sequence / 1e6,
                       p.step_flops / 1e9 / p.world);
  }
  return out;
}

void check_memory_limit(const MemoryPlan& p, const RunConfig& c, int device_sharers, std::size_t device_bytes) {
  const double limit = c.train.memory_limit_mb;
  const double need = static_cast<double>(p.process_peak()) / kMiB;
  if (device_sharers > 1) {  // what all the ranks on this device need of it together
    // On a device run these categories are device memory; the data and the
    // checkpoint staging stay on the host.
    const double each = static_cast<double>(p.total() - p.of(MemCategory::Data) -
                                            p.of(MemCategory::CheckpointStaging)) / kMiB;
    const double together = each * device_sharers;
    const double device = static_cast<double>(device_bytes) / kMiB;
    const bool over_limit = limit > 0 && together > limit, over_device = device_bytes > 0 && together > device;
    if (over_limit || over_device)
      throw InputError(fmt::format(
          "{}: {} ranks share this rank's device (parallel.share_device = true) and together need {:.2f} MiB of it "
          "(the plan's {:.2f} MiB per rank times {}), above {}; use fewer ranks per device, a higher "
          "parallel.zero_stage, a smaller train.micro_batch{}",
          c.source_name, device_sharers, together, each, device_sharers,
          over_limit ? fmt::format("train.memory_limit_mb = {} MiB", limit)
                     : fmt::format("the device's {:.2f} MiB", device),
          over_limit ? ", or raise the limit" : ""));
  }
  if (limit <= 0 || need <= limit) return;
  throw InputError(fmt::format(
      "{}: train.memory_limit_mb = {} MiB, but the predicted process peak is {:.2f} MiB per rank ({:.2f} MiB "
      "short: process before the model {:.2f}, scratch (MPI collective or checkpoint I/O) {:.2f}, and the plan's {:.2f}: "
      "parameters {:.2f}, gradients {:.2f}, optimizer state {:.2f}, activations {:.2f}, "
      "workspace {:.2f}, communication {:.2f}, data {:.2f}, checkpoint staging {:.2f}); use a higher "
      "parallel.zero_stage, more ranks, a smaller train.micro_batch, checkpoint.async = false{}, or raise the limit",
      c.source_name, limit, need, need - limit, p.process.fixed() / kMiB, p.process.scratch() / kMiB,
      p.total() / kMiB, p.of(MemCategory::Parameters) / kMiB,
      p.of(MemCategory::Gradients) / kMiB, p.of(MemCategory::OptimizerState) / kMiB,
      p.of(MemCategory::Activations) / kMiB, p.of(MemCategory::Workspace) / kMiB,
      p.of(MemCategory::Communication) / kMiB, p.of(MemCategory::Data) / kMiB,
      p.of(MemCategory::CheckpointStaging) / kMiB,
      p.data_in_memory > 0 ? fmt::format(", data.in_memory = \"off\" ({:.2f} MiB of data is the data set held in memory)",
                                         p.data_in_memory / kMiB)
                           : std::string()));
}

}  // namespace shardtrain
