// shardtrain/infer/gpt_kv.hpp
// Owns text generation with a GPT (src/model/gpt.hpp's architecture: token and
// position embeddings, pre-LayerNorm blocks with causal attention over a fused
// [q | k | v] projection and a tanh-GELU MLP, final LayerNorm, LM head tied to
// wte): a one-process forward one token at a time, with a key/value cache, and
// the sampling loop. Plain C++ in double on fp32 weights, on core only, so that
// both `trainer-ckpt sample` (src/tools, from a checkpoint or an export) and the
// trainer's train.sample_every (src/train, from the run's weights) use it;
// inference of one sequence needs none of the trainer's sharding. The math is
// checked against PyTorch's greedy decoding (share/reference/gpt_torch.py
// generate; tests/e2e/ckpt).
// The context window: the model sees at most T (seq_len) positions. When the
// sequence outgrows it, the window restarts at the last T/2 tokens (the cache is
// rebuilt from them), so generation goes on past T at the cost of one rebuild
// every T/2 tokens; the PyTorch reference applies the same rule.
// Randomness: draw n comes from hash64(seed, "sample", n) alone (core/rng.hpp),
// never from a generator the caller shares, so sampling changes nothing else.
#pragma once

#include "core/types.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace shardtrain {

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

// Where a GPT's tensors come from (a checkpoint, an export, the trainer's
// flat weights): `shape` gives a tensor's shape in our (out, in) layout, or
// nothing when absent; `read` its values in that layout.
struct TensorSource {
  std::function<std::optional<std::vector<std::int64_t>>(const std::string&)> shape;
  std::function<std::vector<float>(const std::string&)> read;
};

// The weights of the GPT in `src` (gpt_layout's names: wte.weight, wpe.weight,
// h.N.*, ln_f.*; the sizes from their shapes) with `n_head` heads; InputError
// naming `path` and the tensor when one is missing or misshapen.
GptSampleWeights build_gpt_weights(const std::string& path, std::int64_t n_head, double eps, const TensorSource& src);

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

