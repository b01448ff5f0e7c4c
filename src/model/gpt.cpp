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
  s.gelu_epilogue = d.gelu_epilogue;
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
  ChainCosts costs = transformer_chain_costs(block_shape_of(d), d.n_layer, element_bytes, /*causal=*/true);
  const double tokens = static_cast<double>(d.max_batch * d.seq_len);
  costs.other_forward_flops = 2.0 * tokens * static_cast<double>(d.channels) * static_cast<double>(d.vocab);  // LM head
  return costs;
}

std::int64_t gpt_activation_elems(const GptDims& d, const RecomputeSchedule& s) {
  const auto p = gpt_activation_plan(d);
  return p.head + block_chain_elems(p.per_block, s);
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
    : m_dims(dims), m_layout(layout), m_eps(static_cast<T>(layernorm_eps)),
      m_chain(block_shape_of(dims), dims.n_layer, /*causal=*/true, schedule) {
  SHARDTRAIN_CHECK(dims.channels % dims.n_head == 0, "n_head must divide channels");
  SHARDTRAIN_CHECK(layout.padded_size() > 0, "layout must be finalized before building the model");
  const auto plan = gpt_activation_plan(dims);
  m_head_elems = plan.head;
  ModelOpsLimits limits{dims.max_batch, dims.seq_len, dims.channels, dims.n_head, dims.vocab};
  limits.fused_attention = dims.fused_attention;
  limits.flash_attention = dims.flash_attention;
  m_ops = make_model_ops<T>(backend ? *backend : host_backend(), limits, memory);
  m_acts = TrackedBuffer<T>(memory, MemCategory::Activations, m_head_elems + m_chain.arena_elems(), m_ops->memory());
  m_work = TrackedBuffer<T>(memory, MemCategory::Workspace, plan.workspace, m_ops->memory());
  m_ws = transformer_block_workspace(m_work.data(), block_shape_of(dims));

  const std::int64_t bt = dims.max_batch * dims.seq_len, c = dims.channels;
  T* p = m_acts.data();
  auto carve = [&p](std::int64_t n) { T* r = p; p += n; return r; };
  m_emb_out = carve(bt * c);
  m_chain.carve(carve(m_chain.arena_elems()));
  m_lnf_mean = carve(bt); m_lnf_rstd = carve(bt); m_lnf_out = carve(bt * c);
  m_logits = carve(bt * dims.vocab);
  m_losses = carve(bt);
  SHARDTRAIN_CHECK(p == m_acts.data() + m_acts.size(), "activation arena carve mismatch");

  const auto& entries = layout.entries();
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(entries.size()) == 2 + kTransformerBlockTensors * dims.n_layer + 2,
                   "layout is not a gpt_layout() of these dims");
  for (const auto& e : entries) m_rel.push_back(e.offset - layout.group_range(e.group).first);
}

template <class T>
Gpt<T>::~Gpt() = default;

template <class T>
void Gpt<T>::bind_group(int g, T* base, T*& wte, T*& wpe, T*& lnf_w, T*& lnf_b) const {
  if (g == 0) {
    wte = base + m_rel[0];
    wpe = base + m_rel[1];
  } else {
    SHARDTRAIN_CHECK(g == lnf_group(), "Gpt: the blocks' groups are the chain's");
    const std::size_t e = m_rel.size() - 2;
    lnf_w = base + m_rel[e];
    lnf_b = base + m_rel[e + 1];
  }
}

template <class T>
void Gpt<T>::bind(ParamProvider<T>& provider) {
  m_provider = &provider;
  // Block l's tensors follow the embeddings' two; after the last block's
  // forward the final LayerNorm's group is next, after its backward nothing.
  m_chain.bind(*m_ops, provider, m_rel.data() + 2, m_eps, m_ws, lnf_group(), -1);
}

template <class T>
void Gpt<T>::bind(T* params, T* grads) {
  m_flat = std::make_unique<FlatParams<T>>(m_layout, params, grads);
  bind(*m_flat);
}

template <class T>
void Gpt<T>::acquire_params(int g) {
  bind_group(g, m_provider->acquire_params(g), m_wte, m_wpe, m_lnf_w, m_lnf_b);
}

template <class T>
void Gpt<T>::acquire_grads(int g) {
  bind_group(g, m_provider->acquire_grads(g), m_dwte, m_dwpe, m_dlnf_w, m_dlnf_b);
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
  m_head_used = true;

  acquire_params(0);  // kept until the tied LM head has used wte
  m_provider->prefetch(1);
  if (work) m_ops->embedding_forward(m_tokens, m_wte, m_wpe, m_emb_out, batch, t, c, v);
  m_chain.forward(m_emb_out, block_run(batch), work);
  const T* x = m_chain.output();
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

template <class T>
std::int64_t Gpt<T>::activation_high_water_bytes() const {
  const std::int64_t elems = (m_head_used ? m_head_elems : 0) + m_chain.stack_high_elems() +
                             (m_chain.scratch_used() ? m_chain.block_elems() : 0);
  return elems * static_cast<std::int64_t>(sizeof(T));
}

template <class T>
std::int64_t Gpt<T>::stack_high_water_bytes() const {
  return m_chain.stack_high_elems() * static_cast<std::int64_t>(sizeof(T));
}

template <class T>
std::int64_t Gpt<T>::last_pass_stack_high_water_bytes() const {
  return m_chain.pass_stack_high_elems() * static_cast<std::int64_t>(sizeof(T));
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

  const T* x_last = m_chain.output();
  if (work) m_ops->fill(dres, T(0), bt * c);
  acquire_params(lnf_group());
  m_provider->prefetch(m_chain.first_backward_group());  // the first block the backward ops touch
  acquire_grads(lnf_group());
  if (work)
    m_ops->layernorm_backward(x_last, m_lnf_w, m_lnf_mean, m_lnf_rstd, dsmall, dres, m_dlnf_w,
                              m_dlnf_b, bt, c);
  m_provider->grads_ready(lnf_group());
  m_provider->release_params(lnf_group());
  m_chain.backward();
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
