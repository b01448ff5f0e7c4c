// Unit tests of io/gpt2_names.*: GPT-2's names and the four transposed Linear
// weights, the whole table of a small GPT in layout order, and config.json.
#include "io/gpt2_names.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain {
namespace {

TEST(Gpt2Names, PrefixAndConv1dWeights) {
  EXPECT_EQ(gpt2_name("h.0.ln_1.weight"), "transformer.h.0.ln_1.weight");
  EXPECT_TRUE(is_gpt2_name("transformer.wte.weight"));
  EXPECT_FALSE(is_gpt2_name("wte.weight"));
  for (const char* w : {"h.0.attn.c_attn.weight", "h.11.attn.c_proj.weight", "h.3.mlp.c_fc.weight",
                        "h.3.mlp.c_proj.weight"})
    EXPECT_TRUE(gpt2_conv1d(w)) << w;
  for (const char* w : {"h.0.attn.c_attn.bias", "h.0.ln_1.weight", "wte.weight", "wpe.weight", "ln_f.weight",
                        "x.h.0.attn.c_attn.weight", "h.0.attn.c_attn.weight.x"})
    EXPECT_FALSE(gpt2_conv1d(w)) << w;
}

TEST(Gpt2Names, TableOfASmallGpt) {
  const std::int64_t V = 50, C = 8, T = 16, L = 2;
  const std::vector<Gpt2Tensor> t = gpt2_tensors(V, C, T, L);
  ASSERT_EQ(t.size(), static_cast<std::size_t>(2 + 12 * L + 2));
  EXPECT_EQ(t[0].ours, "wte.weight");
  EXPECT_EQ(t[0].gpt2, "transformer.wte.weight");
  EXPECT_EQ(t[0].shape, (std::vector<std::int64_t>{V, C}));
  EXPECT_FALSE(t[0].transposed);
  EXPECT_EQ(t[1].shape, (std::vector<std::int64_t>{T, C}));
  EXPECT_EQ(t[4].ours, "h.0.attn.c_attn.weight");
  EXPECT_EQ(t[4].shape, (std::vector<std::int64_t>{3 * C, C}));
  EXPECT_TRUE(t[4].transposed);
  EXPECT_EQ(t[12].ours, "h.0.mlp.c_proj.weight");
  EXPECT_EQ(t[12].shape, (std::vector<std::int64_t>{C, 4 * C}));
  EXPECT_EQ(t[14].ours, "h.1.ln_1.weight");
  EXPECT_EQ(t.back().gpt2, "transformer.ln_f.bias");
  int transposed = 0;
  for (const Gpt2Tensor& x : t) {
    transposed += x.transposed ? 1 : 0;
    EXPECT_EQ(x.gpt2, gpt2_name(x.ours));
  }
  EXPECT_EQ(transposed, 4 * L);
}

TEST(Gpt2Names, ConfigJson) {
  const std::vector<std::pair<std::string, std::string>> m{
      {"vocab_size", "50257"}, {"n_positions", "1024"}, {"n_ctx", "1024"}, {"n_embd", "768"}, {"n_layer", "12"},
      {"n_head", "12"},        {"layer_norm_epsilon", "1e-05"}, {"tokenizer", "gpt2"}, {"step", "40"}};
  const std::string j = gpt2_config_json(m);
  EXPECT_EQ(j.rfind("{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n", 0), 0u) << j;
  EXPECT_NE(j.find("  \"n_embd\": 768,\n"), std::string::npos);
  EXPECT_NE(j.find("  \"layer_norm_epsilon\": 1e-05,\n"), std::string::npos);
  EXPECT_NE(j.find("  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n"), std::string::npos);
  EXPECT_NE(j.find("  \"shardtrain_tokenizer\": \"gpt2\",\n  \"shardtrain_step\": 40\n}\n"), std::string::npos);
  auto char_model = m;
  char_model[7].second = "char";
  EXPECT_NE(gpt2_config_json(char_model).find("\"eos_token_id\": null,"), std::string::npos);
}

}  // namespace
}  // namespace shardtrain
