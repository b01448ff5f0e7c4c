// shardtrain/config/parse.hpp
// Owns the only way to build a RunConfig: TOML text (+ command-line `--set`
// overrides) -> a fully resolved, validated RunConfig, and the way back to TOML.
// Invariants kept:
//  - Every RunConfig field is filled (defaults from run_config.hpp) and range-checked;
//    the rest of the program trusts it.
//  - Every user mistake throws InputError whose what() has exactly one line per
//    problem, "FILE:LINE:COL: message" (or "FILE: message" when there is no
//    location, "--set KEY=VALUE: message" for an override). All problems found in
//    one pass are reported together, sorted by position in the file.
//  - parse_run_config(to_toml(c), ...) gives back c field for field (floats bit-exact).
// The keys (name, type, range, model types, meaning) are the rows of
// config/schema.hpp; share/doc/config.md, the reference, is generated from them.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "config/run_config.hpp"

namespace shardtrain {

// Parses `text` (the contents of the input file called `source_name`), applies the
// `--set section.key=value` overrides in order (later ones win; all win over the
// file), validates and returns the resolved config. `source_name` is used in error
// messages, for the default train.run_dir ("runs/<stem>") and kept in the result
// together with `text`. data.path is checked to exist (relative to the current
// working directory). Throws InputError (exit code 2) on any problem.
RunConfig parse_run_config(std::string_view text, std::string_view source_name,
                           std::span<const std::string> overrides = {});

// The resolved config as TOML: every section and key, defaults filled in, floats in
// their shortest form that reads back bit-identical. Does not include
// source_name/source_text.
std::string to_toml(const RunConfig& config);

// Why cuDNN's fused attention (model.attention = "fused") cannot take this GPT
// config's precision and shape (fp32; a head width d_model / n_head that is not a
// multiple of 8 or is over 128; a seq_len that is not a multiple of 8: the 16-byte
// alignment of its buffers), or "" when it can. The config's validation reports it
// for an explicit "fused"; resolve_attention falls back on it for "auto".
std::string fused_attention_refusal(const RunConfig& config);

// The attention the run uses: model.attention unless it is "auto", which is
// "fused" for a GPT computing on a CUDA device (`on_cuda`) whose precision and
// shape cuDNN takes (fused_attention_refusal), else "unfused" (the host, fp32,
// other shapes, other model types). Never returns Auto.
AttentionImpl resolve_attention(const RunConfig& config, bool on_cuda);

}  // namespace shardtrain
