// shardtrain/kernels/dnnl_context.hpp
// INTERNAL to kernels/*.cpp (not part of the kernel API; no public header
// includes oneDNN): the process's oneDNN CPU engine and stream, and the small
// helpers every oneDNN call site shares.
// Invariants:
//  - One engine and one in-order stream per process, created on first use and
//    never destroyed before exit. Like half_scratch.hpp's arena this is global
//    state: the kernels keep the signatures of the fp32 Kokkos kernels, and a
//    primitive built for an engine must run on that engine. Kernels run one at
//    a time on the host thread (Kokkos Serial), so no lock is taken.
//  - Every primitive is executed and waited for before its kernel returns
//    (stream().wait()): a kernel's outputs are complete when it returns, as for
//    every other host kernel.
//  - oneDNN failures (dnnl::error) are turned into shardtrain::Error naming the
//    kernel, the shapes and oneDNN's status (dnnl_error), never escape as
//    dnnl::error.
#pragma once

#include <dnnl.hpp>

#include <string>
#include <type_traits>

#include "core/half.hpp"

namespace shardtrain {

dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();

// oneDNN's data type for a storage type (float, bf16, f16).
template <class T>
constexpr dnnl::memory::data_type dnnl_type() {
  if constexpr (std::is_same_v<T, float>) return dnnl::memory::data_type::f32;
  else if constexpr (std::is_same_v<T, bf16>) return dnnl::memory::data_type::bf16;
  else if constexpr (std::is_same_v<T, f16>) return dnnl::memory::data_type::f16;
  else static_assert(!sizeof(T), "no oneDNN data type for this storage type");
}

// Throws shardtrain::Error: "<what>: oneDNN <status name>: <oneDNN's message>".
[[noreturn]] void dnnl_fail(const std::string& what, const dnnl::error& e);

}  // namespace shardtrain
