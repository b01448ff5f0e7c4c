// The GPT forward with a key/value cache and the sampling loop (gpt_kv.hpp).
#include "infer/gpt_kv.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace shardtrain {

namespace {

// sum_i a[i] b[i] in four interleaved partial sums (independent chains keep the
// FMA units busy; the order is fixed, so results are reproducible).
double dot(const double* a, const double* b, std::int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// y[o] = b[o] + sum_i W[o, i] x[i]   (W (out, in) row-major); y += when accumulate.
void linear(const double* x, const std::vector<double>& w, const std::vector<double>& b, double* y,
            std::int64_t in, std::int64_t out, bool accumulate = false) {
  for (std::int64_t o = 0; o < out; ++o) {
    const double s = (b.empty() ? 0.0 : b[static_cast<std::size_t>(o)]) + dot(w.data() + o * in, x, in);
    y[o] = accumulate ? y[o] + s : s;
  }
}

void layernorm(const double* x, const std::vector<double>& g, const std::vector<double>& b, double* y,
               std::int64_t c, double eps) {
  double mean = 0;
  for (std::int64_t i = 0; i < c; ++i) mean += x[i];
  mean /= static_cast<double>(c);
  double var = 0;
  for (std::int64_t i = 0; i < c; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<double>(c);
  const double rstd = 1.0 / std::sqrt(var + eps);
  for (std::int64_t i = 0; i < c; ++i) y[i] = (x[i] - mean) * rstd * g[i] + b[i];
}

double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string out;
  for (const auto d : dims) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return "(" + out + ")";
}

}  // namespace

GptSampleWeights build_gpt_weights(const std::string& path, std::int64_t n_head, double eps, const TensorSource& src) {
  GptSampleWeights w;
  w.n_head = n_head;
  w.layernorm_eps = eps;
  auto read = [&](const std::string& name, std::vector<std::int64_t> shape) {
    const auto have = src.shape(name);
    if (!have) throw InputError(path + ": no tensor '" + name + "' (not a GPT)");
    if (*have != shape)
      throw InputError(path + ": tensor '" + name + "' has shape " + dims_text(*have) + ", the GPT needs " +
                       dims_text(shape));
    const std::vector<float> f = src.read(name);
    return std::vector<double>(f.begin(), f.end());
  };
  const auto wte = src.shape("wte.weight"), wpe = src.shape("wpe.weight");
  if (!wte || !wpe || wte->size() != 2 || wpe->size() != 2)
    throw InputError(path + ": no 2-D wte.weight and wpe.weight (not a GPT)");
  w.vocab = (*wte)[0];
  w.channels = (*wte)[1];
  w.seq_len = (*wpe)[0];
  while (src.shape("h." + std::to_string(w.n_layer) + ".ln_1.weight")) ++w.n_layer;
  const std::int64_t C = w.channels, V = w.vocab, T = w.seq_len;
  if (w.n_head < 1 || C % w.n_head != 0)
    throw InputError(path + ": the stored model.n_head (" + std::to_string(w.n_head) + ") does not divide d_model " +
                     std::to_string(C));
  w.wte = read("wte.weight", {V, C});
  w.wpe = read("wpe.weight", {T, C});
  for (std::int64_t l = 0; l < w.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    GptSampleWeights::Block b;
    b.ln1_w = read(h + "ln_1.weight", {C});
    b.ln1_b = read(h + "ln_1.bias", {C});
    b.qkv_w = read(h + "attn.c_attn.weight", {3 * C, C});
    b.qkv_b = read(h + "attn.c_attn.bias", {3 * C});
    b.proj_w = read(h + "attn.c_proj.weight", {C, C});
    b.proj_b = read(h + "attn.c_proj.bias", {C});
    b.ln2_w = read(h + "ln_2.weight", {C});
    b.ln2_b = read(h + "ln_2.bias", {C});
    b.fc_w = read(h + "mlp.c_fc.weight", {4 * C, C});
    b.fc_b = read(h + "mlp.c_fc.bias", {4 * C});
    b.fc2_w = read(h + "mlp.c_proj.weight", {C, 4 * C});
    b.fc2_b = read(h + "mlp.c_proj.bias", {C});
    w.blocks.push_back(std::move(b));
  }
  w.lnf_w = read("ln_f.weight", {C});
  w.lnf_b = read("ln_f.bias", {C});
  return w;
}

GptKvForward::GptKvForward(const GptSampleWeights& w) : m_w(w) {
  const std::int64_t C = w.channels;
  const auto cache = static_cast<std::size_t>(w.n_layer * w.seq_len * C);
  m_k.resize(cache);
  m_v.resize(cache);
  m_x.resize(static_cast<std::size_t>(C));
  m_ln.resize(static_cast<std::size_t>(C));
  m_qkv.resize(static_cast<std::size_t>(3 * C));
  m_att.resize(static_cast<std::size_t>(C));
  m_fc.resize(static_cast<std::size_t>(4 * C));
  m_scores.resize(static_cast<std::size_t>(w.seq_len));
  m_logits.resize(static_cast<std::size_t>(w.vocab));
}

void GptKvForward::reset() { m_pos = 0; }

const std::vector<double>& GptKvForward::step(TokenIndex token) {
  const GptSampleWeights& w = m_w;
  const std::int64_t C = w.channels, H = w.n_head, hd = C / H, T = w.seq_len, t = m_pos;
  SHARDTRAIN_CHECK(t < T, "the key/value cache is full");
  SHARDTRAIN_CHECK(token >= 0 && token < w.vocab, "token id out of range");
  double* x = m_x.data();
  for (std::int64_t i = 0; i < C; ++i) x[i] = w.wte[static_cast<std::size_t>(token * C + i)] + w.wpe[static_cast<std::size_t>(t * C + i)];
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (std::int64_t l = 0; l < w.n_layer; ++l) {
    const auto& b = w.blocks[static_cast<std::size_t>(l)];
    layernorm(x, b.ln1_w, b.ln1_b, m_ln.data(), C, w.layernorm_eps);
    linear(m_ln.data(), b.qkv_w, b.qkv_b, m_qkv.data(), C, 3 * C);
    double* kc = m_k.data() + l * T * C;
    double* vc = m_v.data() + l * T * C;
    std::copy(m_qkv.begin() + C, m_qkv.begin() + 2 * C, kc + t * C);
    std::copy(m_qkv.begin() + 2 * C, m_qkv.begin() + 3 * C, vc + t * C);
    for (std::int64_t h = 0; h < H; ++h) {
      const double* q = m_qkv.data() + h * hd;
      double mx = -INFINITY;
      for (std::int64_t s = 0; s <= t; ++s) {
        const double d = dot(q, kc + s * C + h * hd, hd);
        m_scores[static_cast<std::size_t>(s)] = d * scale;
        mx = std::max(mx, d * scale);
      }
      double sum = 0;
      for (std::int64_t s = 0; s <= t; ++s) sum += (m_scores[static_cast<std::size_t>(s)] = std::exp(m_scores[static_cast<std::size_t>(s)] - mx));
      double* y = m_att.data() + h * hd;
      std::fill(y, y + hd, 0.0);
      for (std::int64_t s = 0; s <= t; ++s) {
        const double p = m_scores[static_cast<std::size_t>(s)] / sum;
        const double* v = vc + s * C + h * hd;
        for (std::int64_t i = 0; i < hd; ++i) y[i] += p * v[i];
      }
    }
    linear(m_att.data(), b.proj_w, b.proj_b, x, C, C, /*accumulate=*/true);
    layernorm(x, b.ln2_w, b.ln2_b, m_ln.data(), C, w.layernorm_eps);
    linear(m_ln.data(), b.fc_w, b.fc_b, m_fc.data(), C, 4 * C);
    for (double& v : m_fc) v = gelu_tanh(v);
    linear(m_fc.data(), b.fc2_w, b.fc2_b, x, 4 * C, C, /*accumulate=*/true);
  }
  layernorm(x, w.lnf_w, w.lnf_b, m_ln.data(), C, w.layernorm_eps);
  linear(m_ln.data(), w.wte, {}, m_logits.data(), C, w.vocab);  // tied LM head, no bias
  ++m_pos;
  return m_logits;
}

namespace {

// The next id from `logits` (see SampleOptions); `draw` is uniform in (0, 1) and
// picks from the cumulative softmax over the candidates: the top k by logit
// (lower id first on ties) or, without top-k, every id in id order.
TokenIndex choose(const std::vector<double>& logits, const SampleOptions& opt, double draw) {
  const auto V = static_cast<std::int64_t>(logits.size());
  if (opt.temperature == 0.0)
    return static_cast<TokenIndex>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<std::int64_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const std::int64_t k = opt.top_k > 0 ? std::min(opt.top_k, V) : V;
  // Highest logits first, lower id first on ties: the same order on every platform.
  auto higher = [&](std::int64_t a, std::int64_t b) {
    return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)] ||
           (logits[static_cast<std::size_t>(a)] == logits[static_cast<std::size_t>(b)] && a < b);
  };
  if (k < V) std::partial_sort(order.begin(), order.begin() + k, order.end(), higher);  // all: id order
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(static_cast<std::size_t>(k));
  double sum = 0;
  for (std::int64_t i = 0; i < k; ++i)
    sum += (p[static_cast<std::size_t>(i)] = std::exp((logits[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] - top) / opt.temperature));
  double acc = 0;
  for (std::int64_t i = 0; i < k; ++i) {
    acc += p[static_cast<std::size_t>(i)] / sum;
    if (draw < acc) return static_cast<TokenIndex>(order[static_cast<std::size_t>(i)]);
  }
  return static_cast<TokenIndex>(order[static_cast<std::size_t>(k - 1)]);
}

}  // namespace

GenerateResult gpt_generate(const GptSampleWeights& w, std::vector<TokenIndex>& ids, const SampleOptions& opt) {
  GenerateResult result;
  SHARDTRAIN_CHECK(!ids.empty(), "generation needs at least one prompt token");
  const auto t0 = std::chrono::steady_clock::now();
  GptKvForward fwd(w);
  const std::int64_t T = w.seq_len, keep = std::max<std::int64_t>(1, T / 2);
  std::int64_t start = 0;  // the window: ids[start, size)
  std::int64_t fed = 0;    // ids[start, start + fed) are in the cache
  const std::vector<double>* logits = nullptr;
  for (std::int64_t n = 0; n < opt.tokens; ++n) {
    const auto len = static_cast<std::int64_t>(ids.size());
    if (len - start > T) {  // the window is full: restart it at the last T/2 tokens
      start = len - keep;
      fed = 0;
    }
    if (!opt.use_cache) fed = 0;
    if (fed == 0) fwd.reset();
    for (; start + fed < len; ++fed) logits = &fwd.step(ids[static_cast<std::size_t>(start + fed)]);
    const double draw = uniform01(hash64(opt.seed, 0x73616D706C65ull /* "sample" */, static_cast<std::uint64_t>(n)));
    const TokenIndex next = choose(*logits, opt, draw);
    const double top = *std::max_element(logits->begin(), logits->end());
    double sum = 0;
    for (const double l : *logits) sum += std::exp(l - top);
    result.logprob += (*logits)[static_cast<std::size_t>(next)] - top - std::log(sum);
    ids.push_back(next);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace shardtrain
