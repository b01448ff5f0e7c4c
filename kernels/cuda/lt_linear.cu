// shardtrain/kernels/cuda/lt_linear.cu
// nn.Linear through cuBLASLt (see lt_linear.cuh for the semantics, the bias
// epilogues, the algorithm cache and the determinism rule).
// Layout: as gemm.cuh, row-major matrices are read by cuBLASLt (column-major) as
// their transposes, so with M out, K in, N rows:
//   forward  y^T (M x N)  = op_T(w: K x M, ld K) * op_N(x^T: K x N, ld K) [+ y^T] + b  (BIAS: b per row of D)
//   dx       dx^T (K x N) = op_N(w^T: K x M, ld K) * op_N(dy^T: M x N, ld M)
//   dw       dw^T (K x M) = op_N(x^T: K x N, ld K) * op_T(dy^T: M x N, ld M) [+ dw^T]
//            BGRADB: the column sums of op(B) = dy (N x M) over the GEMM's k = N, one per column of D: db (M)
//   GELU forward: as forward, D = act^T, the aux buffer pre^T (M x N, ld M) = the sum before the GELU
//   DGELU:        as dx, D = dpre^T (K x N, ld K) = (w^T dy^T) * gelu'(aux), aux = pre^T (K x N, ld K)
// Invariants: shapes checked before anything is launched; degenerate shapes
// (a zero dimension) take the cuBLAS path, which follows BLAS for them.
#include "kernels/cuda/lt_linear.cuh"

#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/linear.cuh"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;

template <class T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, __half>) return CUDA_R_16F;
  else return CUDA_R_16BF;
}

// The largest power of two (at most 256, cuBLASLt's default preference) that divides the address.
std::int64_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::int64_t align = 256;
  while (align > 1 && a % static_cast<std::uintptr_t>(align) != 0) align /= 2;
  return align;
}

// db(j) += g(j) in fp32, rounded once (g: the BGRADB epilogue's column sums, in T).
template <class T>
__global__ void add_bias_grad_kernel(const T* __restrict__ g, T* __restrict__ db, std::int64_t m) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j < m) db[j] = store_as<T>(load_f32(db[j]) + load_f32(g[j]));
}

// One column-major matmul D(rows x cols) = op(A) op(B) + beta D [epilogue].
struct Matmul {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  std::int64_t rows = 0, cols = 0, k = 0;
  const void* a = nullptr;
  std::int64_t lda = 0;
  const void* b = nullptr;
  std::int64_t ldb = 0;
  void* d = nullptr;
  std::int64_t ldd = 0;
  float beta = 0.0f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;  // BIAS: read (rows); BGRADB: written (cols)
  void* aux = nullptr;   // GELU_AUX(_BIAS): written; DGELU: read (D's shape and leading dimension)
};

// Makes the descriptors and asks the heuristic once for `key`: the first of up
// to kAsk offers whose split-K count is 1 (CUBLASLT_REDUCTION_SCHEME_NONE is
// also asked of the heuristic; this double-checks it).
template <class T>
LtContext::Algo make_algo(LtContext& lt, const Matmul& mm, const LtContext::Key& key) {
  LtContext::Algo r;
  const cudaDataType_t type = data_type<T>();
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&r.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(r.desc, CUBLASLT_MATMUL_DESC_TRANSA, &mm.ta, sizeof(mm.ta)));
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(r.desc, CUBLASLT_MATMUL_DESC_TRANSB, &mm.tb, sizeof(mm.tb)));
  SHARDTRAIN_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(r.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &mm.epilogue, sizeof(mm.epilogue)));
  if (mm.bias != nullptr) {
    const std::int32_t bias_type = type;  // the bias (gradient) in T, as db
    SHARDTRAIN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(r.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    SHARDTRAIN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(r.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &mm.bias, sizeof(mm.bias)));
  }
  if (mm.aux != nullptr) {  // its type: CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE left unset, i.e. D's (T)
    const std::int64_t aux_ld = mm.ldd;
    SHARDTRAIN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(r.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &mm.aux, sizeof(mm.aux)));
    SHARDTRAIN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(r.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  const bool a_n = mm.ta == CUBLAS_OP_N, b_n = mm.tb == CUBLAS_OP_N;
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&r.a, type, a_n ? mm.rows : mm.k, a_n ? mm.k : mm.rows, mm.lda));
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&r.b, type, b_n ? mm.k : mm.cols, b_n ? mm.cols : mm.k, mm.ldb));
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&r.d, type, mm.rows, mm.cols, mm.ldd));

  cublasLtMatmulPreference_t pref = nullptr;
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  constexpr int kAsk = 8;
  cublasLtMatmulHeuristicResult_t offers[kAsk] = {};
  int returned = 0;
  cublasStatus_t asked = CUBLAS_STATUS_SUCCESS;
  try {
    const std::uint64_t ws = kLtWorkspaceBytes;
    const std::uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    const std::uint32_t align_a = static_cast<std::uint32_t>(key[11]), align_b = static_cast<std::uint32_t>(key[12]),
                        align_d = static_cast<std::uint32_t>(key[13] / 1000);
    SHARDTRAIN_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    SHARDTRAIN_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme, sizeof(scheme)));
    SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                                 &align_a, sizeof(align_a)));
    SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                                 &align_b, sizeof(align_b)));
    SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                                 &align_d, sizeof(align_d)));
    SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                                 &align_d, sizeof(align_d)));
    asked = cublasLtMatmulAlgoGetHeuristic(lt.handle(), r.desc, r.a, r.b, r.d, r.d, pref, kAsk, offers, &returned);
  } catch (...) {
    cublasLtMatmulPreferenceDestroy(pref);
    throw;
  }
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  // NOT_SUPPORTED: no algorithm for this shape / epilogue / alignment (the cuBLAS path runs).
  if (asked != CUBLAS_STATUS_NOT_SUPPORTED) SHARDTRAIN_CUBLAS_CHECK(asked);
  for (int i = 0; asked == CUBLAS_STATUS_SUCCESS && i < returned && !r.found; ++i) {
    if (offers[i].state != CUBLAS_STATUS_SUCCESS) continue;
    std::int32_t splits = 1;
    std::size_t written = 0;
    SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&offers[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                                 &splits, sizeof(splits), &written));
    if (splits > 1) continue;  // a split-K reduction: not repeatable in every scheme, refused
    r.algo = offers[i].algo;
    r.found = true;
  }
  return r;
}

// Runs `mm` through its cached algorithm; false (and nothing launched) when
// cuBLASLt has none for it.
template <class T>
bool run_matmul(LtContext& lt, cudaStream_t stream, const Matmul& mm) {
  const LtContext::Key key{static_cast<std::int64_t>(data_type<T>()),
                           static_cast<std::int64_t>(mm.epilogue),
                           static_cast<std::int64_t>(mm.ta),
                           static_cast<std::int64_t>(mm.tb),
                           mm.rows, mm.cols, mm.k, mm.lda, mm.ldb, mm.ldd,
                           mm.beta != 0.0f ? 1 : 0,
                           alignment_of(mm.a),
                           alignment_of(mm.b),
                           alignment_of(mm.d) * 1000 + (mm.bias != nullptr ? alignment_of(mm.bias) : 0),
                           mm.aux != nullptr ? alignment_of(mm.aux) : 0};
  auto it = lt.algos().find(key);
  if (it == lt.algos().end()) it = lt.algos().emplace(key, make_algo<T>(lt, mm, key)).first;
  const LtContext::Algo& algo = it->second;
  if (!algo.found) return false;
  if (mm.bias != nullptr)
    SHARDTRAIN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(algo.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &mm.bias, sizeof(mm.bias)));
  if (mm.aux != nullptr)
    SHARDTRAIN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(algo.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &mm.aux, sizeof(mm.aux)));
  const float alpha = 1.0f;
  SHARDTRAIN_CUBLAS_CHECK(cublasLtMatmul(lt.handle(), algo.desc, &alpha, mm.a, algo.a, mm.b, algo.b, &mm.beta, mm.d,
                                         algo.d, mm.d, algo.d, &algo.algo, lt.workspace(), kLtWorkspaceBytes, stream));
  return true;
}

void check_shape(const char* op, std::int64_t n, std::int64_t k, std::int64_t m) {
  SHARDTRAIN_CHECK(n >= 0 && k >= 0 && m >= 0, std::string(op) + ": negative size n " + std::to_string(n) + " k " +
                                                   std::to_string(k) + " m " + std::to_string(m));
}

// cuBLASLt's rules for the GELU aux buffer (lt_linear.cuh): its leading
// dimension (D's) a multiple of 8; its pointer 16-byte aligned (asked here so a
// refusal never reaches the library as an invalid value).
bool aux_takes(const void* aux, std::int64_t ld) { return ld % 8 == 0 && alignment_of(aux) >= 16; }

}  // namespace

LtContext::LtContext() {
  SHARDTRAIN_CUBLAS_CHECK(cublasLtCreate(&m_handle));
  try {
    SHARDTRAIN_CUDA_CHECK(cudaMalloc(&m_workspace, kLtWorkspaceBytes));
    SHARDTRAIN_CUDA_CHECK(cudaMalloc(&m_bias_scratch, kLtBiasScratchElems * sizeof(float)));
  } catch (...) {
    if (m_workspace != nullptr) SHARDTRAIN_CUDA_WARN(cudaFree(m_workspace));
    cublasLtDestroy(m_handle);  // already failing: the first error is the one reported
    throw;
  }
}

LtContext::~LtContext() {
  for (auto& [key, algo] : m_algos) {
    (void)key;
    if (algo.a != nullptr) cublasLtMatrixLayoutDestroy(algo.a);
    if (algo.b != nullptr) cublasLtMatrixLayoutDestroy(algo.b);
    if (algo.d != nullptr) cublasLtMatrixLayoutDestroy(algo.d);
    if (algo.desc != nullptr) cublasLtMatmulDescDestroy(algo.desc);
  }
  // The device may still run a matmul that uses the workspace: free after the device is idle.
  SHARDTRAIN_CUDA_WARN(cudaDeviceSynchronize());
  SHARDTRAIN_CUDA_WARN(cudaFree(m_bias_scratch));
  SHARDTRAIN_CUDA_WARN(cudaFree(m_workspace));
  if (cublasLtDestroy(m_handle) != CUBLAS_STATUS_SUCCESS)
    std::fprintf(stderr, "warning: %s: cublasLtDestroy failed\n", detail::mpi_rank_label().c_str());
}

template <class T>
void lt_linear_forward(LtContext& lt, cublasHandle_t fallback, cudaStream_t stream, const T* x, const T* w,
                       const T* b, T* y, std::int64_t n, std::int64_t k, std::int64_t m, bool accumulate) {
  check_shape("cuda::lt_linear_forward", n, k, m);
  if (n == 0 || m == 0 || k == 0) return linear_forward<T>(fallback, stream, x, w, b, y, n, k, m, accumulate);
  Matmul mm;
  mm.ta = CUBLAS_OP_T;
  mm.tb = CUBLAS_OP_N;
  mm.rows = m;
  mm.cols = n;
  mm.k = k;
  mm.a = w;
  mm.lda = k;
  mm.b = x;
  mm.ldb = k;
  mm.d = y;
  mm.ldd = m;
  mm.beta = accumulate ? 1.0f : 0.0f;
  if (b != nullptr) {
    mm.epilogue = CUBLASLT_EPILOGUE_BIAS;
    mm.bias = const_cast<T*>(b);  // read only (BIAS)
  }
  if (run_matmul<T>(lt, stream, mm)) return;
  lt.count_fallback();
  linear_forward<T>(fallback, stream, x, w, b, y, n, k, m, accumulate);
}

template <class T>
void lt_linear_backward(LtContext& lt, cublasHandle_t fallback, cudaStream_t stream, const T* x, const T* w,
                        const T* dy, T* dx, T* dw, T* db, std::int64_t n, std::int64_t k, std::int64_t m,
                        bool accumulate) {
  check_shape("cuda::lt_linear_backward", n, k, m);
  if (n == 0 || m == 0 || k == 0 || (db != nullptr && accumulate && m > kLtBiasScratchElems)) {
    if (n != 0 && m != 0 && k != 0) lt.count_fallback();
    return linear_backward<T>(fallback, stream, x, w, dy, dx, dw, db, n, k, m, accumulate);
  }
  bool lt_dx = true;
  if (dx != nullptr) {
    Matmul mm;  // dx^T (K x N) = w^T (K x M) dy^T (M x N)
    mm.rows = k;
    mm.cols = n;
    mm.k = m;
    mm.a = w;
    mm.lda = k;
    mm.b = dy;
    mm.ldb = m;
    mm.d = dx;
    mm.ldd = k;
    lt_dx = run_matmul<T>(lt, stream, mm);
  }
  Matmul mm;  // dw^T (K x M) = x^T (K x N) (dy^T)^T (N x M) [+ dw^T]; BGRADB: db (M)
  mm.tb = CUBLAS_OP_T;
  mm.rows = k;
  mm.cols = m;
  mm.k = n;
  mm.a = x;
  mm.lda = k;
  mm.b = dy;
  mm.ldb = m;
  mm.d = dw;
  mm.ldd = k;
  mm.beta = accumulate ? 1.0f : 0.0f;
  T* grad = nullptr;
  if (db != nullptr) {
    mm.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    grad = accumulate ? static_cast<T*>(lt.bias_scratch()) : db;
    mm.bias = grad;
  }
  if (!lt_dx || !run_matmul<T>(lt, stream, mm)) {
    // No algorithm: the whole call on the cuBLAS path. A dx already written by
    // cuBLASLt is written again, identically in value (dx is overwritten).
    lt.count_fallback();
    return linear_backward<T>(fallback, stream, x, w, dy, dx, dw, db, n, k, m, accumulate);
  }
  if (db != nullptr && accumulate) {
    add_bias_grad_kernel<T><<<blocks_for(m, kThreads), kThreads, 0, stream>>>(grad, db, m);
    check_launch("cuda::lt_linear_backward bias");
  }
}

template <class T>
void lt_linear_gelu_forward(LtContext& lt, cublasHandle_t fallback, cudaStream_t stream, const T* x, const T* w,
                            const T* b, T* pre, T* act, std::int64_t n, std::int64_t k, std::int64_t m) {
  check_shape("cuda::lt_linear_gelu_forward", n, k, m);
  SHARDTRAIN_CHECK(pre != act, "cuda::lt_linear_gelu_forward: pre and act must be different buffers");
  const bool degenerate = n == 0 || m == 0 || k == 0;
  if (!degenerate && aux_takes(pre, m)) {
    Matmul mm;  // act^T (M x N) = gelu(w x^T + b), aux pre^T (M x N, ld M) = w x^T + b
    mm.ta = CUBLAS_OP_T;
    mm.tb = CUBLAS_OP_N;
    mm.rows = m;
    mm.cols = n;
    mm.k = k;
    mm.a = w;
    mm.lda = k;
    mm.b = x;
    mm.ldb = k;
    mm.d = act;
    mm.ldd = m;
    mm.epilogue = b != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    mm.bias = const_cast<T*>(b);  // read only (BIAS)
    mm.aux = pre;
    if (run_matmul<T>(lt, stream, mm)) return;
  }
  // The unfused path: the Linear (cuBLASLt or, refused there too, cuBLAS), then the GELU pass.
  if (!degenerate) lt.count_gelu_fallback();
  lt_linear_forward<T>(lt, fallback, stream, x, w, b, pre, n, k, m, false);
  gelu_forward<T>(pre, act, n * m, stream);
}

template <class T>
void lt_linear_dgelu_backward(LtContext& lt, cublasHandle_t fallback, cudaStream_t stream, const T* x, const T* w,
                              const T* dy, const T* pre, T* dpre, T* dw, T* db, std::int64_t n, std::int64_t k,
                              std::int64_t m, bool accumulate) {
  check_shape("cuda::lt_linear_dgelu_backward", n, k, m);
  SHARDTRAIN_CHECK(pre != dpre, "cuda::lt_linear_dgelu_backward: pre and dpre must be different buffers");
  const bool degenerate = n == 0 || m == 0 || k == 0;
  if (!degenerate && aux_takes(pre, k)) {
    Matmul mm;  // dpre^T (K x N) = (w^T (K x M) dy^T (M x N)) * gelu'(pre^T)
    mm.rows = k;
    mm.cols = n;
    mm.k = m;
    mm.a = w;
    mm.lda = k;
    mm.b = dy;
    mm.ldb = m;
    mm.d = dpre;
    mm.ldd = k;
    mm.epilogue = CUBLASLT_EPILOGUE_DGELU;
    mm.aux = const_cast<T*>(pre);  // read only (DGELU)
    if (run_matmul<T>(lt, stream, mm)) {
      // dw (+ db through BGRADB) exactly as the plain backward does it, with its own fallback.
      return lt_linear_backward<T>(lt, fallback, stream, x, w, dy, nullptr, dw, db, n, k, m, accumulate);
    }
  }
  // The unfused path: the Linear's backward with dx = dpre, then the GELU's backward in place.
  if (!degenerate) lt.count_gelu_fallback();
  lt_linear_backward<T>(lt, fallback, stream, x, w, dy, dpre, dw, db, n, k, m, accumulate);
  gelu_backward<T>(pre, dpre, dpre, n * k, stream);
}

#define SHARDTRAIN_CUDA_INSTANTIATE_LT_LINEAR(T)                                                                   \
  template void lt_linear_forward<T>(LtContext&, cublasHandle_t, cudaStream_t, const T*, const T*, const T*, T*,  \
                                     std::int64_t, std::int64_t, std::int64_t, bool);                              \
  template void lt_linear_backward<T>(LtContext&, cublasHandle_t, cudaStream_t, const T*, const T*, const T*, T*, \
                                      T*, T*, std::int64_t, std::int64_t, std::int64_t, bool);                    \
  template void lt_linear_gelu_forward<T>(LtContext&, cublasHandle_t, cudaStream_t, const T*, const T*, const T*, \
                                          T*, T*, std::int64_t, std::int64_t, std::int64_t);                      \
  template void lt_linear_dgelu_backward<T>(LtContext&, cublasHandle_t, cudaStream_t, const T*, const T*,         \
                                            const T*, const T*, T*, T*, T*, std::int64_t, std::int64_t,           \
                                            std::int64_t, bool);
SHARDTRAIN_CUDA_INSTANTIATE_LT_LINEAR(float)
SHARDTRAIN_CUDA_INSTANTIATE_LT_LINEAR(__half)
SHARDTRAIN_CUDA_INSTANTIATE_LT_LINEAR(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_INSTANTIATE_LT_LINEAR

}  // namespace shardtrain::cuda
