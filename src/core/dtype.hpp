// shardtrain/core/dtype.hpp
// Owns the one element-type enum: what a collective moves (parallel/communicator.hpp),
// what a state vector holds (core/state_vectors.hpp) and what a checkpoint
// stores (io/checkpoint.hpp) are all a DType, and a run's precision.mode
// (core/precision.hpp) names one through precision_dtype.
// F16 and BF16 (core/half.hpp) are 16-bit words; no Kokkos, no MPI, no HDF5.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/half.hpp"
#include "core/precision.hpp"

namespace shardtrain {

enum class DType { F32, F64, I32, I64, U8, F16, BF16 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::F16: return 2;
    case DType::BF16: return 2;
  }
  return 0;
}

// numpy's name of the type ("float32", "float16", "bfloat16", ...): what a
// checkpoint's tools print.
constexpr std::string_view numpy_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
  }
  return "?";
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<f16>() { return DType::F16; }
template <> constexpr DType dtype_of<bf16>() { return DType::BF16; }

// f.template operator()<P>() with P the storage type of `mode` (float, f16,
// bf16): the one place a run's precision becomes the type its layers are
// compiled for (the trainer's Run<P>, plan_run's task).
template <class F>
constexpr decltype(auto) with_storage_type(PrecisionMode mode, F&& f) {
  switch (mode) {
    case PrecisionMode::Fp16: return f.template operator()<f16>();
    case PrecisionMode::Bf16: return f.template operator()<bf16>();
    case PrecisionMode::Fp32: break;
  }
  return f.template operator()<float>();
}

// The compute type of a precision.mode: the DType of its storage type.
constexpr DType precision_dtype(PrecisionMode mode) {
  return with_storage_type(mode, []<class P>() { return dtype_of<P>(); });
}

}  // namespace shardtrain
