// Hugging Face's BERT / DistilBERT names of our encoder's tensors (hf_bert_names.hpp).
#include "io/hf_bert_names.hpp"

#include <array>
#include <utility>

namespace shardtrain {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Our block leaf ("attn.c_proj") -> the family's, after "layer.<l>.".
struct BlockName {
  std::string_view ours;
  std::string_view distilbert;
  std::string_view bert;
};
constexpr std::array<BlockName, 5> k_block = {{
    {"attn.c_proj", "attention.out_lin", "attention.output.dense"},
    {"ln_1", "sa_layer_norm", "attention.output.LayerNorm"},
    {"mlp.c_fc", "ffn.lin1", "intermediate.dense"},
    {"mlp.c_proj", "ffn.lin2", "output.dense"},
    {"ln_2", "output_layer_norm", "output.LayerNorm"},
}};
constexpr std::array<std::string_view, 3> k_qkv_distilbert = {"attention.q_lin", "attention.k_lin", "attention.v_lin"};
constexpr std::array<std::string_view, 3> k_qkv_bert = {"attention.self.query", "attention.self.key",
                                                        "attention.self.value"};

}  // namespace

std::string_view hf_bert_prefix(EncoderLayout layout) {
  return layout == EncoderLayout::Distilbert ? "distilbert." : "bert.";
}

bool hf_bert_head_tensor(std::string_view ours) {
  return starts_with(ours, "pre_classifier.") || starts_with(ours, "pooler.") || starts_with(ours, "head.");
}

bool is_hf_bert_buffer(std::string_view name) {
  constexpr std::string_view tail = "embeddings.position_ids";
  return name.size() >= tail.size() && name.substr(name.size() - tail.size()) == tail;
}

bool is_hf_bert_pretraining_head(EncoderLayout layout, std::string_view name) {
  if (layout == EncoderLayout::Distilbert)
    return starts_with(name, "vocab_transform.") || starts_with(name, "vocab_layer_norm.") ||
           starts_with(name, "vocab_projector.");
  if (layout == EncoderLayout::Bert)
    return starts_with(name, "cls.predictions.") || starts_with(name, "cls.seq_relationship.");
  return false;
}

bool is_hf_bert_name(EncoderLayout layout, std::string_view name) {
  if (layout == EncoderLayout::PreLn) return false;
  const std::string_view body = starts_with(name, hf_bert_prefix(layout)) ? name.substr(hf_bert_prefix(layout).size())
                                                                          : name;
  return starts_with(body, "embeddings.") ||
         starts_with(body, layout == EncoderLayout::Distilbert ? "transformer.layer." : "encoder.layer.") ||
         starts_with(name, "classifier.") || starts_with(name, "pre_classifier.");
}

std::vector<HfPiece> hf_bert_pieces(EncoderLayout layout, std::string_view ours, std::int64_t rows, bool prefixed) {
  if (layout == EncoderLayout::PreLn) return {};
  const bool distil = layout == EncoderLayout::Distilbert;
  const std::string base = prefixed ? std::string(hf_bert_prefix(layout)) : std::string();
  const auto dot = ours.rfind('.');
  if (dot == std::string_view::npos) return {};
  const std::string_view stem = ours.substr(0, dot), kind = ours.substr(dot);  // kind: ".weight" / ".bias"
  auto whole = [&](std::string name) { return std::vector<HfPiece>{{std::move(name) + std::string(kind), 0, rows}}; };
  if (stem == "wte") return whole(base + "embeddings.word_embeddings");
  if (stem == "wpe") return whole(base + "embeddings.position_embeddings");
  if (stem == "wtt") return distil ? std::vector<HfPiece>{} : whole(base + "embeddings.token_type_embeddings");
  if (stem == "ln_emb") return whole(base + "embeddings.LayerNorm");
  if (stem == "head") return prefixed ? whole("classifier") : std::vector<HfPiece>{};
  if (stem == "pre_classifier") return distil && prefixed ? whole("pre_classifier") : std::vector<HfPiece>{};
  if (stem == "pooler") return distil ? std::vector<HfPiece>{} : whole(base + "pooler.dense");
  if (!starts_with(stem, "h.")) return {};
  const auto dot2 = stem.find('.', 2);
  if (dot2 == std::string_view::npos) return {};
  const std::string layer = std::string(stem.substr(2, dot2 - 2));
  const std::string_view leaf = stem.substr(dot2 + 1);
  const std::string block = base + (distil ? "transformer.layer." : "encoder.layer.") + layer + ".";
  if (leaf == "attn.c_attn") {
    const auto& names = distil ? k_qkv_distilbert : k_qkv_bert;
    std::vector<HfPiece> out;
    for (std::size_t i = 0; i < names.size(); ++i)
      out.push_back({block + std::string(names[i]) + std::string(kind), static_cast<std::int64_t>(i) * (rows / 3), rows / 3});
    return out;
  }
  for (const BlockName& b : k_block)
    if (leaf == b.ours) return whole(block + std::string(distil ? b.distilbert : b.bert));
  return {};
}

}  // namespace shardtrain
