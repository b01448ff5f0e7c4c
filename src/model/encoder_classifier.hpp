// shardtrain/model/encoder_classifier.hpp
// Owns the BERT-style text classifier (issue 9's `encoder_classifier`, e.g.
// SpamAssassin with the byte tokenizer of io/text_tokenizer: [CLS] at position 0,
// [PAD] after the valid tokens), in one of three layouts (EncoderDims::layout,
// model.layout):
// - PreLn (ours): token + position embeddings, L pre-LayerNorm transformer
//   blocks with BIDIRECTIONAL attention and a key padding mask
//   (model/transformer_block.hpp, the GPT's blocks), final LayerNorm, pooling
//   (Cls: position 0; Mean: average over the valid positions t < length), a
//   Linear(C, classes) head.
// - Bert / Distilbert (issue 48, the layouts Hugging Face's weights fit):
//   word + position (+ Bert: token-type 0) embeddings, an embedding LayerNorm,
//   L post-LayerNorm blocks (erf GELU, the same key padding mask as
//   Hugging Face's attention_mask over [PAD]), then on the [CLS] row (Cls
//   pooling only) Bert's pooler Linear(C, C) + tanh or Distilbert's
//   pre_classifier Linear(C, C) + ReLU, dropout, the classifier Linear(C, K).
//   The token-type row is added as a Linear of a column of ones (k = 1), so
//   its gradient is the column sum through the ordinary linear_backward.
// Loss = cross-entropy against the labels.
// Dropout p (BERT's sites): on the embeddings output, after each attention
// projection and fc2, and before the head; only when SampleBatch::training.
// (Hugging Face also drops attention probabilities, and DistilBERT has no
// dropout after its attention projection: parity holds with dropout off.)
// Masks depend on (dropout_seed, site stream, global element index) with row r
// of a micro-batch = global sample first_sample + r, so they do not depend on
// the rank count or the micro-batch split.
// Parameter groups (GPT protocol, core/param_provider.hpp): 0 = the embeddings
// (wte, wpe; Bert: wtt; Bert / Distilbert: ln_emb), 1..L = blocks, L+1 = the
// head (PreLn: ln_f + head; Bert: pooler + head; Distilbert: pre_classifier +
// head); acquired right before use, released right
// after, so every ZeRO stage works. Gradients ACCUMULATE over micro-batches.
// Activations (category Activations): embeddings output (Bert / Distilbert:
// also the LayerNorm's input and statistics, and Bert a column of ones), the
// blocks' chain (model/block_chain.hpp: run by a RecomputeSchedule as the
// GPT's; with "none" every block's saved tensors, else the schedule's stack of
// internals and checkpoints and its scratch block, sized by the schedule's plan
// as given), final LayerNorm (PreLn) or the [CLS] rows, pre-activation and
// activation (Bert / Distilbert), pooled rows, logits, losses. Every policy
// computes bitwise the same loss and gradients: dropout masks inside a
// recomputed block are regenerated from (seed, stream, global element index),
// the same as in its first forward. Workspace: the blocks' shared scratch (the
// head's backward reuses it) and the host 16-bit ModelOps' fp32 tiles.
// encoder_costs<T> is exactly that under "none" and gives the chain's costs for
// the plan (encoder_activation_bytes<T>: under a schedule).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/model_ops.hpp"
#include "core/memory.hpp"
#include "core/types.hpp"
#include "model/classifier.hpp"
#include "core/param_layout.hpp"
#include "core/param_provider.hpp"
#include "core/run_choices.hpp"
#include "model/block_chain.hpp"
#include "model/recompute.hpp"
#include "model/transformer_block.hpp"

namespace shardtrain {

struct EncoderDims {
  using Pooling = shardtrain::Pooling;  // model.pooling (core/run_choices.hpp)
  std::int64_t vocab = 0;      // V (the byte tokenizer: 258)
  std::int64_t seq_len = 0;    // T
  std::int64_t n_layer = 0;    // L
  std::int64_t channels = 0;   // C
  std::int64_t n_head = 0;     // H, divides C
  std::int64_t classes = 0;    // K >= 2
  std::int64_t max_batch = 0;  // largest micro-batch the buffers are sized for
  Pooling pooling = Pooling::Cls;
  EncoderLayout layout = EncoderLayout::PreLn;  // model.layout
  std::int64_t positions = 0;  // rows of wpe (model.max_positions); 0: seq_len
  double dropout = 0.0;        // p in [0, 1)
  std::uint64_t dropout_seed = 0;
};

// Rows of Bert's token-type table (Hugging Face's type_vocab_size for every
// published BERT); the model reads row 0 (one segment).
inline constexpr std::int64_t kBertTypeVocab = 2;

// Rows of wpe: positions, or seq_len when 0.
inline std::int64_t encoder_positions(const EncoderDims& d) { return d.positions > 0 ? d.positions : d.seq_len; }

// Throws InputError naming the first bad field.
void encoder_check_dims(const EncoderDims& d);

// Parameter table (not finalized): wte.weight (V, C), wpe.weight (P, C), Bert:
// wtt.weight (kBertTypeVocab, C), Bert / Distilbert: ln_emb.weight, ln_emb.bias
// in group 0; the GPT's block tensors "h.<l>.*" in group l + 1; then in group
// L + 1: PreLn ln_f.weight, ln_f.bias; Bert pooler.weight (C, C), pooler.bias;
// Distilbert pre_classifier.weight (C, C), pre_classifier.bias; and
// head.weight (K, C), head.bias. Matrices (out, in) have weight decay.
ParamLayout encoder_layout(const EncoderDims& d);

// Tensors of group 0 of encoder_layout(d) (2, 4 or 5).
int encoder_embedding_tensors(const EncoderDims& d);

// Initialises params[lo, hi) (global indices: independent of the split) as
// gpt_init_params does (transformer_init_params); head.weight N(0, init_std),
// head.bias 0.
template <class T>
void encoder_init_params(const ParamLayout& layout, const EncoderDims& d, double init_std, std::uint64_t seed,
                         T* params, std::int64_t lo, std::int64_t hi);

// The ModelOps limits the model makes its kernels for.
ModelOpsLimits encoder_ops_limits(const EncoderDims& d);

// Activation (under "none") and workspace bytes the model and its host ModelOps
// allocate, one sample's forward FLOPs, and the blocks' chain for the recompute
// scheduler (ClassifierCosts::chain, kept_activation_bytes).
template <class T>
ClassifierCosts encoder_costs(const EncoderDims& d);

// Activation bytes the model allocates under `schedule` (made for
// encoder_costs<T>(d).chain): the regions outside the chain plus the schedule's.
template <class T>
std::int64_t encoder_activation_bytes(const EncoderDims& d, const RecomputeSchedule& schedule);

template <class T>
class EncoderClassifier final : public Classifier<T> {
 public:
  // schedule: the recompute schedule of the blocks (nullptr: keep everything,
  // "none"), made for encoder_costs<T>(dims).chain. backend: where the kernels
  // run and activations live (nullptr: the host).
  EncoderClassifier(const EncoderDims& dims, const ParamLayout& layout, double layernorm_eps, MemoryTracker& memory,
                    const RecomputeSchedule* schedule = nullptr, Backend* backend = nullptr);
  EncoderClassifier(const EncoderClassifier&) = delete;
  EncoderClassifier& operator=(const EncoderClassifier&) = delete;

  void bind(ParamProvider<T>& provider) override;
  void bind(T* params, T* grads);  // full flat vectors (padded_size() each)

  // b.tokens (batch, T), b.lengths (batch, in [1, T]), b.labels (batch, < 0:
  // ignored), b.training / b.first_sample (dropout). Returns the SUM of the
  // per-sample losses over valid labels.
  double forward(const SampleBatch& b) override;
  void logits(std::vector<float>& out) const override;
  void backward(T dloss) override;
  // The regions outside the chain once a forward wrote them, plus the chain's
  // measured stack high-water and scratch block (classifier.hpp). Under "none"
  // that is the whole arena.
  std::int64_t activation_high_water_bytes() const override;
  // The recompute stack's high-water in bytes since the last forward() began.
  std::int64_t last_pass_stack_high_water_bytes() const {
    return m_chain.pass_stack_high_elems() * static_cast<std::int64_t>(sizeof(T));
  }

  const EncoderDims& dims() const { return m_dims; }

 private:
  TransformerBlockShape block_shape() const;
  TransformerBlockRun block_run() const;  // block 0's; the chain moves the stream per block
  DropoutParams dropout_site(std::uint64_t stream, std::int64_t elems_per_sample) const;
  int head_group() const { return static_cast<int>(m_dims.n_layer) + 1; }
  const std::int32_t* pool_lengths() const;  // Mean: the batch's lengths; Cls: ones
  T* rel(T* base, std::size_t entry) const { return base + m_rel[entry]; }
  bool bert_family() const { return m_dims.layout != EncoderLayout::PreLn; }
  void embed_forward(T* base, bool drop);
  void embed_backward(T* base, T* grads, bool drop);
  void head_forward(const T* x, T* hb, bool drop);
  void head_backward(T* hb, T* hg, bool drop, bool acc);

  EncoderDims m_dims;
  const ParamLayout& m_layout;
  T m_eps;
  std::vector<std::int64_t> m_rel;  // entry offset relative to its group's start
  ParamProvider<T>* m_provider = nullptr;
  std::unique_ptr<FlatParams<T>> m_flat;
  std::unique_ptr<ModelOps<T>> m_ops;
  Backend& m_backend;

  int m_emb_tensors = 2;  // entries of group 0
  // PreLn: emb_out | chain | lnf mean, rstd, out | pooled | logits | losses
  // Bert / Distilbert: emb_pre | emb mean, rstd | emb_out | (Bert) ones | chain
  //   | cls | pre | act | pooled | logits | losses
  // (chain: the schedule's stack and scratch block; "none": L blocks' internals)
  TrackedBuffer<T> m_acts;
  TrackedBuffer<T> m_work;  // the blocks' workspace
  TransformerBlockWork<T> m_ws{};
  BlockChain<T> m_chain;    // the blocks, run by the schedule
  std::int64_t m_kept_elems = 0;  // the arena outside the chain
  T* m_emb_out = nullptr;   // (BT, C)
  T* m_lnf_mean = nullptr; T* m_lnf_rstd = nullptr; T* m_lnf_out = nullptr;  // (BT), (BT), (BT, C)
  T* m_emb_pre = nullptr; T* m_emb_mean = nullptr; T* m_emb_rstd = nullptr;  // (BT, C), (BT), (BT)
  T* m_ones = nullptr;      // (BT) ones: Bert's token-type row as a Linear of k = 1
  T* m_cls = nullptr; T* m_pre = nullptr; T* m_act = nullptr;  // (B, C) each: [CLS], Linear, tanh / ReLU
  T* m_pooled = nullptr;    // (B, C) after the head dropout
  T* m_logits = nullptr;    // (B, K); overwritten by dlogits in backward
  T* m_losses = nullptr;    // (B)

  std::vector<TokenIndex> m_label_rows;  // labels padded to B*T entries (stage_tokens stages n of each)
  std::vector<std::int32_t> m_cls_lengths;  // Cls pooling: length 1 for every row
  const TokenIndex* m_tokens = nullptr;  // as the kernels read them
  const TokenIndex* m_labels = nullptr;
  const std::int32_t* m_lengths = nullptr;  // host, the batch's
  std::int64_t m_batch = 0;
  bool m_training = false;
  std::uint64_t m_first_sample = 0;
  bool m_forward_done = false;
  bool m_forward_ran = false;  // a forward has written the arena
};

extern template class EncoderClassifier<float>;
extern template class EncoderClassifier<double>;
extern template class EncoderClassifier<f16>;
extern template class EncoderClassifier<bf16>;

}  // namespace shardtrain
