// shardtrain/model/gpt.hpp
// Owns the GPT-2-style decoder: token + position embeddings, L pre-LayerNorm
// blocks (causal multi-head attention, GELU MLP: model/transformer_block.hpp,
// shared with the encoder classifier), final LayerNorm, LM head tied to the
// token embedding. Parameters and gradients are NOT owned here: the model
// acquires each parameter group from a ParamProvider right before using it and
// releases it right after (so a ZeRO engine can gather groups just in time and
// reduce gradients group by group); groups are 0 = embeddings, 1..L = blocks,
// L+1 = final LayerNorm, in gpt_layout() order. It owns
// its activation arena (category Activations: what backward needs) and its
// workspace (category Workspace: scratch reused by every block), both sized
// once, before the first step, for micro-batches of up to max_batch sequences.
// Recompute: the blocks are a chain run by a RecomputeSchedule (model/recompute.hpp)
// through model/block_chain.hpp (shared with the encoder classifier):
// forward() runs the schedule's forward pass, backward() the rest (re-running
// block forwards where it says so); the arena holds the head, the schedule's
// internals and checkpoint slots and its scratch block, sized by the schedule's
// plan as given (stack_bytes, uses_scratch: what the memory plan reports). The
// chain measures what it uses of it: the stack's high-water and whether the
// scratch block is used, so activation_high_water_bytes() is the measured
// activation peak to check the plan against (more than planned cannot happen: a
// push past the planned stack throws). The blocks know nothing of the policy;
// every policy computes bitwise the same loss and gradients.
// Gradient convention: backward() ACCUMULATES into the gradient vector, so
// micro-batches add up; the caller zeroes it once per optimizer step.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/model_ops.hpp"
#include "config/run_config.hpp"
#include "core/memory.hpp"
#include "core/half.hpp"
#include "core/param_layout.hpp"
#include "core/param_provider.hpp"
#include "model/block_chain.hpp"
#include "model/recompute.hpp"
#include "model/transformer_block.hpp"

namespace shardtrain {

struct GptDims {
  std::int64_t n_layer = 0;   // L
  std::int64_t channels = 0;  // C
  std::int64_t n_head = 0;    // H
  std::int64_t seq_len = 0;   // T
  std::int64_t vocab = 0;     // V
  std::int64_t max_batch = 0; // largest micro-batch B the buffers are sized for
  bool fused_attention = false;  // model.attention = "fused": cuDNN's flash attention (AttnShape::fused)
  bool flash_attention = false;  // model.attention = "flash": our tiled attention (AttnShape::flash)
  bool gelu_epilogue = false;    // model.gelu = "epilogue": the MLP's GELU in its GEMMs (TransformerBlockShape)
};

// Elements of each buffer class for given dims (the memory plan of one model replica).
struct GptActivationPlan {
  std::int64_t per_block = 0;   // saved per transformer block
  std::int64_t head = 0;        // embeddings output, final LayerNorm, logits, losses
  std::int64_t workspace = 0;   // scratch shared by all blocks
  std::int64_t half_scratch = 0;  // fp32 elements 16-bit kernels convert tiles into (kernels/half_scratch.hpp)
  std::int64_t activations() const;
  std::int64_t n_layer = 0;
};
GptActivationPlan gpt_activation_plan(const GptDims& d);

// The blocks as a chain for the recompute scheduler: per block the bytes it
// saves (internals and output), its output, its forward FLOPs; elements of
// `element_bytes` bytes.
ChainCosts gpt_chain_costs(const GptDims& d, std::int64_t element_bytes);

// Activation elements under `schedule`: the head plus the schedule's slots.
std::int64_t gpt_activation_elems(const GptDims& d, const RecomputeSchedule& schedule);

// Parameter table in nanoGPT naming; Linear weights (out, in). Not finalized.
ParamLayout gpt_layout(const GptDims& d);

// Initialises params[lo, hi) of the flat vector (indices are global, so every
// rank computes the same values for the same index): N(0, init_std) for matrices
// and embeddings, N(0, init_std/sqrt(2L)) for the two residual projections,
// LayerNorm weight 1, biases and padding 0.
template <class T>
void gpt_init_params(const ParamLayout& layout, const GptDims& d, double init_std,
                     std::uint64_t seed, T* params, std::int64_t lo, std::int64_t hi);

template <class T>
class Gpt {
 public:
  // schedule: the recompute schedule of the blocks (nullptr: keep everything, "none").
  // backend: where the kernels run and the activations live (nullptr: the host);
  // parameters and gradients from the provider must live there too. The layer
  // kernels are the backend's ModelOps (backend/model_ops.hpp), which also own
  // their scratch (a 16-bit host model's fp32 tiles, Workspace).
  Gpt(const GptDims& dims, const ParamLayout& layout, double layernorm_eps, MemoryTracker& memory,
      const RecomputeSchedule* schedule = nullptr, Backend* backend = nullptr);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  // Takes parameters and gradients from `provider` (which must outlive the model's use).
  void bind(ParamProvider<T>& provider);
  // Convenience: full flat parameter and gradient vectors (padded_size() each).
  void bind(T* params, T* grads);

  // Forward on `batch` sequences (0 <= batch <= max_batch; 0 computes nothing but
  // makes the same provider calls, so a rank without samples still takes part in
  // a sharded provider's collectives). tokens and targets are
  // (batch, T) row-major; targets < 0 are ignored. Returns the SUM of the
  // per-token losses over valid targets. Both arrays must stay alive and
  // unchanged until backward() returns.
  double forward(const TokenIndex* tokens, const TokenIndex* targets, std::int64_t batch);

  // Backward of the last forward: grads += d(dloss * sum of token losses)/d(params).
  void backward(T dloss);

  const GptDims& dims() const { return m_dims; }

  // Measured activation use in bytes, max over every forward and backward since
  // construction: the head (embeddings output, final LayerNorm, logits, losses)
  // once a forward ran, plus the recompute stack's high-water, plus the scratch
  // block once a forward dropped its internals. Counted in the arena regions the
  // schedule's ops claim, so a micro-batch smaller than max_batch (or an empty
  // one) measures the same. The arena holds gpt_activation_elems(dims, schedule)
  // elements (the plan): the two are equal when the plan is right, and the
  // measured value is lower when the schedule reserves more than its ops use.
  std::int64_t activation_high_water_bytes() const;
  // The recompute stack's high-water in bytes: over the model's life, and since
  // the last forward() began (that forward and its backward).
  std::int64_t stack_high_water_bytes() const;
  std::int64_t last_pass_stack_high_water_bytes() const;

 private:
  // Binds the views of group 0 (wte, wpe) or the final LayerNorm's group
  // (parameters or gradients) to storage starting at `base`.
  void bind_group(int g, T* base, T*& wte, T*& wpe, T*& lnf_w, T*& lnf_b) const;
  void acquire_params(int g);
  void acquire_grads(int g);
  int lnf_group() const { return static_cast<int>(m_dims.n_layer) + 1; }

  GptDims m_dims;
  const ParamLayout& m_layout;
  T m_eps;
  std::vector<std::int64_t> m_rel;             // entry offset relative to its group's start
  ParamProvider<T>* m_provider = nullptr;
  std::unique_ptr<FlatParams<T>> m_flat;       // owned provider of bind(params, grads)
  std::unique_ptr<ModelOps<T>> m_ops;          // the layer kernels of the backend

  // The embeddings' and the final LayerNorm's tensors in the bound storage:
  // wte (V, C), wpe (T, C), ln_f weight and bias (C); the ops take pointers.
  T *m_wte = nullptr, *m_wpe = nullptr, *m_lnf_w = nullptr, *m_lnf_b = nullptr;       // parameters
  T *m_dwte = nullptr, *m_dwpe = nullptr, *m_dlnf_w = nullptr, *m_dlnf_b = nullptr;   // gradients

  TrackedBuffer<T> m_acts;       // Activations: embeddings out, the chain's stack and scratch, head
  TrackedBuffer<T> m_work;       // Workspace: the blocks' (transformer_block_workspace)
  TransformerBlockWork<T> m_ws{};
  BlockChain<T> m_chain;                       // the blocks, run by the schedule (model/block_chain.hpp)
  std::int64_t m_head_elems = 0;               // the arena outside the chain
  bool m_head_used = false;                    // a forward ran
  T* m_emb_out = nullptr;        // (BT, C) block 0 input
  T* m_lnf_mean = nullptr; T* m_lnf_rstd = nullptr; T* m_lnf_out = nullptr;
  T* m_logits = nullptr;         // (BT, V); overwritten by dlogits in backward
  T* m_losses = nullptr;         // (BT)

  const TokenIndex* m_tokens = nullptr;   // as the kernels read them (ModelOps::stage_tokens)
  const TokenIndex* m_targets = nullptr;
  std::int64_t m_batch = 0;
  bool m_forward_done = false;
};

extern template class Gpt<float>;
extern template class Gpt<double>;
extern template class Gpt<f16>;
extern template class Gpt<bf16>;

}  // namespace shardtrain
