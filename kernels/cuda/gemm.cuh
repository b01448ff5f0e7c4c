// shardtrain/kernels/cuda/gemm.cuh
// Owns the row-major GEMM entry points of the CUDA build: thin wrappers over
// cublasGemmEx and cublasGemmStridedBatchedEx. Every other CUDA op that
// multiplies matrices (linear.cu, attention.cu) goes through these, except the
// cuBLASLt Linear (lt_linear.cu, model.gemm = "cublaslt"), which calls cuBLASLt
// itself and comes back here (through linear.cu) only for what cuBLASLt refuses.
//
// Layout convention (the row-major / column-major trick):
//   shardtrain stores matrices ROW-MAJOR (as the host kernels/gemm.hpp): element
//   (i, j) of a matrix with leading dimension ld is at p[i * ld + j]. cuBLAS is
//   column-major, and a row-major (r x c) matrix read column-major with the same
//   ld is its transpose (c x r). So
//       C = op(A) op(B)   (row-major, C is m x n)
//   is computed as the column-major product
//       C^T = op(B)^T op(A)^T   (C^T is n x m)
//   i.e. cublasGemmEx(opB, opA, n, m, k, B, ldb, A, lda, C, ldc): operands swapped,
//   each keeping its own transpose flag, dimensions m and n swapped. lda / ldb /
//   ldc are the ROW strides of the row-major matrices as stored (A is m x k when
//   trans_a == N, k x m when T; likewise B is k x n or n x k).
//
// Precision: compute type CUBLAS_COMPUTE_32F (fp32 accumulation) for every T;
// alpha and beta are fp32 host values (the handle must be in
// CUBLAS_POINTER_MODE_HOST, the default; this is checked). For f16 / bf16 inputs
// cuBLAS picks tensor-core kernels through the default algorithm
// (CUBLAS_GEMM_DEFAULT; CUBLAS_GEMM_DEFAULT_TENSOR_OP is its deprecated alias).
// For float, results are plain fp32 as long as the handle's math mode allows no
// TF32 (CUBLAS_DEFAULT_MATH, the default). C may be float while A and B are
// 16-bit (TC = float): attention.cu keeps its scores in fp32 that way.
//
// Streams and handles: the caller owns the cublasHandle_t; each call sets it to
// `stream` (cublasSetStream, only when it is on another stream, since that call
// also resets a cublasSetWorkspace workspace) so cuBLAS work and this op's own
// kernels are ordered on one stream. Nothing here allocates or synchronizes.
// Degenerate shapes follow BLAS (and the host gemm): m == 0 or n == 0 does
// nothing, k == 0 gives C = beta * C (beta == 0 writes zeros, clearing NaNs).
// Dimensions are int64 and checked against cuBLAS's int range; every cuBLAS call
// is checked with SHARDTRAIN_CUBLAS_CHECK (throws shardtrain::Error).
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardtrain::cuda {

enum class Trans { N, T };

// C(m,n) = alpha * op(A) * op(B) + beta * C, all row-major on the device.
template <class T, class TC = T>
void gemm(cublasHandle_t handle, cudaStream_t stream, Trans trans_a, Trans trans_b,
          std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, float beta, TC* c, std::int64_t ldc);

// For i in [0, batch): C_i = alpha op(A_i) op(B_i) + beta C_i with
// A_i = a + i * stride_a (elements), likewise B_i and C_i. The C_i must not
// share elements (cuBLAS requirement); A_i and B_i may (stride 0 broadcasts).
template <class T, class TC = T>
void gemm_strided_batched(cublasHandle_t handle, cudaStream_t stream, Trans trans_a,
                          Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                          float alpha, const T* a, std::int64_t lda, std::int64_t stride_a,
                          const T* b, std::int64_t ldb, std::int64_t stride_b, float beta, TC* c,
                          std::int64_t ldc, std::int64_t stride_c, std::int64_t batch);

#define SHARDTRAIN_CUDA_DECLARE_GEMM(T, TC)                                                    \
  extern template void gemm<T, TC>(cublasHandle_t, cudaStream_t, Trans, Trans, std::int64_t,   \
                                   std::int64_t, std::int64_t, float, const T*, std::int64_t,  \
                                   const T*, std::int64_t, float, TC*, std::int64_t);          \
  extern template void gemm_strided_batched<T, TC>(                                            \
      cublasHandle_t, cudaStream_t, Trans, Trans, std::int64_t, std::int64_t, std::int64_t,    \
      float, const T*, std::int64_t, std::int64_t, const T*, std::int64_t, std::int64_t, float, \
      TC*, std::int64_t, std::int64_t, std::int64_t);
SHARDTRAIN_CUDA_DECLARE_GEMM(float, float)
SHARDTRAIN_CUDA_DECLARE_GEMM(__half, __half)
SHARDTRAIN_CUDA_DECLARE_GEMM(__nv_bfloat16, __nv_bfloat16)
SHARDTRAIN_CUDA_DECLARE_GEMM(__half, float)
SHARDTRAIN_CUDA_DECLARE_GEMM(__nv_bfloat16, float)
#undef SHARDTRAIN_CUDA_DECLARE_GEMM

}  // namespace shardtrain::cuda
