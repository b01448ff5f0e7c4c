// shardtrain/kernels/cuda/lt_linear.cuh
// Owns nn.Linear on the device through cuBLASLt (model.gemm = "cublaslt"): the
// same semantics, shapes and gradient convention as cuda::linear_forward /
// linear_backward (linear.cuh, kernels/linear.hpp): weight w is (M out, K in)
// row-major, y overwritten or accumulated (+=, the fused residual), dx
// OVERWRITTEN, dw and db ACCUMULATED (+=) or overwritten when !accumulate. T in
// float, __half, __nv_bfloat16; fp32 compute (CUBLAS_COMPUTE_32F, no TF32).
//  - forward: one cublasLtMatmul with CUBLASLT_EPILOGUE_BIAS (no separate bias
//    pass); accumulate: beta = 1 with C = D = y, so y += x w^T + b.
//  - backward: dx one matmul (no epilogue); dw one matmul that, when db is given,
//    also writes the bias gradient through CUBLASLT_EPILOGUE_BGRADB (reduction
//    over the GEMM's k = N rows of dy). The epilogue OVERWRITES its vector, in T:
//    accumulate == false points it straight at db; accumulate == true points it
//    at a scratch of T owned by the LtContext and then one small kernel adds it
//    to db in fp32 and rounds once (so in 16-bit db rounds twice: the column sum
//    to T, then db + sum; the cuBLAS path rounds once). Lengths above the
//    scratch (kLtBiasScratchElems) take the cuBLAS path's bias kernel instead.
//  - algorithms: chosen ONCE per (type, epilogue, transposes, m, n, k, leading
//    dimensions, beta != 0, pointer alignments) by cublasLtMatmulAlgoGetHeuristic
//    with the context's workspace (kLtWorkspaceBytes), cached in a map, the same
//    algorithm on every later call. Determinism: the preference restricts the
//    heuristic to CUBLASLT_REDUCTION_SCHEME_NONE (no split-K, so neither the
//    in-place reduction's counters nor a separate reduction step): each output
//    and each bias-gradient element is summed in one fixed order by one
//    algorithm, bitwise repeatable run to run on one device and library.
//  - refusal / fallback: when the heuristic offers no algorithm for a call
//    (e.g. 16-bit leading dimensions that are not a multiple of 8 with the
//    epilogue, or pointers the kernels cannot take), that key is cached as
//    refused and the call runs the cuBLAS path (cuda::linear_forward/backward)
//    instead; LtContext::fallbacks() counts such calls (tests, the run's note).
//  - no allocation and no synchronization per call: the handle, workspace and
//    bias scratch are made once by the LtContext; the cache grows once per new
//    key (host memory, a heuristic query; no device allocation). Every cuBLASLt
//    status is checked (SHARDTRAIN_CUBLAS_CHECK: cuBLASLt returns cublasStatus_t).
// Has not yet run on a device (2026-11-29): share/doc/gpu.md "cuBLASLt Linear".
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <map>

namespace shardtrain::cuda {

inline constexpr std::size_t kLtWorkspaceBytes = std::size_t{32} << 20;  // 32 MiB, as cuBLAS on Hopper
inline constexpr std::int64_t kLtBiasScratchElems = std::int64_t{1} << 18;  // bias-gradient scratch, elements

// The cuBLASLt handle, the matmul workspace, the bias-gradient scratch and the
// algorithm cache. One per CudaBackend (made only when model.gemm = "cublaslt"),
// used on one stream at a time (the workspace is shared by every call).
class LtContext {
 public:
  LtContext();
  ~LtContext();
  LtContext(const LtContext&) = delete;
  LtContext& operator=(const LtContext&) = delete;

  // Calls that ran the cuBLAS path because cuBLASLt offered no algorithm.
  std::int64_t fallbacks() const { return m_fallbacks; }
  // Distinct matmul keys asked of the heuristic so far (each asked once).
  std::size_t cached_algorithms() const { return m_algos.size(); }

  // What a matmul is cached by (see the file-top comment).
  using Key = std::array<std::int64_t, 14>;
  struct Algo {  // made once per key; the descriptors live as long as the context
    bool found = false;  // false: cuBLASLt offered no deterministic algorithm (the cuBLAS path runs)
    cublasLtMatmulAlgo_t algo{};
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // C is D's layout
  };

  // Internal to lt_linear.cu (public so its helpers can reach them).
  cublasLtHandle_t handle() const { return m_handle; }
  void* workspace() const { return m_workspace; }
  void* bias_scratch() const { return m_bias_scratch; }
  std::map<Key, Algo>& algos() { return m_algos; }
  void count_fallback() { ++m_fallbacks; }

 private:
  cublasLtHandle_t m_handle = nullptr;
  void* m_workspace = nullptr;
  void* m_bias_scratch = nullptr;  // kLtBiasScratchElems floats (room for any T)
  std::map<Key, Algo> m_algos;
  std::int64_t m_fallbacks = 0;
};

// y(N,M) = x(N,K) w(M,K)^T + b(M)   (accumulate: y +=); b == nullptr: no bias.
// `fallback` is the cuBLAS handle the cuBLAS path uses when cuBLASLt refuses.
template <class T>
void lt_linear_forward(LtContext& lt, cublasHandle_t fallback, cudaStream_t stream, const T* x, const T* w,
                       const T* b, T* y, std::int64_t n, std::int64_t k, std::int64_t m, bool accumulate = false);

// dx(N,K) = dy w (skipped when dx == nullptr); dw(M,K) += dy^T x; db(M) += the
// column sums of dy (skipped when db == nullptr); !accumulate overwrites dw, db.
template <class T>
void lt_linear_backward(LtContext& lt, cublasHandle_t fallback, cudaStream_t stream, const T* x, const T* w,
                        const T* dy, T* dx, T* dw, T* db, std::int64_t n, std::int64_t k, std::int64_t m,
                        bool accumulate = true);

#define SHARDTRAIN_CUDA_DECLARE_LT_LINEAR(T)                                                                   \
  extern template void lt_linear_forward<T>(LtContext&, cublasHandle_t, cudaStream_t, const T*, const T*,     \
                                            const T*, T*, std::int64_t, std::int64_t, std::int64_t, bool);     \
  extern template void lt_linear_backward<T>(LtContext&, cublasHandle_t, cudaStream_t, const T*, const T*,    \
                                             const T*, T*, T*, T*, std::int64_t, std::int64_t, std::int64_t,   \
                                             bool);
SHARDTRAIN_CUDA_DECLARE_LT_LINEAR(float)
SHARDTRAIN_CUDA_DECLARE_LT_LINEAR(__half)
SHARDTRAIN_CUDA_DECLARE_LT_LINEAR(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_DECLARE_LT_LINEAR

}  // namespace shardtrain::cuda
