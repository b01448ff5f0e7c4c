// shardtrain/model/classifier.hpp
// Owns the interface the trainer drives every classification model through
// (issue 9: `mlp`, `cnn`, `encoder_classifier`): one labelled sample in, one
// row of class logits out, loss = cross-entropy against the label. The models
// follow the GPT's parameter-group protocol (core/param_provider.hpp), so
// every ZeRO stage applies, and run their kernels through the backend's
// ModelOps (backend/model_ops.hpp). Gradients ACCUMULATE over micro-batches.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "core/types.hpp"
#include "core/half.hpp"
#include "core/param_provider.hpp"
#include "model/recompute.hpp"

namespace shardtrain {

// One micro-batch of labelled samples as the host holds it. Every array has
// `batch` rows and must stay alive and unchanged until backward() returns.
struct SampleBatch {
  std::int64_t batch = 0;
  const float* values = nullptr;         // image models: (batch, sample elements), pixels in [0, 1]
  const TokenIndex* tokens = nullptr;    // token models: (batch, seq_len), padded with the data set's pad id
  const std::int32_t* lengths = nullptr; // token models: valid tokens of each row, in [1, seq_len]
  const TokenIndex* labels = nullptr;    // class ids; < 0: ignored (no loss, no gradient)
  // Dropout: on only when training. Row r is global sample `first_sample + r`
  // of the run's sample stream, which fixes its dropout masks: they do not
  // depend on the rank count or the micro-batch split (kernels/dropout.hpp).
  bool training = false;
  std::uint64_t first_sample = 0;
};

// What a classifier costs, for the memory plan (plan/memory_plan.hpp) and the
// progress line: computed from the dimensions alone, before anything is
// allocated, and equal to what the model then allocates (its tests check it
// against the tracker). Host backend; T = the storage type.
struct ClassifierCosts {
  std::int64_t activation_bytes = 0;  // category Activations with recompute "none": everything kept
  std::int64_t workspace_bytes = 0;   // category Workspace, incl. its ModelOps' scratch (16-bit host tiles)
  double forward_flops = 0;           // one sample's forward pass (multiply-adds count 2)
  // A model whose layers include a chain of blocks the recompute scheduler can
  // run (the encoder's transformer blocks, model/block_chain.hpp): the chain's
  // costs over a micro-batch of max_batch samples (other_forward_flops: the
  // rest of the model), and the Activations bytes outside the chain (always
  // kept), so that a schedule's activations are kept_activation_bytes +
  // schedule.peak_bytes. An empty chain (MLP, CNN): no recompute.
  ChainCosts chain;
  std::int64_t kept_activation_bytes = 0;
  bool has_chain() const { return chain.size() > 0; }
};

template <class T>
class Classifier {
 public:
  virtual ~Classifier() = default;
  // Takes parameters and gradients from `provider` (which must outlive the model's use).
  virtual void bind(ParamProvider<T>& provider) = 0;
  // Forward on b.batch samples (0 <= batch <= the model's max_batch; 0 makes
  // the same provider calls and computes nothing). Returns the SUM of the
  // per-sample losses over valid labels.
  virtual double forward(const SampleBatch& b) = 0;
  // The last forward's logits (batch, classes) copied to the host as floats.
  virtual void logits(std::vector<float>& out) const = 0;
  // Backward of the last forward: grads += d(dloss * sum of sample losses)/d(params).
  virtual void backward(T dloss) = 0;
  // Measured activation use in bytes (the memory report's activations_measured,
  // beside the planned activation bytes), 0 before a forward ran. The MLP's and
  // the CNN's arenas are fixed (no recompute schedule, every region written by
  // every forward; an empty micro-batch claims the same regions): the bytes
  // carved in category Activations. The encoder's: the regions outside its
  // block chain plus the chain's measured stack high-water and scratch block
  // (model/block_chain.hpp), as the GPT measures.
  virtual std::int64_t activation_high_water_bytes() const = 0;
};

// The models' logits(): n logits of type T in `backend` memory, copied to the
// host and widened to float.
template <class T>
void logits_to_host(Backend& backend, const T* logits, std::int64_t n, std::vector<float>& out) {
  std::vector<T> host(static_cast<std::size_t>(n));
  backend.copy_to_host(host.data(), logits, static_cast<std::size_t>(n) * sizeof(T));
  out.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<compute_t<T>>(host[i]));
}

}  // namespace shardtrain
