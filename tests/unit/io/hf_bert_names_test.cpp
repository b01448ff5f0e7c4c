// io/hf_bert_names: every tensor of a BERT- and a DistilBERT-layout encoder
// (model/encoder_classifier.hpp encoder_layout's names) has the Hugging Face name
// transformers uses, prefixed or not; c_attn is query / key / value in row order;
// the head is absent from base-model names; the names are told apart from ours.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/hf_bert_names.hpp"

namespace shardtrain {
namespace {

std::vector<std::string> names_of(const std::vector<HfPiece>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(p.name);
  return out;
}

TEST(HfBertNames, DistilbertBlockAndEmbeddings) {
  const auto l = EncoderLayout::Distilbert;
  const auto qkv = hf_bert_pieces(l, "h.3.attn.c_attn.weight", 48, true);
  ASSERT_EQ(qkv.size(), 3u);
  EXPECT_EQ(names_of(qkv), (std::vector<std::string>{"distilbert.transformer.layer.3.attention.q_lin.weight",
                                                     "distilbert.transformer.layer.3.attention.k_lin.weight",
                                                     "distilbert.transformer.layer.3.attention.v_lin.weight"}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(qkv[i].row0, 16 * i);
    EXPECT_EQ(qkv[i].rows, 16);
  }
  EXPECT_EQ(names_of(hf_bert_pieces(l, "h.0.attn.c_proj.bias", 16, true)),
            std::vector<std::string>{"distilbert.transformer.layer.0.attention.out_lin.bias"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "h.1.ln_1.weight", 16, true)),
            std::vector<std::string>{"distilbert.transformer.layer.1.sa_layer_norm.weight"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "h.1.mlp.c_fc.weight", 64, true)),
            std::vector<std::string>{"distilbert.transformer.layer.1.ffn.lin1.weight"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "h.1.mlp.c_proj.weight", 16, true)),
            std::vector<std::string>{"distilbert.transformer.layer.1.ffn.lin2.weight"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "h.1.ln_2.bias", 16, true)),
            std::vector<std::string>{"distilbert.transformer.layer.1.output_layer_norm.bias"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "wpe.weight", 512, true)),
            std::vector<std::string>{"distilbert.embeddings.position_embeddings.weight"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "ln_emb.weight", 16, false)),
            std::vector<std::string>{"embeddings.LayerNorm.weight"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "pre_classifier.weight", 16, true)),
            std::vector<std::string>{"pre_classifier.weight"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "head.bias", 2, true)), std::vector<std::string>{"classifier.bias"});
  // A base model (DistilBertModel) has no head; DistilBERT has no token types or pooler.
  EXPECT_TRUE(hf_bert_pieces(l, "head.weight", 2, false).empty());
  EXPECT_TRUE(hf_bert_pieces(l, "pre_classifier.weight", 16, false).empty());
  EXPECT_TRUE(hf_bert_pieces(l, "wtt.weight", 2, true).empty());
  EXPECT_TRUE(hf_bert_pieces(l, "pooler.weight", 16, true).empty());
}

TEST(HfBertNames, BertBlockEmbeddingsAndPooler) {
  const auto l = EncoderLayout::Bert;
  EXPECT_EQ(names_of(hf_bert_pieces(l, "h.0.attn.c_attn.bias", 48, true)),
            (std::vector<std::string>{"bert.encoder.layer.0.attention.self.query.bias",
                                      "bert.encoder.layer.0.attention.self.key.bias",
                                      "bert.encoder.layer.0.attention.self.value.bias"}));
  EXPECT_EQ(names_of(hf_bert_pieces(l, "h.2.attn.c_proj.weight", 16, true)),
            std::vector<std::string>{"bert.encoder.layer.2.attention.output.dense.weight"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "h.2.ln_1.weight", 16, true)),
            std::vector<std::string>{"bert.encoder.layer.2.attention.output.LayerNorm.weight"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "h.2.mlp.c_fc.bias", 64, true)),
            std::vector<std::string>{"bert.encoder.layer.2.intermediate.dense.bias"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "h.2.mlp.c_proj.weight", 16, true)),
            std::vector<std::string>{"bert.encoder.layer.2.output.dense.weight"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "h.2.ln_2.weight", 16, true)),
            std::vector<std::string>{"bert.encoder.layer.2.output.LayerNorm.weight"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "wtt.weight", 2, true)),
            std::vector<std::string>{"bert.embeddings.token_type_embeddings.weight"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "wte.weight", 30522, false)),
            std::vector<std::string>{"embeddings.word_embeddings.weight"});
  // BertModel keeps its pooler (unprefixed), not the classifier.
  EXPECT_EQ(names_of(hf_bert_pieces(l, "pooler.bias", 16, false)), std::vector<std::string>{"pooler.dense.bias"});
  EXPECT_EQ(names_of(hf_bert_pieces(l, "pooler.weight", 16, true)),
            std::vector<std::string>{"bert.pooler.dense.weight"});
  EXPECT_TRUE(hf_bert_pieces(l, "head.weight", 2, false).empty());
  EXPECT_TRUE(hf_bert_pieces(l, "pre_classifier.weight", 16, true).empty());
  EXPECT_TRUE(hf_bert_pieces(EncoderLayout::PreLn, "wte.weight", 10, true).empty());
}

TEST(HfBertNames, RecognisesNamesHeadsAndBuffers) {
  EXPECT_TRUE(is_hf_bert_name(EncoderLayout::Bert, "bert.encoder.layer.0.output.dense.weight"));
  EXPECT_TRUE(is_hf_bert_name(EncoderLayout::Bert, "embeddings.word_embeddings.weight"));
  EXPECT_TRUE(is_hf_bert_name(EncoderLayout::Distilbert, "distilbert.transformer.layer.0.ffn.lin1.weight"));
  EXPECT_FALSE(is_hf_bert_name(EncoderLayout::Bert, "h.0.attn.c_attn.weight"));
  EXPECT_FALSE(is_hf_bert_name(EncoderLayout::Distilbert, "wte.weight"));
  EXPECT_FALSE(is_hf_bert_name(EncoderLayout::PreLn, "bert.embeddings.LayerNorm.weight"));
  EXPECT_TRUE(hf_bert_head_tensor("pre_classifier.bias"));
  EXPECT_TRUE(hf_bert_head_tensor("head.weight"));
  EXPECT_TRUE(hf_bert_head_tensor("pooler.weight"));
  EXPECT_FALSE(hf_bert_head_tensor("h.0.ln_1.weight"));
  EXPECT_TRUE(is_hf_bert_buffer("bert.embeddings.position_ids"));
  EXPECT_FALSE(is_hf_bert_buffer("bert.embeddings.position_embeddings.weight"));
}

TEST(HfBertNames, PretrainingHeads) {  // the published checkpoints' masked-LM heads, skipped by init_from
  for (const char* n : {"vocab_transform.weight", "vocab_layer_norm.bias", "vocab_projector.weight"}) {
    EXPECT_TRUE(is_hf_bert_pretraining_head(EncoderLayout::Distilbert, n)) << n;
    EXPECT_FALSE(is_hf_bert_pretraining_head(EncoderLayout::Bert, n)) << n;
  }
  for (const char* n : {"cls.predictions.bias", "cls.predictions.decoder.weight", "cls.seq_relationship.weight"}) {
    EXPECT_TRUE(is_hf_bert_pretraining_head(EncoderLayout::Bert, n)) << n;
    EXPECT_FALSE(is_hf_bert_pretraining_head(EncoderLayout::Distilbert, n)) << n;
  }
  for (const char* n : {"classifier.weight", "pre_classifier.bias", "distilbert.embeddings.LayerNorm.weight",
                        "bert.pooler.dense.weight", "vocab_projector"})
    for (const EncoderLayout l : {EncoderLayout::Bert, EncoderLayout::Distilbert, EncoderLayout::PreLn})
      EXPECT_FALSE(is_hf_bert_pretraining_head(l, n)) << n;
}

}  // namespace
}  // namespace shardtrain
