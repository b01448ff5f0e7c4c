// shardtrain/plan/memory_plan.hpp
// Owns the memory plan: the bytes per rank of every buffer category a run will
// allocate, computed from the config, the data set's vocabulary and the rank
// count alone -- nothing of the model is allocated. The trainer allocates
// exactly these buffers (the same functions size both), so the plan is checked
// against the tracked allocator's measured peaks at the end of every run, and
// its activations also against the model's measured high-water (how far the
// recompute stack rose: Gpt / Classifier::activation_high_water_bytes), which
// allocation alone cannot show.
//   parameters, gradients, optimizer state: ModelState (parallel/model_state.hpp) by stage
//   (fp32: stage 0 16 Psi, 1 8 Psi + 8 Psi/N, 2 4 Psi + 12 Psi/N, 3 16 Psi/N;
//   fp16/bf16 with fp32 master weights and moments: 16 Psi, 4 Psi + 12 Psi/N,
//   2 Psi + 14 Psi/N, 16 Psi/N; Psi = padded parameter count), communication: ZeroEngine's buckets,
//   activations and workspace: gpt_activation_plan (classifiers: their
//   ClassifierCosts, model/classifier.hpp; attention's share of the workspace and
//   of the 16-bit scratch is one piece per (sequence, head) pair processed at once,
//   attention_pair_slots: one with Serial Kokkos or one thread, else up to the
//   Kokkos host threads, kernels/attention.hpp), data: the input buffers (classifiers
//   with data.in_memory: plus the data set held in memory),
//   ckpt_staging: with checkpoint.async and a schedule, the staged copy of the
//   checkpoint's state shard (12 or 14 bytes per shard element).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_type.hpp"
#include "config/run_config.hpp"
#include "core/memory.hpp"
#include "model/classifier.hpp"
#include "model/gpt.hpp"
#include "core/param_layout.hpp"
#include "model/recompute.hpp"

namespace shardtrain {

// The process memory beside the plan's tracked buffers, measured on every rank
// of the job (rundir/process_memory.hpp), not computed: empty vectors until
// measured. Bytes, indexed by rank.
struct ProcessMemory {
  std::vector<std::int64_t> before_model;        // VmRSS just before the model is allocated
  std::vector<std::int64_t> collective_scratch;  // VmHWM's rise in the probed gradient collective
  std::vector<std::int64_t> io_scratch;          // VmHWM's rise in the probed checkpoint write
  bool measured() const { return !before_model.empty(); }
  std::int64_t fixed() const;    // max over ranks of before_model (0 if not measured)
  // Rank r's transient scratch: the larger of its two probes (a checkpoint is
  // written between steps, never during the step's collectives; 0 if unprobed).
  std::int64_t scratch_of(int r) const;
  std::int64_t scratch() const;  // max over ranks of scratch_of
};

struct MemoryPlan {
  std::array<std::int64_t, MemoryTracker::kCategories> bytes{};  // per rank
  std::int64_t num_parameters = 0;   // Psi as a user counts it
  std::int64_t padded_parameters = 0;
  int world = 1;
  int zero_stage = 0;
  PrecisionMode precision = PrecisionMode::Fp32;  // precision.mode
  std::int64_t element_bytes = 4;   // of parameters, gradients, activations
  ModelType model = ModelType::Gpt;  // model.type
  std::int64_t max_batch = 0;       // samples per rank per micro-batch
  GptDims dims;                     // gpt only
  RecomputeSchedule recompute;      // gpt, encoder_classifier: the blocks' schedule (activations are sized by
                                    // it); empty (no ops) for a model without a chain of blocks
  std::int64_t activations_none = 0;  // activation bytes policy "none" would need (for the report)
  // Compute per optimizer step (analytic, gpt_chain_costs): forward FLOPs of one
  // sequence, and the global batch's training FLOPs: forward + recomputed
  // forwards + backward (twice the forward's GEMM work).
  double forward_flops_per_sequence = 0;
  double step_flops = 0;
  std::int64_t batch_size = 0;
  // Classifiers: bytes of the data category that are the data set held in
  // memory (data.in_memory; io/sample_dataset.hpp hold_in_memory), 0 when read
  // from the file per micro-batch.
  std::int64_t data_in_memory = 0;

  ProcessMemory process;  // measured; empty in a plan nobody measured

  std::int64_t total() const;
  // The predicted process peak per rank (VmHWM): process.fixed() + total() +
  // process.scratch(); every rank uses the same (max over ranks) terms.
  std::int64_t process_peak() const { return process.fixed() + total() + process.scratch(); }
  std::int64_t of(MemCategory c) const { return bytes[static_cast<int>(c)]; }
};

// The model dimensions a run uses (max_batch = min(micro_batch, ceil(batch_size / world))).
GptDims gpt_dims(const RunConfig& config, std::int64_t vocab, int world);

// The plan of a GPT (its task's, task/gpt_task.cpp): model state, the activations
// its recompute schedule keeps, workspace. Every model type's plan is its task's
// (task/model_registry.hpp picks the task; task/task.hpp plan_run).
MemoryPlan plan_gpt_memory(const RunConfig& config, std::int64_t vocab, int world);

// The plan of a classifier (a model type whose row reads labelled samples): model
// state from its layout (not finalized; finalized here for `world`), activations and
// workspace from its costs, `data_bytes` of input buffers per rank. A classifier
// with a chain of blocks (costs.chain: the encoder) gets the recompute schedule
// of the config's policy and its activations under it, as the GPT; one without
// (MLP, CNN) refuses any policy but "none" (InputError naming the models that
// have one).
MemoryPlan plan_classifier_memory(const RunConfig& config, ParamLayout layout, const ClassifierCosts& costs,
                                  std::int64_t data_bytes, std::int64_t max_batch, int world);

// Human-readable plan (for `trainer --plan` and the start of a run); with the
// measured process terms and the predicted process peak when measured.
std::string format_plan(const MemoryPlan& plan);

// Throws InputError naming the shortfall if train.memory_limit_mb is set and the
// predicted process peak (process_peak(): the measured terms plus the tracked
// total) exceeds it. Ranks sharing one device (parallel.share_device):
// `device_sharers` ranks of the node are on this rank's device, so what they
// need of it together, the plan's device bytes (its tracked total but the data
// and the checkpoint staging: the model state, activations, workspace and
// buckets a device run allocates there) times the sharers, is
// checked against train.memory_limit_mb too, and against `device_bytes` (the
// device's memory; 0: not known, not checked).
void check_memory_limit(const MemoryPlan& plan, const RunConfig& config, int device_sharers = 1,
                        std::size_t device_bytes = 0);

}  // namespace shardtrain
