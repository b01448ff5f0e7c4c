// shardtrain/kernels/cuda/gemm.cu
// Row-major GEMM over cublasGemmEx / cublasGemmStridedBatchedEx (see gemm.cuh for
// the layout trick and precision). Owns the only direct cuBLAS GEMM calls of
// kernels/cuda. Invariants: shapes and leading dimensions are checked before any
// call; k == 0 is handled here (cuBLAS may reject ld = 0), by a C = beta * C kernel.
#include "kernels/cuda/gemm.cuh"

#include <algorithm>
#include <climits>
#include <string>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {
namespace {

template <class T>
constexpr cudaDataType_t data_type();
template <>
constexpr cudaDataType_t data_type<float>() { return CUDA_R_32F; }
template <>
constexpr cudaDataType_t data_type<__half>() { return CUDA_R_16F; }
template <>
constexpr cudaDataType_t data_type<__nv_bfloat16>() { return CUDA_R_16BF; }

cublasOperation_t op(Trans t) { return t == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T; }

int to_int(std::int64_t v, const char* what) {
  SHARDTRAIN_CHECK(v >= 0 && v <= INT_MAX,
                   std::string("cuda::gemm: ") + what + " = " + std::to_string(v) +
                       " is outside cuBLAS's int range");
  return static_cast<int>(v);
}

// Checks shapes and leading dimensions of one row-major product. A row-major
// matrix stored as rows x cols needs ld >= cols (>= 1 as cols > 0 when it is read).
void check_dims(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k,
                std::int64_t lda, std::int64_t ldb, std::int64_t ldc) {
  SHARDTRAIN_CHECK(m >= 0 && n >= 0 && k >= 0, "cuda::gemm: negative dimension m " +
                                                   std::to_string(m) + " n " + std::to_string(n) +
                                                   " k " + std::to_string(k));
  if (m == 0 || n == 0) return;  // nothing is read or written
  const std::int64_t a_cols = ta == Trans::N ? k : m;
  const std::int64_t b_cols = tb == Trans::N ? n : k;
  // With k == 0, A and B are not read (only C = beta * C): their ld is not checked.
  SHARDTRAIN_CHECK((k == 0 || (lda >= a_cols && ldb >= b_cols)) && ldc >= n,
                   "cuda::gemm: leading dimension too small: lda " + std::to_string(lda) +
                       " (A has " + std::to_string(a_cols) + " columns), ldb " +
                       std::to_string(ldb) + " (B has " + std::to_string(b_cols) +
                       " columns), ldc " + std::to_string(ldc) + " (C has " + std::to_string(n) +
                       " columns)");
}

void prepare_handle(cublasHandle_t handle, cudaStream_t stream) {
  SHARDTRAIN_CHECK(handle != nullptr, "cuda::gemm: null cublasHandle_t");
  // cublasSetStream also resets a workspace set by cublasSetWorkspace: call it only
  // when the handle is on another stream.
  cudaStream_t current = nullptr;
  SHARDTRAIN_CUBLAS_CHECK(cublasGetStream(handle, &current));
  if (current != stream) SHARDTRAIN_CUBLAS_CHECK(cublasSetStream(handle, stream));
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_HOST;
  SHARDTRAIN_CUBLAS_CHECK(cublasGetPointerMode(handle, &mode));
  SHARDTRAIN_CHECK(mode == CUBLAS_POINTER_MODE_HOST,
                   "cuda::gemm: the cublasHandle_t must use CUBLAS_POINTER_MODE_HOST "
                   "(alpha and beta are host floats)");
}

// C(rows, cols) with row stride ldc, for `batch` matrices stride_c apart: C = beta * C.
template <class TC>
__global__ void scale_c_kernel(TC* c, std::int64_t rows, std::int64_t cols, std::int64_t ldc,
                               std::int64_t stride_c, std::int64_t batch, float beta) {
  const std::int64_t total = batch * rows * cols;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t bi = idx / (rows * cols);
    const std::int64_t r = (idx / cols) % rows;
    const std::int64_t j = idx % cols;
    TC* p = c + bi * stride_c + r * ldc + j;
    *p = beta == 0.0f ? store_as<TC>(0.0f) : store_as<TC>(beta * load_f32(*p));
  }
}

template <class TC>
void scale_c(cudaStream_t stream, TC* c, std::int64_t rows, std::int64_t cols, std::int64_t ldc,
             std::int64_t stride_c, std::int64_t batch, float beta) {
  constexpr unsigned kThreads = 256;
  const unsigned blocks = std::min<unsigned>(blocks_for(batch * rows * cols, kThreads), 65535u);
  scale_c_kernel<TC><<<blocks, kThreads, 0, stream>>>(c, rows, cols, ldc, stride_c, batch, beta);
  check_launch("cuda::gemm scale_c (k == 0)");
}

}  // namespace

template <class T, class TC>
void gemm(cublasHandle_t handle, cudaStream_t stream, Trans trans_a, Trans trans_b,
          std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, float beta, TC* c, std::int64_t ldc) {
  check_dims(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  prepare_handle(handle, stream);
  if (k == 0) {
    scale_c(stream, c, m, n, ldc, 0, 1, beta);
    return;
  }
  // Row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T (gemm.cuh).
  SHARDTRAIN_CUBLAS_CHECK(cublasGemmEx(
      handle, op(trans_b), op(trans_a), to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha,
      b, data_type<T>(), to_int(ldb, "ldb"), a, data_type<T>(), to_int(lda, "lda"), &beta, c,
      data_type<TC>(), to_int(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <class T, class TC>
void gemm_strided_batched(cublasHandle_t handle, cudaStream_t stream, Trans trans_a,
                          Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                          float alpha, const T* a, std::int64_t lda, std::int64_t stride_a,
                          const T* b, std::int64_t ldb, std::int64_t stride_b, float beta, TC* c,
                          std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
  check_dims(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  SHARDTRAIN_CHECK(batch >= 0 && stride_a >= 0 && stride_b >= 0 && stride_c >= 0,
                   "cuda::gemm_strided_batched: negative batch or stride");
  if (m == 0 || n == 0 || batch == 0) return;
  prepare_handle(handle, stream);
  if (k == 0) {
    scale_c(stream, c, m, n, ldc, stride_c, batch, beta);
    return;
  }
  SHARDTRAIN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle, op(trans_b), op(trans_a), to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha,
      b, data_type<T>(), to_int(ldb, "ldb"), static_cast<long long>(stride_b), a, data_type<T>(),
      to_int(lda, "lda"), static_cast<long long>(stride_a), &beta, c, data_type<TC>(),
      to_int(ldc, "ldc"), static_cast<long long>(stride_c), to_int(batch, "batch"),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

#define SHARDTRAIN_CUDA_INSTANTIATE_GEMM(T, TC)                                                 \
  template void gemm<T, TC>(cublasHandle_t, cudaStream_t, Trans, Trans, std::int64_t,           \
                            std::int64_t, std::int64_t, float, const T*, std::int64_t, const T*, \
                            std::int64_t, float, TC*, std::int64_t);                             \
  template void gemm_strided_batched<T, TC>(                                                    \
      cublasHandle_t, cudaStream_t, Trans, Trans, std::int64_t, std::int64_t, std::int64_t,     \
      float, const T*, std::int64_t, std::int64_t, const T*, std::int64_t, std::int64_t, float,  \
      TC*, std::int64_t, std::int64_t, std::int64_t);
SHARDTRAIN_CUDA_INSTANTIATE_GEMM(float, float)
SHARDTRAIN_CUDA_INSTANTIATE_GEMM(__half, __half)
SHARDTRAIN_CUDA_INSTANTIATE_GEMM(__nv_bfloat16, __nv_bfloat16)
SHARDTRAIN_CUDA_INSTANTIATE_GEMM(__half, float)
SHARDTRAIN_CUDA_INSTANTIATE_GEMM(__nv_bfloat16, float)
#undef SHARDTRAIN_CUDA_INSTANTIATE_GEMM

}  // namespace shardtrain::cuda
