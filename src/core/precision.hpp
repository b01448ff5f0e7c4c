// shardtrain/core/precision.hpp
// precision.mode as a value: fp32, or 16-bit storage with fp32 master weights
// (fp16, with its loss scaler; bf16). In core because the config, the backends'
// FLOP peaks, the plan and the checkpoints' metadata all name it. The element
// type each mode computes in is the trainer's template parameter P
// (train/trainer.cpp picks it; float, f16, bf16).
// Adding a precision: share/doc/architecture.md#adding-a-precision.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

#include "core/named_enum.hpp"

namespace shardtrain {

enum class PrecisionMode : unsigned char { Fp32, Fp16, Bf16 };

// Every name, in the order of the enum, as input files and checkpoints spell them.
inline constexpr std::string_view k_precision_names[] = {"fp32", "fp16", "bf16"};

// name_of(p) and enum_named<PrecisionMode>(name) read them (core/named_enum.hpp).
constexpr std::span<const std::string_view> enum_names(PrecisionMode) { return k_precision_names; }

}  // namespace shardtrain
