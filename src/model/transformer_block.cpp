// The transformer block (transformer_block.hpp), pre- and post-LayerNorm:
// parameter table, initialisation, activation/workspace layouts, forward and
// backward.
// Every op is a ModelOps kernel; this file only wires buffers.
#include "model/transformer_block.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/half.hpp"

namespace shardtrain {

namespace {

// The attention of a micro-batch of `batch` sequences, for sizing its buffers.
AttnShape attention_shape(const TransformerBlockShape& s, std::int64_t batch) {
  AttnShape a{batch, s.seq_len, s.channels, s.n_head};
  a.fused = s.fused_attention;
  a.flash = s.flash_attention;
  return a;
}

AttnShape attn_shape(const TransformerBlockShape& s, const TransformerBlockRun& run) {
  AttnShape a{run.batch, s.seq_len, s.channels, s.n_head, run.causal, run.lengths};
  a.fused = s.fused_attention;
  a.flash = s.flash_attention;
  return a;
}

// Dropout site k (0: after the attention projection, 1: after fc2) of a block.
DropoutParams site(const TransformerBlockShape& s, const TransformerBlockRun& run, std::uint64_t k) {
  DropoutParams d;
  d.p = run.dropout;
  d.seed = run.seed;
  d.stream = run.stream + k;
  d.offset = run.first_sample * static_cast<std::uint64_t>(s.seq_len * s.channels);
  d.training = run.training;
  return d;
}


// The post-LayerNorm block (BERT family): see transformer_block.hpp.
template <class T>
void post_ln_forward(ModelOps<T>& ops, const TransformerBlockShape& s, const TransformerBlockRun& run, T eps,
                     const TransformerBlockParams<T>& p, const T* x, const TransformerBlockActs<T>& a,
                     const TransformerBlockWork<T>& w) {
  const std::int64_t bt = run.batch * s.seq_len, c = s.channels;
  const bool drop = run.dropout_active();
  ops.linear_forward(x, p.qkv_w, p.qkv_b, w.qkv, bt, c, 3 * c, false);
  ops.attention_forward(attn_shape(s, run), w.qkv, a.att_saved, w.att, a.att_out);
  // resid1 = x + drop(proj(att_out)); h1 = ln_1(resid1)
  if (drop) {
    ops.linear_forward(a.att_out, p.proj_w, p.proj_b, w.dsmall, bt, c, c, false);
    ops.dropout_forward(site(s, run, 0), w.dsmall, w.dsmall, bt * c);
    ops.copy(x, a.resid1, bt * c);
    ops.accumulate(w.dsmall, a.resid1, bt * c);
  } else {
    ops.copy(x, a.resid1, bt * c);
    ops.linear_forward(a.att_out, p.proj_w, p.proj_b, a.resid1, bt, c, c, /*accumulate=*/true);
  }
  ops.layernorm_forward(a.resid1, p.ln1_w, p.ln1_b, a.ln1_out, a.ln1_mean, a.ln1_rstd, bt, c, eps);
  // resid2 (in ln2_out) = h1 + drop(fc2(gelu_erf(fc(h1)))); out = ln_2(resid2)
  ops.linear_forward(a.ln1_out, p.fc_w, p.fc_b, a.fc_pre, bt, c, 4 * c, false);
  ops.gelu_erf_forward(a.fc_pre, a.fc_act, bt * 4 * c);
  if (drop) {
    ops.linear_forward(a.fc_act, p.fc2_w, p.fc2_b, w.dsmall, bt, 4 * c, c, false);
    ops.dropout_forward(site(s, run, 1), w.dsmall, w.dsmall, bt * c);
    ops.copy(a.ln1_out, a.ln2_out, bt * c);
    ops.accumulate(w.dsmall, a.ln2_out, bt * c);
  } else {
    ops.copy(a.ln1_out, a.ln2_out, bt * c);
    ops.linear_forward(a.fc_act, p.fc2_w, p.fc2_b, a.ln2_out, bt, 4 * c, c, /*accumulate=*/true);
  }
  ops.layernorm_forward(a.ln2_out, p.ln2_w, p.ln2_b, a.out, a.ln2_mean, a.ln2_rstd, bt, c, eps);
}

// dres: d out on entry, d x on return. Buffers: dsmall d resid2, then d resid1;
// dres d h1 between the LayerNorms; dbig1 / dbig2 the FFN's and attention's.
template <class T>
void post_ln_backward(ModelOps<T>& ops, const TransformerBlockShape& s, const TransformerBlockRun& run,
                      const TransformerBlockParams<T>& p, const TransformerBlockParams<T>& g, const T* x,
                      const TransformerBlockActs<T>& a, const TransformerBlockWork<T>& w, bool acc) {
  const std::int64_t bt = run.batch * s.seq_len, c = s.channels;
  const bool drop = run.dropout_active();
  // out = ln_2(resid2): dsmall = d resid2 (layernorm_backward adds into dx).
  ops.fill(w.dsmall, T(0), bt * c);
  ops.layernorm_backward(a.ln2_out, p.ln2_w, a.ln2_mean, a.ln2_rstd, w.dres, w.dsmall, g.ln2_w, g.ln2_b, bt, c);
  // resid2 = h1 + drop(fc2(gelu(fc(h1)))): dres = d h1 = d resid2 + the FFN's.
  const T* dfc2 = w.dsmall;
  if (drop) {
    ops.dropout_backward(site(s, run, 1), w.dsmall, w.dres, bt * c);
    dfc2 = w.dres;
  }
  ops.linear_backward(a.fc_act, p.fc2_w, dfc2, w.dbig1, g.fc2_w, g.fc2_b, bt, 4 * c, c, acc);
  ops.gelu_erf_backward(a.fc_pre, w.dbig1, w.dbig2, bt * 4 * c);
  ops.linear_backward(a.ln1_out, p.fc_w, w.dbig2, w.dres, g.fc_w, g.fc_b, bt, c, 4 * c, acc);
  ops.accumulate(w.dsmall, w.dres, bt * c);
  // h1 = ln_1(resid1): dsmall = d resid1.
  ops.fill(w.dsmall, T(0), bt * c);
  ops.layernorm_backward(a.resid1, p.ln1_w, a.ln1_mean, a.ln1_rstd, w.dres, w.dsmall, g.ln1_w, g.ln1_b, bt, c);
  // resid1 = x + drop(proj(attention(qkv(x)))): dres = d x = d resid1 + the attention's.
  const T* dproj = w.dsmall;
  if (drop) {
    ops.dropout_backward(site(s, run, 0), w.dsmall, w.dbig2, bt * c);  // dbig2 is free again
    dproj = w.dbig2;
  }
  ops.linear_backward(a.att_out, p.proj_w, dproj, w.dres, g.proj_w, g.proj_b, bt, c, c, acc);
  ops.attention_backward(attn_shape(s, run), a.att_out, w.dres, a.att_saved, w.att, w.dbig1);
  ops.linear_backward(x, p.qkv_w, w.dbig1, w.dres, g.qkv_w, g.qkv_b, bt, c, 3 * c, acc);
  ops.accumulate(w.dsmall, w.dres, bt * c);
}

}  // namespace

void add_transformer_block_params(ParamLayout& layout, int l, int g, std::int64_t c) {
  const std::string h = "h." + std::to_string(l) + ".";
  layout.add(h + "ln_1.weight", {c}, false, g);
  layout.add(h + "ln_1.bias", {c}, false, g);
  layout.add(h + "attn.c_attn.weight", {3 * c, c}, true, g);
  layout.add(h + "attn.c_attn.bias", {3 * c}, false, g);
  layout.add(h + "attn.c_proj.weight", {c, c}, true, g);
  layout.add(h + "attn.c_proj.bias", {c}, false, g);
  layout.add(h + "ln_2.weight", {c}, false, g);
  layout.add(h + "ln_2.bias", {c}, false, g);
  layout.add(h + "mlp.c_fc.weight", {4 * c, c}, true, g);
  layout.add(h + "mlp.c_fc.bias", {4 * c}, false, g);
  layout.add(h + "mlp.c_proj.weight", {c, 4 * c}, true, g);
  layout.add(h + "mlp.c_proj.bias", {c}, false, g);
}

template <class T>
void transformer_init_params(const ParamLayout& layout, std::int64_t n_layer, double init_std, std::uint64_t seed,
                             T* params, std::int64_t lo, std::int64_t hi) {
  constexpr std::uint64_t kInitStream = 0x1417;  // "init"
  const double resid_std = init_std / std::sqrt(2.0 * static_cast<double>(n_layer));
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
TransformerBlockParams<T> transformer_block_params(T* base, const std::int64_t* rel) {
  TransformerBlockParams<T> b;
  b.ln1_w = base + rel[0]; b.ln1_b = base + rel[1];
  b.qkv_w = base + rel[2]; b.qkv_b = base + rel[3];
  b.proj_w = base + rel[4]; b.proj_b = base + rel[5];
  b.ln2_w = base + rel[6]; b.ln2_b = base + rel[7];
  b.fc_w = base + rel[8]; b.fc_b = base + rel[9];
  b.fc2_w = base + rel[10]; b.fc2_b = base + rel[11];
  return b;
}

std::int64_t transformer_block_saved_elems(const TransformerBlockShape& s) {
  const std::int64_t bt = s.max_batch * s.seq_len, c = s.channels;
  // ln1 mean/rstd/out, attention saved, att_out, resid1, ln2 mean/rstd/out, fc_pre, fc_act, out
  return 2 * bt + bt * c + op_sizes::attention_saved(attention_shape(s, s.max_batch)) + bt * c + bt * c + 2 * bt +
         bt * c + 2 * bt * 4 * c + bt * c;
}

template <class T>
TransformerBlockActs<T> transformer_block_carve(T* base, const TransformerBlockShape& s) {
  const std::int64_t bt = s.max_batch * s.seq_len, c = s.channels;
  T* p = base;
  auto carve = [&p](std::int64_t n) { T* r = p; p += n; return r; };
  TransformerBlockActs<T> a;
  a.ln1_mean = carve(bt); a.ln1_rstd = carve(bt); a.ln1_out = carve(bt * c);
  a.att_saved = carve(op_sizes::attention_saved(attention_shape(s, s.max_batch)));
  a.att_out = carve(bt * c);
  a.resid1 = carve(bt * c);
  a.ln2_mean = carve(bt); a.ln2_rstd = carve(bt); a.ln2_out = carve(bt * c);
  a.fc_pre = carve(bt * 4 * c); a.fc_act = carve(bt * 4 * c);
  a.out = carve(bt * c);
  SHARDTRAIN_CHECK(p - base == transformer_block_saved_elems(s), "block carve mismatch");
  return a;
}

std::int64_t transformer_block_workspace_elems(const TransformerBlockShape& s) {
  const std::int64_t bt = s.max_batch * s.seq_len, c = s.channels;
  // qkv (forward) | attention workspace | dres | dsmall | dbig1 | dbig2
  return bt * 3 * c + op_sizes::attention_workspace(attention_shape(s, s.max_batch)) + bt * c + bt * c + 2 * bt * 4 * c;
}

template <class T>
TransformerBlockWork<T> transformer_block_workspace(T* base, const TransformerBlockShape& s) {
  const std::int64_t bt = s.max_batch * s.seq_len, c = s.channels;
  TransformerBlockWork<T> w;
  w.qkv = base;
  w.att = w.qkv + bt * 3 * c;
  w.dres = w.att + op_sizes::attention_workspace(attention_shape(s, s.max_batch));
  w.dsmall = w.dres + bt * c;
  w.dbig1 = w.dsmall + bt * c;
  w.dbig2 = w.dbig1 + bt * 4 * c;
  return w;
}

double transformer_block_forward_flops(double tokens, std::int64_t seq_len, std::int64_t channels, bool causal) {
  const double cd = static_cast<double>(channels);
  const double attention = 2.0 * tokens * static_cast<double>(seq_len) * cd;  // causal: half the scores
  return 2.0 * tokens * 12.0 * cd * cd + (causal ? attention : 2.0 * attention);
}

template <class T>
void transformer_block_forward(ModelOps<T>& ops, const TransformerBlockShape& s, const TransformerBlockRun& run,
                               T eps, const TransformerBlockParams<T>& p, const T* x,
                               const TransformerBlockActs<T>& a, const TransformerBlockWork<T>& w) {
  if (s.post_ln) return post_ln_forward(ops, s, run, eps, p, x, a, w);
  const std::int64_t bt = run.batch * s.seq_len, c = s.channels;
  const bool drop = run.dropout_active();
  ops.layernorm_forward(x, p.ln1_w, p.ln1_b, a.ln1_out, a.ln1_mean, a.ln1_rstd, bt, c, eps);
  ops.linear_forward(a.ln1_out, p.qkv_w, p.qkv_b, w.qkv, bt, c, 3 * c, false);
  ops.attention_forward(attn_shape(s, run), w.qkv, a.att_saved, w.att, a.att_out);
  if (drop) {  // the projection to dsmall (unused in forward), dropped, added to x
    ops.linear_forward(a.att_out, p.proj_w, p.proj_b, w.dsmall, bt, c, c, false);
    ops.dropout_forward(site(s, run, 0), w.dsmall, w.dsmall, bt * c);
    ops.copy(x, a.resid1, bt * c);
    ops.accumulate(w.dsmall, a.resid1, bt * c);
  } else {
    ops.copy(x, a.resid1, bt * c);
    ops.linear_forward(a.att_out, p.proj_w, p.proj_b, a.resid1, bt, c, c, /*accumulate=*/true);
  }
  ops.layernorm_forward(a.resid1, p.ln2_w, p.ln2_b, a.ln2_out, a.ln2_mean, a.ln2_rstd, bt, c, eps);
  if (s.gelu_epilogue) {  // the same fc_pre and fc_act, the GELU in fc's GEMM
    ops.linear_gelu_forward(a.ln2_out, p.fc_w, p.fc_b, a.fc_pre, a.fc_act, bt, c, 4 * c);
  } else {
    ops.linear_forward(a.ln2_out, p.fc_w, p.fc_b, a.fc_pre, bt, c, 4 * c, false);
    ops.gelu_forward(a.fc_pre, a.fc_act, bt * 4 * c);
  }
  if (drop) {
    ops.linear_forward(a.fc_act, p.fc2_w, p.fc2_b, w.dsmall, bt, 4 * c, c, false);
    ops.dropout_forward(site(s, run, 1), w.dsmall, w.dsmall, bt * c);
    ops.copy(a.resid1, a.out, bt * c);
    ops.accumulate(w.dsmall, a.out, bt * c);
  } else {
    ops.copy(a.resid1, a.out, bt * c);
    ops.linear_forward(a.fc_act, p.fc2_w, p.fc2_b, a.out, bt, 4 * c, c, /*accumulate=*/true);
  }
}

template <class T>
void transformer_block_backward(ModelOps<T>& ops, const TransformerBlockShape& s, const TransformerBlockRun& run,
                                const TransformerBlockParams<T>& p, const TransformerBlockParams<T>& g, const T* x,
                                const TransformerBlockActs<T>& a, const TransformerBlockWork<T>& w, bool grads_zero) {
  const bool acc = !grads_zero;  // the linears' dw, db: add, or overwrite the zeros
  if (s.post_ln) return post_ln_backward(ops, s, run, p, g, x, a, w, acc);
  const std::int64_t bt = run.batch * s.seq_len, c = s.channels;
  const bool drop = run.dropout_active();
  T* dres = w.dres;
  // out = resid1 + drop(fc2(gelu(fc(ln2(resid1))))); dres holds d out.
  const T* dfc2 = dres;
  if (drop) {
    ops.dropout_backward(site(s, run, 1), dres, w.dsmall, bt * c);
    dfc2 = w.dsmall;
  }
  if (s.gelu_epilogue) {  // dbig2 = d fc_pre straight from fc2's dx GEMM (dbig1: the default's scratch)
    ops.linear_dgelu_backward(a.fc_act, p.fc2_w, dfc2, a.fc_pre, w.dbig2, g.fc2_w, g.fc2_b, w.dbig1, bt, 4 * c, c,
                              acc);
  } else {
    ops.linear_backward(a.fc_act, p.fc2_w, dfc2, w.dbig1, g.fc2_w, g.fc2_b, bt, 4 * c, c, acc);
    ops.gelu_backward(a.fc_pre, w.dbig1, w.dbig2, bt * 4 * c);
  }
  ops.linear_backward(a.ln2_out, p.fc_w, w.dbig2, w.dsmall, g.fc_w, g.fc_b, bt, c, 4 * c, acc);
  ops.layernorm_backward(a.resid1, p.ln2_w, a.ln2_mean, a.ln2_rstd, w.dsmall, dres, g.ln2_w, g.ln2_b, bt, c);
  // resid1 = x + drop(proj(attention(qkv(ln1(x))))); dres now holds d resid1.
  const T* dproj = dres;
  if (drop) {
    ops.dropout_backward(site(s, run, 0), dres, w.dbig2, bt * c);  // dbig2 is free again
    dproj = w.dbig2;
  }
  ops.linear_backward(a.att_out, p.proj_w, dproj, w.dsmall, g.proj_w, g.proj_b, bt, c, c, acc);
  ops.attention_backward(attn_shape(s, run), a.att_out, w.dsmall, a.att_saved, w.att, w.dbig1);
  ops.linear_backward(a.ln1_out, p.qkv_w, w.dbig1, w.dsmall, g.qkv_w, g.qkv_b, bt, c, 3 * c, acc);
  ops.layernorm_backward(x, p.ln1_w, a.ln1_mean, a.ln1_rstd, w.dsmall, dres, g.ln1_w, g.ln1_b, bt, c);
}

#define SHARDTRAIN_INSTANTIATE_BLOCK(T)                                                                          \
  template void transformer_init_params<T>(const ParamLayout&, std::int64_t, double, std::uint64_t, T*,          \
                                           std::int64_t, std::int64_t);                                          \
  template TransformerBlockParams<T> transformer_block_params<T>(T*, const std::int64_t*);                       \
  template TransformerBlockActs<T> transformer_block_carve<T>(T*, const TransformerBlockShape&);                \
  template TransformerBlockWork<T> transformer_block_workspace<T>(T*, const TransformerBlockShape&);            \
  template void transformer_block_forward<T>(ModelOps<T>&, const TransformerBlockShape&,                         \
                                             const TransformerBlockRun&, T, const TransformerBlockParams<T>&,    \
                                             const T*, const TransformerBlockActs<T>&,                           \
                                             const TransformerBlockWork<T>&);                                    \
  template void transformer_block_backward<T>(ModelOps<T>&, const TransformerBlockShape&,                        \
                                              const TransformerBlockRun&, const TransformerBlockParams<T>&,      \
                                              const TransformerBlockParams<T>&, const T*,                        \
                                              const TransformerBlockActs<T>&, const TransformerBlockWork<T>&, bool);
SHARDTRAIN_INSTANTIATE_BLOCK(float)
SHARDTRAIN_INSTANTIATE_BLOCK(double)
SHARDTRAIN_INSTANTIATE_BLOCK(f16)
SHARDTRAIN_INSTANTIATE_BLOCK(bf16)
#undef SHARDTRAIN_INSTANTIATE_BLOCK

}  // namespace shardtrain
