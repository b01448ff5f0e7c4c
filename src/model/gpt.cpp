// Gpt: layout, initialisation, activation plan, forward and backward of the
// GPT decoder. Every op is a ModelOps kernel of the backend; this file only
// wires buffers and parameter groups.
#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "kernels/attention.hpp"  // attention_saved_elems / attention_workspace_elems: the arena layout
#include "kernels/half.hpp"

namespace shardtrain {

namespace {

AttentionShape attention_shape(const GptDims& d, std::int64_t batch) {
  return AttentionShape{batch, d.seq_len, d.channels, d.n_head};
}

AttnShape attn_shape(const GptDims& d, std::int64_t batch) {
  return AttnShape{batch, d.seq_len, d.channels, d.n_head};
}

std::string block_name(int layer, const char* leaf) {
  return "h." + std::to_string(layer) + "." + leaf;
}

}  // namespace

std::int64_t GptActivationPlan::activations() const { return head + n_layer * per_block; }

GptActivationPlan gpt_activation_plan(const GptDims& d) {
  const std::int64_t bt = d.max_batch * d.seq_len, c = d.channels;
  const auto att_shape = attention_shape(d, d.max_batch);
  GptActivationPlan p;
  p.n_layer = d.n_layer;
  // ln1 mean/rstd/out, attention saved, att_out, resid1, ln2 mean/rstd/out, fc_pre, fc_act, out
  p.per_block = 2 * bt + bt * c + attention_saved_elems(att_shape) + bt * c + bt * c + 2 * bt +
                bt * c + 2 * bt * 4 * c + bt * c;
  // embedding output, final LayerNorm mean/rstd/out, logits, losses
  p.head = bt * c + 2 * bt + bt * c + bt * d.vocab + bt;
  // qkv (forward) | attention workspace | dres | dsmall | dbig1 | dbig2
  p.workspace = bt * 3 * c + attention_workspace_elems(att_shape) + bt * c + bt * c +
                2 * bt * 4 * c;
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
  const double block = 2.0 * tokens * 12.0 * cd * cd + 2.0 * tokens * static_cast<double>(d.seq_len) * cd;
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
  for (int l = 0; l < d.n_layer; ++l) {
    const int g = l + 1;
    layout.add(block_name(l, "ln_1.weight"), {c}, false, g);
    layout.add(block_name(l, "ln_1.bias"), {c}, false, g);
    layout.add(block_name(l, "attn.c_attn.weight"), {3 * c, c}, true, g);
    layout.add(block_name(l, "attn.c_attn.bias"), {3 * c}, false, g);
    layout.add(block_name(l, "attn.c_proj.weight"), {c, c}, true, g);
    layout.add(block_name(l, "attn.c_proj.bias"), {c}, false, g);
    layout.add(block_name(l, "ln_2.weight"), {c}, false, g);
    layout.add(block_name(l, "ln_2.bias"), {c}, false, g);
    layout.add(block_name(l, "mlp.c_fc.weight"), {4 * c, c}, true, g);
    layout.add(block_name(l, "mlp.c_fc.bias"), {4 * c}, false, g);
    layout.add(block_name(l, "mlp.c_proj.weight"), {c, 4 * c}, true, g);
    layout.add(block_name(l, "mlp.c_proj.bias"), {c}, false, g);
  }
  layout.add("ln_f.weight", {c}, false, static_cast<int>(d.n_layer) + 1);
  layout.add("ln_f.bias", {c}, false, static_cast<int>(d.n_layer) + 1);
  return layout;
}

template <class T>
void gpt_init_params(const ParamLayout& layout, const GptDims& d, double init_std,
                     std::uint64_t seed, T* params, std::int64_t lo, std::int64_t hi) {
  constexpr std::uint64_t kInitStream = 0x1417;  // "init"
  const double resid_std = init_std / std::sqrt(2.0 * static_cast<double>(d.n_layer));
  for (std::int64_t i = lo; i < hi; ++i) params[i - lo] = T(0);
  for (const auto& e : layout.entries()) {
    const std::int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.numel);
    if (a >= b) continue;
    const bool is_bias = e.name.ends_with(".bias");
    const bool is_ln_weight = e.name.find("ln_") != std::string::npos && !is_bias;
    const bool is_resid_proj = e.name.ends_with("c_proj.weight");
    for (std::int64_t i = a; i < b; ++i) {
      T v;
      if (is_bias) v = T(0);
      else if (is_ln_weight) v = T(1);
      else v = static_cast<T>((is_resid_proj ? resid_std : init_std) *
                              normal(seed, kInitStream, static_cast<std::uint64_t>(i)));
      params[i - lo] = v;
    }
  }
}

template <class T>
Gpt<T>::Gpt(const GptDims& dims, const ParamLayout& layout, double layernorm_eps,
            MemoryTracker& memory, const RecomputeSchedule* schedule, Backend* backend)
    : m_dims(dims), m_layout(layout), m_eps(static_cast<T>(layernorm_eps)) {
  SHARDTRAIN_CHECK(dims.channels % dims.n_head == 0, "n_head must divide channels");
  SHARDTRAIN_CHECK(layout.padded_size() > 0, "layout must be finalized before building the model");
  SHARDTRAIN_CHECK(dims.n_layer >= 1, "a GPT needs at least one block");
  const ChainCosts costs = gpt_chain_costs(dims, sizeof(T));
  m_schedule = schedule ? *schedule : *make_recompute_schedule("none", costs);
  simulate(costs, m_schedule);  // a schedule for another chain fails here
  const auto plan = gpt_activation_plan(dims);
  m_per_block = plan.per_block;
  m_ops = make_model_ops<T>(backend ? *backend : host_backend(),
                            ModelOpsLimits{dims.max_batch, dims.seq_len, dims.channels, dims.n_head, dims.vocab},
                            memory);
  m_acts = TrackedBuffer<T>(memory, MemCategory::Activations, gpt_activation_elems(dims, m_schedule),
                            m_ops->memory());
  m_work = TrackedBuffer<T>(memory, MemCategory::Workspace, plan.workspace, m_ops->memory());

  const std::int64_t bt = dims.max_batch * dims.seq_len, c = dims.channels;
  T* p = m_acts.data();
  auto carve = [&p](std::int64_t n) { T* r = p; p += n; return r; };
  m_emb_out = carve(bt * c);
  m_stack = carve(m_schedule.stack_bytes / static_cast<std::int64_t>(sizeof(T)));
  if (m_schedule.uses_scratch) {
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
typename Gpt<T>::BlockParams Gpt<T>::block_views(T* base, int l) const {
  const std::int64_t c = m_dims.channels;
  const std::int64_t* rel = m_rel.data() + 2 + l * kBlockTensors;  // gpt_layout() order
  auto v1 = [&](int k, std::int64_t n) { return View1<T>(base + rel[k], n); };
  auto v2 = [&](int k, std::int64_t r, std::int64_t n) { return View2<T>(base + rel[k], r, n); };
  BlockParams b;
  b.ln1_w = v1(0, c); b.ln1_b = v1(1, c);
  b.qkv_w = v2(2, 3 * c, c); b.qkv_b = v1(3, 3 * c);
  b.proj_w = v2(4, c, c); b.proj_b = v1(5, c);
  b.ln2_w = v1(6, c); b.ln2_b = v1(7, c);
  b.fc_w = v2(8, 4 * c, c); b.fc_b = v1(9, 4 * c);
  b.fc2_w = v2(10, c, 4 * c); b.fc2_b = v1(11, c);
  return b;
}

template <class T>
void Gpt<T>::bind_group(int g, T* base, View2<T>& wte, View2<T>& wpe, View1<T>& lnf_w,
                        View1<T>& lnf_b, std::vector<BlockParams>& blocks) const {
  const std::int64_t c = m_dims.channels;
  if (g == 0) {
    wte = View2<T>(base + m_rel[0], m_dims.vocab, c);
    wpe = View2<T>(base + m_rel[1], m_dims.seq_len, c);
  } else if (g == lnf_group()) {
    const std::size_t e = m_rel.size() - 2;
    lnf_w = View1<T>(base + m_rel[e], c);
    lnf_b = View1<T>(base + m_rel[e + 1], c);
  } else {
    blocks[g - 1] = block_views(base, g - 1);
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
void Gpt<T>::block_forward(int l, const T* x, const BlockActs& a, std::int64_t batch) {
  const std::int64_t bt = batch * m_dims.seq_len, c = m_dims.channels, t = m_dims.seq_len;
  const BlockParams& p = m_blocks[l];
  ModelOps<T>& ops = *m_ops;
  T* qkv = m_work.data();
  T* att_ws = qkv + m_dims.max_batch * t * 3 * c;

  ops.layernorm_forward(x, p.ln1_w.data(), p.ln1_b.data(), a.ln1_out, a.ln1_mean, a.ln1_rstd, bt, c, m_eps);
  ops.linear_forward(a.ln1_out, p.qkv_w.data(), p.qkv_b.data(), qkv, bt, c, 3 * c, false);
  ops.attention_forward(attn_shape(m_dims, batch), qkv, a.att_saved, att_ws, a.att_out);
  ops.copy(x, a.resid1, bt * c);
  ops.linear_forward(a.att_out, p.proj_w.data(), p.proj_b.data(), a.resid1, bt, c, c, /*accumulate=*/true);
  ops.layernorm_forward(a.resid1, p.ln2_w.data(), p.ln2_b.data(), a.ln2_out, a.ln2_mean, a.ln2_rstd, bt, c, m_eps);
  ops.linear_forward(a.ln2_out, p.fc_w.data(), p.fc_b.data(), a.fc_pre, bt, c, 4 * c, false);
  ops.gelu_forward(a.fc_pre, a.fc_act, bt * 4 * c);
  ops.copy(a.resid1, a.out, bt * c);
  ops.linear_forward(a.fc_act, p.fc2_w.data(), p.fc2_b.data(), a.out, bt, 4 * c, c, /*accumulate=*/true);
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
  m_stack_marks.clear();

  acquire_params(0);  // kept until the tied LM head has used wte
  m_provider->prefetch(1);
  if (work) m_ops->embedding_forward(m_tokens, m_wte.data(), m_wpe.data(), m_emb_out, batch, t, c, v);
  run_ops(0, static_cast<std::size_t>(m_schedule.forward_ops_in_pass), work, batch, nullptr);
  const T* x = input_of(n);
  acquire_params(lnf_group());
  if (work)
    m_ops->layernorm_forward(x, m_lnf_w.data(), m_lnf_b.data(), m_lnf_out, m_lnf_mean, m_lnf_rstd, bt, c, m_eps);
  m_provider->release_params(lnf_group());
  if (work) {
    m_ops->linear_forward(m_lnf_out, m_wte.data(), nullptr, m_logits, bt, c, v, false);
    m_ops->cross_entropy_forward(m_logits, m_targets, m_losses, bt, v);
  }
  m_provider->release_params(0);
  return work ? m_ops->sum_losses(m_losses, bt) : 0.0;  // fixed order: deterministic
}

template <class T>
void Gpt<T>::block_backward(int l, const T* x, const BlockActs& a, std::int64_t batch, T* dres) {
  const std::int64_t t = m_dims.seq_len, c = m_dims.channels, bt = batch * t;
  const std::int64_t bt_max = m_dims.max_batch * t;
  const BlockParams& p = m_blocks[l];
  BlockParams& g = m_dblocks[l];
  ModelOps<T>& ops = *m_ops;
  T* att_ws = m_work.data() + bt_max * 3 * c;  // workspace: qkv | attention | dres | dsmall | dbig1 | dbig2
  T* dsmall = dres + bt_max * c;
  T* dbig1 = dsmall + bt_max * c;
  T* dbig2 = dbig1 + bt_max * 4 * c;

  // out = resid1 + fc2(gelu(fc(ln2(resid1)))); dres holds d out.
  ops.linear_backward(a.fc_act, p.fc2_w.data(), dres, dbig1, g.fc2_w.data(), g.fc2_b.data(), bt, 4 * c, c);
  ops.gelu_backward(a.fc_pre, dbig1, dbig2, bt * 4 * c);
  ops.linear_backward(a.ln2_out, p.fc_w.data(), dbig2, dsmall, g.fc_w.data(), g.fc_b.data(), bt, c, 4 * c);
  ops.layernorm_backward(a.resid1, p.ln2_w.data(), a.ln2_mean, a.ln2_rstd, dsmall, dres, g.ln2_w.data(),
                         g.ln2_b.data(), bt, c);
  // resid1 = x + proj(attention(qkv(ln1(x)))); dres now holds d resid1.
  ops.linear_backward(a.att_out, p.proj_w.data(), dres, dsmall, g.proj_w.data(), g.proj_b.data(), bt, c, c);
  ops.attention_backward(attn_shape(m_dims, batch), a.att_out, dsmall, a.att_saved, att_ws, dbig1);
  ops.linear_backward(a.ln1_out, p.qkv_w.data(), dbig1, dsmall, g.qkv_w.data(), g.qkv_b.data(), bt, c, 3 * c);
  ops.layernorm_backward(x, p.ln1_w.data(), a.ln1_mean, a.ln1_rstd, dsmall, dres, g.ln1_w.data(),
                         g.ln1_b.data(), bt, c);
}

// One block's saved tensors, laid out from `base` (per_block elements).
template <class T>
typename Gpt<T>::BlockActs Gpt<T>::carve_block_at(T* base) const {
  const std::int64_t bt = m_dims.max_batch * m_dims.seq_len, c = m_dims.channels;
  const std::int64_t att_saved = attention_saved_elems(attention_shape(m_dims, m_dims.max_batch));
  T* p = base;
  auto carve = [&p](std::int64_t n) { T* r = p; p += n; return r; };
  BlockActs a;
  a.ln1_mean = carve(bt); a.ln1_rstd = carve(bt); a.ln1_out = carve(bt * c);
  a.att_saved = carve(att_saved);
  a.att_out = carve(bt * c);
  a.resid1 = carve(bt * c);
  a.ln2_mean = carve(bt); a.ln2_rstd = carve(bt); a.ln2_out = carve(bt * c);
  a.fc_pre = carve(bt * 4 * c); a.fc_act = carve(bt * 4 * c);
  a.out = carve(bt * c);
  SHARDTRAIN_CHECK(p - base == m_per_block, "block carve mismatch");
  return a;
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
  SHARDTRAIN_CHECK(m_stack_top + elems <= m_schedule.stack_bytes / static_cast<std::int64_t>(sizeof(T)),
                   "recompute: activation stack overflow (schedule and arena disagree)");
  m_stack_marks.push_back(m_stack_top);
  T* r = m_stack + m_stack_top;
  m_stack_top += elems;
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
int Gpt<T>::next_group(std::size_t k) const {
  const std::size_t fp = static_cast<std::size_t>(m_schedule.forward_ops_in_pass);
  const std::size_t end = k < fp ? fp : m_schedule.ops.size();
  for (std::size_t j = k + 1; j < end; ++j)
    if (m_schedule.ops[j].kind != RecomputeOp::Kind::FreeInput) return m_schedule.ops[j].layer + 1;
  return k < fp ? lnf_group() : -1;  // after the last block: the final LayerNorm / nothing
}

template <class T>
void Gpt<T>::run_ops(std::size_t first, std::size_t last, bool work, std::int64_t batch, T* dres) {
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
          a = m_scratch;  // internals and output to the scratch block
        }
        acquire_params(l + 1);
        if (const int g = next_group(k); g >= 0) m_provider->prefetch(g);
        if (work) block_forward(l, x, a, batch);
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
        if (work) block_backward(l, x, m_int_acts[l], batch, dres);
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
  const std::int64_t batch = m_batch, bt = batch * t, bt_max = m_dims.max_batch * t;
  const bool work = batch > 0;  // see forward()
  T* dres = m_work.data() + bt_max * 3 * c +
            attention_workspace_elems(attention_shape(m_dims, m_dims.max_batch));
  T* dsmall = dres + bt_max * c;

  // Head: logits = ln_f(x_L) wte^T; dlogits overwrite the logits in place.
  if (work) m_ops->cross_entropy_backward(m_logits, m_targets, dloss, m_logits, bt, v);
  acquire_params(0);
  acquire_grads(0);  // wte collects from the LM head now and from the embedding at the end
  if (work) m_ops->linear_backward(m_lnf_out, m_wte.data(), m_logits, dsmall, m_dwte.data(), nullptr, bt, c, v);
  m_provider->release_params(0);

  const std::size_t fp = static_cast<std::size_t>(m_schedule.forward_ops_in_pass);
  const T* x_last = input_of(static_cast<int>(m_dims.n_layer));
  if (work) m_ops->fill(dres, T(0), bt * c);
  acquire_params(lnf_group());
  m_provider->prefetch(next_group(fp - 1));  // the first block the backward ops touch
  acquire_grads(lnf_group());
  if (work)
    m_ops->layernorm_backward(x_last, m_lnf_w.data(), m_lnf_mean, m_lnf_rstd, dsmall, dres, m_dlnf_w.data(),
                              m_dlnf_b.data(), bt, c);
  m_provider->grads_ready(lnf_group());
  m_provider->release_params(lnf_group());
  run_ops(fp, m_schedule.ops.size(), work, batch, dres);
  if (work) m_ops->embedding_backward(m_tokens, dres, m_dwte.data(), m_dwpe.data(), batch, t, c, v);
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
