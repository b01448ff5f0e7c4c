// shardtrain/model/cnn.hpp
// Owns the convolutional classifier (issue 9's `cnn`, e.g. MNIST LeNet-like as
// in LeCun et al. 1998): images (B, C, H, W) -> [Conv2d (stride 1) -> ReLU ->
// MaxPool(pool, pool)] per conv -> flatten -> [Linear -> ReLU -> Dropout] per
// hidden width -> Linear -> logits (B, K), loss = cross-entropy against the labels.
// Parameters follow the GPT's protocol (core/param_provider.hpp) as the MLP
// does: every layer is one parameter group in forward order ("conv.i.weight"
// (OC, IC, K, K) with weight decay, "conv.i.bias", then "fc.j.weight" (out, in)
// with weight decay, "fc.j.bias"), acquired right before use and released right
// after; gradients ACCUMULATE over micro-batches. Kernels: the backend's
// ModelOps (backend/model_ops.hpp), host or CUDA.
// Activations (category Activations): each conv's output (ReLU applied when
// no pool follows; a pooled stage applies ReLU to the pool's output instead,
// the same values: cnn.cpp), each pool's output and int32 argmax, each hidden layer's ReLU output (dropout applied in
// place: the ReLU mask is recovered from the dropped output, since dropped
// elements have zero gradient anyway), the logits (overwritten by their
// gradient in backward) and the per-sample losses. Workspace: the largest
// op_sizes::conv2d_workspace<T> of the convs at max_batch (backend/model_ops.hpp,
// the host kernels' layout in kernels/conv2d.hpp: for
// float and native bf16 the channels-last copies of a block of samples, oneDNN's
// scratchpad and the fp32 dw / db staging, for double an im2col block; bounded by
// the shapes, not by the batch) and two
// gradient buffers of the largest activation, plus the host 16-bit ModelOps'
// fp32 scratch. cnn_costs() equals all of that.
// Dropout masks: element e of sample s of hidden layer j uses counter
// s * hidden[j] + e of stream (kDropoutStream + j) under dims.dropout_seed, s the
// global sample index (SampleBatch::first_sample + row): independent of the
// micro-batch split and the rank count.
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

struct CnnConv {
  std::int64_t out_channels = 0;  // OC
  std::int64_t kernel = 0;        // square K x K, stride 1
  std::int64_t padding = 0;       // zero padding on all four sides
};

struct CnnDims {
  std::int64_t in_channels = 0, height = 0, width = 0;  // one sample: (C, H, W)
  std::vector<CnnConv> convs;         // each followed by ReLU and max-pool
  std::int64_t pool = 2;              // max-pool window = stride after each conv; <= 1: no pooling
  std::vector<std::int64_t> hidden;   // fully connected widths after flattening (ReLU, dropout)
  std::int64_t classes = 0;           // K >= 2
  double dropout = 0.0;               // p of the dropout after each hidden layer, in [0, 1); 0: none
  std::int64_t max_batch = 0;         // largest micro-batch the buffers are sized for
  std::uint64_t dropout_seed = 0;     // seed of the dropout masks (the run's seed)
};

// Throws InputError naming the layer and sizes unless the dims describe a
// CNN: extents >= 1, padding >= 0, classes >= 2, 0 <= dropout < 1, max_batch
// >= 1, and every conv and pool leaves a spatial size >= 1.
void cnn_check_dims(const CnnDims& d);

// The geometry of the layers at max_batch (cnn_check_dims first).
struct CnnStage {
  Conv2dShape conv;      // batch = max_batch
  bool pooled = false;
  Pool2dShape pool;      // valid when pooled
  std::int64_t conv_out = 0;   // elements per sample of the conv output
  std::int64_t stage_out = 0;  // elements per sample after the pool (= conv_out without pooling)
};
struct CnnPlan {
  std::vector<CnnStage> stages;
  std::int64_t features = 0;         // flattened input of fc.0 per sample
  std::int64_t activations = 0;      // elements of T in Activations
  std::int64_t argmax = 0;           // int32 elements in Activations
  std::int64_t grad_buffer = 0;      // elements of T of each of the two gradient buffers
  std::int64_t fc_layers() const { return static_cast<std::int64_t>(fc_in.size()); }
  std::vector<std::int64_t> fc_in, fc_out;  // widths of fc.j
};
CnnPlan cnn_plan(const CnnDims& d);

// Elements of T of the conv workspace: the largest op_sizes::conv2d_workspace<T> of
// the plan's convs (at max_batch, so enough for every smaller micro-batch).
template <class T>
std::int64_t cnn_conv_workspace(const CnnPlan& p);

// Parameter table (not finalized): one group per layer, in forward order.
ParamLayout cnn_layout(const CnnDims& d);

// Initialises params[lo, hi) (global indices, so every rank computes the same
// values): weights N(0, sqrt(2 / fan_in)), fan_in = IC*K*K or in; biases 0
// (model/param_init.hpp, shared with the MLP).
template <class T>
void cnn_init_params(const ParamLayout& layout, std::uint64_t seed, T* params, std::int64_t lo, std::int64_t hi);

// The ModelOps limits the model creates its ops with (incl. half_scratch_elems =
// the largest op_sizes::conv2d_half_scratch).
ModelOpsLimits cnn_ops_limits(const CnnDims& d);

// Runs every conv of the model once on a small zero batch through the host
// kernels (op_sizes::warm_up_conv2d, backend/model_ops.hpp), so that oneDNN's lazily built
// code and buffers exist before the trainer measures the process before the
// model (rundir/process_memory.cpp): they are then part of "RSS before the
// model" in the predicted process peak, as the rest of the libraries' code is.
template <class T>
void cnn_warm_up_kernels(const CnnDims& d);

// Bytes the model and its host ModelOps allocate (Activations, Workspace) and
// the forward FLOPs of one sample (2 per multiply-add of the convs and Linears;
// bias, ReLU, pool, dropout and the loss are not counted).
template <class T>
ClassifierCosts cnn_costs(const CnnDims& d);

template <class T>
class Cnn final : public Classifier<T> {
 public:
  // backend: where the kernels run and activations live (nullptr: the host).
  Cnn(const CnnDims& dims, const ParamLayout& layout, MemoryTracker& memory, Backend* backend = nullptr);
  Cnn(const Cnn&) = delete;
  Cnn& operator=(const Cnn&) = delete;

  void bind(ParamProvider<T>& provider) override;
  void bind(T* params, T* grads);  // full flat vectors (padded_size() each)

  // b.values (batch, C*H*W) host floats, b.labels (batch) (< 0: ignored);
  // dropout only when b.training. Returns the SUM of the per-sample losses.
  double forward(const SampleBatch& b) override;
  void logits(std::vector<float>& out) const override;
  void backward(T dloss) override;
  // Fixed arena (no recompute stack): what was carved (values and argmax), once
  // a forward wrote it.
  std::int64_t activation_high_water_bytes() const override {
    return m_forward_ran ? static_cast<std::int64_t>(m_acts.bytes() + m_argmax.bytes()) : 0;
  }

  const CnnDims& dims() const { return m_dims; }

  static constexpr std::uint64_t kDropoutStream = 0xC440D000;  // + hidden layer index

 private:
  std::int64_t rel(int group, int which) const;  // offset of weight (0) / bias (1) in its group
  DropoutParams dropout_params(std::int64_t j) const;
  // Stage s's conv at this micro-batch; checks that the workspace holds its need.
  Conv2dShape conv_at(const CnnStage& s, std::int64_t batch) const;
  CnnDims m_dims;
  CnnPlan m_plan;
  const ParamLayout& m_layout;
  ParamProvider<T>* m_provider = nullptr;
  std::unique_ptr<FlatParams<T>> m_flat;
  std::unique_ptr<ModelOps<T>> m_ops;
  Backend& m_backend;
  TrackedBuffer<T> m_acts;                // conv outs | pool outs (per stage) | hidden outs | logits | losses
  TrackedBuffer<std::int32_t> m_argmax;   // per pooled stage
  std::int64_t m_conv_workspace = 0;      // cnn_conv_workspace<T>(m_plan)
  TrackedBuffer<T> m_work;                // conv workspace | two gradient buffers
  std::vector<T*> m_conv_out, m_stage_out, m_hidden_out;
  std::vector<std::int32_t*> m_stage_argmax;
  T* m_logits = nullptr;
  T* m_losses = nullptr;
  const T* m_inputs = nullptr;
  const TokenIndex* m_labels = nullptr;
  std::int64_t m_batch = 0;
  bool m_training = false;
  std::uint64_t m_first_sample = 0;
  bool m_forward_done = false;
  bool m_forward_ran = false;  // a forward has written the arena
};

extern template class Cnn<float>;
extern template class Cnn<double>;
extern template class Cnn<f16>;
extern template class Cnn<bf16>;

}  // namespace shardtrain
