// shardtrain/kernels/types.hpp
// The one place that names Kokkos View types and the execution space. Kernels
// never own memory: every View here is Unmanaged and points into a TrackedBuffer
// (parameters, gradients, activations or workspace) owned by the caller.
// All Views are LayoutRight (row-major, last index fastest), so 2-D views map
// onto BLAS without copies and a (rows, cols) view equals a flat buffer.
#pragma once

#include "core/types.hpp"

#include <Kokkos_Core.hpp>
#include <cstdint>

namespace shardtrain {

// The host kernels run in Kokkos' default HOST execution space (Serial or OpenMP),
// also under a Kokkos built with CUDA, whose default space is the device: the GPU
// path does not go through Kokkos (backend/cuda), so these Views are host memory.
using ExecSpace = Kokkos::DefaultHostExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;

template <class T> using View1 = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace, Unmanaged>;
template <class T> using View2 = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Unmanaged>;
template <class T> using View3 = Kokkos::View<T***, Kokkos::LayoutRight, MemSpace, Unmanaged>;
template <class T> using View4 = Kokkos::View<T****, Kokkos::LayoutRight, MemSpace, Unmanaged>;

template <class T> using CView1 = View1<const T>;
template <class T> using CView2 = View2<const T>;
template <class T> using CView3 = View3<const T>;
template <class T> using CView4 = View4<const T>;


inline Kokkos::RangePolicy<ExecSpace> range(std::int64_t n) {
  return Kokkos::RangePolicy<ExecSpace>(0, n);
}

// True when the 4-D view v has extents (e0, e1, e2, e3) (shape checks of the NCHW kernels).
template <class V>
bool extents_are(const V& v, std::int64_t e0, std::int64_t e1, std::int64_t e2, std::int64_t e3) {
  return static_cast<std::int64_t>(v.extent(0)) == e0 && static_cast<std::int64_t>(v.extent(1)) == e1 &&
         static_cast<std::int64_t>(v.extent(2)) == e2 && static_cast<std::int64_t>(v.extent(3)) == e3;
}

// Whether every view is contiguous (the kernels' pointer paths require it).
template <class... V>
bool contiguous(const V&... v) {
  return (v.span_is_contiguous() && ...);
}

}  // namespace shardtrain
