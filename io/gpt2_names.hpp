// shardtrain/io/gpt2_names.hpp
// Owns Hugging Face GPT-2's names for a GPT's tensors, the one table that
// `trainer-ckpt export --names gpt2` writes, model.init_from and
// `trainer-ckpt sample` read: GPT2LMHeadModel's state-dict name is ours with
// the prefix "transformer."; the four Linear weights of a block
// (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are stored as GPT-2's
// Conv1D, (in, out), where ours are (out, in); [q | k | v] along c_attn's
// output, heads contiguous, is the layout both models use; lm_head.weight is
// tied to transformer.wte.weight and not stored. Also GPT2Config's config.json
// for such an export. No HDF5, no MPI: names and text only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardtrain {

inline constexpr std::string_view kGpt2Prefix = "transformer.";

// GPT-2's name of our tensor `ours` ("h.0.ln_1.weight" -> "transformer.h.0.ln_1.weight").
std::string gpt2_name(std::string_view ours);
// Whether `name` is a GPT-2 name (starts with "transformer."): a file with one holds GPT-2's names.
bool is_gpt2_name(std::string_view name);
// Whether our tensor `ours` is one of a block's four Linear weights, which
// GPT-2 stores transposed (Conv1D's (in, out)).
bool gpt2_conv1d(std::string_view ours);

// One tensor of a GPT under GPT-2's names: our name, our shape, GPT-2's name
// and whether GPT-2 holds it transposed.
struct Gpt2Tensor {
  std::string ours;
  std::vector<std::int64_t> shape;  // ours: (out, in) for a Linear weight
  std::string gpt2;
  bool transposed = false;
};
// Every tensor of a GPT (model/gpt.hpp gpt_layout's names and shapes) of
// vocabulary `vocab`, width `d_model`, `seq_len` positions and `n_layer`
// blocks, in layout order.
std::vector<Gpt2Tensor> gpt2_tensors(std::int64_t vocab, std::int64_t d_model, std::int64_t seq_len,
                                     std::int64_t n_layer);

// Hugging Face's config.json (GPT2Config) for a GPT-2-named export, from the
// export's metadata (vocab_size, n_positions, n_ctx, n_embd, n_layer, n_head,
// layer_norm_epsilon, tokenizer, step): no dropout (ours has none), the tanh
// GELU ("gelu_new"), the LM head tied to wte, and GPT-2's <|endoftext|> id only
// for a gpt2-tokenized data set (null otherwise).
std::string gpt2_config_json(const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace shardtrain
