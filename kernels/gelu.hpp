// shardtrain/kernels/gelu.hpp
// GELU, tanh approximation (GPT-2; PyTorch nn.GELU(approximate="tanh")):
//   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// and GELU in its exact erf form (BERT / DistilBERT, Hugging Face's "gelu";
// PyTorch nn.GELU()), gelu_erf_*:
//   y = 0.5 x (1 + erf(x / sqrt(2))),  y' = 0.5 (1 + erf(x / sqrt(2))) + x phi(x)
// Elementwise over flat views. backward OVERWRITES dx. y may alias x in forward.
// T = f16 / bf16: evaluated in fp32 in registers on the 16-bit values and rounded
// once (bit for bit the fp32 result on the same inputs, rounded); no scratch. The
// tanh form's 16-bit calls look that result up (GeluPath below).
#pragma once

#include "core/half.hpp"
#include "types.hpp"

namespace shardtrain {

template <class T>
void gelu_forward(CView1<T> x, View1<T> y);

template <class T>
void gelu_backward(CView1<T> x, CView1<T> dy, View1<T> dx);

// The paths of the tanh form: `arithmetic` evaluates the formula per value (every T);
// `table` (T = f16 / bf16 only; float and double take the arithmetic) looks each
// 16-bit x up in tables of all 65536 patterns that the arithmetic path computed
// once: the same bits, at a load instead of an exp and a division a value.
// gelu_forward / gelu_backward take `table`; the arithmetic is kept as the
// definition the tables come from (tests compare the two on every pattern).
enum class GeluPath { arithmetic, table };

template <class T>
void gelu_forward_on(GeluPath path, CView1<T> x, View1<T> y);

template <class T>
void gelu_backward_on(GeluPath path, CView1<T> x, CView1<T> dy, View1<T> dx);

// Builds the 16-bit tables now (384 KiB per type, kept for the process), so that a
// run can count them before it measures its own memory; otherwise the first 16-bit
// call builds them.
void gelu_prepare_tables(bool f16_tables, bool bf16_tables);

// The backward's table for T = f16 / bf16 (65536 fp32 factors y'(x), indexed by x's
// bits; built on first call): for tests, which compare each with the fp32 kernel.
template <class T>
const float* gelu_table_factors();

template <class T>
void gelu_erf_forward(CView1<T> x, View1<T> y);

template <class T>
void gelu_erf_backward(CView1<T> x, CView1<T> dy, View1<T> dx);

#define SHARDTRAIN_DECLARE_GELU(T)                                          \
  extern template void gelu_forward<T>(CView1<T>, View1<T>);               \
  extern template void gelu_backward<T>(CView1<T>, CView1<T>, View1<T>);   \
  extern template void gelu_erf_forward<T>(CView1<T>, View1<T>);           \
  extern template void gelu_erf_backward<T>(CView1<T>, CView1<T>, View1<T>);
SHARDTRAIN_DECLARE_GELU(float)
SHARDTRAIN_DECLARE_GELU(double)
SHARDTRAIN_DECLARE_GELU(f16)
SHARDTRAIN_DECLARE_GELU(bf16)
#undef SHARDTRAIN_DECLARE_GELU

// Floats of 16-bit scratch (half_scratch.hpp) that gelu_forward and gelu_backward
// need: 0 for every T (the 16-bit path runs directly on 16-bit memory). Declared
// so a model can size the arena uniformly over every kernel it calls.
std::int64_t gelu_half_scratch_elems();

}  // namespace shardtrain
