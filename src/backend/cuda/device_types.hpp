// shardtrain/backend/cuda/device_types.hpp
// The CUDA type of each storage type: f16 <-> __half, bf16 <-> __nv_bfloat16
// (the same 16 bits: IEEE binary16 / bfloat16, checked below), float <-> float.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/half.hpp"

namespace shardtrain {

template <class T> struct DeviceTypeOf { using type = T; };
template <> struct DeviceTypeOf<f16> { using type = __half; };
template <> struct DeviceTypeOf<bf16> { using type = __nv_bfloat16; };
template <class T> using device_t = typename DeviceTypeOf<T>::type;

static_assert(sizeof(f16) == sizeof(__half) && alignof(f16) <= alignof(__half));
static_assert(sizeof(bf16) == sizeof(__nv_bfloat16) && alignof(bf16) <= alignof(__nv_bfloat16));

template <class T> device_t<T>* dev(T* p) { return reinterpret_cast<device_t<T>*>(p); }
template <class T> const device_t<T>* dev(const T* p) { return reinterpret_cast<const device_t<T>*>(p); }

}  // namespace shardtrain
