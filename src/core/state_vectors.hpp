// shardtrain/core/state_vectors.hpp
// Owns the names of the model state's vectors: what a rank keeps of each under
// a ZeRO stage and in which element type, and which of them a checkpoint saves
// under which name. parallel/model_state.hpp (the vectors themselves and their
// spans), plan/memory_plan.cpp (their bytes), the checkpoint's save, load and
// I/O probe (train/), its reader (io/) and trainer-ckpt
// read this table; nobody else spells a vector's name or its stage rule.
//   vector       type     kept whole at   saved as                 memory category
//   params       compute  stages 0-2      params_fp16/params_bf16  Parameters      (16-bit models; fp32: master)
//   grads        compute  stages 0-1      -                        Gradients
//   master       fp32     stage 0         master                   OptimizerState  (16-bit models only;
//                                                                                   fp32: the params themselves)
//   exp_avg      fp32     stage 0         exp_avg                  OptimizerState
//   exp_avg_sq   fp32     stage 0         exp_avg_sq               OptimizerState
// At the stages where a vector is not kept whole the rank keeps its shard.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/memory.hpp"

namespace shardtrain {

enum class StateVector { Params, Grads, Master, ExpAvg, ExpAvgSq };
inline constexpr std::array<StateVector, 5> kStateVectors = {StateVector::Params, StateVector::Grads,
                                                             StateVector::Master, StateVector::ExpAvg,
                                                             StateVector::ExpAvgSq};

// The first ZeRO stage at which a rank keeps only its shard of `v`.
constexpr int shard_from_stage(StateVector v) {
  switch (v) {
    case StateVector::Params: return 3;
    case StateVector::Grads: return 2;
    default: return 1;
  }
}
constexpr bool sharded(StateVector v, int zero_stage) { return zero_stage >= shard_from_stage(v); }

// Whether a model computing in `compute` keeps `v` (master: 16-bit models only).
constexpr bool kept(StateVector v, DType compute) { return v != StateVector::Master || compute != DType::F32; }

// The element type of `v` in a model computing in `compute`.
constexpr DType element_type(StateVector v, DType compute) {
  return v == StateVector::Params || v == StateVector::Grads ? compute : DType::F32;
}

// The memory category `v`'s buffer is tracked under.
constexpr MemCategory category(StateVector v) {
  switch (v) {
    case StateVector::Params: return MemCategory::Parameters;
    case StateVector::Grads: return MemCategory::Gradients;
    default: return MemCategory::OptimizerState;
  }
}

// The bytes a rank keeps of `v` at `zero_stage` in a model computing in
// `compute` whose vectors have `whole` elements, `shard` of them this rank's.
constexpr std::int64_t stage_bytes(StateVector v, DType compute, int zero_stage, std::int64_t whole,
                                   std::int64_t shard) {
  if (!kept(v, compute)) return 0;
  return static_cast<std::int64_t>(dtype_size(element_type(v, compute))) * (sharded(v, zero_stage) ? shard : whole);
}

// A vector as a checkpoint saves it: the dataset /state/<name> of `type`.
struct SavedVector {
  std::string_view name;
  StateVector vector;
  DType type;
  bool required;  // in every checkpoint (the 16-bit copy is there only when the model computed in it)
};
inline constexpr std::array<SavedVector, 5> kSavedVectors = {{
    {"master", StateVector::Master, DType::F32, true},
    {"exp_avg", StateVector::ExpAvg, DType::F32, true},
    {"exp_avg_sq", StateVector::ExpAvgSq, DType::F32, true},
    {"params_fp16", StateVector::Params, DType::F16, false},
    {"params_bf16", StateVector::Params, DType::BF16, false},
}};

// The row of kSavedVectors named `name`, or nullptr.
constexpr const SavedVector* find_saved_vector(std::string_view name) {
  for (const SavedVector& s : kSavedVectors)
    if (s.name == name) return &s;
  return nullptr;
}

// The name a checkpoint saves `v` under (the fp32 weights: master; params: the
// 16-bit copy of a `compute` model).
constexpr std::string_view saved_name(StateVector v, DType compute = DType::F32) {
  for (const SavedVector& s : kSavedVectors)
    if (s.vector == v && (v != StateVector::Params || s.type == compute)) return s.name;
  return {};
}

// What a checkpoint of a model computing in `compute` holds, in file order:
// master, exp_avg, exp_avg_sq, and the 16-bit copy of a 16-bit model (an fp32
// model's parameters are its master weights).
// (Rows of kSavedVectors.)
inline std::vector<const SavedVector*> saved_vectors(DType compute) {
  std::vector<const SavedVector*> out;
  for (const SavedVector& s : kSavedVectors)
    if (s.vector != StateVector::Params || (compute != DType::F32 && s.type == compute)) out.push_back(&s);
  return out;
}

// The bytes per element of the flat layout that a checkpoint of such a model
// holds (12 for fp32, 14 for a 16-bit model).
inline std::size_t saved_bytes_per_element(DType compute) {
  std::size_t b = 0;
  for (const SavedVector* s : saved_vectors(compute)) b += dtype_size(s->type);
  return b;
}

}  // namespace shardtrain
