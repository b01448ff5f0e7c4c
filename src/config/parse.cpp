// shardtrain/config/parse.cpp
// TOML text + `--set` overrides -> validated RunConfig. One pass over the schema's
// rows (schema.hpp) reads, range-checks and defaults every key; then come the
// checks that involve two keys, then each row's own further check. Problems are
// collected, not thrown one by one, so the user sees every mistake in one run;
// each is one line "WHERE: dotted.key: message" (diagnostics.hpp).
#include "config/parse.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "config/diagnostics.hpp"
#include "config/resolver.hpp"
#include "config/schema.hpp"
#include "config/suggest.hpp"
#include "config/toml_text.hpp"

namespace shardtrain {
namespace {

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

// Parses each "section.key=value"; the value is read as a TOML value, or taken as a
// bare string when it is not one (and does not start like a quoted string, array or
// inline table, where a TOML syntax error is more likely the user's intent).
std::vector<Override> parse_overrides(std::span<const std::string> arguments, Diagnostics& diagnostics) {
  std::vector<Override> out;
  for (std::size_t index = 0; index < arguments.size(); ++index) {
    const std::string& argument = arguments[index];
    const auto eq = argument.find('=');
    if (eq == std::string::npos) {
      diagnostics.in_override(index, argument, "expected section.key=value (no '=' found)");
      continue;
    }
    const std::string_view name = trim(std::string_view(argument).substr(0, eq));
    const std::string_view value = trim(std::string_view(argument).substr(eq + 1));
    const auto dot = name.find('.');
    if (name.empty() || dot == std::string_view::npos) {
      diagnostics.in_override(
          index, argument,
          fmt::format("expected section.key=value, got key '{}' without a section", printable(name)));
      continue;
    }
    const std::string_view section = name.substr(0, dot);
    const std::string_view key = name.substr(dot + 1);
    const KeySpec* spec = find_config_key(section, key);
    if (!spec) {
      diagnostics.in_override(index, argument,
                              fmt::format("unknown key {}{}", printable(name), suggest_key(section, key)));
      continue;
    }
    if (value.empty()) {
      diagnostics.in_override(index, argument, fmt::format("{}: missing value after '='", name));
      continue;
    }
    Override o{index, argument, spec, {}};
    try {
      toml::table parsed = toml::parse(std::string_view(fmt::format("v = {}", value)), std::string_view("--set"));
      if (parsed.size() == 1 && parsed.contains("v")) o.holder = std::move(parsed);
    } catch (const toml::parse_error& e) {
      if (value.front() == '"' || value.front() == '\'' || value.front() == '[' || value.front() == '{') {
        diagnostics.in_override(index, argument,
                                fmt::format("{}: not a valid TOML value: {}", name, printable(e.description())));
        continue;
      }
    }
    if (o.holder.empty()) o.holder.insert("v", std::string(value));
    out.push_back(std::move(o));
  }
  return out;
}

// Reads every key of the schema into `c`, in the schema's order (model.type first:
// whether a model key is used depends on it).
void read_keys(Resolver& r, RunConfig& c, Diagnostics& diagnostics) {
  for (const KeySpec& k : config_schema()) {
    const std::string key = dotted_name(k);
    const Origin o = r.origin(key);
    if (!o.given()) {
      if (k.required) {
        const toml::table* section = r.root().get_as<toml::table>(k.section);
        const std::string message = fmt::format("missing required key {}", key);
        if (section && section->source().begin.line > 0)
          diagnostics.at(section->source(), message);
        else
          diagnostics.in_file(message);
      }
      if (k.derive) k.derive(c);
      continue;
    }
    // A key of one model type only, given for another, is a mistake.
    if (!r.failed("model.type") && !used_by_model_type(k, c.model.type)) {
      std::string types;
      for (ModelType t : k.model_types) types += fmt::format("{}{}", types.empty() ? "" : "/", name_of(t));
      r.report(o, key, fmt::format("is not used by model.type = \"{}\" (only by {})", name_of(c.model.type), types));
    }
    r.read(k, c);
  }
}

bool multiply_fits(std::int64_t a, std::int64_t b, std::int64_t& product) {
  return !__builtin_mul_overflow(a, b, &product);
}

// The checks that involve two keys, each reported at the key the user gave.
void check_across_keys(Resolver& r, const RunConfig& c) {
  if (c.model.type == ModelType::Cnn && !r.failed("model.conv_channels") && c.model.conv_channels.empty())
    r.report(r.origin("model.conv_channels"), "model.conv_channels",
             "model.type = \"cnn\" needs at least one convolution (use model.type = \"mlp\" for none)");
  const bool transformer = is_transformer(c.model.type);
  if (transformer && !r.failed("model.n_head") && !r.failed("model.d_model") && c.model.d_model % c.model.n_head != 0) {
    auto [where, first] = r.pick("model.n_head", "model.d_model");
    if (first)
      r.report(where, "model.n_head",
               fmt::format("must divide model.d_model ({}), got {}", c.model.d_model, c.model.n_head));
    else
      r.report(where, "model.d_model",
               fmt::format("must be a multiple of model.n_head ({}), got {}", c.model.n_head, c.model.d_model));
  }

  if (c.model.type == ModelType::Gpt && c.model.attention == AttentionImpl::Fused && !r.failed("model.attention") &&
      !r.failed("precision.mode") && !r.failed("model.n_head") && !r.failed("model.d_model") &&
      !r.failed("model.seq_len")) {
    if (const std::string why = fused_attention_refusal(c); !why.empty())
      r.report(r.origin("model.attention"), "model.attention", why);
  }

  // Our tiled attention keeps a head's row in 4 fp32 registers per lane
  // (kernels/cuda/flash_attention.cuh: kFlashMaxHeadDim).
  if (c.model.type == ModelType::Gpt && c.model.attention == AttentionImpl::Flash && !r.failed("model.attention") &&
      !r.failed("model.n_head") && !r.failed("model.d_model") && c.model.n_head > 0 &&
      c.model.d_model % c.model.n_head == 0 && c.model.d_model / c.model.n_head > 128)
    r.report(r.origin("model.attention"), "model.attention",
             fmt::format("\"flash\" (our tiled attention) needs a head width d_model / n_head of at most 128, got "
                         "{} / {} = {}",
                         c.model.d_model, c.model.n_head, c.model.d_model / c.model.n_head));

  // The GELU epilogues are cuBLASLt's: the cuBLAS Linear has none.
  if (c.model.type == ModelType::Gpt && c.model.gelu == GeluImpl::Epilogue && c.model.gemm == GemmImpl::Cublas &&
      !r.failed("model.gelu") && !r.failed("model.gemm")) {
    auto [where, first] = r.pick("model.gelu", "model.gemm");
    r.report(where, first ? "model.gelu" : "model.gemm",
             "model.gelu = \"epilogue\" runs the GELU in the epilogues of cuBLASLt's matmuls and needs model.gemm "
             "= \"cublaslt\" or \"auto\", but model.gemm = \"cublas\"");
  }

  const auto& t = c.train;
  if (!r.failed("train.steps") && !r.failed("train.batch_size") && !r.failed("model.seq_len")) {
    std::int64_t sequences = 0, tokens = 0;
    auto [where, first] = r.pick("train.steps", "train.batch_size");
    const std::string_view key = first ? "train.steps" : "train.batch_size";
    if (!multiply_fits(t.steps, t.batch_size, sequences))
      r.report(where, key,
               fmt::format("train.steps * train.batch_size (sequences in the run) must fit in int64, got {} * {}",
                           t.steps, t.batch_size));
    else if (!multiply_fits(sequences, c.model.seq_len, tokens))
      r.report(where, key,
               fmt::format("train.steps * train.batch_size * model.seq_len (tokens in the run) must fit in "
                           "int64, got {} * {} * {}",
                           t.steps, t.batch_size, c.model.seq_len));
  }

  const auto& o = c.optim;
  if (!r.failed("optim.lr") && !r.failed("optim.min_lr") && o.min_lr > o.lr) {
    auto [where, first] = r.pick("optim.min_lr", "optim.lr");
    if (first)
      r.report(where, "optim.min_lr", fmt::format("must be <= optim.lr ({}), got {}", show(o.lr), show(o.min_lr)));
    else
      r.report(where, "optim.lr", fmt::format("must be >= optim.min_lr ({}), got {}", show(o.min_lr), show(o.lr)));
  }

  const auto& pr = c.precision;
  if (!r.failed("precision.init_scale") && !r.failed("precision.min_scale") && pr.min_scale > pr.init_scale) {
    auto [where, first] = r.pick("precision.min_scale", "precision.init_scale");
    r.report(where, first ? "precision.min_scale" : "precision.init_scale",
             fmt::format("precision.min_scale ({}) must be <= precision.init_scale ({})", show(pr.min_scale),
                         show(pr.init_scale)));
  }

  const auto& rc = c.recompute;
  if (!r.failed("recompute.policy") && !r.failed("recompute.budget_mb")) {
    if (rc.policy == RecomputePolicy::Budget && rc.budget_mb <= 0) {
      auto [where, first] = r.pick("recompute.budget_mb", "recompute.policy");
      r.report(where, first ? "recompute.budget_mb" : "recompute.policy",
               "recompute.policy = \"budget\" needs recompute.budget_mb > 0 (activation MiB per rank)");
    } else if (rc.policy != RecomputePolicy::Budget && rc.budget_mb > 0) {
      r.report(r.origin("recompute.budget_mb"), "recompute.budget_mb",
               fmt::format("is only used by recompute.policy = \"budget\", but the policy is \"{}\"",
                           name_of(rc.policy)));
    }
  }
  const auto& g = c.guard;
  const bool checkpoints = c.checkpoint.every_steps > 0 || c.checkpoint.every_minutes > 0;
  auto needs_checkpoints = [&](std::string_view key, bool rollback) {
    const std::string name = fmt::format("guard.{}", key);
    if (rollback && !checkpoints && !r.failed(name) && !r.failed("checkpoint.every_steps") &&
        !r.failed("checkpoint.every_minutes"))
      r.report(r.origin(name), name,
               "\"rollback\" reloads the last checkpoint, but checkpoints are off: set checkpoint.every_steps "
               "(or checkpoint.every_minutes)");
  };
  needs_checkpoints("non_finite", g.non_finite == NonFinitePolicy::Rollback);
  needs_checkpoints("loss_spike", g.loss_spike == LossSpikePolicy::Rollback);
  needs_checkpoints("replica", g.replica == ReplicaPolicy::Rollback);
}

// Each row's further check (a file that must exist, ...) of the value given.
void check_each_key(Resolver& r, const RunConfig& c) {
  for (const KeySpec& k : config_schema()) {
    const std::string key = dotted_name(k);
    if (!k.check || r.failed(key)) continue;
    const Origin o = r.origin(key);
    if (!o.given()) continue;
    if (const std::string problem = k.check(c); !problem.empty()) r.report(o, key, problem);
  }
}

}  // namespace

RunConfig parse_run_config(std::string_view text, std::string_view source_name,
                           std::span<const std::string> overrides) {
  Diagnostics diagnostics(source_name);
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    diagnostics.at(e.source(), printable(e.description()));
    diagnostics.raise();  // nothing else can be checked without a document
  }

  const std::vector<Override> parsed = parse_overrides(overrides, diagnostics);
  RunConfig config;
  config.source_name = std::string(source_name);
  config.source_text = std::string(text);
  Resolver resolver(root, parsed, diagnostics);
  resolver.check_unknown();
  read_keys(resolver, config, diagnostics);
  check_across_keys(resolver, config);
  check_each_key(resolver, config);
  if (!diagnostics.empty()) diagnostics.raise();
  return config;
}

std::string fused_attention_refusal(const RunConfig& c) {
  if (c.precision.mode == PrecisionMode::Fp32)
    return "\"fused\" (cuDNN's flash attention) needs precision.mode = \"fp16\" or \"bf16\": cuDNN has no fp32 "
           "flash-attention engine; use model.attention = \"unfused\" (or \"auto\") for fp32";
  if (c.model.n_head > 0 && c.model.d_model % c.model.n_head == 0) {
    const std::int64_t head = c.model.d_model / c.model.n_head;
    if (head % 8 != 0 || head > 128)
      return fmt::format("\"fused\" (cuDNN's flash attention) needs a head width d_model / n_head that is a "
                         "multiple of 8 and at most 128, got {} / {} = {}",
                         c.model.d_model, c.model.n_head, head);
  }
  // With T (and C, by the head width) a multiple of 8, every activation and workspace
  // piece is a multiple of 8 elements, so the attention's buffers start 16-byte
  // aligned, which cuDNN needs.
  if (c.model.seq_len % 8 != 0)
    return fmt::format("\"fused\" (cuDNN's flash attention) needs model.seq_len to be a multiple of 8 (the "
                       "16-byte alignment of its buffers), got {}",
                       c.model.seq_len);
  return {};
}

AttentionImpl resolve_attention(const RunConfig& c, bool on_cuda) {
  if (c.model.attention != AttentionImpl::Auto) return c.model.attention;
  return c.model.type == ModelType::Gpt && on_cuda && fused_attention_refusal(c).empty() ? AttentionImpl::Fused
                                                                                          : AttentionImpl::Unfused;
}

}  // namespace shardtrain
