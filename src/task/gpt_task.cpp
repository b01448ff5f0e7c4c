// GptTask: the GPT language model on a token data set (task/task.hpp).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "infer/gpt_kv.hpp"
#include "io/text_tokenizer.hpp"
#include "io/token_dataset.hpp"
#include "model/gpt.hpp"
#include "task/batch_sampler.hpp"
#include "task/task_factory.hpp"

namespace shardtrain {

namespace {

// Checks that the data set fits the model; every rank sees the same file, so
// every rank throws the same InputError.
void check_data_fits(const RunConfig& cfg, const TokenDataset& data) {
  const auto& p = cfg.data.path;
  const std::int64_t need = cfg.model.seq_len + 1;
  if (data.size(Split::Train) < 2 * need)
    throw InputError(fmt::format("{}: train split has {} tokens; model.seq_len = {} needs at least {}",
                                 p, data.size(Split::Train), cfg.model.seq_len, 2 * need));
  if (data.size(Split::Val) < need)
    throw InputError(fmt::format("{}: validation split has {} tokens; model.seq_len = {} needs at least {}",
                                 p, data.size(Split::Val), cfg.model.seq_len, need));
}

// train.sample_prompt as ids of the data set's vocabulary (none: gpt2's
// <|endoftext|>, or token 0); InputError, the same on every rank, for a prompt
// the tokenizer cannot encode here.
std::vector<TokenIndex> sample_prompt_ids(const RunConfig& cfg, const TokenDataset& data) {
  const TextTokenizer tok = data.tokenizer();
  const std::string& prompt = cfg.train.sample_prompt;
  const auto& vocab = data.vocab();
  if (tok == TextTokenizer::Pretokenized)
    throw InputError(fmt::format("{}: train.sample_every: {} is pretokenized and carries no vocabulary to write "
                                 "text with", cfg.source_name, cfg.data.path));
  if (prompt.empty()) {
    if (tok == TextTokenizer::Gpt2 && !vocab.empty() && vocab.back() == "<|endoftext|>")
      return {static_cast<TokenIndex>(vocab.size() - 1)};
    return {0};
  }
  if (tok == TextTokenizer::Byte) {
    std::vector<TokenIndex> ids;
    for (const char c : prompt) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  if (tok != TextTokenizer::Char)
    throw InputError(fmt::format("{}: train.sample_prompt: a {} data set ({}) takes no prompt here (the trainer has "
                                 "no BPE merges); leave it out to start from <|endoftext|>, or use trainer-ckpt "
                                 "sample --bpe on a checkpoint", cfg.source_name, name_of(tok), cfg.data.path));
  std::vector<TokenIndex> ids;
  for (std::size_t i = 0; i < prompt.size();) {
    const auto b = static_cast<unsigned char>(prompt[i]);
    const std::size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    const std::string ch = prompt.substr(i, len);
    const auto it = std::find(vocab.begin(), vocab.end(), ch);
    if (it == vocab.end())
      throw InputError(fmt::format("{}: train.sample_prompt: character '{}' at byte offset {} is not in the "
                                   "vocabulary of {} ({} characters)", cfg.source_name, ch, i, cfg.data.path,
                                   vocab.size()));
    ids.push_back(static_cast<TokenIndex>(it - vocab.begin()));
    i += len;
  }
  return ids;
}

template <class P>
class GptTask final : public Task<P> {
 public:
  GptTask(const RunConfig& cfg, MpiCommunicator& comm, int plan_world)
      : m_cfg(cfg), m_comm(comm), m_data(cfg.data.path, comm.comm(), cfg.checkpoint.io_timeout_s) {
    check_data_fits(cfg, m_data);
    this->m_plan = plan_gpt_memory(cfg, m_data.vocab_size(), plan_world);
    m_dims = this->m_plan.dims;
    if (cfg.train.sample_every > 0) m_sample_prompt = sample_prompt_ids(cfg, m_data);
  }

  std::string sample_text(const ParamLayout& layout, const float* weights, double& logprob) const override {
    if (m_sample_prompt.empty()) return {};
    TensorSource src{[&](const std::string& name) -> std::optional<std::vector<std::int64_t>> {
                       for (const auto& e : layout.entries())
                         if (e.name == name) return e.shape;
                       return std::nullopt;
                     },
                     [&](const std::string& name) {
                       const ParamEntry& e = layout.find(name);
                       return std::vector<float>(weights + e.offset, weights + e.offset + e.numel);
                     }};
    const GptSampleWeights w = build_gpt_weights(m_cfg.source_name, m_dims.n_head, m_cfg.model.layernorm_eps, src);
    SampleOptions opt;
    opt.tokens = m_cfg.train.sample_tokens;
    opt.temperature = m_cfg.train.sample_temperature;
    opt.seed = m_cfg.train.seed;
    std::vector<TokenIndex> ids = m_sample_prompt;
    logprob = gpt_generate(w, ids, opt).logprob;
    const bool from_eot = m_cfg.train.sample_prompt.empty() && m_data.tokenizer() == TextTokenizer::Gpt2;
    const std::vector<TokenIndex> shown(ids.begin() + (from_eot ? 1 : 0), ids.end());
    return decode_tokens(m_data.tokenizer(), m_data.vocab(), shown);
  }

  TaskText describe() const override {
    return {fmt::format("GPT L={} C={} H={} T={} V={}{}{}", m_dims.n_layer, m_dims.channels, m_dims.n_head,
                        m_dims.seq_len, m_dims.vocab, m_dims.fused_attention  ? ", fused attention (cuDNN)"
                        : m_dims.flash_attention ? ", flash attention (ours)"
                                                 : "",
                        m_dims.gelu_epilogue ? ", GELU in cuBLASLt's epilogues" : ""),
            fmt::format("batch {} x {} tokens, micro-batch {}", m_cfg.train.batch_size, m_dims.seq_len,
                        m_dims.max_batch),
            fmt::format("data {} ({} train / {} val tokens)", m_cfg.data.path, m_data.size(Split::Train),
                        m_data.size(Split::Val))};
  }
  std::int64_t targets_per_sample() const override { return m_dims.seq_len; }
  std::int64_t tokens_per_sample() const override { return m_dims.seq_len; }
  DataIdentity data_identity() const override {
    return {m_data.size(Split::Train), "tokens", m_data.vocab_size(), m_dims.seq_len, m_data.tokenizer()};
  }
  ParamLayout make_layout() const override { return gpt_layout(m_dims); }
  void init_params(const ParamLayout& layout, P* params, std::int64_t lo, std::int64_t hi) const override {
    gpt_init_params<P>(layout, m_dims, m_cfg.model.init_std, m_cfg.train.seed, params, lo, hi);
  }
  void build(const ParamLayout& layout, MemoryTracker& memory, Backend& backend,
             ParamProvider<P>& provider) override {
    m_model = std::make_unique<Gpt<P>>(m_dims, layout, m_cfg.model.layernorm_eps, memory, &this->m_plan.recompute,
                                       &backend);
    m_model->bind(provider);
    const std::int64_t t = m_dims.seq_len, mb = m_dims.max_batch;
    m_window_buf = TrackedBuffer<TokenIndex>(memory, MemCategory::Data, mb * (t + 1));
    m_inputs = TrackedBuffer<TokenIndex>(memory, MemCategory::Data, mb * t);
    m_targets = TrackedBuffer<TokenIndex>(memory, MemCategory::Data, mb * t);
    m_sampler = std::make_unique<WindowSampler>(m_data.size(Split::Train), t, m_cfg.train.seed);
  }

  double train_micro_batch(std::int64_t cursor, std::int64_t lo, std::int64_t hi, std::int64_t m,
                           P dloss) override {
    const std::int64_t b = load_micro_batch(Split::Train, lo, hi, m, [&](std::int64_t k) {
      return m_sampler->window_start(cursor + k);
    });
    const double loss = m_model->forward(m_inputs.data(), m_targets.data(), b);
    m_model->backward(dloss);
    return loss;
  }

  EvalResult evaluate(std::int64_t max_windows) override {
    const std::int64_t t = m_dims.seq_len;
    std::int64_t windows = eval_window_count(m_data.size(Split::Val), t);
    if (max_windows > 0) windows = std::min(windows, max_windows);
    const auto [lo, hi] = rank_slice(windows, m_comm.rank(), m_comm.size());
    double loss_sum = 0.0;
    for (std::int64_t m = 0; m < micro_batches(windows, m_comm.size(), m_dims.max_batch); ++m) {
      const std::int64_t b = load_micro_batch(Split::Val, lo, hi, m, [t](std::int64_t k) { return k * t; });
      loss_sum += m_model->forward(m_inputs.data(), m_targets.data(), b);
    }
    loss_sum = m_comm.all_reduce_value(loss_sum);
    EvalResult r;
    r.loss = loss_sum / static_cast<double>(windows * t);
    r.samples = windows;
    return r;
  }
  std::int64_t activation_high_water_bytes() const override {
    return m_model ? m_model->activation_high_water_bytes() : 0;
  }

 private:
  // Micro-batch m of this rank's slice [lo, hi): reads the windows of samples
  // first..first+b-1 (first token of sample k at start_of(k)) and splits them into
  // inputs and targets. Returns b, 0 once the slice is used up.
  template <class StartOf>
  std::int64_t load_micro_batch(Split split, std::int64_t lo, std::int64_t hi, std::int64_t m, StartOf start_of) {
    const std::int64_t t = m_dims.seq_len, first = lo + m * m_dims.max_batch;
    const std::int64_t b = std::clamp<std::int64_t>(hi - first, 0, m_dims.max_batch);
    if (b == 0) return 0;
    m_starts.resize(b);
    for (std::int64_t i = 0; i < b; ++i) m_starts[i] = start_of(first + i);
    m_data.read_windows(split, m_starts, t + 1, m_window_buf.data());
    for (std::int64_t i = 0; i < b; ++i) {
      const TokenIndex* w = m_window_buf.data() + i * (t + 1);
      std::copy(w, w + t, m_inputs.data() + i * t);
      std::copy(w + 1, w + t + 1, m_targets.data() + i * t);
    }
    return b;
  }

  const RunConfig& m_cfg;
  MpiCommunicator& m_comm;
  TokenDataset m_data;
  GptDims m_dims;
  std::unique_ptr<Gpt<P>> m_model;
  std::unique_ptr<WindowSampler> m_sampler;
  TrackedBuffer<TokenIndex> m_window_buf, m_inputs, m_targets;
  std::vector<std::int64_t> m_starts;
  std::vector<TokenIndex> m_sample_prompt;  // train.sample_every: the prompt's ids (empty: off)
};

}  // namespace

template <class P>
std::unique_ptr<Task<P>> make_gpt_task(const RunConfig& config, MpiCommunicator& comm, int plan_world) {
  return std::make_unique<GptTask<P>>(config, comm, plan_world);
}

template std::unique_ptr<Task<float>> make_gpt_task<float>(const RunConfig&, MpiCommunicator&, int);
template std::unique_ptr<Task<f16>> make_gpt_task<f16>(const RunConfig&, MpiCommunicator&, int);
template std::unique_ptr<Task<bf16>> make_gpt_task<bf16>(const RunConfig&, MpiCommunicator&, int);

}  // namespace shardtrain
