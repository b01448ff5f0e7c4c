// shardtrain/core/host_device.hpp
// SHARDTRAIN_HOST_DEVICE marks functions that device code calls too (the CUDA
// kernels, Kokkos device lambdas): __host__ __device__ under nvcc or another
// device compiler, nothing otherwise. No Kokkos or CUDA header, so core's
// headers (half.hpp, rng.hpp) can use it and stay below the kernels.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define SHARDTRAIN_HOST_DEVICE __host__ __device__
#else
#define SHARDTRAIN_HOST_DEVICE
#endif
