// shardtrain/task/task.hpp
// Owns what the step loop (train/trainer.cpp) needs to know about one kind of
// model and its data: the memory plan, the parameter layout and its
// initialisation, the model itself, how a micro-batch of the global sample
// stream is read and run forward and backward, and the evaluation pass.
//   GptTask (gpt_task.cpp): token data set, training windows (WindowSampler),
//     loss per target token, validation loss.
//   ClassifierTask (classifier_task.cpp): labelled-sample data set, a seeded
//     permutation per epoch (SampleSampler), model.type mlp / cnn /
//     encoder_classifier, loss per sample, validation loss, accuracy and the
//     confusion matrix.
// The step loop, ZeRO engine, optimizer, checkpoints and lifecycle are the
// same for every task.
// Invariants: the global sample stream depends only on (seed, data, global
// sample index), never on the rank count; a task's constructor opens the data
// set (collective) and allocates nothing large; every rank throws the same
// InputError for a data set that does not fit the model.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "config/run_config.hpp"
#include "core/memory.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "core/param_layout.hpp"
#include "core/param_provider.hpp"
#include "io/text_tokenizer.hpp"
#include "plan/memory_plan.hpp"
#include "task/classification_metrics.hpp"

namespace shardtrain {

struct EvalResult {
  double loss = 0.0;                         // mean over every target of the pass (token or sample)
  std::int64_t samples = 0;                  // sequences / samples evaluated
  std::optional<double> accuracy;            // classifiers
  std::optional<ConfusionMatrix> confusion;  // classifiers (summed over ranks)
};

// What identifies the data a run trains on (checkpoint metadata, resume warnings).
struct DataIdentity {
  std::int64_t train_size = 0;  // tokens (gpt) or samples (classifiers) of the training split
  const char* unit = "tokens";
  std::int64_t vocab_size = 0;  // token data; 0 for images
  std::int64_t seq_len = 0;     // tokens per sample; 0 for images
  std::optional<TextTokenizer> tokenizer;  // token data sets (io/text_tokenizer.hpp); none otherwise
};

// The run's first line: "shardtrain: N ranks, ... | MODEL | K parameters | BATCH | DATA".
struct TaskText {
  std::string model, batch, data;
};

template <class P>
class Task {
 public:
  virtual ~Task() = default;
  const MemoryPlan& plan() const { return m_plan; }
  std::int64_t max_batch() const { return m_plan.max_batch; }
  virtual TaskText describe() const = 0;
  // Loss terms per sample: the step's loss is their mean over the global batch.
  virtual std::int64_t targets_per_sample() const = 0;
  // Tokens per sample for the throughput (0: the model reads images).
  virtual std::int64_t tokens_per_sample() const = 0;
  virtual DataIdentity data_identity() const = 0;
  // Class names of a classifier (empty for the GPT).
  virtual std::vector<std::string> class_names() const { return {}; }
  // The parameter table (not finalized) and its seeded initialisation of
  // params[lo, hi) (global indices: every rank computes the same values).
  virtual ParamLayout make_layout() const = 0;
  virtual void init_params(const ParamLayout& layout, P* params, std::int64_t lo, std::int64_t hi) const = 0;
  // Builds the model on the finalized layout and binds it to `provider`;
  // allocates the input buffers (category Data).
  virtual void build(const ParamLayout& layout, MemoryTracker& memory, Backend& backend,
                     ParamProvider<P>& provider) = 0;
  // Forward and backward of micro-batch m (max_batch() samples each) of this
  // rank's slice [lo, hi) of the global batch whose first sample is global
  // index `cursor`; grads += dloss * d(sum of its losses). Returns the sum of
  // its losses (0 for an empty micro-batch, which still makes the model's
  // provider calls).
  virtual double train_micro_batch(std::int64_t cursor, std::int64_t lo, std::int64_t hi, std::int64_t m,
                                   P dloss) = 0;
  // The validation pass over the first `max_samples` samples (0: the whole
  // split), split over the ranks. Collective.
  virtual EvalResult evaluate(std::int64_t max_samples) = 0;
  // The model's measured activation high-water in bytes, max over every
  // forward and backward so far (Gpt / Classifier::activation_high_water_bytes);
  // the memory report sets it beside the planned Activations. 0 before build().
  virtual std::int64_t activation_high_water_bytes() const = 0;
  // train.sample_every (task/run_sample.hpp): the text the model writes with
  // the whole weights `weights` (fp32, in the finalized layout), on rank 0
  // alone, and in `logprob` the continuation's log-probability under the model
  // (infer/gpt_kv.hpp GenerateResult); "" for a task that does not sample. The
  // prompt is checked when the task is made, so this does not throw on bad input.
  virtual std::string sample_text(const ParamLayout& /*layout*/, const float* /*weights*/, double& /*logprob*/) const {
    return {};
  }

 protected:
  MemoryPlan m_plan;
};

// The task of config.model.type; opens the data set on `comm` (collective)
// and plans for `plan_world` ranks.
template <class P>
std::unique_ptr<Task<P>> make_task(const RunConfig& config, MpiCommunicator& comm, int plan_world);

// The memory plan of a run with `world` ranks (`trainer --plan`): opens the
// data set on `comm` (collective), measures the process before the model
// (rundir/process_memory.hpp) and, when `world` is comm's size and the plan
// fits train.memory_limit_mb so far, probes the gradient collective's scratch
// (a temporary gradient- or bucket-sized buffer); allocates nothing else large.
MemoryPlan plan_run(const RunConfig& config, MPI_Comm comm, int world);

// Micro-batch size of a run: min(train.micro_batch, ceil(train.batch_size / world)).
std::int64_t run_max_batch(const RunConfig& config, int world);

}  // namespace shardtrain
