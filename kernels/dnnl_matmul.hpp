// shardtrain/kernels/dnnl_matmul.hpp
// INTERNAL to kernels/*.cpp: dense matrix products on oneDNN's matmul primitive,
// the engine of gemm<float>, gemm<bf16> (AVX512-BF16 CPUs) and the Linear layer.
//   C (m x n) = alpha * op(A) op(B) [+ bias (1 x n, broadcast over rows)] + beta * C
// A, B, C row-major with leading dimensions (elements between rows as stored);
// op(X) = X or X^T is a stride choice, never a copy. Storage types: float, or
// bf16 operands with a bf16 or float C (and bias). oneDNN accumulates bf16
// products in fp32 and, with beta != 0, adds beta * C (its "sum" post-op) in
// fp32 before rounding C once.
// Invariants:
//  - one primitive per distinct MatmulShape, created on first use and cached for
//    the life of the process (a model has a few dozen shapes); later calls only
//    wrap the caller's pointers (no copies, no allocation of ours);
//  - C is not read when beta == 0 (NaNs in it do not propagate);
//  - m, n, k >= 1 (gemm and linear handle the degenerate shapes themselves);
//  - the primitive has run to completion when the call returns;
//  - results depend only on the inputs, the shape and the thread count (oneDNN
//    splits work by thread count in a fixed order), not on earlier calls.
#pragma once

#include <cstdint>
#include <string>

#include <dnnl.hpp>

namespace shardtrain {

struct MatmulShape {
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;  // A stored (k x m) / B stored (n x k)
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  dnnl::memory::data_type ab = dnnl::memory::data_type::f32;  // A and B
  dnnl::memory::data_type c = dnnl::memory::data_type::f32;   // C (and the bias)
  bool bias = false;
  float alpha = 1.0f, beta = 0.0f;

  bool operator==(const MatmulShape&) const = default;
  std::string describe() const;  // for error messages
};

// Runs C = alpha op(A) op(B) (+ bias) + beta C on the process's engine. `what`
// names the caller in errors (e.g. "linear_forward").
void dnnl_matmul(const MatmulShape& s, const void* a, const void* b, const void* bias, void* c,
                 const char* what);

// Number of cached primitives (tests: a repeated shape must not add one).
std::size_t dnnl_matmul_cache_size();

}  // namespace shardtrain
