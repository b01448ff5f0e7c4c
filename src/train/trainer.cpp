// The step loop: data -> forward/backward per micro-batch -> gradient all-reduce
// -> clip -> AdamW, plus evaluation, progress lines, metrics and the memory report.
#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "dist/mpi/mpi_communicator.hpp"
#include "dist/zero_engine.hpp"
#include "io/token_dataset.hpp"
#include "model/gpt.hpp"
#include "model/param_layout.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "plan/memory_plan.hpp"
#include "train/batch_sampler.hpp"
#include "train/progress.hpp"
#include "train/run_directory.hpp"

namespace shardtrain {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Checks that the data set fits the model; every rank sees the same file, so
// every rank throws the same InputError.
void check_data_fits(const RunConfig& cfg, const TokenDataset& data) {
  const auto& p = cfg.data.path;
  const std::int64_t need = cfg.model.seq_len + 1;
  if (data.size(Split::Train) < 2 * need)
    throw InputError(fmt::format("{}: train split has {} tokens; model.seq_len = {} needs at least {}",
                                 p, data.size(Split::Train), cfg.model.seq_len, 2 * need));
  if (data.size(Split::Val) < need)
    throw InputError(fmt::format("{}: validation split has {} tokens; model.seq_len = {} needs at least {}",
                                 p, data.size(Split::Val), cfg.model.seq_len, need));
}

}  // namespace

// Holds everything one run needs.
class Run {
 public:
  Run(const RunConfig& cfg, MPI_Comm world)
      : m_cfg(cfg),
        m_comm(world),
        m_data(cfg.data.path, world) {
    check_data_fits(cfg, m_data);
    m_plan = plan_memory(cfg, m_data.vocab_size(), m_comm.size());
    check_memory_limit(m_plan, cfg);  // before anything large is allocated
    m_dims = m_plan.dims;

    m_layout = std::make_unique<ParamLayout>(gpt_layout(m_dims));
    m_layout->finalize(m_comm.size());
    m_zero = std::make_unique<ZeroEngine>(
        *m_layout,
        ZeroEngine::Options{cfg.parallel.zero_stage, cfg.parallel.overlap, cfg.parallel.bucket_mb},
        m_comm, m_memory);
    const auto [plo, phi] = m_zero->stored_param_range();
    gpt_init_params<float>(*m_layout, m_dims, cfg.model.init_std, cfg.train.seed,
                           m_zero->stored_params(), plo, phi);
    m_model = std::make_unique<Gpt<float>>(m_dims, *m_layout, cfg.model.layernorm_eps, m_memory);
    m_model->bind(*m_zero);
    const auto [olo, ohi] = m_zero->optimizer_range();
    m_optim = std::make_unique<AdamW>(cfg.optim, *m_layout, olo, ohi, m_memory);

    const std::int64_t t = m_dims.seq_len, mb = m_dims.max_batch;
    m_window_buf = TrackedBuffer<TokenIndex>(m_memory, MemCategory::Data, mb * (t + 1));
    m_inputs = TrackedBuffer<TokenIndex>(m_memory, MemCategory::Data, mb * t);
    m_targets = TrackedBuffer<TokenIndex>(m_memory, MemCategory::Data, mb * t);
    m_sampler = std::make_unique<WindowSampler>(m_data.size(Split::Train), t, cfg.train.seed);
  }

  TrainResult run();

 private:
  // Micro-batch m of this rank's slice [lo, hi): reads the windows of samples
  // first..first+b-1 (first token of sample k at start_of(k)) and splits them into
  // inputs and targets. Returns b, 0 once the slice is used up.
  template <class StartOf>
  std::int64_t load_micro_batch(Split split, std::int64_t lo, std::int64_t hi, std::int64_t m,
                                StartOf start_of);
  double train_step(std::int64_t step, double lr, double& grad_norm);
  double evaluate(std::int64_t max_windows);
  void report_memory(RunDirectory* dir);  // collective; dir is rank 0's
  void report_communication(std::uint64_t bytes_per_step);
  bool is_root() const { return m_comm.rank() == 0; }
  // Micro-batches per rank for `count` samples split over the ranks (the largest slice).
  std::int64_t micro_batches(std::int64_t count) const {
    const std::int64_t largest = (count + m_comm.size() - 1) / m_comm.size();
    return (largest + m_dims.max_batch - 1) / m_dims.max_batch;
  }

  const RunConfig& m_cfg;
  MpiCommunicator m_comm;
  MemoryTracker m_memory;
  TokenDataset m_data;
  MemoryPlan m_plan;
  GptDims m_dims;
  std::unique_ptr<ParamLayout> m_layout;
  std::unique_ptr<ZeroEngine> m_zero;
  std::unique_ptr<Gpt<float>> m_model;
  std::unique_ptr<AdamW> m_optim;
  std::unique_ptr<WindowSampler> m_sampler;
  TrackedBuffer<TokenIndex> m_window_buf, m_inputs, m_targets;
  std::vector<std::int64_t> m_starts;
};

template <class StartOf>
std::int64_t Run::load_micro_batch(Split split, std::int64_t lo, std::int64_t hi, std::int64_t m,
                                   StartOf start_of) {
  const std::int64_t t = m_dims.seq_len, first = lo + m * m_dims.max_batch;
  const std::int64_t b = std::clamp<std::int64_t>(hi - first, 0, m_dims.max_batch);
  if (b == 0) return 0;
  m_starts.resize(b);
  for (std::int64_t i = 0; i < b; ++i) m_starts[i] = start_of(first + i);
  m_data.read_windows(split, m_starts, t + 1, m_window_buf.data());
  for (std::int64_t i = 0; i < b; ++i) {
    const TokenIndex* w = m_window_buf.data() + i * (t + 1);
    std::copy(w, w + t, m_inputs.data() + i * t);
    std::copy(w + 1, w + t + 1, m_targets.data() + i * t);
  }
  return b;
}

double Run::train_step(std::int64_t step, double lr, double& grad_norm) {
  const std::int64_t global_batch = m_cfg.train.batch_size, t = m_dims.seq_len;
  const auto [lo, hi] = rank_slice(global_batch, m_comm.rank(), m_comm.size());
  const float dloss = static_cast<float>(1.0 / static_cast<double>(global_batch * t));

  m_zero->begin_step();
  double loss_sum = 0.0;
  // Every rank runs the same number of micro-batches (sharded stages reduce per
  // micro-batch); a rank whose slice is used up runs empty ones.
  for (std::int64_t m = 0; m < micro_batches(global_batch); ++m) {
    const std::int64_t b = load_micro_batch(Split::Train, lo, hi, m, [&](std::int64_t k) {
      return m_sampler->window_start(step * global_batch + k);
    });
    loss_sum += m_model->forward(m_inputs.data(), m_targets.data(), b);
    m_model->backward(dloss);
  }

  // The summed gradient of the whole global batch: all-reduced (stage 0) or
  // reduce-scattered into each rank's shard (stages 1-3).
  grad_norm = std::sqrt(m_zero->finish_gradients());
  loss_sum = m_comm.all_reduce_value(loss_sum);
  float clip = 1.0f;
  if (m_cfg.optim.grad_clip > 0 && grad_norm > m_cfg.optim.grad_clip)
    clip = static_cast<float>(m_cfg.optim.grad_clip / (grad_norm + 1e-6));
  m_zero->apply_optimizer(*m_optim, lr, clip, step);
  return loss_sum / static_cast<double>(global_batch * t);
}

double Run::evaluate(std::int64_t max_windows) {
  const std::int64_t t = m_dims.seq_len;
  std::int64_t windows = eval_window_count(m_data.size(Split::Val), t);
  if (max_windows > 0) windows = std::min(windows, max_windows);
  const auto [lo, hi] = rank_slice(windows, m_comm.rank(), m_comm.size());
  double loss_sum = 0.0;
  for (std::int64_t m = 0; m < micro_batches(windows); ++m) {
    const std::int64_t b =
        load_micro_batch(Split::Val, lo, hi, m, [t](std::int64_t k) { return k * t; });
    loss_sum += m_model->forward(m_inputs.data(), m_targets.data(), b);
  }
  loss_sum = m_comm.all_reduce_value(loss_sum);
  return loss_sum / static_cast<double>(windows * t);
}

void Run::report_memory(RunDirectory* dir) {
  constexpr int kCats = MemoryTracker::kCategories;
  const int n = m_comm.size();
  std::vector<std::int64_t> peaks(static_cast<std::size_t>(n) * (kCats + 1), 0);
  for (int c = 0; c < kCats; ++c)
    peaks[m_comm.rank() * (kCats + 1) + c] = static_cast<std::int64_t>(m_memory.peak(static_cast<MemCategory>(c)));
  peaks[m_comm.rank() * (kCats + 1) + kCats] = static_cast<std::int64_t>(m_memory.peak_total());
  m_comm.all_reduce(std::span<std::int64_t>(peaks), ReduceOp::Sum);
  if (!is_root()) return;
  std::vector<std::int64_t> plan(m_plan.bytes.begin(), m_plan.bytes.end());
  plan.push_back(m_plan.total());
  dir->write_memory(peaks, plan);
  auto row = [](const std::string& who, const std::int64_t* p) {
    auto mib = [p](int i) { return static_cast<double>(p[i]) / (1024.0 * 1024.0); };
    fmt::print("  {:>4} {:>10.3f} {:>10.3f} {:>10.3f} {:>11.3f} {:>10.3f} {:>8.3f} {:>8.3f} {:>10.3f}\n", who,
               mib(0), mib(1), mib(2), mib(3), mib(4), mib(5), mib(6), mib(kCats));
  };
  fmt::print("peak memory per rank (MiB, tracked allocator; also {}/memory.csv):\n", dir->path());
  fmt::print("  {:>4} {:>10} {:>10} {:>10} {:>11} {:>10} {:>8} {:>8} {:>10}\n", "rank", "params",
             "grads", "optimizer", "activations", "workspace", "comm", "data", "total");
  for (int r = 0; r < n; ++r) row(std::to_string(r), &peaks[r * (kCats + 1)]);
  row("plan", plan.data());
}

// Rank 0's bytes per step against ZeRO's theory: 2 Psi (N-1)/N elements per
// step for stages 0-2 (reduce-scatter + all-gather, or all-reduce), 3 Psi (N-1)/N
// for stage 3 (parameters gathered for forward and again for backward), with
// Psi the padded parameter count and one micro-batch per step; stages 2 and 3
// reduce gradients once per micro-batch.
void Run::report_communication(std::uint64_t bytes_per_step) {
  if (!is_root()) return;
  const double n = m_comm.size(), psi = static_cast<double>(m_layout->padded_size());
  const double per_elem = m_cfg.parallel.zero_stage == 3 ? 3.0 : 2.0;
  const double theory = per_elem * psi * (n - 1) / n * sizeof(float);
  fmt::print("communication per step per rank (rank 0): {:.3f} MB sent; ZeRO theory {:.0f}*Psi*(N-1)/N = {:.3f} MB\n",
             static_cast<double>(bytes_per_step) / 1e6, per_elem, theory / 1e6);
}

TrainResult Run::run() {
  const auto& tc = m_cfg.train;
  std::optional<RunDirectory> dir;
  if (is_root()) {
    dir.emplace(m_cfg);
    fmt::print("shardtrain: {} ranks, ZeRO stage {} | GPT L={} C={} H={} T={} V={} | {} parameters | "
               "batch {} x {} tokens, micro-batch {} | data {} ({} train / {} val tokens)\n",
               m_comm.size(), m_cfg.parallel.zero_stage, m_dims.n_layer, m_dims.channels, m_dims.n_head, m_dims.seq_len,
               m_dims.vocab, m_layout->num_parameters(), tc.batch_size, m_dims.seq_len,
               m_dims.max_batch, m_cfg.data.path, m_data.size(Split::Train), m_data.size(Split::Val));
    fmt::print("{}", format_plan(m_plan));
    fmt::print("run directory: {}\n", dir->path());
    std::fflush(stdout);
  }

  TrainResult result;
  std::uint64_t comm_total = 0;  // bytes this rank sent in training steps (not evaluation)
  Progress progress(tc.steps, tc.batch_size * m_dims.seq_len);
  const auto t0 = Clock::now();
  for (std::int64_t step = 0; step < tc.steps; ++step) {
    const double lr = learning_rate(m_cfg.optim, step, tc.steps);
    double grad_norm = 0.0;
    const std::uint64_t sent_before = m_comm.bytes_sent();
    const double loss = train_step(step, lr, grad_norm);
    const std::uint64_t step_bytes = m_comm.bytes_sent() - sent_before;
    comm_total += step_bytes;
    if (!std::isfinite(loss))
      SHARDTRAIN_FAIL(fmt::format("training loss is {} at step {}; lower optim.lr", loss, step + 1));
    result.final_train_loss = loss;
    const std::int64_t done = step + 1;
    progress.step_done(seconds_since(t0));

    std::optional<double> val;
    const bool last = done == tc.steps;
    if (last || (tc.eval_every > 0 && done % tc.eval_every == 0))
      val = evaluate(last ? 0 : tc.eval_windows);  // the final pass covers the whole split
    if (is_root() && (done % tc.log_every == 0 || last || val)) {
      MetricsRow row{done, loss, val, lr, grad_norm, progress.tokens_per_second(), seconds_since(t0),
                     step_bytes};
      dir->append(row);
      progress.print(row);
    }
    if (val) result.final_val_loss = *val;
  }
  result.seconds = seconds_since(t0);
  report_memory(dir ? &*dir : nullptr);
  report_communication(comm_total / static_cast<std::uint64_t>(tc.steps));
  if (is_root()) {
    fmt::print("done: {} steps in {:.1f} s | final train loss {:.4f} | final val loss {:.4f} "
               "(whole validation split)\n",
               tc.steps, result.seconds, result.final_train_loss, result.final_val_loss);
    fmt::print("metrics: {}\n", dir->metrics_path());
    std::fflush(stdout);
  }
  return result;
}

Trainer::Trainer(const RunConfig& config, MPI_Comm world)
    : m_run(std::make_unique<Run>(config, world)) {}
Trainer::~Trainer() = default;
TrainResult Trainer::run() { return m_run->run(); }

}  // namespace shardtrain
