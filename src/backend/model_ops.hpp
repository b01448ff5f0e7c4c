// shardtrain/backend/model_ops.hpp
// Owns the layer-kernel interface the model is written against: the ops of
// kernels/*.hpp in pointer form (row-major, the same semantics, shapes and
// saved layouts), implemented by the host backend with the Kokkos kernels and
// by the CUDA backend with kernels/cuda (cuBLAS GEMMs, cuDNN attention where
// it is built). A ModelOps instance belongs to one model: it owns the scratch
// its kernels need for micro-batches up to the limits it was made for
// (category Workspace), and the device copy of the token ids.
// Gradient convention as in kernels/: weight and bias gradients ACCUMULATE
// (+=); activation gradients overwrite, except layernorm_backward's dx, which
// accumulates (the residual stream's gradient flows through it).
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.hpp"
#include "kernels/cnn_shapes.hpp"  // Conv2dShape, Pool2dShape, DropoutParams (Kokkos-free)
#include "kernels/types.hpp"

namespace shardtrain {

struct ModelOpsLimits {
  std::int64_t max_batch = 0, seq_len = 0, channels = 0, n_head = 0, vocab = 0;
  std::int64_t max_input_elems = 0;  // floats stage_values takes at most (classifier inputs)
  // Host 16-bit kernels: fp32 scratch floats the model's other ops need at
  // least (e.g. the CNN's conv2d_half_scratch_elems); the GPT ops' need is
  // computed from the fields above.
  std::int64_t half_scratch_elems = 0;
};

struct AttnShape {  // multi-head attention over packed qkv (B, T, 3C), kernels/attention.hpp
  std::int64_t batch = 0, seq_len = 0, channels = 0, n_head = 0;
  bool causal = true;                     // false: bidirectional (encoder classifier)
  const std::int32_t* lengths = nullptr;  // HOST: valid keys per sequence, in [1, T]; nullptr: all T
};

template <class T>
class ModelOps {
 public:
  virtual ~ModelOps() = default;
  // Where activations and workspace of this model live (nullptr: host).
  virtual MemorySpace* memory() = 0;

  // The token ids and targets (host arrays of n each) of the next forward and
  // backward; returns the pointers the kernels read (the host's own arrays, or
  // device copies valid until the next call). tokens may be nullptr (a
  // classifier stages only its labels, as targets); *kernel_tokens is then nullptr.
  virtual void stage_tokens(const TokenIndex* tokens, const TokenIndex* targets, std::int64_t n,
                            const TokenIndex** kernel_tokens, const TokenIndex** kernel_targets) = 0;
  // n input values (host floats, e.g. pixels in [0, 1]) rounded to T where the
  // kernels read them; valid until the next call.
  virtual const T* stage_values(const float* values, std::int64_t n) = 0;
  // Sum over losses[0, n) in double, in index order (the loss of a micro-batch).
  virtual double sum_losses(const T* losses, std::int64_t n) = 0;

  // out(b, t, :) = wte(tokens(b, t), :) + wpe(t, :)
  virtual void embedding_forward(const TokenIndex* tokens, const T* wte, const T* wpe, T* out,
                                 std::int64_t b, std::int64_t t, std::int64_t c, std::int64_t v) = 0;
  // dwte(tokens(b, t), :) += dout(b, t, :); dwpe(t, :) += sum over b of dout(b, t, :)
  virtual void embedding_backward(const TokenIndex* tokens, const T* dout, T* dwte, T* dwpe,
                                  std::int64_t b, std::int64_t t, std::int64_t c, std::int64_t v) = 0;
  virtual void layernorm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd,
                                 std::int64_t n, std::int64_t c, T eps) = 0;
  // dx += ..., dw += ..., db += ...
  virtual void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy,
                                  T* dx, T* dw, T* db, std::int64_t n, std::int64_t c) = 0;
  // y(n, m) (+)= x(n, k) w(m, k)^T + b(m); b may be nullptr.
  virtual void linear_forward(const T* x, const T* w, const T* b, T* y, std::int64_t n, std::int64_t k,
                              std::int64_t m, bool accumulate) = 0;
  // dx = dy w (skipped when dx is nullptr); dw += dy^T x; db += column sums of dy (nullptr: none).
  virtual void linear_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, std::int64_t n,
                               std::int64_t k, std::int64_t m) = 0;
  // saved: attention_saved_elems(s) elements (kernels/attention.hpp); out (B, T, C);
  // workspace: attention_workspace_elems(s) elements of the model's workspace
  // (the host kernels' scratch; the CUDA ops use scratch of their own).
  virtual void attention_forward(const AttnShape& s, const T* qkv, T* saved, T* workspace, T* out) = 0;
  // out is the forward's output (backends that recompute from it need it).
  virtual void attention_backward(const AttnShape& s, const T* out, const T* dout, const T* saved,
                                  T* workspace, T* dqkv) = 0;
  virtual void gelu_forward(const T* x, T* y, std::int64_t n) = 0;
  virtual void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n) = 0;
  // losses(i) = logsumexp(logits(i, :)) - logits(i, targets(i)); targets < 0 give 0.
  virtual void cross_entropy_forward(const T* logits, const TokenIndex* targets, T* losses, std::int64_t n,
                                     std::int64_t v) = 0;
  // dlogits = scale * (softmax(logits) - onehot(targets)); may be in place.
  virtual void cross_entropy_backward(const T* logits, const TokenIndex* targets, T scale, T* dlogits,
                                      std::int64_t n, std::int64_t v) = 0;
  // y = max(x, 0) (y may alias x); dx = saved > 0 ? dy : 0 with saved the
  // forward's input or output (dx may alias dy).
  virtual void relu_forward(const T* x, T* y, std::int64_t n) = 0;
  virtual void relu_backward(const T* saved, const T* dy, T* dx, std::int64_t n) = 0;
  // --- CNN ops (conv2d, max-pool, dropout) ---
  // NCHW row-major, the semantics of kernels/conv2d.hpp, pool.hpp, dropout.hpp.
  // conv2d: x (N, IC, H, W), w (OC, IC, KH, KW), b (OC, nullptr: none), y (N, OC, OH, OW);
  // workspace: conv2d_workspace_elems(s) elements of the model's workspace (the
  // host kernels' im2col block; the CUDA ops use cuDNN scratch of their own).
  virtual void conv2d_forward(const Conv2dShape& s, const T* x, const T* w, const T* b, T* workspace, T* y) = 0;
  // dx = conv_transpose(dy, w) (nullptr: skipped); dw += ...; db += ... (nullptr: none).
  virtual void conv2d_backward(const Conv2dShape& s, const T* x, const T* w, const T* dy, T* workspace, T* dx,
                               T* dw, T* db) = 0;
  // y (N, C, OH, OW) = window maxima (first maximum wins, NaN propagates); argmax
  // (N, C, OH, OW) = in-plane index ih * W + iw of the chosen element.
  virtual void max_pool2d_forward(const Pool2dShape& s, const T* x, T* y, std::int32_t* argmax) = 0;
  // dx (N, C, H, W) = dy routed to argmax (OVERWRITES; zero elsewhere).
  virtual void max_pool2d_backward(const Pool2dShape& s, const T* dy, const std::int32_t* argmax, T* dx) = 0;
  // Inverted dropout of n elements (mask from (seed, stream, offset + i), not
  // stored); y may alias x, dx may alias dy.
  virtual void dropout_forward(const DropoutParams& p, const T* x, T* y, std::int64_t n) = 0;
  virtual void dropout_backward(const DropoutParams& p, const T* dy, T* dx, std::int64_t n) = 0;
  // --- end CNN ops ---
  // --- encoder classifier ops (its attention: AttnShape's causal / lengths) ---
  // y += x, n elements.
  virtual void accumulate(const T* x, T* y, std::int64_t n) = 0;
  // Mean over the valid positions (kernels/seq_pool.hpp): x (B, T, C) -> y (B, C);
  // backward OVERWRITES dx (B, T, C), 0 at padded positions. lengths: HOST array
  // of B entries in [1, T] (nullptr: all T valid); the CUDA ops copy it over.
  virtual void seq_mean_pool_forward(const T* x, const std::int32_t* lengths, T* y, std::int64_t b,
                                     std::int64_t t, std::int64_t c) = 0;
  virtual void seq_mean_pool_backward(const T* dy, const std::int32_t* lengths, T* dx, std::int64_t b,
                                      std::int64_t t, std::int64_t c) = 0;
  // --- end encoder classifier ops ---
  virtual void copy(const T* x, T* y, std::int64_t n) = 0;
  virtual void fill(T* y, T value, std::int64_t n) = 0;
};

// Floats of fp32 scratch the host's 16-bit kernels need for a GPT within
// `limits` (kernels/half_scratch.hpp): the largest op's tiles.
std::int64_t host_half_scratch_elems(const ModelOpsLimits& limits);

// The layer kernels of `backend` for a model within `limits`; their scratch is
// counted in `memory`. T = double exists on the host only.
template <class T>
std::unique_ptr<ModelOps<T>> make_model_ops(Backend& backend, const ModelOpsLimits& limits,
                                            MemoryTracker& memory);

}  // namespace shardtrain
