// shardtrain/core/cuda_check.hpp
// Owns the check macros for the CUDA build: every CUDA runtime, NCCL, cuBLAS and
// cuDNN call goes through one of them. A failure throws shardtrain::Error whose
// what() reads
//   "src/parallel/nccl/nccl_communicator.cpp:123: rank 0: cudaStreamCreate(&s) failed:
//    error 35 cudaErrorInsufficientDriver: CUDA driver version is insufficient ..."
// i.e. file:line, the MPI rank (MPI_COMM_WORLD; "rank ?" before MPI_Init or after
// MPI_Finalize), the call as written and the library's own error name and text.
// Header-only and only included by CUDA-build targets (shardtrain_core itself
// stays free of CUDA). SHARDTRAIN_CUDA_CHECK is always available; the NCCL,
// cuBLAS and cuDNN variants exist when that library's header is on the include
// path. They only reference a library symbol where they are used, so including
// this header does not add a link dependency.
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "core/error.hpp"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define SHARDTRAIN_HAVE_NCCL_H 1
#endif
#if __has_include(<cublas_v2.h>)
#include <cublas_v2.h>
#define SHARDTRAIN_HAVE_CUBLAS_H 1
#endif
#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define SHARDTRAIN_HAVE_CUDNN_H 1
#endif

namespace shardtrain::detail {

// "rank R" of MPI_COMM_WORLD, or "rank ?" when MPI is not running.
inline std::string mpi_rank_label() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return "rank ?";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return "rank " + std::to_string(rank);
}

[[noreturn]] inline void throw_gpu_error(const char* file, int line, const char* call,
                                         const std::string& error) {
  throw_error(file, line, mpi_rank_label() + ": " + call + " failed: " + error);
}

// "error 35 cudaErrorInsufficientDriver: CUDA driver version is insufficient ..."
inline std::string cuda_error_text(cudaError_t rc) {
  return "error " + std::to_string(static_cast<int>(rc)) + " " + cudaGetErrorName(rc) + ": " +
         cudaGetErrorString(rc);
}

#ifdef SHARDTRAIN_HAVE_NCCL_H
// NCCL's code and text, plus its last detailed message (which may name a peer or
// a transport) when the library has one.
inline std::string nccl_error_text(ncclResult_t rc) {
  std::string text = "error " + std::to_string(static_cast<int>(rc)) + ": " +
                     ncclGetErrorString(rc);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') text += std::string(" (") + last + ")";
#endif
  return text;
}
#endif

#ifdef SHARDTRAIN_HAVE_CUBLAS_H
inline std::string cublas_error_text(cublasStatus_t rc) {
  return "error " + std::to_string(static_cast<int>(rc)) + " " + cublasGetStatusName(rc) + ": " +
         cublasGetStatusString(rc);
}
#endif

#ifdef SHARDTRAIN_HAVE_CUDNN_H
inline std::string cudnn_error_text(cudnnStatus_t rc) {
  return "error " + std::to_string(static_cast<int>(rc)) + ": " + cudnnGetErrorString(rc);
}
#endif

}  // namespace shardtrain::detail

#define SHARDTRAIN_CUDA_CHECK(call)                                                      \
  do {                                                                                   \
    const cudaError_t shardtrain_cuda_rc_ = (call);                                      \
    if (shardtrain_cuda_rc_ != cudaSuccess)                                              \
      ::shardtrain::detail::throw_gpu_error(                                             \
          __FILE__, __LINE__, #call, ::shardtrain::detail::cuda_error_text(shardtrain_cuda_rc_)); \
  } while (0)

// For destructors and other places that must not throw: a failure is printed
// to stderr in the same form ("file:line: rank R: call failed: ...") and ignored.
#define SHARDTRAIN_CUDA_WARN(call)                                                       \
  do {                                                                                   \
    const cudaError_t shardtrain_cuda_rc_ = (call);                                      \
    if (shardtrain_cuda_rc_ != cudaSuccess)                                              \
      std::fprintf(stderr, "warning: %s:%d: %s: %s failed: %s\n", __FILE__, __LINE__,     \
                   ::shardtrain::detail::mpi_rank_label().c_str(), #call,                \
                   ::shardtrain::detail::cuda_error_text(shardtrain_cuda_rc_).c_str());  \
  } while (0)

#ifdef SHARDTRAIN_HAVE_NCCL_H
#define SHARDTRAIN_NCCL_CHECK(call)                                                      \
  do {                                                                                   \
    const ncclResult_t shardtrain_nccl_rc_ = (call);                                     \
    if (shardtrain_nccl_rc_ != ncclSuccess)                                              \
      ::shardtrain::detail::throw_gpu_error(                                             \
          __FILE__, __LINE__, #call, ::shardtrain::detail::nccl_error_text(shardtrain_nccl_rc_)); \
  } while (0)
#endif

#ifdef SHARDTRAIN_HAVE_CUBLAS_H
#define SHARDTRAIN_CUBLAS_CHECK(call)                                                    \
  do {                                                                                   \
    const cublasStatus_t shardtrain_cublas_rc_ = (call);                                 \
    if (shardtrain_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                  \
      ::shardtrain::detail::throw_gpu_error(                                             \
          __FILE__, __LINE__, #call,                                                     \
          ::shardtrain::detail::cublas_error_text(shardtrain_cublas_rc_));               \
  } while (0)
#endif

#ifdef SHARDTRAIN_HAVE_CUDNN_H
#define SHARDTRAIN_CUDNN_CHECK(call)                                                     \
  do {                                                                                   \
    const cudnnStatus_t shardtrain_cudnn_rc_ = (call);                                   \
    if (shardtrain_cudnn_rc_ != CUDNN_STATUS_SUCCESS)                                    \
      ::shardtrain::detail::throw_gpu_error(                                             \
          __FILE__, __LINE__, #call,                                                     \
          ::shardtrain::detail::cudnn_error_text(shardtrain_cudnn_rc_));                 \
  } while (0)
#endif
