// ClassifierTask: a model type whose row (task/model_registry.hpp) reads a
// labelled-sample data set (task/task.hpp, io/sample_dataset.hpp): mlp, cnn,
// encoder_classifier. data.in_memory is decided in
// the constructor (so the plan, and `trainer --plan`, count the held bytes) and
// the data set is read into memory in build(), after the process was measured
// before the model, so its bytes are tracked (data category), not in that term.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "io/sample_dataset.hpp"
#include "model/classifier.hpp"
#include "task/batch_sampler.hpp"
#include "task/model_registry.hpp"
#include "task/task_factory.hpp"

namespace shardtrain {

namespace {


template <class P>
class ClassifierTask final : public Task<P> {
 public:
  ClassifierTask(const RunConfig& cfg, MpiCommunicator& comm, int plan_world)
      : m_cfg(cfg), m_comm(comm), m_data(cfg.data.path, comm.comm(), cfg.checkpoint.io_timeout_s) {
    const ModelRow& row = model_row(cfg.model.type);
    const std::string_view type = name_of(cfg.model.type);
    const bool images = m_data.kind() == SampleKind::Image;
    const std::string& path = cfg.data.path;
    if (images != (row.data == ModelData::Images))
      throw InputError(fmt::format("{}: holds {} samples, but model.type = \"{}\" reads {}; import {} with "
                                   "trainer-data ({}), or choose a model for this data",
                                   path, images ? "image" : "token", type, images ? "token sequences" : "images",
                                   images ? "text" : "images", images ? "textdir, csv" : "mnist"));
    if (m_data.size(SampleSplit::Train) < 1 || m_data.size(SampleSplit::Val) < 1)
      throw InputError(fmt::format("{}: a classifier needs training and validation samples; the file has {} and {}",
                                   path, m_data.size(SampleSplit::Train), m_data.size(SampleSplit::Val)));
    m_classes = m_data.num_classes();
    m_row = m_data.sample_elems();
    const std::int64_t mb = run_max_batch(cfg, plan_world);
    ClassifierSamples samples{path, images, m_data.sample_shape(), m_row, m_classes, 0, false};
    if (!images) {
      samples.vocab = m_data.vocab_size();
      samples.has_cls = m_data.cls_id() >= 0;
      m_sep_id = m_data.sep_id();
    }
    m_dims = row.classifier_dims(cfg, samples, mb);
    m_seq_len = classifier_tokens(m_dims);
    // Input buffers: one micro-batch of rows as the file stores them, labels (and lengths).
    const std::int64_t row_bytes = images ? m_row * static_cast<std::int64_t>(sizeof(float))
                                          : m_row * static_cast<std::int64_t>(sizeof(TokenIndex)) + 4;
    // The CNN's oneDNN convolutions build code on first execution (several MiB):
    // run them once now, before the trainer measures the process before the
    // model, so that the predicted process peak holds that memory.
    classifier_warm_up<P>(m_dims);
    // data.in_memory: both splits held in memory from build() on, planned here
    // as part of the data category.
    const std::int64_t held = m_data.in_memory_bytes();
    const double limit = cfg.data.in_memory_limit_mb * kMiB;
    switch (cfg.data.in_memory) {
      case DataInMemory::On:
        m_in_memory = true;
        m_data_source = fmt::format("held in memory: {:.3g} MiB per rank (data.in_memory = \"on\")", held / kMiB);
        break;
      case DataInMemory::Off:
        m_in_memory = false;
        m_data_source = "read from the file per micro-batch (data.in_memory = \"off\")";
        break;
      case DataInMemory::Auto:
        m_in_memory = static_cast<double>(held) <= limit;
        m_data_source = m_in_memory ? fmt::format("held in memory: {:.3g} MiB per rank (data.in_memory = \"auto\", "
                                                  "at most data.in_memory_limit_mb = {:g})",
                                                  held / kMiB, cfg.data.in_memory_limit_mb)
                                    : fmt::format("read from the file per micro-batch (data.in_memory = \"auto\": "
                                                  "{:.3g} MiB per rank is above data.in_memory_limit_mb = {:g})",
                                                  held / kMiB, cfg.data.in_memory_limit_mb);
        break;
    }
    this->m_plan = plan_classifier_memory(cfg, make_layout(), costs(), mb * (row_bytes + 4) + (m_in_memory ? held : 0),
                                          mb, plan_world);
    this->m_plan.data_in_memory = m_in_memory ? held : 0;
  }

  TaskText describe() const override {
    const std::string model = describe_classifier(m_dims, m_cfg);
    return {model, fmt::format("batch {} samples, micro-batch {}", m_cfg.train.batch_size, this->max_batch()),
            fmt::format("data {} ({} train / {} val samples of shape ({}), {} classes; {})", m_cfg.data.path,
                        m_data.size(SampleSplit::Train), m_data.size(SampleSplit::Val),
                        fmt::join(m_data.sample_shape(), ", "), m_classes, m_data_source)};
  }
  std::int64_t targets_per_sample() const override { return 1; }
  std::int64_t tokens_per_sample() const override { return m_seq_len; }
  DataIdentity data_identity() const override {
    return {m_data.size(SampleSplit::Train), "samples", m_data.vocab_size(), m_seq_len, std::nullopt};
  }
  std::vector<std::string> class_names() const override { return m_data.class_names(); }

  ParamLayout make_layout() const override { return classifier_layout(m_dims); }
  void init_params(const ParamLayout& layout, P* params, std::int64_t lo, std::int64_t hi) const override {
    classifier_init_params<P>(m_dims, m_cfg, layout, params, lo, hi);
  }
  void build(const ParamLayout& layout, MemoryTracker& memory, Backend& backend,
             ParamProvider<P>& provider) override {
    m_model = make_classifier<P>(m_dims, m_cfg, layout, memory, backend, this->m_plan.recompute);
    m_model->bind(provider);
    const std::int64_t mb = this->max_batch();
    if (m_seq_len == 0) {
      m_values = TrackedBuffer<float>(memory, MemCategory::Data, mb * m_row);
    } else {
      m_tokens = TrackedBuffer<TokenIndex>(memory, MemCategory::Data, mb * m_row);
      m_lengths = TrackedBuffer<std::int32_t>(memory, MemCategory::Data, mb);
    }
    m_labels = TrackedBuffer<TokenIndex>(memory, MemCategory::Data, mb);
    if (m_in_memory) {
      const auto t0 = std::chrono::steady_clock::now();
      m_data.hold_in_memory(memory, MemCategory::Data);
      m_data_source += fmt::format(", read in {:.2f} s",
                                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    m_sampler = std::make_unique<SampleSampler>(m_data.size(SampleSplit::Train), m_cfg.train.seed);
  }

  double train_micro_batch(std::int64_t cursor, std::int64_t lo, std::int64_t hi, std::int64_t m,
                           P dloss) override {
    const std::int64_t first = lo + m * this->max_batch();
    SampleBatch b = load(SampleSplit::Train, first, hi, [&](std::int64_t k) { return m_sampler->sample(cursor + k); });
    b.training = true;
    b.first_sample = static_cast<std::uint64_t>(cursor + first);
    const double loss = m_model->forward(b);
    m_model->backward(dloss);
    return loss;
  }

  EvalResult evaluate(std::int64_t max_samples) override {
    std::int64_t count = m_data.size(SampleSplit::Val);
    if (max_samples > 0) count = std::min(count, max_samples);
    const auto [lo, hi] = rank_slice(count, m_comm.rank(), m_comm.size());
    const std::int64_t mb = this->max_batch();
    double loss_sum = 0.0;
    ConfusionMatrix confusion(m_classes);
    for (std::int64_t m = 0; m < micro_batches(count, m_comm.size(), mb); ++m) {
      const SampleBatch b = load(SampleSplit::Val, lo + m * mb, hi, [](std::int64_t k) { return k; });
      loss_sum += m_model->forward(b);  // training = false: no dropout
      if (b.batch > 0) {
        m_model->logits(m_logits);
        confusion.add_logits(m_logits.data(), b.labels, b.batch);
      }
    }
    loss_sum = m_comm.all_reduce_value(loss_sum);
    confusion.all_reduce(m_comm);
    EvalResult r;
    r.loss = loss_sum / static_cast<double>(count);
    r.samples = count;
    r.accuracy = confusion.accuracy();
    r.confusion = std::move(confusion);
    return r;
  }
  std::int64_t activation_high_water_bytes() const override {
    return m_model ? m_model->activation_high_water_bytes() : 0;
  }

 private:
  ClassifierCosts costs() const { return classifier_costs<P>(m_dims); }

  // Reads samples index_of(first .. min(first + max_batch, hi) - 1) of `split`.
  template <class IndexOf>
  SampleBatch load(SampleSplit split, std::int64_t first, std::int64_t hi, IndexOf index_of) {
    SampleBatch b;
    b.batch = std::clamp<std::int64_t>(hi - first, 0, this->max_batch());
    if (b.batch == 0) return b;
    m_indices.resize(static_cast<std::size_t>(b.batch));
    for (std::int64_t i = 0; i < b.batch; ++i) m_indices[i] = index_of(first + i);
    const bool images = m_seq_len == 0;
    m_data.read(split, m_indices, images ? m_values.data() : nullptr, images ? nullptr : m_tokens.data(),
                m_labels.data(), images ? nullptr : m_lengths.data());
    if (!images && m_seq_len < m_row) {  // the model reads the first m_seq_len tokens of every row
      const auto t = static_cast<std::int32_t>(m_seq_len);
      for (std::int64_t i = 0; i < b.batch; ++i) {
        TokenIndex* row = m_tokens.data() + i * m_seq_len;
        std::copy_n(m_tokens.data() + i * m_row, m_seq_len, row);
        // A row cut short ends in [SEP] where the set has one (WordPiece: [CLS]
        // + the first t - 2 pieces + [SEP], what an import at --seq-len t gives).
        if (m_lengths.data()[i] > t && m_sep_id >= 0 && t >= 2) row[t - 1] = static_cast<TokenIndex>(m_sep_id);
        m_lengths.data()[i] = std::min(m_lengths.data()[i], t);
      }
    }
    b.values = images ? m_values.data() : nullptr;
    b.tokens = images ? nullptr : m_tokens.data();
    b.lengths = images ? nullptr : m_lengths.data();
    b.labels = m_labels.data();
    return b;
  }

  const RunConfig& m_cfg;
  MpiCommunicator& m_comm;
  SampleDataset m_data;
  bool m_in_memory = false;   // data.in_memory decided: m_data holds both splits from build() on
  std::string m_data_source;  // how the samples are read, for the start-up line
  std::int64_t m_classes = 0;
  std::int64_t m_row = 0;      // elements of one sample as stored
  std::int64_t m_seq_len = 0;  // tokens per sample the model reads (<= m_row); 0: images
  std::int64_t m_sep_id = -1;  // the set's [SEP], put last in a row cut to m_seq_len; -1: none
  ClassifierDims m_dims;  // the model's, from its row (task/model_registry.hpp)
  std::unique_ptr<Classifier<P>> m_model;
  std::unique_ptr<SampleSampler> m_sampler;
  TrackedBuffer<float> m_values;
  TrackedBuffer<TokenIndex> m_tokens, m_labels;
  TrackedBuffer<std::int32_t> m_lengths;
  std::vector<std::int64_t> m_indices;
  std::vector<float> m_logits;
};

}  // namespace

template <class P>
std::unique_ptr<Task<P>> make_classifier_task(const RunConfig& config, MpiCommunicator& comm, int plan_world) {
  return std::make_unique<ClassifierTask<P>>(config, comm, plan_world);
}

template std::unique_ptr<Task<float>> make_classifier_task<float>(const RunConfig&, MpiCommunicator&, int);
template std::unique_ptr<Task<f16>> make_classifier_task<f16>(const RunConfig&, MpiCommunicator&, int);
template std::unique_ptr<Task<bf16>> make_classifier_task<bf16>(const RunConfig&, MpiCommunicator&, int);

}  // namespace shardtrain
