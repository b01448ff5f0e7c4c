// shardtrain/backend/profiled_model_ops.hpp
// Owns the `--profile` decorator of a model's layer kernels: every ModelOps
// call goes to the backend's own ops, timed under its ProfileOp
// (core/profiler.hpp). make_model_ops wraps the ops in it when the backend has
// a profiler; without one there is no wrapper and no cost.
#pragma once

#include <memory>
#include <utility>

#include "backend/model_ops.hpp"
#include "core/profiler.hpp"

namespace shardtrain {

template <class T>
class ProfiledModelOps final : public ModelOps<T> {
 public:
  ProfiledModelOps(std::unique_ptr<ModelOps<T>> inner, Profiler* profiler)
      : m_inner(std::move(inner)), m_profiler(profiler) {}

  MemorySpace* memory() override { return m_inner->memory(); }
  void stage_tokens(const TokenIndex* tokens, const TokenIndex* targets, std::int64_t n, const TokenIndex** kernel_tokens, const TokenIndex** kernel_targets) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Staging);
    m_inner->stage_tokens(tokens, targets, n, kernel_tokens, kernel_targets);
  }
  const T* stage_values(const float* values, std::int64_t n) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Staging);
    return m_inner->stage_values(values, n);
  }
  double sum_losses(const T* losses, std::int64_t n) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Staging);
    return m_inner->sum_losses(losses, n);
  }
  void embedding_forward(const TokenIndex* tokens, const T* wte, const T* wpe, T* out, std::int64_t b, std::int64_t t, std::int64_t c, std::int64_t v) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Embedding);
    m_inner->embedding_forward(tokens, wte, wpe, out, b, t, c, v);
  }
  void embedding_backward(const TokenIndex* tokens, const T* dout, T* dwte, T* dwpe, std::int64_t b, std::int64_t t, std::int64_t c, std::int64_t v) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Embedding);
    m_inner->embedding_backward(tokens, dout, dwte, dwpe, b, t, c, v);
  }
  void layernorm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, std::int64_t n, std::int64_t c, T eps) override {
    Profiler::Scope timed(m_profiler, ProfileOp::LayerNorm);
    m_inner->layernorm_forward(x, w, b, y, mean, rstd, n, c, eps);
  }
  void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, T* dx, T* dw, T* db, std::int64_t n, std::int64_t c) override {
    Profiler::Scope timed(m_profiler, ProfileOp::LayerNorm);
    m_inner->layernorm_backward(x, w, mean, rstd, dy, dx, dw, db, n, c);
  }
  void linear_forward(const T* x, const T* w, const T* b, T* y, std::int64_t n, std::int64_t k, std::int64_t m, bool accumulate) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Linear);
    m_inner->linear_forward(x, w, b, y, n, k, m, accumulate);
  }
  void linear_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, std::int64_t n, std::int64_t k, std::int64_t m) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Linear);
    m_inner->linear_backward(x, w, dy, dx, dw, db, n, k, m);
  }
  void attention_forward(const AttnShape& s, const T* qkv, T* saved, T* workspace, T* out) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Attention);
    m_inner->attention_forward(s, qkv, saved, workspace, out);
  }
  void attention_backward(const AttnShape& s, const T* out, const T* dout, const T* saved, T* workspace, T* dqkv) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Attention);
    m_inner->attention_backward(s, out, dout, saved, workspace, dqkv);
  }
  void gelu_forward(const T* x, T* y, std::int64_t n) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Gelu);
    m_inner->gelu_forward(x, y, n);
  }
  void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Gelu);
    m_inner->gelu_backward(x, dy, dx, n);
  }
  void cross_entropy_forward(const T* logits, const TokenIndex* targets, T* losses, std::int64_t n, std::int64_t v) override {
    Profiler::Scope timed(m_profiler, ProfileOp::CrossEntropy);
    m_inner->cross_entropy_forward(logits, targets, losses, n, v);
  }
  void cross_entropy_backward(const T* logits, const TokenIndex* targets, T scale, T* dlogits, std::int64_t n, std::int64_t v) override {
    Profiler::Scope timed(m_profiler, ProfileOp::CrossEntropy);
    m_inner->cross_entropy_backward(logits, targets, scale, dlogits, n, v);
  }
  void relu_forward(const T* x, T* y, std::int64_t n) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Relu);
    m_inner->relu_forward(x, y, n);
  }
  void relu_backward(const T* saved, const T* dy, T* dx, std::int64_t n) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Relu);
    m_inner->relu_backward(saved, dy, dx, n);
  }
  void conv2d_forward(const Conv2dShape& s, const T* x, const T* w, const T* b, T* workspace, T* y) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Conv2d);
    m_inner->conv2d_forward(s, x, w, b, workspace, y);
  }
  void conv2d_backward(const Conv2dShape& s, const T* x, const T* w, const T* dy, T* workspace, T* dx, T* dw, T* db) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Conv2d);
    m_inner->conv2d_backward(s, x, w, dy, workspace, dx, dw, db);
  }
  void max_pool2d_forward(const Pool2dShape& s, const T* x, T* y, std::int32_t* argmax) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Pool);
    m_inner->max_pool2d_forward(s, x, y, argmax);
  }
  void max_pool2d_backward(const Pool2dShape& s, const T* dy, const std::int32_t* argmax, T* dx) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Pool);
    m_inner->max_pool2d_backward(s, dy, argmax, dx);
  }
  void dropout_forward(const DropoutParams& p, const T* x, T* y, std::int64_t n) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Dropout);
    m_inner->dropout_forward(p, x, y, n);
  }
  void dropout_backward(const DropoutParams& p, const T* dy, T* dx, std::int64_t n) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Dropout);
    m_inner->dropout_backward(p, dy, dx, n);
  }
  void accumulate(const T* x, T* y, std::int64_t n) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Staging);
    m_inner->accumulate(x, y, n);
  }
  void seq_mean_pool_forward(const T* x, const std::int32_t* lengths, T* y, std::int64_t b, std::int64_t t, std::int64_t c) override {
    Profiler::Scope timed(m_profiler, ProfileOp::SeqPool);
    m_inner->seq_mean_pool_forward(x, lengths, y, b, t, c);
  }
  void seq_mean_pool_backward(const T* dy, const std::int32_t* lengths, T* dx, std::int64_t b, std::int64_t t, std::int64_t c) override {
    Profiler::Scope timed(m_profiler, ProfileOp::SeqPool);
    m_inner->seq_mean_pool_backward(dy, lengths, dx, b, t, c);
  }
  void copy(const T* x, T* y, std::int64_t n) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Staging);
    m_inner->copy(x, y, n);
  }
  void fill(T* y, T value, std::int64_t n) override {
    Profiler::Scope timed(m_profiler, ProfileOp::Staging);
    m_inner->fill(y, value, n);
  }

 private:
  std::unique_ptr<ModelOps<T>> m_inner;
  Profiler* m_profiler;
};

}  // namespace shardtrain
