// shardtrain/io/hf_bert_names.hpp
// Owns Hugging Face's names for an encoder_classifier in the BERT family's
// layouts (model.layout = "bert" | "distilbert"), the one table that
// `trainer-ckpt export --names bert|distilbert` writes and model.init_from
// reads: BertForSequenceClassification / DistilBertForSequenceClassification's
// state-dict names, or BertModel / DistilBertModel's (the same without the
// "bert." / "distilbert." prefix, and without the classifier head).
//   ours                      DistilBERT                                   BERT
//   wte / wpe / wtt .weight   distilbert.embeddings.word_embeddings /      bert.embeddings.word_embeddings /
//                             position_embeddings                          position_embeddings / token_type_embeddings
//   ln_emb.*                  distilbert.embeddings.LayerNorm.*            bert.embeddings.LayerNorm.*
//   h.<l>.attn.c_attn.*       ...layer.<l>.attention.{q,k,v}_lin.*         ...layer.<l>.attention.self.{query,key,value}.*
//   h.<l>.attn.c_proj.*       ...layer.<l>.attention.out_lin.*             ...layer.<l>.attention.output.dense.*
//   h.<l>.ln_1.*              ...layer.<l>.sa_layer_norm.*                 ...layer.<l>.attention.output.LayerNorm.*
//   h.<l>.mlp.c_fc.*          ...layer.<l>.ffn.lin1.*                      ...layer.<l>.intermediate.dense.*
//   h.<l>.mlp.c_proj.*        ...layer.<l>.ffn.lin2.*                      ...layer.<l>.output.dense.*
//   h.<l>.ln_2.*              ...layer.<l>.output_layer_norm.*             ...layer.<l>.output.LayerNorm.*
//   pre_classifier.* / pooler.*  pre_classifier.*                          bert.pooler.dense.*
//   head.*                    classifier.*                                 classifier.*
// (DistilBERT's blocks are under distilbert.transformer.layer.<l>, BERT's under
// bert.encoder.layer.<l>.) Both store Linear weights (out, in) as we do; our
// fused c_attn (3C, C) is [query; key; value] along its rows, so it is three
// tensors there, rows [0, C), [C, 2C), [2C, 3C) (and its bias likewise).
// No HDF5, no MPI: names only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/run_choices.hpp"

namespace shardtrain {

// Rows [row0, row0 + rows) of one of our tensors are Hugging Face's tensor `name`, whole.
struct HfPiece {
  std::string name;
  std::int64_t row0 = 0;
  std::int64_t rows = 0;
};

// The pieces of our tensor `ours` (first dimension `rows`) in a file of the
// family `layout` (Bert or Distilbert); `prefixed`: the ...ForSequenceClassification
// names, else the base model's. Empty when `ours` has no name there (the head
// of a base model, or a tensor that is not the layout's).
std::vector<HfPiece> hf_bert_pieces(EncoderLayout layout, std::string_view ours, std::int64_t rows, bool prefixed);

// Whether our tensor belongs to the classification head (pre_classifier /
// pooler / head), which a file may lack: it is then initialised fresh.
bool hf_bert_head_tensor(std::string_view ours);

// Whether `name` is one of Hugging Face's names for the family (prefixed or
// not): what marks a file as holding them.
bool is_hf_bert_name(EncoderLayout layout, std::string_view name);
// The prefix of the ...ForSequenceClassification names ("bert." / "distilbert.").
std::string_view hf_bert_prefix(EncoderLayout layout);
// A pretraining head's tensor, which the published checkpoints hold and a
// sequence classifier does not use (transformers loads them into
// ...ForSequenceClassification with "Some weights ... were not used"):
// DistilBERT's masked-LM head (distilbert-base-uncased is a
// DistilBertForMaskedLM: vocab_transform.*, vocab_layer_norm.*,
// vocab_projector.*) and BERT's (BertForPreTraining: cls.predictions.*,
// cls.seq_relationship.*). model.init_from skips them and says so.
bool is_hf_bert_pretraining_head(EncoderLayout layout, std::string_view name);
// Hugging Face buffers that are not parameters ("...embeddings.position_ids"):
// a file may hold them; they are skipped.
bool is_hf_bert_buffer(std::string_view name);

}  // namespace shardtrain
