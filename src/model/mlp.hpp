// shardtrain/model/mlp.hpp
// Owns the multilayer perceptron classifier (issue 9's `mlp`, e.g. MNIST
// 784-300-100-10 as in LeCun et al. 1998): inputs (B, D) -> Linear -> ReLU ->
// ... -> Linear -> logits (B, K), loss = cross-entropy against the labels.
// Parameters follow the GPT's protocol (core/param_provider.hpp): layer i is
// parameter group i ("fc.i.weight" (out, in) with weight decay, "fc.i.bias"),
// acquired right before use and released right after, so every ZeRO stage
// works; gradients ACCUMULATE over micro-batches. The kernels are the
// backend's ModelOps (backend/model_ops.hpp): host or CUDA.
// Activations (category Activations): the ReLU output of every hidden layer,
// the logits (overwritten by their gradient in backward) and the per-sample
// losses; workspace: two gradient buffers of the widest layer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/model_ops.hpp"
#include "core/memory.hpp"
#include "core/types.hpp"
#include "model/classifier.hpp"
#include "core/param_layout.hpp"
#include "core/param_provider.hpp"

namespace shardtrain {

struct MlpDims {
  std::int64_t inputs = 0;             // D
  std::vector<std::int64_t> hidden;    // widths of the hidden layers (may be empty: logistic regression)
  std::int64_t classes = 0;            // K >= 2
  std::int64_t max_batch = 0;          // largest micro-batch the buffers are sized for
  std::int64_t layers() const { return static_cast<std::int64_t>(hidden.size()) + 1; }
  std::int64_t in_of(std::int64_t l) const { return l == 0 ? inputs : hidden[l - 1]; }
  std::int64_t out_of(std::int64_t l) const { return l + 1 == layers() ? classes : hidden[l]; }
};

// Parameter table (not finalized): fc.i.weight (out, in), fc.i.bias, group i.
ParamLayout mlp_layout(const MlpDims& d);

// Activation and workspace elements for micro-batches up to max_batch.
struct MlpActivationPlan {
  std::int64_t activations = 0;  // hidden outputs + logits + losses
  std::int64_t workspace = 0;    // two gradient buffers of the widest layer
};
MlpActivationPlan mlp_activation_plan(const MlpDims& d);
// The limits the model's ModelOps are made for.
ModelOpsLimits mlp_ops_limits(const MlpDims& d);
// Bytes the model (incl. its host ModelOps' 16-bit scratch) allocates, and FLOPs.
template <class T>
ClassifierCosts mlp_costs(const MlpDims& d);

// Initialises params[lo, hi) of the flat vector (global indices, so every rank
// computes the same values): weights N(0, sqrt(2 / fan_in)) (He et al. 2015, for
// ReLU), biases and padding 0.
template <class T>
void mlp_init_params(const ParamLayout& layout, std::uint64_t seed, T* params, std::int64_t lo, std::int64_t hi);

template <class T>
class Mlp final : public Classifier<T> {
 public:
  // backend: where the kernels run and activations live (nullptr: the host).
  Mlp(const MlpDims& dims, const ParamLayout& layout, MemoryTracker& memory, Backend* backend = nullptr);
  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  void bind(ParamProvider<T>& provider) override;
  void bind(T* params, T* grads);  // full flat vectors (padded_size() each)

  // Forward on `batch` samples (0 <= batch <= max_batch; 0 makes the same
  // provider calls and computes nothing): inputs (batch, D) host floats, labels
  // (batch) host class ids (< 0: ignored). Returns the SUM of the per-sample
  // losses over valid labels. Both arrays must stay alive until backward() returns.
  double forward(const float* inputs, const TokenIndex* labels, std::int64_t batch);
  double forward(const SampleBatch& b) override { return forward(b.values, b.labels, b.batch); }
  // The last forward's logits (batch, K) copied to the host as floats.
  void logits(std::vector<float>& out) const override;
  // grads += d(dloss * sum of sample losses)/d(params).
  void backward(T dloss) override;
  // Fixed arena (no recompute stack): what was carved, once a forward wrote it.
  std::int64_t activation_high_water_bytes() const override {
    return m_forward_ran ? static_cast<std::int64_t>(m_acts.bytes()) : 0;
  }

  const MlpDims& dims() const { return m_dims; }

 private:
  std::int64_t rel(std::int64_t layer, int which) const;  // offset of weight (0) / bias (1) in its group
  MlpDims m_dims;
  const ParamLayout& m_layout;
  ParamProvider<T>* m_provider = nullptr;
  std::unique_ptr<FlatParams<T>> m_flat;
  std::unique_ptr<ModelOps<T>> m_ops;
  Backend& m_backend;
  TrackedBuffer<T> m_acts;  // hidden outputs (per layer) | logits | losses
  TrackedBuffer<T> m_work;  // two gradient buffers of the widest layer
  std::vector<T*> m_hidden_out;
  T* m_logits = nullptr;
  T* m_losses = nullptr;
  const T* m_inputs = nullptr;
  const TokenIndex* m_labels = nullptr;
  std::int64_t m_batch = 0;
  bool m_forward_done = false;
  bool m_forward_ran = false;  // a forward has written the arena
};

extern template class Mlp<float>;
extern template class Mlp<double>;
extern template class Mlp<f16>;
extern template class Mlp<bf16>;

}  // namespace shardtrain
