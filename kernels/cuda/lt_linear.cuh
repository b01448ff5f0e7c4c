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
//  - GELU fused into the MLP's GEMMs (model.gelu = "epilogue"; GPT-2's tanh form
//    only, never the erf form):
//      lt_linear_gelu_forward: one matmul with CUBLASLT_EPILOGUE_GELU_AUX_BIAS
//      (GELU_AUX without a bias): act = gelu(x w^T + b) is D, and the
//      pre-activation x w^T + b is written to the aux buffer `pre` (the
//      backward's input), both in T. The GELU is applied to the fp32 sum before
//      it is rounded, so in 16 bits act may differ from gelu(round(pre)) (the
//      separate pass) by an ulp.
//      lt_linear_dgelu_backward: the layer AFTER the GELU (fc2): its dx matmul
//      with CUBLASLT_EPILOGUE_DGELU reads the aux buffer `pre` and writes
//      dpre = (dy w) * gelu'(pre) straight (the separate pass's input dx is never
//      stored); dw and db as lt_linear_backward (BGRADB). DGELU, not
//      DGELU_BGRAD: the first layer's (fc's) bias gradient already comes from
//      ITS dw matmul's BGRADB epilogue (no separate pass to save), BGRADB sums
//      along the GEMM's k inside one thread block's loop (the order validated
//      bitwise), while DGELU_BGRAD would sum over D's columns across thread
//      blocks, in an order cuBLASLt does not document; and fc's linear_backward
//      stays as it is.
//    The formula: cuBLASLt's header and manual name the epilogue only "GELU".
//    PyTorch, whose CUDA _addmm_activation(use_gelu) runs this epilogue, writes
//    its decomposition as gelu(approximate="tanh") on CUDA and the erf form
//    elsewhere (torch/_decomp/decompositions.py), i.e. the tanh form
//      gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's and
//    kernels/cuda/gelu.cuh's. Not yet checked on a device: the fp32 cases of
//    gpu_lt_linear_test tell the two forms apart (on their inputs tanh and erf
//    differ by more than 5x the fp32 tolerance).
//    Aux rules (cuBLASLt: EPILOGUE_AUX_LD a multiple of 8, at least D's rows):
//    the aux leading dimension here is D's (m forward, k backward); a call whose
//    aux leading dimension is not a multiple of 8 or whose aux pointer is not
//    16-byte aligned is refused before asking. Cached by the same key plus the
//    aux pointer's alignment; split-K refused as above (the GELU epilogues are
//    elementwise, so no reduction order enters). A refused call runs the
//    unfused path for that call -- lt_linear_forward then cuda::gelu_forward;
//    lt_linear_backward with dx = dpre then cuda::gelu_backward in place -- and
//    LtContext::gelu_fallbacks() counts it.
// Has not yet run on a device (2026-11-29): share/doc/gpu.md "cuBLASLt Linear";
// the GELU epilogues not either (2026-11-30).
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
  // Fused-GELU calls (lt_linear_gelu_forward / lt_linear_dgelu_backward) that ran
  // the unfused path because cuBLASLt offered no GELU-epilogue algorithm or the
  // aux buffer broke its rules.
  std::int64_t gelu_fallbacks() const { return m_gelu_fallbacks; }
  // Distinct matmul keys asked of the heuristic so far (each asked once).
  std::size_t cached_algorithms() const { return m_algos.size(); }

  // What a matmul is cached by (see the file-top comment).
  using Key = std::array<std::int64_t, 15>;
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
  void count_gelu_fallback() { ++m_gelu_fallbacks; }

 private:
  cublasLtHandle_t m_handle = nullptr;
  void* m_workspace = nullptr;
  void* m_bias_scratch = nullptr;  // kLtBiasScratchElems floats (room for any T)
  std::map<Key, Algo> m_algos;
  std::int64_t m_fallbacks = 0;
  std::int64_t m_gelu_fallbacks = 0;
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

// pre(N,M) = x(N,K) w(M,K)^T + b(M), act(N,M) = gelu_tanh(pre), both OVERWRITTEN
// (GELU_AUX_BIAS; b == nullptr: GELU_AUX, no bias). pre and act must not overlap.
template <class T>
void lt_linear_gelu_forward(LtContext& lt, cublasHandle_t fallback, cudaStream_t stream, const T* x, const T* w,
                            const T* b, T* pre, T* act, std::int64_t n, std::int64_t k, std::int64_t m);

// The Linear after a GELU, backward through both: x = gelu(pre) (N,K) its input,
// pre (N,K) the GELU's input (the forward's aux buffer), dy (N,M):
// dpre(N,K) = (dy w) * gelu_tanh'(pre), OVERWRITTEN (DGELU; must not overlap pre);
// dw(M,K) += dy^T x; db(M) += the column sums of dy (nullptr: none); !accumulate
// overwrites dw, db (as lt_linear_backward).
template <class T>
void lt_linear_dgelu_backward(LtContext& lt, cublasHandle_t fallback, cudaStream_t stream, const T* x, const T* w,
                              const T* dy, const T* pre, T* dpre, T* dw, T* db, std::int64_t n, std::int64_t k,
                              std::int64_t m, bool accumulate = true);

#define SHARDTRAIN_CUDA_DECLARE_LT_LINEAR(T)                                                                   \
  extern template void lt_linear_forward<T>(LtContext&, cublasHandle_t, cudaStream_t, const T*, const T*,     \
                                            const T*, T*, std::int64_t, std::int64_t, std::int64_t, bool);     \
  extern template void lt_linear_backward<T>(LtContext&, cublasHandle_t, cudaStream_t, const T*, const T*,    \
                                             const T*, T*, T*, T*, std::int64_t, std::int64_t, std::int64_t,   \
                                             bool);                                                            \
  extern template void lt_linear_gelu_forward<T>(LtContext&, cublasHandle_t, cudaStream_t, const T*, const T*, \
                                                 const T*, T*, T*, std::int64_t, std::int64_t, std::int64_t);   \
  extern template void lt_linear_dgelu_backward<T>(LtContext&, cublasHandle_t, cudaStream_t, const T*,         \
                                                   const T*, const T*, const T*, T*, T*, T*, std::int64_t,      \
                                                   std::int64_t, std::int64_t, bool);
SHARDTRAIN_CUDA_DECLARE_LT_LINEAR(float)
SHARDTRAIN_CUDA_DECLARE_LT_LINEAR(__half)
SHARDTRAIN_CUDA_DECLARE_LT_LINEAR(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_DECLARE_LT_LINEAR

}  // namespace shardtrain::cuda
