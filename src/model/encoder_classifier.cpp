// EncoderClassifier: dims check, layout, initialisation, costs, forward and
// backward of the BERT-style classifier in its three layouts (PreLn, Bert,
// Distilbert; encoder_classifier.hpp). The blocks are model/transformer_block
// (shared with the GPT; post-LayerNorm for the BERT family), run as a chain
// under the recompute schedule by model/block_chain (as the GPT's); every op
// is a ModelOps kernel; this file only wires buffers, parameter groups and dropout
// sites.
#include "model/encoder_classifier.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/half.hpp"

namespace shardtrain {

namespace {

// Dropout streams: the embeddings, the head, then two per block (stream, stream + 1).
constexpr std::uint64_t kDropoutStreamEmbedding = 0xE7C0DE00;
constexpr std::uint64_t kDropoutStreamHead = kDropoutStreamEmbedding + 1;
constexpr std::uint64_t kDropoutStreamBlocks = kDropoutStreamEmbedding + 2;

TransformerBlockShape shape_of(const EncoderDims& d) {
  TransformerBlockShape s{d.max_batch, d.seq_len, d.channels, d.n_head};
  s.post_ln = d.layout != EncoderLayout::PreLn;
  return s;
}

struct ActivationElems {
  std::int64_t per_block = 0;  // one block's saved tensors
  std::int64_t kept = 0;       // outside the chain: always kept
  std::int64_t total = 0;      // under "none": kept + every block's
};

ActivationElems activation_elems(const EncoderDims& d) {
  const std::int64_t b = d.max_batch, bt = b * d.seq_len, c = d.channels;
  ActivationElems a;
  a.per_block = transformer_block_saved_elems(shape_of(d));
  switch (d.layout) {
    case EncoderLayout::PreLn:  // emb_out | chain | lnf mean, rstd, out | pooled | logits | losses
      a.kept = bt * c + 2 * bt + bt * c + b * c + b * d.classes + b;
      break;
    case EncoderLayout::Bert:
    case EncoderLayout::Distilbert:  // emb_pre | mean, rstd | emb_out | (ones) | chain | cls, pre, act, pooled | logits | losses
      a.kept = bt * c + 2 * bt + bt * c + (d.layout == EncoderLayout::Bert ? bt : 0) + 4 * b * c + b * d.classes + b;
      break;
  }
  a.total = a.kept + d.n_layer * a.per_block;
  return a;
}

// One sample's forward FLOPs outside the blocks: the head (and the pooler /
// pre-classifier of the BERT family).
double head_forward_flops(const EncoderDims& d) {
  const double cd = static_cast<double>(d.channels);
  return 2.0 * cd * static_cast<double>(d.classes) + (d.layout != EncoderLayout::PreLn ? 2.0 * cd * cd : 0.0);
}

}  // namespace

void encoder_check_dims(const EncoderDims& d) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw InputError("encoder_classifier: " + what);
  };
  need(d.vocab >= 1, "vocab must be >= 1 (got " + std::to_string(d.vocab) + ")");
  need(d.seq_len >= 1, "seq_len must be >= 1 (got " + std::to_string(d.seq_len) + ")");
  need(d.n_layer >= 1, "n_layer must be >= 1 (got " + std::to_string(d.n_layer) + ")");
  need(d.channels >= 1, "d_model (channels) must be >= 1 (got " + std::to_string(d.channels) + ")");
  need(d.n_head >= 1, "n_head must be >= 1 (got " + std::to_string(d.n_head) + ")");
  need(d.channels % d.n_head == 0, "n_head " + std::to_string(d.n_head) + " does not divide d_model " +
                                       std::to_string(d.channels));
  need(d.classes >= 2, "classes must be >= 2 (got " + std::to_string(d.classes) + ")");
  need(d.max_batch >= 1, "micro-batch must be >= 1 (got " + std::to_string(d.max_batch) + ")");
  need(d.dropout >= 0.0 && d.dropout < 1.0, "dropout must be in [0, 1) (got " + std::to_string(d.dropout) + ")");
  need(d.positions == 0 || d.positions >= d.seq_len,
       "max_positions " + std::to_string(d.positions) + " is below the sequence length " + std::to_string(d.seq_len));
  need(d.layout == EncoderLayout::PreLn || d.pooling == Pooling::Cls,
       std::string("layout \"") + std::string(name_of(d.layout)) +
           "\" reads the [CLS] position (its head is Hugging Face's); use pooling = \"cls\"");
}

int encoder_embedding_tensors(const EncoderDims& d) {
  switch (d.layout) {
    case EncoderLayout::PreLn: return 2;
    case EncoderLayout::Bert: return 5;
    case EncoderLayout::Distilbert: return 4;
  }
  return 2;
}

ParamLayout encoder_layout(const EncoderDims& d) {
  encoder_check_dims(d);
  const std::int64_t c = d.channels;
  ParamLayout layout;
  layout.add("wte.weight", {d.vocab, c}, false, 0);
  layout.add("wpe.weight", {encoder_positions(d), c}, false, 0);
  if (d.layout == EncoderLayout::Bert) layout.add("wtt.weight", {kBertTypeVocab, c}, false, 0);
  if (d.layout != EncoderLayout::PreLn) {
    layout.add("ln_emb.weight", {c}, false, 0);
    layout.add("ln_emb.bias", {c}, false, 0);
  }
  for (int l = 0; l < d.n_layer; ++l) add_transformer_block_params(layout, l, l + 1, c);
  const int g = static_cast<int>(d.n_layer) + 1;
  switch (d.layout) {
    case EncoderLayout::PreLn:
      layout.add("ln_f.weight", {c}, false, g);
      layout.add("ln_f.bias", {c}, false, g);
      break;
    case EncoderLayout::Bert:
      layout.add("pooler.weight", {c, c}, true, g);
      layout.add("pooler.bias", {c}, false, g);
      break;
    case EncoderLayout::Distilbert:
      layout.add("pre_classifier.weight", {c, c}, true, g);
      layout.add("pre_classifier.bias", {c}, false, g);
      break;
  }
  layout.add("head.weight", {d.classes, c}, true, g);
  layout.add("head.bias", {d.classes}, false, g);
  return layout;
}

template <class T>
void encoder_init_params(const ParamLayout& layout, const EncoderDims& d, double init_std, std::uint64_t seed,
                         T* params, std::int64_t lo, std::int64_t hi) {
  transformer_init_params(layout, d.n_layer, init_std, seed, params, lo, hi);
}

ModelOpsLimits encoder_ops_limits(const EncoderDims& d) {
  ModelOpsLimits l{d.max_batch, d.seq_len, d.channels, d.n_head, d.vocab};
  // The head: Linear(C, K) over B rows and cross-entropy over K classes.
  l.half_scratch_elems = std::max(op_sizes::linear_half_scratch(d.max_batch, d.channels, d.classes),
                                  op_sizes::cross_entropy_half_scratch(d.classes));
  // The BERT family's pooler / pre-classifier Linear(C, C) and Bert's token-type
  // row, a Linear of k = 1 over every token.
  if (d.layout != EncoderLayout::PreLn)
    l.half_scratch_elems = std::max({l.half_scratch_elems, op_sizes::linear_half_scratch(d.max_batch, d.channels, d.channels),
                                     op_sizes::linear_half_scratch(d.max_batch * d.seq_len, 1, d.channels)});
  return l;
}

template <class T>
ClassifierCosts encoder_costs(const EncoderDims& d) {
  ClassifierCosts costs;
  const auto elem = static_cast<std::int64_t>(sizeof(T));
  const ActivationElems a = activation_elems(d);
  costs.activation_bytes = a.total * elem;
  costs.kept_activation_bytes = a.kept * elem;
  costs.workspace_bytes = transformer_block_workspace_elems(shape_of(d)) * elem;
  if constexpr (is_half_v<T>)
    costs.workspace_bytes += host_half_scratch_elems(encoder_ops_limits(d)) * static_cast<std::int64_t>(sizeof(float));
  costs.forward_flops = static_cast<double>(d.n_layer) *
                            transformer_block_forward_flops(static_cast<double>(d.seq_len), d.seq_len, d.channels,
                                                            /*causal=*/false) +
                        head_forward_flops(d);
  costs.chain = transformer_chain_costs(shape_of(d), d.n_layer, elem, /*causal=*/false);
  costs.chain.other_forward_flops = head_forward_flops(d) * static_cast<double>(d.max_batch);
  return costs;
}

template <class T>
std::int64_t encoder_activation_bytes(const EncoderDims& d, const RecomputeSchedule& schedule) {
  const ActivationElems a = activation_elems(d);
  return (a.kept + block_chain_elems(a.per_block, schedule)) * static_cast<std::int64_t>(sizeof(T));
}

template <class T>
EncoderClassifier<T>::EncoderClassifier(const EncoderDims& dims, const ParamLayout& layout, double layernorm_eps,
                                        MemoryTracker& memory, const RecomputeSchedule* schedule, Backend* backend)
    : m_dims(dims), m_layout(layout), m_eps(static_cast<T>(layernorm_eps)),
      m_backend(backend ? *backend : host_backend()),
      m_chain((encoder_check_dims(dims), shape_of(dims)), dims.n_layer, /*causal=*/false, schedule) {
  SHARDTRAIN_CHECK(layout.padded_size() > 0, "layout must be finalized before building the model");
  const auto& entries = layout.entries();
  m_emb_tensors = encoder_embedding_tensors(dims);
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(entries.size()) ==
                       m_emb_tensors + kTransformerBlockTensors * dims.n_layer + 4,
                   "layout is not an encoder_layout() of these dims");
  for (const auto& e : entries) m_rel.push_back(e.offset - layout.group_range(e.group).first);
  m_ops = make_model_ops<T>(m_backend, encoder_ops_limits(dims), memory);
  m_kept_elems = activation_elems(dims).kept;
  m_acts = TrackedBuffer<T>(memory, MemCategory::Activations, m_kept_elems + m_chain.arena_elems(), m_ops->memory());
  m_work = TrackedBuffer<T>(memory, MemCategory::Workspace, transformer_block_workspace_elems(block_shape()),
                            m_ops->memory());
  m_ws = transformer_block_workspace(m_work.data(), block_shape());
  const std::int64_t b = dims.max_batch, bt = b * dims.seq_len, c = dims.channels;
  T* p = m_acts.data();
  auto carve = [&p](std::int64_t n) { T* r = p; p += n; return r; };
  if (bert_family()) {
    m_emb_pre = carve(bt * c); m_emb_mean = carve(bt); m_emb_rstd = carve(bt);
  }
  m_emb_out = carve(bt * c);
  if (dims.layout == EncoderLayout::Bert) {
    m_ones = carve(bt);
    m_ops->fill(m_ones, T(1), bt);
  }
  m_chain.carve(carve(m_chain.arena_elems()));
  if (bert_family()) {
    m_cls = carve(b * c); m_pre = carve(b * c); m_act = carve(b * c);
  } else {
    m_lnf_mean = carve(bt); m_lnf_rstd = carve(bt); m_lnf_out = carve(bt * c);
  }
  m_pooled = carve(b * c);
  m_logits = carve(b * dims.classes);
  m_losses = carve(b);
  SHARDTRAIN_CHECK(p == m_acts.data() + m_acts.size(), "activation arena carve mismatch");
  m_label_rows.assign(static_cast<std::size_t>(bt), TokenIndex(-1));
  m_cls_lengths.assign(static_cast<std::size_t>(b), 1);
}

template <class T>
TransformerBlockShape EncoderClassifier<T>::block_shape() const { return shape_of(m_dims); }

template <class T>
TransformerBlockRun EncoderClassifier<T>::block_run() const {
  TransformerBlockRun run;
  run.batch = m_batch;
  run.causal = false;
  run.lengths = m_lengths;
  run.dropout = m_dims.dropout;
  run.training = m_training;
  run.seed = m_dims.dropout_seed;
  run.stream = kDropoutStreamBlocks;  // block l: + 2 l (BlockChain)
  run.first_sample = m_first_sample;
  return run;
}

template <class T>
std::int64_t EncoderClassifier<T>::activation_high_water_bytes() const {
  if (!m_forward_ran) return 0;
  const std::int64_t elems =
      m_kept_elems + m_chain.stack_high_elems() + (m_chain.scratch_used() ? m_chain.block_elems() : 0);
  return elems * static_cast<std::int64_t>(sizeof(T));
}

template <class T>
DropoutParams EncoderClassifier<T>::dropout_site(std::uint64_t stream, std::int64_t elems_per_sample) const {
  DropoutParams d;
  d.p = m_dims.dropout;
  d.seed = m_dims.dropout_seed;
  d.stream = stream;
  d.offset = m_first_sample * static_cast<std::uint64_t>(elems_per_sample);
  d.training = m_training;
  return d;
}

template <class T>
const std::int32_t* EncoderClassifier<T>::pool_lengths() const {
  return m_dims.pooling == EncoderDims::Pooling::Mean ? m_lengths : m_cls_lengths.data();
}

template <class T>
void EncoderClassifier<T>::embed_forward(T* base, bool drop) {
  const std::int64_t batch = m_batch, t = m_dims.seq_len, c = m_dims.channels, bt = batch * t;
  if (!bert_family()) {
    m_ops->embedding_forward(m_tokens, rel(base, 0), rel(base, 1), m_emb_out, batch, t, c, m_dims.vocab);
  } else {
    m_ops->embedding_forward(m_tokens, rel(base, 0), rel(base, 1), m_emb_pre, batch, t, c, m_dims.vocab);
    if (m_dims.layout == EncoderLayout::Bert)  // + wtt row 0: ones (BT, 1) times the row as (C, 1)
      m_ops->linear_forward(m_ones, rel(base, 2), nullptr, m_emb_pre, bt, 1, c, /*accumulate=*/true);
    const std::size_t ln = static_cast<std::size_t>(m_emb_tensors) - 2;
    m_ops->layernorm_forward(m_emb_pre, rel(base, ln), rel(base, ln + 1), m_emb_out, m_emb_mean, m_emb_rstd, bt, c,
                             m_eps);
  }
  if (drop) m_ops->dropout_forward(dropout_site(kDropoutStreamEmbedding, t * c), m_emb_out, m_emb_out, bt * c);
}

// m_ws.dres holds d(emb_out) on entry.
template <class T>
void EncoderClassifier<T>::embed_backward(T* base, T* eg, bool drop) {
  const std::int64_t batch = m_batch, t = m_dims.seq_len, c = m_dims.channels, bt = batch * t;
  if (drop) m_ops->dropout_backward(dropout_site(kDropoutStreamEmbedding, t * c), m_ws.dres, m_ws.dres, bt * c);
  const T* demb = m_ws.dres;
  if (bert_family()) {
    const std::size_t ln = static_cast<std::size_t>(m_emb_tensors) - 2;
    m_ops->fill(m_ws.dsmall, T(0), bt * c);
    m_ops->layernorm_backward(m_emb_pre, rel(base, ln), m_emb_mean, m_emb_rstd, m_ws.dres, m_ws.dsmall, rel(eg, ln),
                              rel(eg, ln + 1), bt, c);
    if (m_dims.layout == EncoderLayout::Bert)  // d wtt row 0 += column sums
      m_ops->linear_backward(m_ones, rel(base, 2), m_ws.dsmall, nullptr, rel(eg, 2), nullptr, bt, 1, c,
                             /*accumulate=*/true);
    demb = m_ws.dsmall;
  }
  m_ops->embedding_backward(m_tokens, demb, rel(eg, 0), rel(eg, 1), batch, t, c, m_dims.vocab);
}

// x: the last block's output (B, T, C). Writes m_logits.
template <class T>
void EncoderClassifier<T>::head_forward(const T* x, T* hb, bool drop) {
  const std::int64_t batch = m_batch, t = m_dims.seq_len, c = m_dims.channels, bt = batch * t;
  const std::size_t e = m_rel.size() - 4;  // ln_f / pooler / pre_classifier weight, bias; head weight, bias
  const DropoutParams site = dropout_site(kDropoutStreamHead, c);
  switch (m_dims.layout) {
    case EncoderLayout::PreLn:
      m_ops->layernorm_forward(x, rel(hb, e), rel(hb, e + 1), m_lnf_out, m_lnf_mean, m_lnf_rstd, bt, c, m_eps);
      m_ops->seq_mean_pool_forward(m_lnf_out, pool_lengths(), m_pooled, batch, t, c);
      if (drop) m_ops->dropout_forward(site, m_pooled, m_pooled, batch * c);
      break;
    case EncoderLayout::Bert:
    case EncoderLayout::Distilbert:
      m_ops->seq_mean_pool_forward(x, m_cls_lengths.data(), m_cls, batch, t, c);  // the [CLS] rows
      m_ops->linear_forward(m_cls, rel(hb, e), rel(hb, e + 1), m_pre, batch, c, c, false);
      if (m_dims.layout == EncoderLayout::Bert) m_ops->tanh_forward(m_pre, m_act, batch * c);
      else m_ops->relu_forward(m_pre, m_act, batch * c);
      if (drop) m_ops->dropout_forward(site, m_act, m_pooled, batch * c);
      else m_ops->copy(m_act, m_pooled, batch * c);
      break;
  }
  m_ops->linear_forward(m_pooled, rel(hb, e + 2), rel(hb, e + 3), m_logits, batch, c, m_dims.classes, false);
}

// m_logits holds dlogits on entry; leaves d(x_L) in m_ws.dres.
template <class T>
void EncoderClassifier<T>::head_backward(T* hb, T* hg, bool drop, bool acc) {
  const std::int64_t batch = m_batch, t = m_dims.seq_len, c = m_dims.channels, bt = batch * t;
  const std::size_t e = m_rel.size() - 4;
  const DropoutParams site = dropout_site(kDropoutStreamHead, c);
  T* dpooled = m_ws.dbig1;
  m_ops->linear_backward(m_pooled, rel(hb, e + 2), m_logits, dpooled, rel(hg, e + 2), rel(hg, e + 3), batch, c,
                         m_dims.classes, acc);
  if (drop) m_ops->dropout_backward(site, dpooled, dpooled, batch * c);
  switch (m_dims.layout) {
    case EncoderLayout::PreLn: {
      m_ops->seq_mean_pool_backward(dpooled, pool_lengths(), m_ws.dsmall, batch, t, c);
      m_ops->fill(m_ws.dres, T(0), bt * c);
      const T* x_last = m_chain.output();
      m_ops->layernorm_backward(x_last, rel(hb, e), m_lnf_mean, m_lnf_rstd, m_ws.dsmall, m_ws.dres, rel(hg, e),
                                rel(hg, e + 1), bt, c);
      break;
    }
    case EncoderLayout::Bert:
    case EncoderLayout::Distilbert:
      if (m_dims.layout == EncoderLayout::Bert) m_ops->tanh_backward(m_act, dpooled, dpooled, batch * c);
      else m_ops->relu_backward(m_pre, dpooled, dpooled, batch * c);
      m_ops->linear_backward(m_cls, rel(hb, e), dpooled, m_ws.dbig2, rel(hg, e), rel(hg, e + 1), batch, c, c, acc);
      m_ops->seq_mean_pool_backward(m_ws.dbig2, m_cls_lengths.data(), m_ws.dres, batch, t, c);
      break;
  }
}

template <class T>
void EncoderClassifier<T>::bind(ParamProvider<T>& provider) {
  m_provider = &provider;
  // Block l's tensors follow the embeddings'; after the last block's forward
  // the head's group is next, after the first block's backward the embeddings'.
  m_chain.bind(*m_ops, provider, m_rel.data() + m_emb_tensors, m_eps, m_ws, head_group(), 0);
}

template <class T>
void EncoderClassifier<T>::bind(T* params, T* grads) {
  m_flat = std::make_unique<FlatParams<T>>(m_layout, params, grads);
  bind(*m_flat);
}

template <class T>
double EncoderClassifier<T>::forward(const SampleBatch& sb) {
  const std::int64_t batch = sb.batch, t = m_dims.seq_len;
  SHARDTRAIN_CHECK(batch >= 0 && batch <= m_dims.max_batch, "micro-batch larger than planned");
  SHARDTRAIN_CHECK(m_provider != nullptr, "EncoderClassifier::forward before bind");
  const bool work = batch > 0;
  const std::int64_t bt = batch * t;
  m_batch = batch;
  m_training = sb.training;
  m_first_sample = sb.first_sample;
  m_forward_done = m_forward_ran = true;
  const bool drop = m_dims.dropout > 0.0 && m_training;
  if (work) {
    SHARDTRAIN_CHECK(sb.tokens && sb.lengths && sb.labels, "EncoderClassifier::forward: tokens, lengths and labels are required");
    for (std::int64_t r = 0; r < batch; ++r)
      SHARDTRAIN_CHECK(sb.lengths[r] >= 1 && sb.lengths[r] <= t,
                       "EncoderClassifier: lengths[" + std::to_string(r) + "] = " + std::to_string(sb.lengths[r]) +
                           " is not in [1, " + std::to_string(t) + "]");
    m_lengths = sb.lengths;
    std::copy(sb.labels, sb.labels + batch, m_label_rows.begin());
    m_ops->stage_tokens(sb.tokens, m_label_rows.data(), bt, &m_tokens, &m_labels);
  }
  T* base = m_provider->acquire_params(0);
  m_provider->prefetch(1);
  if (work) embed_forward(base, drop);
  m_provider->release_params(0);
  m_chain.forward(m_emb_out, block_run(), work);
  const T* x = m_chain.output();
  T* hb = m_provider->acquire_params(head_group());
  if (work) head_forward(x, hb, drop);
  m_provider->release_params(head_group());
  if (!work) return 0.0;
  m_ops->cross_entropy_forward(m_logits, m_labels, m_losses, batch, m_dims.classes);
  return m_ops->sum_losses(m_losses, batch);
}

template <class T>
void EncoderClassifier<T>::logits(std::vector<float>& out) const {
  logits_to_host(m_backend, m_logits, m_batch * m_dims.classes, out);
}

template <class T>
void EncoderClassifier<T>::backward(T dloss) {
  SHARDTRAIN_CHECK(m_forward_done, "backward without forward");
  const std::int64_t batch = m_batch;
  const bool work = batch > 0, drop = m_dims.dropout > 0.0 && m_training;
  // Head: dlogits overwrite the logits; d(x_L) in dres (the blocks' backward
  // carries it down).
  if (work) m_ops->cross_entropy_backward(m_logits, m_labels, dloss, m_logits, batch, m_dims.classes);
  T* hb = m_provider->acquire_params(head_group());
  m_provider->prefetch(m_chain.first_backward_group());
  T* hg = m_provider->acquire_grads(head_group());
  if (work) head_backward(hb, hg, drop, /*acc=*/!m_provider->grads_zero(head_group()));
  m_provider->grads_ready(head_group());
  m_provider->release_params(head_group());
  m_chain.backward();  // d(x_L) in dres -> d(x_0)
  T* eb = m_provider->acquire_params(0);
  T* eg = m_provider->acquire_grads(0);
  if (work) embed_backward(eb, eg, drop);
  m_provider->grads_ready(0);
  m_provider->release_params(0);
  m_forward_done = false;
}

template class EncoderClassifier<float>;
template class EncoderClassifier<double>;
template class EncoderClassifier<f16>;
template class EncoderClassifier<bf16>;
#define SHARDTRAIN_INSTANTIATE_ENCODER(T)                                                                    \
  template void encoder_init_params<T>(const ParamLayout&, const EncoderDims&, double, std::uint64_t, T*, \
                                       std::int64_t, std::int64_t);                                        \
  template ClassifierCosts encoder_costs<T>(const EncoderDims&);                                           \
  template std::int64_t encoder_activation_bytes<T>(const EncoderDims&, const RecomputeSchedule&);
SHARDTRAIN_INSTANTIATE_ENCODER(float)
SHARDTRAIN_INSTANTIATE_ENCODER(double)
SHARDTRAIN_INSTANTIATE_ENCODER(f16)
SHARDTRAIN_INSTANTIATE_ENCODER(bf16)
#undef SHARDTRAIN_INSTANTIATE_ENCODER

}  // namespace shardtrain
