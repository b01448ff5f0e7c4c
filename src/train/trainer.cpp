// The step loop: data -> forward/backward per micro-batch -> gradient all-reduce
// -> clip -> AdamW, plus evaluation, progress lines, metrics and the memory report.
#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "dist/mpi/mpi_communicator.hpp"
#include "dist/zero_engine.hpp"
#include "io/token_dataset.hpp"
#include "model/gpt.hpp"
#include "model/param_layout.hpp"
#include "optim/adamw.hpp"
#include "optim/loss_scaler.hpp"
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

class RunBase {
 public:
  virtual ~RunBase() = default;
  virtual TrainResult run() = 0;
};

namespace {

// Holds everything one run needs; P is the storage type of parameters,
// activations and gradients (float, f16 or bf16).
template <class P>
class Run final : public RunBase {
 public:
  Run(const RunConfig& cfg, MPI_Comm world, const TrainerHooks& hooks)
      : m_cfg(cfg),
        m_hooks(hooks),
        m_comm(world),
        m_data(cfg.data.path, world),
        m_scaler(scaler_config(cfg.precision)) {
    check_data_fits(cfg, m_data);
    m_plan = plan_memory(cfg, m_data.vocab_size(), m_comm.size());
    check_memory_limit(m_plan, cfg);  // before anything large is allocated
    m_dims = m_plan.dims;

    m_layout = std::make_unique<ParamLayout>(gpt_layout(m_dims));
    m_layout->finalize(m_comm.size());
    m_zero = std::make_unique<ZeroEngine<P>>(
        *m_layout,
        typename ZeroEngine<P>::Options{cfg.parallel.zero_stage, cfg.parallel.overlap,
                                        cfg.parallel.bucket_mb},
        m_comm, m_memory);
    const auto [plo, phi] = m_zero->stored_param_range();
    gpt_init_params<P>(*m_layout, m_dims, cfg.model.init_std, cfg.train.seed,
                       m_zero->stored_params(), plo, phi);
    m_model = std::make_unique<Gpt<P>>(m_dims, *m_layout, cfg.model.layernorm_eps, m_memory,
                                       &m_plan.recompute);
    m_model->bind(*m_zero);
    const auto [olo, ohi] = m_zero->optimizer_range();
    constexpr bool kMaster = !std::is_same_v<P, float>;
    m_optim = std::make_unique<AdamW>(cfg.optim, *m_layout, olo, ohi, m_memory, kMaster);
    // The optimizer's range lies inside the stored parameters at every stage.
    if (kMaster) m_optim->init_master(m_zero->stored_params() + (olo - plo));

    const std::int64_t t = m_dims.seq_len, mb = m_dims.max_batch;
    m_window_buf = TrackedBuffer<TokenIndex>(m_memory, MemCategory::Data, mb * (t + 1));
    m_inputs = TrackedBuffer<TokenIndex>(m_memory, MemCategory::Data, mb * t);
    m_targets = TrackedBuffer<TokenIndex>(m_memory, MemCategory::Data, mb * t);
    m_sampler = std::make_unique<WindowSampler>(m_data.size(Split::Train), t, cfg.train.seed);
  }

  TrainResult run() override;

 private:
  static LossScalerConfig scaler_config(const PrecisionConfig& p) {
    LossScalerConfig c;
    c.enabled = p.mode == "fp16";
    c.init_scale = p.init_scale;
    c.growth_factor = p.growth_factor;
    c.backoff_factor = p.backoff_factor;
    c.growth_interval = p.growth_interval;
    c.hysteresis = p.hysteresis;
    c.min_scale = p.min_scale;
    c.max_consecutive_skips = p.max_consecutive_skips;
    return c;
  }
  // The outcome of one optimizer step.
  struct StepResult {
    double loss = 0.0;        // mean training loss over the global batch
    double grad_norm = 0.0;   // global L2 norm of the (unscaled) gradient, before clipping
    double loss_scale = 1.0;  // the scale this step's backward used
    bool skipped = false;     // inf/NaN gradient: no update (fp16)
  };
  // Micro-batch m of this rank's slice [lo, hi): reads the windows of samples
  // first..first+b-1 (first token of sample k at start_of(k)) and splits them into
  // inputs and targets. Returns b, 0 once the slice is used up.
  template <class StartOf>
  std::int64_t load_micro_batch(Split split, std::int64_t lo, std::int64_t hi, std::int64_t m,
                                StartOf start_of);
  StepResult train_step(std::int64_t step, double lr);
  // Handles an inf/NaN gradient or loss found at `step` (0-based): the scaler's
  // decision, one log line, and the abort or failure when training cannot go on.
  void handle_overflow(std::int64_t step);
  std::string tensor_of(std::int64_t flat_index) const;
  // CRC-32 of the fp32 weights (the master weights of a 16-bit model) of the
  // whole vector up to its last tensor, in layout order: every rank hashes the range its
  // optimizer owns and rank 0 chains the pieces, so the value does not depend
  // on the rank count or ZeRO stage. Collective; the result is rank 0's.
  std::uint32_t weights_crc();
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
  TrainerHooks m_hooks;
  MpiCommunicator m_comm;
  MemoryTracker m_memory;
  TokenDataset m_data;
  MemoryPlan m_plan;
  GptDims m_dims;
  std::unique_ptr<ParamLayout> m_layout;
  std::unique_ptr<ZeroEngine<P>> m_zero;
  std::unique_ptr<Gpt<P>> m_model;
  std::unique_ptr<AdamW> m_optim;
  LossScaler m_scaler;
  std::int64_t m_updates = 0;  // optimizer updates applied (skipped steps excluded)
  std::unique_ptr<WindowSampler> m_sampler;
  TrackedBuffer<TokenIndex> m_window_buf, m_inputs, m_targets;
  std::vector<std::int64_t> m_starts;
};

template <class P>
template <class StartOf>
std::int64_t Run<P>::load_micro_batch(Split split, std::int64_t lo, std::int64_t hi, std::int64_t m,
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

template <class P>
typename Run<P>::StepResult Run<P>::train_step(std::int64_t step, double lr) {
  const std::int64_t global_batch = m_cfg.train.batch_size, t = m_dims.seq_len;
  const auto [lo, hi] = rank_slice(global_batch, m_comm.rank(), m_comm.size());
  StepResult r;
  r.loss_scale = m_scaler.scale();
  // The backward seed carries the loss scale (1 unless fp16).
  const P dloss(static_cast<float>(r.loss_scale / static_cast<double>(global_batch * t)));
  if (m_hooks.overflow_step == step + 1 && m_hooks.overflow_rank == m_comm.rank())
    m_zero->plant_overflow();

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
  // reduce-scattered into each rank's shard (stages 1-3). Its squared norm is
  // one scalar all-reduce of per-shard sums, so an inf/NaN in any rank's shard
  // makes it non-finite on every rank: that is the found-inf reduction.
  const double norm2 = m_zero->finish_gradients();
  loss_sum = m_comm.all_reduce_value(loss_sum);
  r.loss = loss_sum / static_cast<double>(global_batch * t);
  r.grad_norm = std::sqrt(norm2) / r.loss_scale;
  if (!std::isfinite(norm2) || !std::isfinite(r.loss)) {
    handle_overflow(step);
    r.skipped = true;
    return r;
  }
  const auto decision = m_scaler.update(false);
  if (decision.scale_changed && is_root()) fmt::print("{}\n", m_scaler.describe(decision, step + 1));
  float clip = 1.0f;
  if (m_cfg.optim.grad_clip > 0 && r.grad_norm > m_cfg.optim.grad_clip)
    clip = static_cast<float>(m_cfg.optim.grad_clip / (r.grad_norm + 1e-6));
  m_zero->apply_optimizer(*m_optim, lr, static_cast<float>(clip / r.loss_scale), m_updates++);
  return r;
}

template <class P>
std::uint32_t Run<P>::weights_crc() {
  const auto [olo, ohi] = m_zero->optimizer_range();
  const auto [plo, phi] = m_zero->stored_param_range();
  const float* w = m_optim->has_master() ? m_optim->master().data()
                                         : reinterpret_cast<const float*>(m_zero->stored_params() + (olo - plo));
  // Stage 0: every rank owns the whole vector; rank 0's piece is the hash.
  const bool sharded = m_cfg.parallel.zero_stage > 0;
  std::uint64_t crc = 0, bytes = 0;
  // Up to the end of the last tensor: the final padding depends on the rank count.
  const auto& last = m_layout->entries().back();
  const std::int64_t end = std::min(ohi, last.offset + last.numel);
  if ((sharded || is_root()) && end > olo) {
    bytes = static_cast<std::uint64_t>(end - olo) * sizeof(float);
    const auto* p = reinterpret_cast<const Bytef*>(w);
    uLong c = crc32(0L, Z_NULL, 0);
    for (std::uint64_t done = 0; done < bytes;) {  // crc32 takes uInt lengths
      const uInt n = static_cast<uInt>(std::min<std::uint64_t>(bytes - done, 1u << 30));
      c = crc32(c, p + done, n);
      done += n;
    }
    crc = c;
  }
  std::vector<std::int64_t> parts(2 * static_cast<std::size_t>(m_comm.size()), 0);
  parts[2 * m_comm.rank()] = static_cast<std::int64_t>(crc);
  parts[2 * m_comm.rank() + 1] = static_cast<std::int64_t>(bytes);
  m_comm.all_reduce(std::span<std::int64_t>(parts), ReduceOp::Sum);
  uLong total = static_cast<uLong>(parts[0]);
  for (int r = 1; r < m_comm.size(); ++r)
    if (parts[2 * r + 1] > 0)
      total = crc32_combine(total, static_cast<uLong>(parts[2 * r]), static_cast<z_off_t>(parts[2 * r + 1]));
  return static_cast<std::uint32_t>(total);
}

template <class P>
std::string Run<P>::tensor_of(std::int64_t i) const {
  for (const auto& e : m_layout->entries())
    if (i >= e.offset && i < e.offset + e.numel) return e.name;
  return "padding";
}

template <class P>
void Run<P>::handle_overflow(std::int64_t step) {
  const std::int64_t first = m_zero->first_non_finite_gradient();  // collective
  const std::string where =
      first >= 0 ? fmt::format("first non-finite gradient in {}", tensor_of(first))
                 : std::string("the loss is not finite, the gradients are");
  if (!m_scaler.enabled())
    throw AgreedError(fmt::format(
        "step {}: {} ({}); {} has no loss scaling to recover with: lower optim.lr, or use "
        "precision.mode = \"fp16\" only with its loss scaler",
        step + 1, first >= 0 ? "gradient overflow (inf/NaN)" : "loss overflow (inf/NaN)", where,
        m_cfg.precision.mode));
  const auto decision = m_scaler.update(true);
  if (is_root()) {
    fmt::print("{}; {}\n", m_scaler.describe(decision, step + 1), where);
    if (decision.at_min_scale && !decision.abort)
      fmt::print(stderr, "warning: step {}: loss scale is at precision.min_scale ({}) and the "
                 "gradient still overflows; steps keep being skipped\n", step + 1,
                 m_cfg.precision.min_scale);
    std::fflush(stdout);
  }
  if (decision.abort)
    throw AgreedError(fmt::format(
        "step {}: {} consecutive steps skipped for inf/NaN gradients (precision."
        "max_consecutive_skips = {}) at loss scale {}; the model diverged: lower optim.lr, "
        "raise optim.warmup_steps, or use precision.mode = \"bf16\"",
        step + 1, decision.consecutive_skips, m_cfg.precision.max_consecutive_skips,
        decision.new_scale));
}

template <class P>
double Run<P>::evaluate(std::int64_t max_windows) {
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

template <class P>
void Run<P>::report_memory(RunDirectory* dir) {
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
template <class P>
void Run<P>::report_communication(std::uint64_t bytes_per_step) {
  if (!is_root()) return;
  const double n = m_comm.size(), psi = static_cast<double>(m_layout->padded_size());
  const double per_elem = m_cfg.parallel.zero_stage == 3 ? 3.0 : 2.0;
  const double theory = per_elem * psi * (n - 1) / n * sizeof(P);
  fmt::print("communication per step per rank (rank 0): {:.3f} MB sent; ZeRO theory {:.0f}*Psi*(N-1)/N = {:.3f} MB\n",
             static_cast<double>(bytes_per_step) / 1e6, per_elem, theory / 1e6);
}

template <class P>
TrainResult Run<P>::run() {
  const auto& tc = m_cfg.train;
  std::optional<RunDirectory> dir;
  if (is_root()) {
    dir.emplace(m_cfg);
    fmt::print("shardtrain: {} ranks, ZeRO stage {}, {} | GPT L={} C={} H={} T={} V={} | {} parameters | "
               "batch {} x {} tokens, micro-batch {} | data {} ({} train / {} val tokens)\n",
               m_comm.size(), m_cfg.parallel.zero_stage, m_cfg.precision.mode, m_dims.n_layer, m_dims.channels, m_dims.n_head, m_dims.seq_len,
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
    const std::uint64_t sent_before = m_comm.bytes_sent();
    const StepResult sr = train_step(step, lr);
    const std::uint64_t step_bytes = m_comm.bytes_sent() - sent_before;
    comm_total += step_bytes;
    const double loss = sr.loss;
    if (sr.skipped) ++result.skipped_steps;
    else result.final_train_loss = loss;
    const std::int64_t done = step + 1;
    progress.step_done(seconds_since(t0));

    std::optional<double> val;
    const bool last = done == tc.steps;
    if (last || (tc.eval_every > 0 && done % tc.eval_every == 0))
      val = evaluate(last ? 0 : tc.eval_windows);  // the final pass covers the whole split
    const bool log_row = done % tc.log_every == 0 || last || val || sr.skipped;
    const std::uint32_t crc = log_row ? weights_crc() : 0;  // collective
    if (is_root() && log_row) {
      MetricsRow row{done, loss, val, lr, sr.grad_norm, progress.tokens_per_second(), seconds_since(t0),
                     step_bytes, sr.loss_scale, sr.skipped, crc};
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

}  // namespace

Trainer::Trainer(const RunConfig& config, MPI_Comm world, const TrainerHooks& hooks) {
  const std::string& mode = config.precision.mode;
  if (mode == "fp16") m_run = std::make_unique<Run<f16>>(config, world, hooks);
  else if (mode == "bf16") m_run = std::make_unique<Run<bf16>>(config, world, hooks);
  else m_run = std::make_unique<Run<float>>(config, world, hooks);
}
Trainer::~Trainer() = default;
TrainResult Trainer::run() { return m_run->run(); }

}  // namespace shardtrain
