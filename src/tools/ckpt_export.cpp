// trainer-ckpt export: parameters of one state vector of a checkpoint as plain
// HDF5 (io/checkpoint_export.hpp), .npy (io/npy_write.hpp) or safetensors
// (io/safetensors_write.hpp), under our names, Hugging Face GPT-2's
// (io/gpt2_names.hpp) or BERT's / DistilBERT's (io/hf_bert_names.hpp), with the model keys a reader of the export needs
// (ckpt_commands.hpp). This file picks the tensors and the names and reads the
// stored config; the writers are io/'s.
// Invariants: OUT is written to OUT.partial and renamed into place only when
// complete, so OUT is never a half-written file; memory use is bounded by one
// tensor row block (kExportChunkElements; twice that for a transposed GPT-2
// weight), not by the model size.
#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "core/clock.hpp"
#include "core/durable_file.hpp"
#include "core/error.hpp"
#include "core/exit_codes.hpp"
#include "core/model_type.hpp"
#include "core/mpi_world.hpp"
#include "core/named_enum.hpp"
#include "core/text.hpp"
#include "io/checkpoint.hpp"
#include "io/checkpoint_phase.hpp"
#include "io/checkpoint_export.hpp"
#include "io/gpt2_names.hpp"
#include "io/hf_bert_names.hpp"
#include "io/npy_write.hpp"
#include "io/safetensors_write.hpp"
#include "io/token_dataset.hpp"
#include "tools/ckpt_commands.hpp"
#include "version.hpp"

namespace shardtrain {

namespace {

// "no parameter 'X'; close names: a, b" (up to 6, nearest first, then layout order).
std::string unknown_parameter(const std::string& path, const std::string& name,
                              const std::vector<CheckpointTensor>& layout) {
  const std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
  std::vector<std::pair<std::size_t, std::size_t>> scored;  // (distance, layout index)
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const std::string& cand = layout[i].name;
    std::size_t d = edit_distance(name, cand, limit);
    if (d > limit && !name.empty() && cand.find(name) != std::string::npos) d = limit;  // "c_attn.weight"
    if (d <= limit) scored.emplace_back(d, i);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::string msg = path + ": no parameter '" + name + "' in the checkpoint";
  if (scored.empty())
    return msg + " (it has " + std::to_string(layout.size()) + " parameters; `trainer-ckpt info " + path +
           "` lists them)";
  msg += "; close names: ";
  for (std::size_t k = 0; k < scored.size() && k < 6; ++k) msg += (k ? ", " : "") + layout[scored[k].second].name;
  if (scored.size() > 6) msg += ", ...";
  return msg;
}

// Writes one float32 dataset per tensor, named by the tensor, in its shape
// (io/checkpoint_export.hpp), into OUT.partial, then renames it to OUT.
void write_h5(CheckpointReader& ckpt, const std::string& vector, const std::vector<const CheckpointTensor*>& tensors,
              const std::vector<std::pair<std::string, std::string>>& metadata, const std::string& out) {
  PartialFile partial(out);
  std::fclose(create_fresh_file(partial.tmp(), out));  // a clear message when OUT cannot be created
  export_tensors_h5(ckpt, vector, tensors, metadata, partial.tmp(), out, kExportChunkElements);
  partial.commit();
}

using Metadata = std::vector<std::pair<std::string, std::string>>;

// The stored config's [model] table (empty if it has none); InputError if the
// text does not parse.
toml::table stored_model_config(const CheckpointReader& ckpt) {
  toml::table root;
  try {
    root = toml::parse(ckpt.meta().config_text, std::string_view("/config"));
  } catch (const toml::parse_error& e) {
    throw InputError(ckpt.path() + ": the stored config text (/config) does not parse as TOML: " +
                     std::string(e.description()));
  }
  const toml::table* model = root["model"].as_table();
  return model ? *model : toml::table{};
}

// What a reader of an export needs besides the tensors (model.init_from's
// checks, `trainer-ckpt sample EXPORT`): the model type and sizes from the
// stored config, the vocabulary size and data set of the checkpoint, and that
// data set's tokenizer when the file is still there to ask.
Metadata model_metadata(const CheckpointReader& ckpt) {
  const toml::table model = stored_model_config(ckpt);
  const std::string type = model["type"].value_or(std::string("(none)"));
  const std::optional<ModelType> known = enum_named<ModelType>(type);
  const bool transformer = known && is_transformer(*known);
  Metadata m{{"model_type", type}};
  if (transformer) {
    for (const char* k : {"n_layer", "n_head", "d_model", "seq_len"})
      if (const auto v = model[k].value<std::int64_t>()) m.emplace_back(k, std::to_string(*v));
    m.emplace_back("layernorm_eps", fmt::format("{}", model["layernorm_eps"].value_or(1e-5)));
  }
  const CheckpointMeta& meta = ckpt.meta();
  if (meta.data_vocab_size > 0) m.emplace_back("vocab_size", std::to_string(meta.data_vocab_size));
  if (meta.seq_len > 0 && !transformer) m.emplace_back("seq_len", std::to_string(meta.seq_len));
  m.emplace_back("data_path", meta.data_path);
  if (meta.data_vocab_size > 0 && std::filesystem::is_regular_file(meta.data_path)) {
    try {
      TokenDataset data(meta.data_path, MPI_COMM_SELF);
      if (data.vocab_size() == meta.data_vocab_size) m.emplace_back("tokenizer", name_of(data.tokenizer()));
    } catch (const std::exception&) {  // not a token data set (a classifier's), or gone: not recorded
    }
  }
  return m;
}

// Every parameter under Hugging Face GPT-2 names (GPT2LMHeadModel's state dict),
// in layout order, and the model's shape for the metadata. The checkpoint must
// be a GPT (stored model.type "gpt") whose layout is exactly gpt_layout's (names
// and shapes); anything else is an InputError naming the file. Our (out, in)
// Linear weights become Conv1D's (in, out); [q | k | v] along c_attn's output
// dimension, heads contiguous, is the layout both models use. lm_head.weight is
// not written: it is tied to transformer.wte.weight (as in HF's own files).
std::vector<SafetensorsEntry> gpt2_entries(const CheckpointReader& ckpt, Metadata& metadata) {
  const std::string& path = ckpt.path();
  const toml::table model = stored_model_config(ckpt);
  const std::string type = model["type"].value_or(std::string("(none)"));
  if (enum_named<ModelType>(type) != ModelType::Gpt)
    throw InputError(path + ": --names gpt2 needs a GPT checkpoint; this one's model.type is \"" + type + "\"");
  const std::int64_t n_head = model["n_head"].value_or(std::int64_t{0});
  const auto& layout = ckpt.layout();
  auto find = [&](const std::string& n) -> const CheckpointTensor* {
    const auto it = std::find_if(layout.begin(), layout.end(), [&](const auto& t) { return t.name == n; });
    return it == layout.end() ? nullptr : &*it;
  };
  const CheckpointTensor* wte = find("wte.weight");
  const CheckpointTensor* wpe = find("wpe.weight");
  if (!wte || !wpe || wte->shape.size() != 2 || wpe->shape.size() != 2)
    throw InputError(path + ": --names gpt2: the layout has no 2-D wte.weight and wpe.weight");
  const std::int64_t V = wte->shape[0], C = wte->shape[1], T = wpe->shape[0];
  std::int64_t L = 0;
  while (find("h." + std::to_string(L) + ".ln_1.weight")) ++L;
  if (n_head < 1 || C % n_head != 0)
    throw InputError(path + ": --names gpt2: the stored config's model.n_head (" + std::to_string(n_head) +
                     ") does not divide the embedding width " + std::to_string(C));

  // Our name -> GPT-2's name, our shape, transposed (io/gpt2_names.hpp).
  const std::vector<Gpt2Tensor> want = gpt2_tensors(V, C, T, L);
  std::vector<SafetensorsEntry> entries;
  for (const auto& t : layout) {
    const auto it = std::find_if(want.begin(), want.end(), [&](const Gpt2Tensor& w) { return w.ours == t.name; });
    if (it == want.end())
      throw InputError(path + ": --names gpt2: parameter '" + t.name + "' has no GPT-2 name (not a plain GPT layout)");
    const Gpt2Tensor& w = *it;
    if (t.shape != w.shape)
      throw InputError(path + ": --names gpt2: " + t.name + " has shape " + shape_text(t.shape) + ", GPT-2 needs " +
                       shape_text(w.shape));
    std::vector<std::int64_t> shape = w.transposed ? std::vector<std::int64_t>{t.shape[1], t.shape[0]} : t.shape;
    entries.push_back({w.gpt2, &t, std::move(shape), w.transposed});
  }
  if (entries.size() != want.size())
    for (const Gpt2Tensor& w : want)
      if (!find(w.ours))
        throw InputError(path + ": --names gpt2: the layout has no " + w.ours + " (for " + w.gpt2 + ")");

  const double eps = model["layernorm_eps"].value_or(1e-5);
  metadata.insert(metadata.end(), {{"architecture", "GPT2LMHeadModel"},
                                   {"vocab_size", std::to_string(V)},
                                   {"n_positions", std::to_string(T)},
                                   {"n_ctx", std::to_string(T)},
                                   {"n_embd", std::to_string(C)},
                                   {"n_layer", std::to_string(L)},
                                   {"n_head", std::to_string(n_head)},
                                   {"layer_norm_epsilon", fmt::format("{}", eps)},
                                   {"activation_function", "gelu_new"},
                                   {"tied_weights", "lm_head.weight=transformer.wte.weight"}});
  return entries;
}

// Every parameter of an encoder_classifier checkpoint with model.layout "bert" /
// "distilbert" under Hugging Face's ...ForSequenceClassification names
// (io/hf_bert_names.hpp; c_attn as three tensors), in layout order, and the
// config.json text transformers reads beside it (BertConfig / DistilBertConfig
// of those dimensions). Anything else is an InputError naming the file.
std::vector<SafetensorsEntry> bert_entries(const CheckpointReader& ckpt, const std::string& style,
                                           std::string& config_json) {
  const std::string& path = ckpt.path();
  const toml::table model = stored_model_config(ckpt);
  const std::string type = model["type"].value_or(std::string("(none)"));
  const std::string layout_name = model["layout"].value_or(std::string("pre_ln"));
  if (enum_named<ModelType>(type) != ModelType::EncoderClassifier || layout_name != style)
    throw InputError(path + ": --names " + style + " needs an encoder_classifier checkpoint with model.layout = \"" +
                     style + "\"; this one is model.type \"" + type + "\", layout \"" + layout_name + "\"");
  const EncoderLayout family = style == "bert" ? EncoderLayout::Bert : EncoderLayout::Distilbert;
  const auto& layout = ckpt.layout();
  auto find = [&](const std::string& n) -> const CheckpointTensor* {
    const auto it = std::find_if(layout.begin(), layout.end(), [&](const auto& t) { return t.name == n; });
    return it == layout.end() ? nullptr : &*it;
  };
  const CheckpointTensor* wte = find("wte.weight");
  const CheckpointTensor* wpe = find("wpe.weight");
  const CheckpointTensor* head = find("head.weight");
  if (!wte || !wpe || !head || wte->shape.size() != 2 || wpe->shape.size() != 2 || head->shape.size() != 2)
    throw InputError(path + ": --names " + style + ": the layout has no 2-D wte.weight, wpe.weight and head.weight");
  std::vector<SafetensorsEntry> entries;
  for (const auto& t : layout) {
    const std::vector<HfPiece> pieces = hf_bert_pieces(family, t.name, t.shape.empty() ? 1 : t.shape[0], true);
    if (pieces.empty())
      throw InputError(path + ": --names " + style + ": parameter '" + t.name + "' has no Hugging Face name");
    for (const HfPiece& p : pieces) {
      std::vector<std::int64_t> shape = t.shape;
      shape[0] = p.rows;
      entries.push_back({p.name, &t, std::move(shape), false, p.row0, pieces.size() > 1 ? p.rows : -1});
    }
  }
  const std::int64_t V = wte->shape[0], C = wte->shape[1], P = wpe->shape[0], K = head->shape[0];
  std::int64_t L = 0;
  while (find("h." + std::to_string(L) + ".ln_1.weight")) ++L;
  const std::int64_t H = model["n_head"].value_or(std::int64_t{0});
  const double eps = model["layernorm_eps"].value_or(1e-12);
  std::string labels, ids;
  for (std::int64_t k = 0; k < K; ++k) {
    labels += fmt::format("{}\n    \"{}\": \"LABEL_{}\"", k ? "," : "", k, k);
    ids += fmt::format("{}\n    \"LABEL_{}\": {}", k ? "," : "", k, k);
  }
  if (family == EncoderLayout::Distilbert)
    config_json = fmt::format(
        "{{\n  \"architectures\": [\"DistilBertForSequenceClassification\"],\n  \"model_type\": \"distilbert\",\n"
        "  \"activation\": \"gelu\",\n  \"vocab_size\": {},\n  \"dim\": {},\n  \"n_layers\": {},\n"
        "  \"n_heads\": {},\n  \"hidden_dim\": {},\n  \"max_position_embeddings\": {},\n"
        "  \"dropout\": 0.1,\n  \"attention_dropout\": 0.1,\n  \"seq_classif_dropout\": 0.2,\n"
        "  \"sinusoidal_pos_embds\": false,\n  \"initializer_range\": 0.02,\n  \"pad_token_id\": 0,\n"
        "  \"id2label\": {{{}\n  }},\n  \"label2id\": {{{}\n  }}\n}}\n",
        V, C, L, H, 4 * C, P, labels, ids);
  else
    config_json = fmt::format(
        "{{\n  \"architectures\": [\"BertForSequenceClassification\"],\n  \"model_type\": \"bert\",\n"
        "  \"hidden_act\": \"gelu\",\n  \"vocab_size\": {},\n  \"hidden_size\": {},\n"
        "  \"num_hidden_layers\": {},\n  \"num_attention_heads\": {},\n  \"intermediate_size\": {},\n"
        "  \"max_position_embeddings\": {},\n  \"type_vocab_size\": {},\n  \"layer_norm_eps\": {:g},\n"
        "  \"hidden_dropout_prob\": 0.1,\n  \"attention_probs_dropout_prob\": 0.1,\n  \"initializer_range\": 0.02,\n"
        "  \"pad_token_id\": 0,\n  \"position_embedding_type\": \"absolute\",\n"
        "  \"id2label\": {{{}\n  }},\n  \"label2id\": {{{}\n  }}\n}}\n",
        V, C, L, H, 4 * C, P, std::int64_t{2}, eps, labels, ids);
  return entries;
}

// Hugging Face's config.json for a --names gpt2 export named model.safetensors
// (io/gpt2_names.hpp gpt2_config_json), written to `path` (OUT's folder, so
// that GPT2LMHeadModel.from_pretrained(folder) finds both) as path.partial and
// renamed into place, like OUT.
void write_text_file(const std::string& text, const std::string& path) {
  PartialFile partial(path);
  std::FILE* f = create_fresh_file(partial.tmp(), path);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) SHARDTRAIN_FAIL(path + ": write failed: " + std::strerror(errno));
  partial.commit();
}

// The export format: --format, or else from OUT's extension.
std::string export_format(const std::string& out, const std::string& format) {
  if (!format.empty()) return format;
  if (out.ends_with(".npy")) return "npy";
  if (out.ends_with(".h5") || out.ends_with(".hdf5")) return "hdf5";
  if (out.ends_with(".safetensors")) return "safetensors";
  throw InputError(out + ": output must end in .h5 or .hdf5 (HDF5, one dataset per parameter), .npy "
                         "(NumPy, one parameter) or .safetensors, or give --format hdf5|npy|safetensors");
}
}  // namespace

int cmd_export(const std::string& path, const std::string& out, std::vector<std::string> names,
               const std::string& vector, const std::string& format_option, const std::string& name_style,
               double io_timeout_s) {
  const std::string format = export_format(out, format_option);
  const bool npy = format == "npy";
  if (name_style != "ours" && format != "safetensors")
    throw InputError("--names " + name_style + ": only with --format safetensors (this export is " + format + ")");
  if (name_style != "ours" && !names.empty())
    throw InputError("--names " + name_style + " writes the whole model; it does not take --param");
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && std::filesystem::equivalent(out, path, ec))
    throw InputError(out + ": is the checkpoint itself; choose another output file");

  const auto t0 = SteadyClock::now();
  IoDeadline deadline(io_timeout_s, world_rank());
  CheckpointReader ckpt(path, MPI_COMM_SELF, &deadline);
  const auto& layout = ckpt.layout();
  std::vector<const CheckpointTensor*> tensors;
  if (names.empty()) {
    for (const auto& t : layout) tensors.push_back(&t);
  } else {
    std::vector<std::string> seen;
    for (const auto& n : names) {
      if (std::find(seen.begin(), seen.end(), n) != seen.end()) continue;  // asked twice: export once
      seen.push_back(n);
      const auto it = std::find_if(layout.begin(), layout.end(), [&](const auto& t) { return t.name == n; });
      if (it == layout.end()) throw InputError(unknown_parameter(path, n, layout));
      tensors.push_back(&*it);
    }
  }
  if (npy && tensors.size() != 1)
    throw InputError(out + ": a .npy file holds one array; give exactly one --param (the checkpoint has " +
                     std::to_string(layout.size()) + " parameters, " + std::to_string(tensors.size()) +
                     " selected)");

  std::int64_t values = 0;
  for (const auto* t : tensors) values += t->numel;
  const ReadFloats read = [&](std::int64_t lo, std::int64_t hi, float* dst) { ckpt.read_range(vector, lo, hi, dst); };
  if (npy) {
    write_npy(out, tensors[0]->shape, tensors[0]->offset, tensors[0]->numel, read, kExportChunkElements);
  } else if (format == "hdf5") {
    write_h5(ckpt, vector, tensors, model_metadata(ckpt), out);
  } else {
    Metadata metadata{{"format", "pt"},  // what Hugging Face's loaders expect of a PyTorch state dict
                      {"producer", std::string("shardtrain trainer-ckpt ") + kVersion},
                      {"source_checkpoint", ckpt.path()},
                      {"step", std::to_string(ckpt.meta().step)},
                      {"vector", vector},
                      {"names", name_style == "ours" ? "shardtrain" : name_style}};
    std::vector<SafetensorsEntry> entries;
    std::string config_json;
    if (name_style == "gpt2") {
      entries = gpt2_entries(ckpt, metadata);
      config_json = gpt2_config_json(metadata);
    } else if (name_style == "bert" || name_style == "distilbert") {
      entries = bert_entries(ckpt, name_style, config_json);
    } else {
      for (const auto* t : tensors) entries.push_back({t->name, t, t->shape, false});
    }
    for (auto& kv : model_metadata(ckpt))  // gpt2_entries' own keys (vocab_size, n_head, ...) are the same values
      if (std::none_of(metadata.begin(), metadata.end(), [&](const auto& x) { return x.first == kv.first; }))
        metadata.push_back(std::move(kv));
    write_safetensors(out, entries, metadata, read, kExportChunkElements);
    const std::string hf_class = name_style == "gpt2"   ? "GPT2LMHeadModel"
                                 : name_style == "bert" ? "BertForSequenceClassification"
                                                        : "DistilBertForSequenceClassification";
    if (name_style != "ours" && std::filesystem::path(out).filename() == "model.safetensors") {
      const std::string config = (std::filesystem::path(out).parent_path() / "config.json").string();
      write_text_file(config_json, config);
      fmt::print("{}: Hugging Face config beside {} ({}.from_pretrained reads the folder)\n", config, out,
                 hf_class);
    } else if (name_style != "ours") {
      fmt::print("note: an OUT named model.safetensors also gets config.json beside it, for Hugging Face's "
                 "{}.from_pretrained(folder)\n", hf_class);
    }
  }
  const double secs = seconds_since(t0);
  fmt::print("{}: {} parameter{} of {} at step {} ({} float32 values, {}), {:.2f} s\n", out, tensors.size(),
             tensors.size() == 1 ? "" : "s", vector, ckpt.meta().step, values,
             human_bytes(static_cast<std::uint64_t>(values) * 4), secs);
  return kExitOk;
}

}  // namespace shardtrain
