// shardtrain/model/transformer_block.hpp
// Owns the transformer block shared by the GPT decoder (model/gpt.hpp) and the
// encoder classifier (model/encoder_classifier.hpp), pre-LayerNorm (GPT-2, our
// encoder's "pre_ln" layout):
//   resid1 = x + drop(proj(attention(qkv(ln_1(x)))))
//   out    = resid1 + drop(fc2(gelu(fc(ln_2(resid1)))))
// or post-LayerNorm (TransformerBlockShape::post_ln: BERT / DistilBERT, whose
// sa_layer_norm / attention.output.LayerNorm is our ln_1 and output_layer_norm /
// output.LayerNorm our ln_2; GELU in its exact erf form, Hugging Face's "gelu"):
//   h1  = ln_1(x + drop(proj(attention(qkv(x)))))
//   out = ln_2(h1 + drop(fc2(gelu_erf(fc(h1)))))
// with its 12 parameter tensors (GPT-2 names "h.<l>.ln_1.weight", ...), the
// layout of the activations one block saves for backward, the layout of the
// workspace every block shares, and forward / backward over ModelOps.
// Attention is causal (GPT) or bidirectional with a key padding mask (encoder).
// Dropout (BERT's two block sites) runs only when p > 0 and training; with p = 0
// (the GPT) every kernel call is the one the GPT made before this file existed,
// so results are bitwise unchanged and nothing extra is computed.
// The mask is not stored: backward regenerates it from (seed, stream, offset)
// (kernels/dropout.hpp), offset = first_sample * T * C, so it depends on the
// global sample index only, never on the micro-batch split.
// The pre-LN MLP's GELU (tanh form) may run inside its GEMMs
// (TransformerBlockShape::gelu_epilogue, model.gelu = "epilogue": ModelOps'
// linear_gelu_forward / linear_dgelu_backward); the same fc_pre and fc_act are
// saved either way, so recompute and the memory plan do not change.
// Gradient convention: parameter gradients ACCUMULATE; `dres` (the gradient of
// the block output on entry) becomes the gradient of the block input.
#pragma once

#include <cstdint>
#include <string>

#include "backend/model_ops.hpp"
#include "core/param_layout.hpp"

namespace shardtrain {

struct TransformerBlockShape {
  std::int64_t max_batch = 0;  // B the buffers are sized for
  std::int64_t seq_len = 0;    // T
  std::int64_t channels = 0;   // C
  std::int64_t n_head = 0;     // H
  bool fused_attention = false;  // cuDNN's fused attention (AttnShape::fused)
  bool post_ln = false;          // the BERT family's post-LayerNorm block (and erf GELU)
  bool flash_attention = false;  // our tiled attention on the device (AttnShape::flash)
  // Pre-LN only (tanh GELU): the MLP through ModelOps' linear_gelu_forward /
  // linear_dgelu_backward (the GELU in cuBLASLt's epilogues on a device,
  // model.gelu = "epilogue") instead of linear + gelu and gelu + linear backward.
  bool gelu_epilogue = false;
};

inline constexpr int kTransformerBlockTensors = 12;

// Appends the block's 12 tensors (Linear weights (out, in), with weight decay)
// as "h.<layer>.<leaf>" to `layout`, in parameter group `group`, in the order
// transformer_block_params() expects.
void add_transformer_block_params(ParamLayout& layout, int layer, int group, std::int64_t channels);

// GPT-2 initialisation of every tensor of a layout built from these blocks plus
// embeddings, LayerNorms and Linear heads, by name: biases 0, LayerNorm ("ln_")
// weights 1, "*c_proj.weight" N(0, init_std / sqrt(2 n_layer)), every other
// tensor N(0, init_std); padding 0. Global indices: value i depends only on
// (seed, i), not on the [lo, hi) range.
template <class T>
void transformer_init_params(const ParamLayout& layout, std::int64_t n_layer, double init_std, std::uint64_t seed,
                             T* params, std::int64_t lo, std::int64_t hi);

// One block's parameters (or gradients): pointers into its group.
template <class T>
struct TransformerBlockParams {
  T* ln1_w = nullptr; T* ln1_b = nullptr;    // (C), (C)
  T* qkv_w = nullptr; T* qkv_b = nullptr;    // (3C, C), (3C)
  T* proj_w = nullptr; T* proj_b = nullptr;  // (C, C), (C)
  T* ln2_w = nullptr; T* ln2_b = nullptr;    // (C), (C)
  T* fc_w = nullptr; T* fc_b = nullptr;      // (4C, C), (4C)
  T* fc2_w = nullptr; T* fc2_b = nullptr;    // (C, 4C), (C)
};
// rel: the 12 offsets of the block's tensors relative to `group_base`, in
// add_transformer_block_params() order.
template <class T>
TransformerBlockParams<T> transformer_block_params(T* group_base, const std::int64_t* rel);

// Saved for backward, per block; row count B*T. Post-LN blocks keep the same
// buffers with these meanings: resid1 = x + attn (ln_1's input), ln1_out = h1,
// ln2_out = h1 + ffn (ln_2's input), out = ln_2's output.
template <class T>
struct TransformerBlockActs {
  T* ln1_mean; T* ln1_rstd; T* ln1_out;  // (BT), (BT), (BT, C)
  T* att_saved;                          // attention_saved_elems
  T* att_out;                            // (BT, C) heads concatenated
  T* resid1;                             // (BT, C) x + attn
  T* ln2_mean; T* ln2_rstd; T* ln2_out;  // (BT), (BT), (BT, C)
  T* fc_pre; T* fc_act;                  // (BT, 4C) before / after GELU
  T* out;                                // (BT, C) block output = next block input
};
std::int64_t transformer_block_saved_elems(const TransformerBlockShape& s);
template <class T>
TransformerBlockActs<T> transformer_block_carve(T* base, const TransformerBlockShape& s);

// Scratch shared by all blocks: qkv (BT, 3C) | attention workspace (attention_workspace_elems:
// one (T*T + T*hd) piece per concurrent (sequence, head) pair) | dres (BT, C)
// | dsmall (BT, C) | dbig1 (BT, 4C) | dbig2 (BT, 4C). A model's own backward may
// use dres, dsmall, dbig1 and dbig2 outside the block calls.
template <class T>
struct TransformerBlockWork {
  T* qkv; T* att; T* dres; T* dsmall; T* dbig1; T* dbig2;
};
std::int64_t transformer_block_workspace_elems(const TransformerBlockShape& s);
template <class T>
TransformerBlockWork<T> transformer_block_workspace(T* base, const TransformerBlockShape& s);

// Forward FLOPs of one block over `tokens` rows (multiply-adds count 2): the four
// Linear layers (12 C^2 per token) and attention (QK^T and PV: T C per token
// when causal, half the scores; 2 T C bidirectional).
double transformer_block_forward_flops(double tokens, std::int64_t seq_len, std::int64_t channels, bool causal);

// How one call runs: the micro-batch, the attention mask and dropout.
struct TransformerBlockRun {
  std::int64_t batch = 0;
  bool causal = true;
  const std::int32_t* lengths = nullptr;  // HOST, batch entries in [1, T]; nullptr: all valid
  double dropout = 0.0;                   // p of both sites; active only when training
  bool training = false;
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;               // this block's; sites use stream and stream + 1
  std::uint64_t first_sample = 0;         // global index of row 0 of the micro-batch
  bool dropout_active() const { return dropout > 0.0 && training; }
};

template <class T>
void transformer_block_forward(ModelOps<T>& ops, const TransformerBlockShape& s, const TransformerBlockRun& run,
                               T eps, const TransformerBlockParams<T>& p, const T* x,
                               const TransformerBlockActs<T>& a, const TransformerBlockWork<T>& w);

// w.dres holds d(out) on entry and d(x) on return; grads += ... When grads_zero
// (the provider's ParamProvider::grads_zero for the block's group: g holds only
// zeros) the four linears OVERWRITE their weight and bias gradients instead: the
// same bits, without reading g (the layernorms still add).
template <class T>
void transformer_block_backward(ModelOps<T>& ops, const TransformerBlockShape& s, const TransformerBlockRun& run,
                                const TransformerBlockParams<T>& p, const TransformerBlockParams<T>& g, const T* x,
                                const TransformerBlockActs<T>& a, const TransformerBlockWork<T>& w, bool grads_zero);

}  // namespace shardtrain
