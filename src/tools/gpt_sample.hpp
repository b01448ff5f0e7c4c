// shardtrain/tools/gpt_sample.hpp
// Owns text generation from a GPT checkpoint (`trainer-ckpt sample`): a
// one-process forward of the GPT (src/model/gpt.hpp's architecture: token and
// position embeddings, pre-LayerNorm blocks with causal attention over a fused
// [q | k | v] projection and a tanh-GELU MLP, final LayerNorm, LM head tied to
// wte) one token at a time, with a key/value cache. Plain C++ in double on the
// checkpoint's fp32 master weights: the tools layer sits on io and core only
// (share/doc/architecture.md), and inference of one sequence needs none of the
// trainer's sharding. The math is checked against PyTorch's greedy decoding
// (share/reference/gpt_torch.py generate; tests/e2e/ckpt).
// The context window: the model sees at most T (seq_len) positions. When the
// sequence outgrows it, the window restarts at the last T/2 tokens (the cache is
// rebuilt from them), so generation goes on past T at the cost of one rebuild
// every T/2 tokens; the PyTorch reference applies the same rule.
#pragma once

#include "core/types.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain {

class CheckpointReader;
class WeightsFile;

struct GptSampleWeights {
  std::int64_t n_layer = 0, channels = 0, n_head = 0, seq_len = 0, vocab = 0;
  double layernorm_eps = 1e-5;
  std::vector<double> wte, wpe;  // (V, C), (T, C)
  struct Block {
    std::vector<double> ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;  // qkv_w (3C, C), proj_w (C, C)
    std::vector<double> ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b;      // fc_w (4C, C), fc2_w (C, 4C)
  };
  std::vector<Block> blocks;
  std::vector<double> lnf_w, lnf_b;
};

// The fp32 master weights of a GPT checkpoint and its stored model config
// (model.type must be "gpt"); InputError naming the file and the tensor otherwise.
GptSampleWeights load_gpt_sample_weights(CheckpointReader& ckpt);
// The same from an export (io/weights_file.hpp: safetensors under our names or
// GPT-2's, or HDF5), its n_head and layernorm_eps from the file's metadata
// (`trainer-ckpt export` writes them); InputError naming what is missing.
GptSampleWeights load_gpt_sample_weights(const WeightsFile& file);

// One sequence's forward with a key/value cache.
class GptKvForward {
 public:
  explicit GptKvForward(const GptSampleWeights& w);
  void reset();                           // empty the cache (position 0)
  std::int64_t position() const { return m_pos; }
  // Runs `token` at the next position (< seq_len) and returns the logits (V).
  const std::vector<double>& step(TokenIndex token);

 private:
  const GptSampleWeights& m_w;
  std::int64_t m_pos = 0;
  std::vector<double> m_k, m_v;  // (L, T, C) each
  std::vector<double> m_x, m_ln, m_qkv, m_att, m_fc, m_scores, m_logits;
};

struct SampleOptions {
  std::int64_t tokens = 100;     // to generate
  double temperature = 1.0;      // 0: greedy (argmax, lowest id on ties)
  std::int64_t top_k = 0;        // 0: all
  std::uint64_t seed = 1;
  bool use_cache = true;         // false: re-run the whole window for every token (benchmark, test)
};

struct GenerateResult {
  double seconds = 0;   // spent generating
  double logprob = 0;   // sum over the generated tokens of log softmax(logits)[token] (temperature 1)
};

// Appends opt.tokens ids to `ids` (which holds the prompt, at least one id).
// Same weights, prompt and options give the same ids; with and without the cache
// too.
GenerateResult gpt_generate(const GptSampleWeights& w, std::vector<TokenIndex>& ids, const SampleOptions& opt);

}  // namespace shardtrain

namespace shardtrain {

// `trainer-ckpt sample` (src/tools/ckpt_sample.cpp): loads the weights of CKPT (a
// checkpoint, or an export: .safetensors, or an .h5 that is not a checkpoint)
// and its data set's vocabulary (data.path stored in CKPT or data_path in the
// export's metadata, or `data`), encodes `prompt`
// with the data set's tokenizer (gpt2: with the BPE files in `bpe_dir`), generates,
// and prints the prompt and continuation as text (or, with `print_ids`, the ids
// and the continuation's log-probability under the model), and the speed on stderr.
struct SampleCommand {
  std::string checkpoint, data, bpe_dir, prompt;
  SampleOptions options;
  bool print_ids = false;
};
void run_sample_command(const SampleCommand& cmd);

}  // namespace shardtrain
