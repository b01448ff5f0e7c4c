// shardtrain/model/param_init.hpp
// Owns the He-normal initialisation the classifier models share (mlp, cnn):
// every ".weight" tensor N(0, sqrt(2 / fan_in)) with fan_in = numel / shape[0]
// (a Linear (out, in): in; a conv (OC, IC, KH, KW): IC*KH*KW; He et al. 2015,
// for ReLU), everything else (biases, padding) 0.
// Invariant: value i of the flat vector depends only on (seed, i), never on the
// range [lo, hi) a rank initialises (core/rng.hpp's counter-based normal()).
#pragma once

#include <cstdint>

#include "core/param_layout.hpp"

namespace shardtrain {

// Initialises params[lo, hi) of the flat vector of `layout` (global indices).
template <class T>
void he_normal_init(const ParamLayout& layout, std::uint64_t seed, T* params, std::int64_t lo, std::int64_t hi);

}  // namespace shardtrain
