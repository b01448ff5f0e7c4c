// Gpt: layout, initialisation, activation plan, forward and backward of the
// GPT decoder. Every op is a ModelOps kernel of the backend; this file only
// wires buffers and parameter groups.
#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/half.hpp"

namespace shardtrain {

namespace {

TransformerBlockShape block_shape_of(const GptDims& d) {
  TransformerBlockShape s{d.max_batch, d.seq_len, d.channels, d.n_head, d.fused_attention};
  s.flash_attention = d.flash_attention;
  return s;
}

// The GPT's blocks: causal, no padding, no dropout.
TransformerBlockRun block_run(std::int64_t batch) {
  TransformerBlockRun run;
  run.batch = batch;
  return run;
}

}  // namespace

std::int64_t GptActivationPlan::activations() const { return head + n_layer * per_block; }

GptActivationPlan gpt_activation_plan(const GptDims& d) {
  const std::int64_t bt = d.max_batch * d.seq_len, c = d.channels;
  GptActivationPlan p;
  p.n_layer = d.n_layer;
  p.per_block = transformer_block_saved_elems(block_shape_of(d));
  // embedding output, final LayerNorm mean/rstd/out, logits, losses
  p.head = bt * c + 2 * bt + bt * c + bt * d.vocab + bt;
  p.workspace = transformer_block_workspace_elems(block_shape_of(d));
  // 16-bit models: the fp32 tiles of the largest kernel call (kernels/half_scratch.hpp).
  p.half_scratch = host_half_scratch_elems(ModelOpsLimits{d.max_batch, d.seq_len, c, d.n_head, d.vocab});
  return p;
}

ChainCosts gpt_chain_costs(const GptDims& d, std::int64_t element_bytes) {
  const auto p = gpt_activation_plan(d);
  const std::int64_t bt = d.max_batch * d.seq_len, c = d.channels;
  ChainCosts costs;
  // Analytic forward FLOPs: the four Linear layers (12 C^2 multiply-adds per
  // token) and causal attention (QK^T and PV over half the T x T scores).
  const double tokens = static_cast<double>(bt), cd = static_cast<double>(c);
  const double block = transformer_block_forward_flops(tokens, d.seq_len, c, /*causal=*/true);
  for (std::int64_t l = 0; l < d.n_layer; ++l) {
    costs.saved_bytes.push_back(p.per_block * element_bytes);
    costs.output_bytes.push_back(bt * c * element_bytes);
    costs.forward_flops.push_back(block);
  }
  costs.scratch_bytes = p.per_block * element_bytes;
  costs.other_forward_flops = 2.0 * tokens * cd * static_cast<double>(d.vocab);  // LM head
  return costs;
}

std::int64_t gpt_activation_elems(const GptDims& d, const RecomputeSchedule& s) {
  const auto p = gpt_activation_plan(d);
  // gpt_chain_costs sizes are whole elements, so the stack is too (element size
  // recovered from the slot size).
  const std::int64_t elem = p.per_block > 0 ? s.slot_bytes / p.per_block : 1;
  return p.head + s.stack_bytes / elem + (s.uses_scratch ? p.per_block : 0);
}

ParamLayout gpt_layout(const GptDims& d) {
  const std::int64_t c = d.channels;
  ParamLayout layout;
  layout.add("wte.weight", {d.vocab, c}, false, 0);
  layout.add("wpe.weight", {d.seq_len, c}, false, 0);
  for (int l = 0; l < d.n_layer; ++l) add_transformer_block_params(layout, l, l + 1, c);
  layout.add("ln_f.weight", {c}, false, static_cast<int>(d.n_layer) + 1);
  layout.add("ln_f.bias", {c}, false, static_cast<int>(d.n_layer) + 1);
  return layout;
}

template <class T>
void gpt_init_params(const ParamLayout& layout, const GptDims& d, double init_std,
                     std::uint64_t seed, T* params, std::int64_t lo, std::int64_t hi) {
  transformer_init_params(layout, d.n_layer, init_std, seed, params, lo, hi);
}

template <class T>
Gpt<T>::Gpt(const GptDims& dims, const ParamLayout& layout, double layernorm_eps,
            MemoryTracker& memory, const RecomputeSchedule* schedule, Backend* backend)
    : m_dims(dims), m_layout(layout), m_eps(static_cast<T>(layernorm_eps)) {
  SHARDTRAIN_CHECK(dims.channels % dims.n_head == 0, "n_head must divide channels");
  SHARDTRAIN_CHECK(layout.padded_size() > 0, "layout must be finalized before building the model");
  SHARDTRAIN_CHECK(dims.n_layer >= 1, "a GPT needs at least one block");
  const ChainCosts costs = gpt_chain_costs(dims, sizeof(T));
  // The arena is the schedule's plan as given (what the memory plan reported);
  // the ops are replayed on this chain (a schedule for another chain fails
  // here) and run from the replay. What the ops use of the arena is measured.
  const RecomputeSchedule planned = schedule ? *schedule : *make_recompute_schedule(RecomputePolicy::None, costs);
  m_schedule = planned;
  simulate(costs, m_schedule);
  const auto plan = gpt_activation_plan(dims);
  m_per_block = plan.per_block;
  m_head_elems = plan.head;
  m_stack_capacity = planned.stack_bytes / static_cast<std::int64_t>(sizeof(T));
  m_has_scratch = planned.uses_scratch;
  ModelOpsLimits limits{dims.max_batch, dims.seq_len, dims.channels, dims.n_head, dims.vocab};
  limits.fused_attention = dims.fused_attention;
  limits.flash_attention = dims.flash_attention;
  m_ops = make_model_ops<T>(backend ? *backend : host_backend(), limits, memory);
  m_acts = TrackedBuffer<T>(memory, MemCategory::Activations, gpt_activation_elems(dims, planned),
                            m_ops->memory());
  m_work = TrackedBuffer<T>(memory, MemCategory::Workspace, plan.workspace, m_ops->memory());
  m_ws = transformer_block_workspace(m_work.data(), block_shape());

  const std::int64_t bt = dims.max_batch * dims.seq_len, c = dims.channels;
  T* p = m_acts.data();
  auto carve = [&p](std::int64_t n) { T* r = p; p += n; return r; };
  m_emb_out = carve(bt * c);
  m_stack = carve(m_stack_capacity);
  if (m_has_scratch) {
    m_scratch = carve_block_at(p);
    p += m_per_block;
  }
  m_lnf_mean = carve(bt); m_lnf_rstd = carve(bt); m_lnf_out = carve(bt * c);
  m_logits = carve(bt * dims.vocab);
  m_losses = carve(bt);
  SHARDTRAIN_CHECK(p == m_acts.data() + m_acts.size(), "activation arena carve mismatch");

  const auto& entries = layout.entries();
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(entries.size()) == 2 + kBlockTensors * dims.n_layer + 2,
                   "layout is not a gpt_layout() of these dims");
  for (const auto& e : entries) m_rel.push_back(e.offset - layout.group_range(e.group).first);
}

template <class T>
Gpt<T>::~Gpt() = default;

template <class T>
TransformerBlockShape Gpt<T>::block_shape() const {
  return block_shape_of(m_dims);
}

template <class T>
void Gpt<T>::bind_group(int g, T* base, T*& wte, T*& wpe, T*& lnf_w, T*& lnf_b,
                        std::vector<BlockParams>& blocks) const {
  if (g == 0) {
    wte = base + m_rel[0];
    wpe = base + m_rel[1];
  } else if (g == lnf_group()) {
    const std::size_t e = m_rel.size() - 2;
    lnf_w = base + m_rel[e];
    lnf_b = base + m_rel[e + 1];
  } else {
    blocks[g - 1] = transformer_block_params(base, m_rel.data() + 2 + (g - 1) * kBlockTensors);
  }
}

template <class T>
void Gpt<T>::bind(ParamProvider<T>& provider) {
  m_provider = &provider;
  m_blocks.assign(m_dims.n_layer, BlockParams{});
  m_dblocks.assign(m_dims.n_layer, BlockParams{});
}

template <class T>
void Gpt<T>::bind(T* params, T* grads) {
  m_flat = std::make_unique<FlatParams<T>>(m_layout, params, grads);
  bind(*m_flat);
}

template <class T>
void Gpt<T>::acquire_params(int g) {
  bind_group(g, m_provider->acquire_params(g), m_wte, m_wpe, m_lnf_w, m_lnf_b, m_blocks);
}

template <class T>
void Gpt<T>::acquire_grads(int g) {
  bind_group(g, m_provider->acquire_grads(g), m_dwte, m_dwpe, m_dlnf_w, m_dlnf_b, m_dblocks);
}

template <class T>
double Gpt<T>::forward(const TokenIndex* tokens, const TokenIndex* targets, std::int64_t batch) {
  SHARDTRAIN_CHECK(batch >= 0 && batch <= m_dims.max_batch, "micro-batch larger than planned");
  SHARDTRAIN_CHECK(m_provider != nullptr, "Gpt::forward before bind");
  m_batch = batch; m_forward_done = true;
  const std::int64_t t = m_dims.seq_len, c = m_dims.channels, bt = batch * t, v = m_dims.vocab;
  m_ops->stage_tokens(tokens, targets, bt, &m_tokens, &m_targets);
  // batch == 0 (a rank with no sample in this micro-batch) runs no kernel but
  // makes every provider call, so it takes part in the provider's collectives.
  const bool work = batch > 0;

  // A forward without its backward (evaluation) leaves slots held: start afresh.
  const int n = static_cast<int>(m_dims.n_layer);
  m_int_acts.assign(n, BlockActs{});
  m_int_held.assign(n, 0);
  m_ck_of.assign(n + 1, nullptr);
  m_stack_top = 0;
  m_pass_stack_high = 0;
  m_stack_marks.clear();
  m_head_used = true;

  acquire_params(0);  // kept until the tied LM head has used wte
  m_provider->prefetch(1);
  if (work) m_ops->embedding_forward(m_tokens, m_wte, m_wpe, m_emb_out, batch, t, c, v);
  run_ops(0, static_cast<std::size_t>(m_schedule.forward_ops_in_pass), work, batch);
  const T* x = input_of(n);
  acquire_params(lnf_group());
  if (work)
    m_ops->layernorm_forward(x, m_lnf_w, m_lnf_b, m_lnf_out, m_lnf_mean, m_lnf_rstd, bt, c, m_eps);
  m_provider->release_params(lnf_group());
  if (work) {
    m_ops->linear_forward(m_lnf_out, m_wte, nullptr, m_logits, bt, c, v, false);
    m_ops->cross_entropy_forward(m_logits, m_targets, m_losses, bt, v);
  }
  m_provider->release_params(0);
  return work ? m_ops->sum_losses(m_losses, bt) : 0.0;  // fixed order: deterministic
}

// One block's saved tensors, laid out from `base` (per_block elements).
template <class T>
typename Gpt<T>::BlockActs Gpt<T>::carve_block_at(T* base) const {
  return transformer_block_carve(base, block_shape());
}

template <class T>
const T* Gpt<T>::input_of(int l) const {
  if (l == 0) return m_emb_out;
  if (m_ck_of[l]) return m_ck_of[l];
  SHARDTRAIN_CHECK(m_int_held[l - 1], "recompute: the input of block " + std::to_string(l) + " is not held");
  return m_int_acts[l - 1].out;
}

template <class T>
T* Gpt<T>::stack_push(std::int64_t elems) {
  SHARDTRAIN_CHECK(m_stack_top + elems <= m_stack_capacity,
                   "recompute: activation stack overflow (schedule and arena disagree)");
  m_stack_marks.push_back(m_stack_top);
  T* r = m_stack + m_stack_top;
  m_stack_top += elems;
  m_pass_stack_high = std::max(m_pass_stack_high, m_stack_top);
  m_stack_high = std::max(m_stack_high, m_stack_top);
  return r;
}

template <class T>
void Gpt<T>::stack_pop(const T* region) {
  SHARDTRAIN_CHECK(!m_stack_marks.empty() && m_stack + m_stack_marks.back() == region,
                   "recompute: activation freed out of LIFO order");
  m_stack_top = m_stack_marks.back();
  m_stack_marks.pop_back();
}

template <class T>
std::int64_t Gpt<T>::activation_high_water_bytes() const {
  const std::int64_t elems =
      (m_head_used ? m_head_elems : 0) + m_stack_high + (m_scratch_used ? m_per_block : 0);
  return elems * static_cast<std::int64_t>(sizeof(T));
}

template <class T>
std::int64_t Gpt<T>::stack_high_water_bytes() const {
  return m_stack_high * static_cast<std::int64_t>(sizeof(T));
}

template <class T>
std::int64_t Gpt<T>::last_pass_stack_high_water_bytes() const {
  return m_pass_stack_high * static_cast<std::int64_t>(sizeof(T));
}

template <class T>
int Gpt<T>::next_group(std::size_t k) const {
  const std::size_t fp = static_cast<std::size_t>(m_schedule.forward_ops_in_pass);
  const std::size_t end = k < fp ? fp : m_schedule.ops.size();
  for (std::size_t j = k + 1; j < end; ++j)
    if (m_schedule.ops[j].kind != RecomputeOp::Kind::FreeInput) return m_schedule.ops[j].layer + 1;
  return k < fp ? lnf_group() : -1;  // after the last block: the final LayerNorm / nothing
}

template <class T>
void Gpt<T>::run_ops(std::size_t first, std::size_t last, bool work, std::int64_t batch) {
  const std::int64_t bt_c = m_dims.max_batch * m_dims.seq_len * m_dims.channels;
  for (std::size_t k = first; k < last; ++k) {
    const RecomputeOp& op = m_schedule.ops[k];
    const int l = op.layer;
    switch (op.kind) {
      case RecomputeOp::Kind::Forward: {
        const T* x = input_of(l);
        BlockActs a;
        if (op.keep) {
          T* base = stack_push(m_per_block);
          a = carve_block_at(base);
          m_int_acts[l] = a;
          m_int_held[l] = 1;
        } else {
          SHARDTRAIN_CHECK(m_has_scratch, "recompute: a forward drops its internals but the arena has no scratch "
                                          "block (the schedule's plan says uses_scratch = false)");
          a = m_scratch;  // internals and output to the scratch block
          m_scratch_used = true;
        }
        acquire_params(l + 1);
        if (const int g = next_group(k); g >= 0) m_provider->prefetch(g);
        if (work)
          transformer_block_forward(*m_ops, block_shape(), block_run(batch), m_eps, m_blocks[l], x, a, m_ws);
        m_provider->release_params(l + 1);
        if (!op.keep) {
          // The input goes first when the schedule frees it right away (it is
          // on top), then x_{l+1} moves from the scratch block to the stack.
          if (forward_frees_input(m_schedule.ops, k)) {
            stack_pop(m_ck_of[l]);
            m_ck_of[l] = nullptr;
            ++k;
          }
          m_ck_of[l + 1] = stack_push(bt_c);
          if (work) m_ops->copy(m_scratch.out, m_ck_of[l + 1], batch * m_dims.seq_len * m_dims.channels);
        }
        break;
      }
      case RecomputeOp::Kind::Backward: {
        const T* x = input_of(l);
        acquire_params(l + 1);
        if (const int g = next_group(k); g >= 0) m_provider->prefetch(g);
        acquire_grads(l + 1);
        if (work)
          transformer_block_backward(*m_ops, block_shape(), block_run(batch), m_blocks[l], m_dblocks[l], x,
                                     m_int_acts[l], m_ws, m_provider->grads_zero(l + 1));
        m_provider->grads_ready(l + 1);
        m_provider->release_params(l + 1);
        stack_pop(m_int_acts[l].ln1_mean);
        m_int_held[l] = 0;
        break;
      }
      case RecomputeOp::Kind::FreeInput:
        stack_pop(m_ck_of[l]);
        m_ck_of[l] = nullptr;
        break;
    }
  }
}

template <class T>
void Gpt<T>::backward(T dloss) {
  SHARDTRAIN_CHECK(m_forward_done, "backward without forward");
  const std::int64_t t = m_dims.seq_len, c = m_dims.channels, v = m_dims.vocab;
  const std::int64_t batch = m_batch, bt = batch * t;
  const bool work = batch > 0;  // see forward()
  T* dres = m_ws.dres;  // the blocks' backward reads and writes d(residual) there
  T* dsmall = m_ws.dsmall;

  // Head: logits = ln_f(x_L) wte^T; dlogits overwrite the logits in place.
  if (work) m_ops->cross_entropy_backward(m_logits, m_targets, dloss, m_logits, bt, v);
  acquire_params(0);
  acquire_grads(0);  // wte collects from the LM head now and from the embedding at the end
  // The LM head writes wte's gradient first (the embedding adds to it at the end).
  if (work)
    m_ops->linear_backward(m_lnf_out, m_wte, m_logits, dsmall, m_dwte, nullptr, bt, c, v,
                           /*accumulate=*/!m_provider->grads_zero(0));
  m_provider->release_params(0);

  const std::size_t fp = static_cast<std::size_t>(m_schedule.forward_ops_in_pass);
  const T* x_last = input_of(static_cast<int>(m_dims.n_layer));
  if (work) m_ops->fill(dres, T(0), bt * c);
  acquire_params(lnf_group());
  m_provider->prefetch(next_group(fp - 1));  // the first block the backward ops touch
  acquire_grads(lnf_group());
  if (work)
    m_ops->layernorm_backward(x_last, m_lnf_w, m_lnf_mean, m_lnf_rstd, dsmall, dres, m_dlnf_w,
                              m_dlnf_b, bt, c);
  m_provider->grads_ready(lnf_group());
  m_provider->release_params(lnf_group());
  run_ops(fp, m_schedule.ops.size(), work, batch);
  if (work) m_ops->embedding_backward(m_tokens, dres, m_dwte, m_dwpe, batch, t, c, v);
  m_provider->grads_ready(0);
  m_forward_done = false;
}

template class Gpt<float>;
template class Gpt<double>;
template class Gpt<f16>;
template class Gpt<bf16>;
template void gpt_init_params<f16>(const ParamLayout&, const GptDims&, double, std::uint64_t,
                                   f16*, std::int64_t, std::int64_t);
template void gpt_init_params<bf16>(const ParamLayout&, const GptDims&, double, std::uint64_t,
                                    bf16*, std::int64_t, std::int64_t);
template void gpt_init_params<float>(const ParamLayout&, const GptDims&, double, std::uint64_t,
                                     float*, std::int64_t, std::int64_t);
template void gpt_init_params<double>(const ParamLayout&, const GptDims&, double, std::uint64_t,
                                      double*, std::int64_t, std::int64_t);

}  // namespace shardtrain
