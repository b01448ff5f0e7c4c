// GPT-2's names of a GPT's tensors and its config.json (gpt2_names.hpp).
#include "io/gpt2_names.hpp"

#include "core/named_enum.hpp"
#include "io/text_tokenizer.hpp"

namespace shardtrain {

std::string gpt2_name(std::string_view ours) { return std::string(kGpt2Prefix) + std::string(ours); }

bool is_gpt2_name(std::string_view name) { return name.starts_with(kGpt2Prefix); }

// "h.<layer>.{attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj}.weight".
bool gpt2_conv1d(std::string_view ours) {
  if (!ours.starts_with("h.")) return false;
  std::size_t i = 2;
  while (i < ours.size() && ours[i] >= '0' && ours[i] <= '9') ++i;
  if (i == 2 || i >= ours.size() || ours[i] != '.') return false;
  const std::string_view rest = ours.substr(i + 1);
  for (const std::string_view w : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"})
    if (rest == w) return true;
  return false;
}

std::vector<Gpt2Tensor> gpt2_tensors(std::int64_t vocab, std::int64_t d_model, std::int64_t seq_len,
                                     std::int64_t n_layer) {
  const std::int64_t V = vocab, C = d_model, T = seq_len;
  std::vector<Gpt2Tensor> out;
  auto add = [&](std::string ours, std::vector<std::int64_t> shape) {
    std::string gpt2 = gpt2_name(ours);
    const bool transposed = gpt2_conv1d(ours);
    out.push_back({std::move(ours), std::move(shape), std::move(gpt2), transposed});
  };
  add("wte.weight", {V, C});
  add("wpe.weight", {T, C});
  for (std::int64_t l = 0; l < n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const std::vector<std::pair<std::string, std::vector<std::int64_t>>> block{
        {"ln_1.weight", {C}},          {"ln_1.bias", {C}},          {"attn.c_attn.weight", {3 * C, C}},
        {"attn.c_attn.bias", {3 * C}}, {"attn.c_proj.weight", {C, C}}, {"attn.c_proj.bias", {C}},
        {"ln_2.weight", {C}},          {"ln_2.bias", {C}},          {"mlp.c_fc.weight", {4 * C, C}},
        {"mlp.c_fc.bias", {4 * C}},    {"mlp.c_proj.weight", {C, 4 * C}}, {"mlp.c_proj.bias", {C}}};
    for (const auto& [n, shape] : block) add(h + n, shape);
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  return out;
}

std::string gpt2_config_json(const std::vector<std::pair<std::string, std::string>>& metadata) {
  auto get = [&](const std::string& k) -> std::string {
    for (const auto& [key, v] : metadata)
      if (key == k) return v;
    return "";
  };
  const std::string tokenizer = get("tokenizer");
  const std::string eot = enum_named<TextTokenizer>(tokenizer) == TextTokenizer::Gpt2 ? "50256" : "null";
  std::string text = "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n";
  for (const char* k : {"vocab_size", "n_positions", "n_ctx", "n_embd", "n_layer", "n_head", "layer_norm_epsilon"})
    text += std::string("  \"") + k + "\": " + get(k) + ",\n";
  text += "  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
          "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
          "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n"
          "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n"
          "  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n  \"torch_dtype\": \"float32\",\n";
  text += "  \"bos_token_id\": " + eot + ",\n  \"eos_token_id\": " + eot + ",\n";
  text += "  \"shardtrain_tokenizer\": \"" + (tokenizer.empty() ? std::string("unknown") : tokenizer) +
          "\",\n  \"shardtrain_step\": " + get("step") + "\n}\n";
  return text;
}

}  // namespace shardtrain
