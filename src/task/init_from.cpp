// model.init_from: the name and shape matching (ours, GPT-2's, Hugging Face's
// BERT / DistilBERT with their config.json), each rank's read of its shard, and
// the start of a run from those weights (init_from.hpp).
#include "task/init_from.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "backend/host_staging.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/text.hpp"
#include "io/checkpoint_phase.hpp"
#include "io/gpt2_names.hpp"
#include "io/hf_bert_names.hpp"
#include "model/encoder_classifier.hpp"  // kBertTypeVocab
#include "io/weights_file.hpp"
#include "parallel/mpi/agreement.hpp"
#include "rundir/weights_crc.hpp"

namespace shardtrain {

namespace {

// One tensor of the model, or a piece of one, and where it is in the file.
struct Source {
  const ParamEntry* entry = nullptr;
  const WeightsTensor* tensor = nullptr;  // nullptr: a head the file lacks, initialised fresh
  bool transpose = false;  // the file holds entry's (out, in) matrix as (in, out)
  std::int64_t elem0 = 0;  // the piece's first element in the entry (Hugging Face's q / k / v of c_attn)
  std::int64_t numel = 0;  // the piece's elements (the entry's, but for a piece)
};

// Where a Hugging Face model is: FILE.safetensors with config.json beside it, or
// a folder holding both.
struct HfFiles {
  std::string weights, config;
};
HfFiles hf_files(const std::string& init_from) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(init_from, ec))
    return {(fs::path(init_from) / "model.safetensors").string(), (fs::path(init_from) / "config.json").string()};
  return {init_from, (fs::path(init_from).parent_path() / "config.json").string()};
}

// config.json's dimensions against the model's; InputError naming the key, both values and the model.* key.
void check_hf_config(const std::string& path, const ParamLayout& layout, const RunConfig& cfg) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw InputError(fmt::format("{}: model.init_from: Hugging Face weights need their config.json beside them "
                                 "(for the attention heads and the model type); not found", path));
  const std::map<std::string, std::string> c = read_json_scalars(path);
  const bool distil = cfg.model.layout == EncoderLayout::Distilbert;
  const std::string family = distil ? "distilbert" : "bert";
  auto value = [&](const std::string& key) -> std::string {
    const auto it = c.find(key);
    if (it == c.end()) throw InputError(fmt::format("{}: model.init_from: config.json has no '{}'", path, key));
    return it->second;
  };
  if (value("model_type") != family)
    throw InputError(fmt::format("{}: model.init_from: config.json's model_type is \"{}\"; model.layout = \"{}\" "
                                 "({}) reads \"{}\"", path, value("model_type"), family, cfg.source_name, family));
  const auto& e = layout.entries();
  auto rows = [&](const std::string& name) {
    for (const auto& t : e)
      if (t.name == name) return t.shape[0];
    return std::int64_t{-1};
  };
  std::int64_t n_layer = 0;
  for (const auto& t : e) n_layer += t.name.ends_with(".ln_1.weight") ? 1 : 0;
  const std::int64_t channels = rows("ln_emb.weight");
  struct Want {
    std::string key;
    std::int64_t ours;
    std::string what;
  };
  std::vector<Want> want = {
      {"vocab_size", rows("wte.weight"), "the data set's vocabulary (" + cfg.data.path + ")"},
      {distil ? "dim" : "hidden_size", channels, "model.d_model"},
      {distil ? "n_layers" : "num_hidden_layers", n_layer, "model.n_layer"},
      {distil ? "n_heads" : "num_attention_heads", cfg.model.n_head, "model.n_head"},
      {distil ? "hidden_dim" : "intermediate_size", 4 * channels, "4 x model.d_model (our blocks' FFN width)"},
      {"max_position_embeddings", rows("wpe.weight"), "model.max_positions (0: the sequence length)"},
  };
  if (!distil) want.push_back({"type_vocab_size", kBertTypeVocab, "BERT's two segments"});
  for (const Want& w : want)
    if (value(w.key) != std::to_string(w.ours))
      throw InputError(fmt::format("{}: model.init_from: config.json has {} = {}; the model has {} ({}, {})", path,
                                   w.key, value(w.key), w.ours, w.what, cfg.source_name));
  const std::string act = c.count(distil ? "activation" : "hidden_act") ? value(distil ? "activation" : "hidden_act")
                                                                         : "gelu";
  if (act != "gelu")
    throw InputError(fmt::format("{}: model.init_from: config.json's activation is \"{}\"; the model's is \"gelu\" "
                                 "(the exact erf form)", path, act));
  // DistilBERT's LayerNorm eps is fixed at 1e-12; BERT's is config.json's layer_norm_eps.
  const double eps = distil || !c.count("layer_norm_eps") ? 1e-12 : std::stod(value("layer_norm_eps"));
  if (std::abs(eps - cfg.model.layernorm_eps) > 1e-6 * eps)
    throw InputError(fmt::format("{}: model.init_from: the model's LayerNorm eps is {:g}; set model.layernorm_eps = "
                                 "{:g} ({})", path, eps, eps, cfg.source_name));
}

// The model's tensors in a Hugging Face file (hf_bert_names.hpp): c_attn from
// three tensors, a head the file lacks fresh; missing, extra or misshapen
// tensors refused by name.
std::vector<Source> match_hf(const WeightsFile& file, const ParamLayout& layout, const RunConfig& cfg,
                             std::vector<std::string>& fresh, std::vector<std::string>& unused) {
  const std::string& path = file.path();
  const EncoderLayout family = cfg.model.layout;
  const std::string_view prefix = hf_bert_prefix(family);
  bool prefixed = false;
  for (const WeightsTensor& t : file.tensors()) prefixed = prefixed || t.name.starts_with(prefix);
  std::vector<Source> out;
  std::vector<const WeightsTensor*> used;
  for (const ParamEntry& e : layout.entries()) {
    const std::int64_t row_elems = e.numel / e.shape[0];
    const std::vector<HfPiece> pieces = hf_bert_pieces(family, e.name, e.shape[0], prefixed);
    bool any = false;
    for (const HfPiece& p : pieces) any = any || file.find(p.name) != nullptr;
    if (hf_bert_head_tensor(e.name) && !any) {
      fresh.push_back(e.name);
      out.push_back(Source{&e, nullptr, false, 0, e.numel});
      continue;
    }
    if (pieces.empty())
      throw InputError(fmt::format("{}: model.init_from: the model's {} has no Hugging Face name in a {} file", path,
                                   e.name, prefixed ? "prefixed" : "base-model"));
    for (const HfPiece& p : pieces) {
      std::vector<std::int64_t> want = e.shape;
      want[0] = p.rows;
      const WeightsTensor* t = file.find(p.name);
      if (!t)
        throw InputError(fmt::format("{}: model.init_from: tensor '{}' is missing (the model's {}{}, shape {}; the "
                                     "file has {} tensors)", path, p.name, e.name,
                                     pieces.size() > 1 ? fmt::format(" rows [{}, {})", p.row0, p.row0 + p.rows) : "",
                                     shape_text(want), file.tensors().size()));
      if (t->shape != want)
        throw InputError(fmt::format("{}: model.init_from: tensor '{}' has shape {} in the file; the model needs {} "
                                     "(for its {})", path, p.name, shape_text(t->shape), shape_text(want), e.name));
      if (t->dtype != "F32")
        throw InputError(fmt::format("{}: model.init_from: tensor '{}' is {}; only float32 (F32) weights are read",
                                     path, p.name, t->dtype));
      used.push_back(t);
      out.push_back(Source{&e, t, false, p.row0 * row_elems, p.rows * row_elems});
    }
  }
  std::vector<std::string> extra;
  for (const WeightsTensor& t : file.tensors()) {
    if (is_hf_bert_buffer(t.name) || std::find(used.begin(), used.end(), &t) != used.end()) continue;
    if (is_hf_bert_pretraining_head(family, t.name))
      unused.push_back(t.name);
    else
      extra.push_back(t.name + " " + shape_text(t.shape));
  }
  if (!extra.empty()) {
    std::string list;
    for (std::size_t i = 0; i < extra.size() && i < 6; ++i) list += (i ? ", " : "") + extra[i];
    throw InputError(fmt::format("{}: model.init_from: {} tensor{} in the file {} not part of the model ({}, layout "
                                 "\"{}\"): {}{}", path, extra.size(), extra.size() == 1 ? "" : "s",
                                 extra.size() == 1 ? "is" : "are", cfg.source_name, name_of(family), list,
                                 extra.size() > 6 ? ", ..." : ""));
  }
  return out;
}

std::string data_text(const RunConfig& cfg, const DataIdentity& data) {
  return fmt::format("the data set {} has {} tokens{}", cfg.data.path, data.vocab_size,
                     data.tokenizer ? fmt::format(" (tokenizer {})", name_of(*data.tokenizer)) : std::string());
}

// The model's tensors in the file; InputError naming the file, the tensor and both shapes otherwise.
std::vector<Source> match(const WeightsFile& file, const ParamLayout& layout, const RunConfig& cfg,
                          const DataIdentity& data, bool gpt2) {
  const std::string& path = file.path();
  const bool gpt = cfg.model.type == ModelType::Gpt;
  if (gpt2 && !gpt)
    throw InputError(fmt::format("{}: model.init_from: GPT-2 names (\"transformer.*\") fit a gpt; this model.type is "
                                 "\"{}\"", path, name_of(cfg.model.type)));
  // The vocabulary, before any shape: a gpt's wte rows are the data set's tokens.
  if (gpt && data.vocab_size > 0) {
    const std::string wte_name = gpt2 ? gpt2_name("wte.weight") : "wte.weight";
    if (const WeightsTensor* wte = file.find(wte_name); wte && wte->shape.size() == 2 && wte->shape[0] != data.vocab_size)
      throw InputError(fmt::format("{}: model.init_from: vocabulary mismatch: the file's is {} tokens ({} has {} rows), "
                                   "{} ({})", path, wte->shape[0], wte_name, wte->shape[0], data_text(cfg, data),
                                   cfg.source_name));
    const std::string file_vocab = file.metadata_or("vocab_size", "");
    if (!file_vocab.empty() && file_vocab != std::to_string(data.vocab_size))
      throw InputError(fmt::format("{}: model.init_from: vocabulary mismatch: the file records vocab_size {}, {} ({})",
                                   path, file_vocab, data_text(cfg, data), cfg.source_name));
    const std::string file_tok = file.metadata_or("tokenizer", "");
    if (!file_tok.empty() && data.tokenizer && enum_named<TextTokenizer>(file_tok) != data.tokenizer)
      throw InputError(fmt::format("{}: model.init_from: tokenizer mismatch: the file's weights were trained with the "
                                   "{} tokenizer (data set {}), {} ({})",
                                   path, file_tok, file.metadata_or("data_path", "?"), data_text(cfg, data),
                                   cfg.source_name));
  }
  std::vector<Source> out;
  std::vector<const WeightsTensor*> used;
  for (const ParamEntry& e : layout.entries()) {
    Source s{&e, nullptr, gpt2 && gpt2_conv1d(e.name) && e.shape.size() == 2, 0, e.numel};
    const std::string name = gpt2 ? gpt2_name(e.name) : e.name;
    const std::vector<std::int64_t> want =
        s.transpose ? std::vector<std::int64_t>{e.shape[1], e.shape[0]} : e.shape;
    s.tensor = file.find(name);
    if (!s.tensor)
      throw InputError(fmt::format("{}: model.init_from: tensor '{}' is missing (the model's {}, shape {}; the file "
                                   "has {} tensors)", path, name, e.name, shape_text(want),
                                   file.tensors().size()));
    if (s.tensor->shape != want)
      throw InputError(fmt::format("{}: model.init_from: tensor '{}' has shape {} in the file; the model needs {}{}",
                                   path, name, shape_text(s.tensor->shape), shape_text(want),
                                   s.transpose ? " (GPT-2's Conv1D layout, (in, out))" : ""));
    if (s.tensor->dtype != "F32")
      throw InputError(fmt::format("{}: model.init_from: tensor '{}' is {}; only float32 (F32) weights are read",
                                   path, name, s.tensor->dtype));
    used.push_back(s.tensor);
    out.push_back(s);
  }
  std::vector<std::string> extra;
  for (const WeightsTensor& t : file.tensors())
    if (std::find(used.begin(), used.end(), &t) == used.end()) extra.push_back(t.name + " " + shape_text(t.shape));
  if (!extra.empty()) {
    std::string list;
    for (std::size_t i = 0; i < extra.size() && i < 6; ++i) list += (i ? ", " : "") + extra[i];
    throw InputError(fmt::format("{}: model.init_from: {} tensor{} in the file {} not part of the model ({}): {}{}",
                                 path, extra.size(), extra.size() == 1 ? "" : "s", extra.size() == 1 ? "is" : "are",
                                 cfg.source_name, list, extra.size() > 6 ? ", ..." : ""));
  }
  return out;
}

// Fills master[q - lo] for the flat elements q in [lo, hi) of the model's
// tensors from the file; returns the bytes read.
std::uint64_t read_shard(const WeightsFile& file, const std::vector<Source>& sources, std::int64_t lo, std::int64_t hi,
                         float* master) {
  std::uint64_t bytes = 0;
  std::vector<float> tmp;
  for (const Source& s : sources) {
    const ParamEntry& e = *s.entry;
    if (!s.tensor) continue;  // fresh: keeps its initial values
    if (!s.transpose) {  // the piece: elements [elem0, elem0 + numel) of the entry, the file tensor's [0, numel)
      const std::int64_t start = e.offset + s.elem0;
      const std::int64_t a = std::max(lo, start) - start, b = std::min(hi, start + s.numel) - start;
      float* dst = master + (start - lo);  // dst[q]: element q of the piece
      for (std::int64_t q = a; q < b; q += kInitFromChunk) {
        const std::int64_t end = std::min(b, q + kInitFromChunk);
        file.read(*s.tensor, q, end, dst + q);
        bytes += static_cast<std::uint64_t>(end - q) * 4;
      }
      continue;
    }
    const std::int64_t a = std::max(lo, e.offset) - e.offset, b = std::min(hi, e.offset + e.numel) - e.offset;
    if (a >= b) continue;
    float* dst = master + (e.offset - lo);  // dst[q]: element q of the tensor
    // Ours (R, K) row-major, the file's (K, R): element (o, i) is q = o*K + i here, i*R + o there.
    const std::int64_t R = e.shape[0], K = e.shape[1];
    const std::int64_t rows_per_block = std::max<std::int64_t>(1, kInitFromChunk / K);
    for (std::int64_t o0 = a / K; o0 <= (b - 1) / K; o0 += rows_per_block) {
      const std::int64_t o1 = std::min((b - 1) / K + 1, o0 + rows_per_block), n = o1 - o0;
      tmp.resize(static_cast<std::size_t>(n * K));
      for (std::int64_t i = 0; i < K; ++i) file.read(*s.tensor, i * R + o0, i * R + o1, tmp.data() + i * n);
      bytes += static_cast<std::uint64_t>(n * K) * 4;
      for (std::int64_t o = o0; o < o1; ++o)
        for (std::int64_t i = 0; i < K; ++i) {
          const std::int64_t q = o * K + i;
          if (q >= a && q < b) dst[q] = tmp[static_cast<std::size_t>(i * n + (o - o0))];
        }
    }
  }
  return bytes;
}

}  // namespace

template <class P>
InitFromReport load_init_from(const RunConfig& cfg, MpiCommunicator& comm, Communicator& state_comm,
                              ModelState<P>& state, const DataIdentity& data) {
  const auto t0 = SteadyClock::now();
  InitFromReport report;
  const ShardView<P> s = state.shard_view();
  const std::size_t n = static_cast<std::size_t>(s.size());
  std::vector<unsigned char> st_master, st_p;
  float* master = nullptr;
  P* params = nullptr;
  // Each rank's reads run under the I/O deadline (checkpoint.io_timeout_s):
  // storage that stops answering ends the job naming the rank, 'read' and the
  // file, before the others wait forever in the agreement.
  IoDeadline deadline(cfg.checkpoint.io_timeout_s, comm.rank(), "model.init_from I/O");
  const Agreement a = agree_on_failure(comm.comm(), [&] {
    IoDeadline::Phase watch(&deadline, "read", cfg.model.init_from);
    const bool bert_family = cfg.model.type == ModelType::EncoderClassifier && cfg.model.layout != EncoderLayout::PreLn;
    const HfFiles hf = bert_family ? hf_files(cfg.model.init_from) : HfFiles{cfg.model.init_from, ""};
    const WeightsFile file(hf.weights);
    bool gpt2 = false, hf_names = false;
    for (const WeightsTensor& t : file.tensors()) {
      gpt2 = gpt2 || is_gpt2_name(t.name);
      hf_names = hf_names || (bert_family && is_hf_bert_name(cfg.model.layout, t.name));
    }
    std::vector<Source> sources;
    if (hf_names) {
      check_hf_config(hf.config, state.layout(), cfg);
      sources = match_hf(file, state.layout(), cfg, report.fresh, report.unused);
    } else {
      sources = match(file, state.layout(), cfg, data, gpt2);
    }
    master = to_host(state.backend(), s.master.data(), n, st_master);
    report.bytes_read = read_shard(file, sources, s.lo, s.hi, master);
    if constexpr (!std::is_same_v<P, float>) {
      params = to_host(state.backend(), s.params.data(), n, st_p);
      convert(master, params, n);
    }
    report.format = file.format();
    report.names = hf_names ? std::string(name_of(cfg.model.layout)) : gpt2 ? "gpt2" : "ours";
    for (const Source& src : sources) {
      if (!src.tensor) continue;
      report.tensors += 1;
      report.transposed += src.transpose ? 1 : 0;
      report.parameters += src.numel;
      report.file_bytes += static_cast<std::uint64_t>(src.numel) * 4;
    }
    const std::string ckpt = file.metadata_or("source_checkpoint", "");
    if (!ckpt.empty()) report.source = fmt::format("exported from {} at step {}", ckpt, file.metadata_or("step", "?"));
  });
  if (a.failed()) {
    if (a.worst == Outcome::BadInput) throw InputError(a.message);
    throw AgreedError(fmt::format("model.init_from: rank {}: {}", a.first_failing, a.message));
  }
  from_host(state.backend(), s.master.data(), master, n);
  if constexpr (!std::is_same_v<P, float>) from_host(state.backend(), s.params.data(), params, n);
  state.replicate_shard(state_comm);
  report.seconds = seconds_since(t0);
  return report;
}

template <class P>
std::string start_from_exported_weights(const RunConfig& cfg, MpiCommunicator& comm, Communicator& state_comm,
                                        ModelState<P>& state, const DataIdentity& data) {
  const InitFromReport r = load_init_from(cfg, comm, state_comm, state, data);
  const std::uint32_t crc = weights_crc(state, comm, 0);  // collective: the weights as every rank holds them
  if (comm.rank() != 0) return std::string();
  return fmt::format(
      "init_from: {}: {} tensors, {} parameters ({}, {} names{}){}{}; step 0, fresh optimizer state; "
      "rank 0 read {} of {} bytes in {:.3f} s; weights crc32 {:08x}",
      cfg.model.init_from, r.tensors, r.parameters, r.format,
      r.names == "gpt2" ? "GPT-2" : r.names == "ours" ? "our" : "Hugging Face " + r.names,
      r.transposed > 0 ? fmt::format(", {} read transposed", r.transposed) : std::string(),
      r.source.empty() ? std::string() : ", " + r.source,
      (r.fresh.empty() ? std::string()
                       : fmt::format("; not in the file, initialised fresh: {}", fmt::join(r.fresh, ", "))) +
          (r.unused.empty() ? std::string()
                            : fmt::format("; the file's pretraining head, not used: {}", fmt::join(r.unused, ", "))),
      r.bytes_read, r.file_bytes, r.seconds, crc);
}

template InitFromReport load_init_from<float>(const RunConfig&, MpiCommunicator&, Communicator&, ModelState<float>&,
                                              const DataIdentity&);
template InitFromReport load_init_from<f16>(const RunConfig&, MpiCommunicator&, Communicator&, ModelState<f16>&,
                                            const DataIdentity&);
template InitFromReport load_init_from<bf16>(const RunConfig&, MpiCommunicator&, Communicator&, ModelState<bf16>&,
                                             const DataIdentity&);

template std::string start_from_exported_weights<float>(const RunConfig&, MpiCommunicator&, Communicator&,
                                                        ModelState<float>&, const DataIdentity&);
template std::string start_from_exported_weights<f16>(const RunConfig&, MpiCommunicator&, Communicator&,
                                                      ModelState<f16>&, const DataIdentity&);
template std::string start_from_exported_weights<bf16>(const RunConfig&, MpiCommunicator&, Communicator&,
                                                       ModelState<bf16>&, const DataIdentity&);

}  // namespace shardtrain
