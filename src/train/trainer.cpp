// The step loop: data -> forward/backward per micro-batch -> gradient all-reduce
// -> clip -> AdamW, plus resume and checkpoints, evaluation, progress lines,
// metrics and the memory report.
#include "train/trainer.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <limits>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

#include "backend/backend.hpp"
#include "config/parse.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/mpi_check.hpp"
#include "dist/mpi/mpi_communicator.hpp"
#include "dist/zero_engine.hpp"
#include "io/checkpoint.hpp"
#include "core/param_layout.hpp"
#include "optim/adamw.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/lr_schedule.hpp"
#include "plan/memory_plan.hpp"
#include "train/process_memory.hpp"
#include "train/batch_sampler.hpp"
#include "train/checkpointing.hpp"
#include "train/lifecycle.hpp"
#include "train/progress.hpp"
#include "train/run_directory.hpp"
#include "train/task.hpp"
#include "train/task_factory.hpp"
#include "version.hpp"

#ifdef SHARDTRAIN_WITH_CUDA
#include "backend/cuda/cuda_backend.hpp"
#include "dist/nccl/nccl_communicator.hpp"
#endif

namespace shardtrain {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A checkpoint whose model does not match the config: no other checkpoint of
// the same directory would do better, so resume = "auto" does not fall back.
class IncompatibleCheckpoint : public InputError {
 public:
  using InputError::InputError;
};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

class RunBase {
 public:
  virtual ~RunBase() = default;
  virtual TrainResult run() = 0;
};

// Where the run computes (backend/backend.hpp) and the communicator that moves
// its memory: the host and the run's MpiCommunicator, or one CUDA device per
// rank with an NcclCommunicator (CUDA build).
struct DeviceContext {
  Backend* backend = &host_backend();
#ifdef SHARDTRAIN_WITH_CUDA
  std::unique_ptr<NcclCommunicator> nccl;
  std::unique_ptr<CudaBackend> cuda;
#endif
  // The communicator for backend memory; nullptr: the run's MpiCommunicator.
  Communicator* comm() {
#ifdef SHARDTRAIN_WITH_CUDA
    if (nccl) return nccl.get();
#endif
    return nullptr;
  }
};

namespace {

// `--profile`: the run's Profiler, bound to the backend for the run's lifetime
// (the host backend is one per process, so the binding is undone on every exit).
class ProfilerBinding {
 public:
  ProfilerBinding(Backend& backend, bool on) : m_backend(backend) {
    if (!on) return;
    m_profiler = std::make_unique<Profiler>();
    if (backend.memory() != nullptr) m_profiler->set_sync([&backend] { backend.synchronize(); });
    backend.set_profiler(m_profiler.get());
  }
  ~ProfilerBinding() {
    if (m_profiler) m_backend.set_profiler(nullptr);
  }
  ProfilerBinding(const ProfilerBinding&) = delete;
  ProfilerBinding& operator=(const ProfilerBinding&) = delete;
  Profiler* get() const { return m_profiler.get(); }

 private:
  Backend& m_backend;
  std::unique_ptr<Profiler> m_profiler;
};

// Holds everything one run needs; P is the storage type of parameters,
// activations and gradients (float, f16 or bf16).
template <class P>
class Run final : public RunBase {
 public:
  Run(const RunConfig& cfg, MPI_Comm world, const TrainerHooks& hooks, DeviceContext& device)
      : m_cfg(cfg),
        m_hooks(hooks),
        m_world(world),
        m_comm(world),
        m_backend(*device.backend),
        m_state_comm(device.comm() ? *device.comm() : static_cast<Communicator&>(m_comm)),
        m_profiler(m_backend, hooks.profile),
        m_task(make_task<P>(cfg, m_comm, m_comm.size())),
        m_scaler(scaler_config(cfg.precision)),
        m_watchdog(cfg.parallel.collective_timeout_s, m_comm.rank()),
        m_guard(cfg.train.time_limit_minutes) {
    m_comm.set_watchdog(&m_watchdog);
    m_plan = m_task->plan();
    // The predicted process peak (its measured terms: train/process_memory.hpp)
    // against train.memory_limit_mb, before anything large is allocated.
    measure_process_before_model(m_plan, m_comm, cfg.checkpoint.dir);
    check_memory_limit(m_plan, cfg);

    m_layout = std::make_unique<ParamLayout>(m_task->make_layout());
    m_layout->finalize(m_comm.size());
    if (m_backend.memory() == nullptr) {  // host collectives (a device's go through NCCL: not probed)
      measure_collective_scratch(m_plan, cfg, *m_layout, dtype_of<P>(), m_comm);
      check_memory_limit(m_plan, cfg);
    }
    m_zero = std::make_unique<ZeroEngine<P>>(
        *m_layout,
        typename ZeroEngine<P>::Options{cfg.parallel.zero_stage, cfg.parallel.overlap,
                                        cfg.parallel.bucket_mb},
        m_state_comm, m_memory, &m_backend);
    const auto [plo, phi] = m_zero->stored_param_range();
    if (m_backend.memory() == nullptr) {
      m_task->init_params(*m_layout, m_zero->stored_params(), plo, phi);
    } else {  // initialised on the host (the same values), then copied to the device
      std::vector<P> init(static_cast<std::size_t>(phi - plo));
      m_task->init_params(*m_layout, init.data(), plo, phi);
      m_backend.copy_from_host(m_zero->stored_params(), init.data(), init.size() * sizeof(P));
    }
    m_task->build(*m_layout, m_memory, m_backend, *m_zero);
    const auto [olo, ohi] = m_zero->optimizer_range();
    constexpr bool kMaster = !std::is_same_v<P, float>;
    m_optim = std::make_unique<AdamW>(cfg.optim, *m_layout, olo, ohi, m_memory, kMaster, m_backend.memory());
    // The optimizer's range lies inside the stored parameters at every stage.
    if (kMaster) m_optim->init_master(m_backend.vector_ops<P>(), m_zero->stored_params() + (olo - plo));


    m_ckpt = std::make_unique<CheckpointManager>(cfg.checkpoint, cfg.source_name, world);
    m_ckpt->set_pause_step(hooks.pause_checkpoint_step);
    m_ckpt->prepare();
    resume();
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
  // This rank's shard [lo, hi) of the padded layout (what it writes to and reads
  // from a checkpoint) and where element lo of each state vector lives here
  // (backend memory: device pointers on a CUDA backend; see to_host / from_host).
  struct ShardViews {
    std::int64_t lo = 0, hi = 0;
    float* master = nullptr;      // fp32 weights: the optimizer's master copy, or the parameters (fp32)
    float* exp_avg = nullptr;
    float* exp_avg_sq = nullptr;
    P* params = nullptr;          // the model's copy (== master for fp32)
  };
  ShardViews shard_views();
  // Host access to n elements of backend memory at p: p itself on the host
  // backend, else a copy in `stage` (to_host) or a buffer copied back by from_host.
  template <class T>
  T* to_host(T* p, std::size_t n, std::vector<unsigned char>& stage);
  template <class T>
  void from_host(T* p, const T* host, std::size_t n);
  // Resumes from checkpoint.resume (train/checkpointing.hpp): the first
  // candidate that loads wins; with "auto" a damaged file is reported and the
  // previous one tried. Collective; every rank throws the same InputError.
  void resume();
  void check_compatible(const CheckpointReader& reader) const;
  void load_state(CheckpointReader& reader);
  // Writes and commits the checkpoint of step `done` (1-based). Collective.
  void save_checkpoint(std::int64_t done);
  // At a step boundary, one small all-reduce agrees on what the ranks and
  // rank 0's clock know: whether any rank received a stop signal, or the
  // wall-time guard says the next step and a checkpoint would not fit (`stop`:
  // 0, or a reason for describe_stop), and whether checkpoint.every_minutes
  // have passed. The same on every rank.
  struct Boundary {
    std::int64_t stop = 0;
    bool checkpoint_time = false;
  };
  Boundary agree_at_boundary(double step_s);
  std::string describe_stop(std::int64_t reason) const;
  // The outcome of one optimizer step.
  struct StepResult {
    double loss = 0.0;        // mean training loss over the global batch
    double grad_norm = 0.0;   // global L2 norm of the (unscaled) gradient, before clipping
    double loss_scale = 1.0;  // the scale this step's backward used
    bool skipped = false;     // inf/NaN gradient: no update (fp16)
  };
  StepResult train_step(std::int64_t step, double lr);
  // Handles an inf/NaN gradient or loss found at `step` (0-based): the scaler's
  // decision, one log line, and the abort or failure when training cannot go on.
  void handle_overflow(std::int64_t step);
  std::string tensor_of(std::int64_t flat_index) const;
  // CRC-32 of the fp32 weights (the master weights of a 16-bit model) of the
  // whole vector up to its last tensor, in layout order: every rank hashes the range its
  // optimizer owns and rank 0 chains the pieces, so the value does not depend
  // on the rank count or ZeRO stage. At stage 0 every rank owns the whole
  // vector: every rank hashes its replica, and when they differ every rank
  // throws the same AgreedError naming the ranks (`step`, 1-based, is for the
  // message). Collective; the result is rank 0's.
  std::uint32_t weights_crc(std::int64_t step);
  // Backend pointer to element optimizer_range().first of the fp32 weights
  // that weights_crc hashes (the master copy of a 16-bit model).
  float* fp32_weights();
  // --perturb-weights: moves this rank's first fp32 weight by one ulp.
  void perturb_weight(std::int64_t step);
  void report_memory(RunDirectory* dir);  // collective; dir is rank 0's
  void report_profile(RunDirectory* dir);  // collective (--profile); dir is rank 0's
  // Every rank's payload, modelled wire bytes and ZeRO's theory per step of
  // this job (`job`: this rank's tally over the job's `steps` training steps),
  // and the whole tally of the communicators since they were created.
  // Collective; rank 0 prints.
  void report_communication(const CommTally& job, std::int64_t steps);
  bool is_root() const { return m_comm.rank() == 0; }
  // This rank's collectives through both communicators (communicator.hpp).
  CommTally comm_tally() const {
    CommTally t = m_comm.tally();
    if (&m_state_comm != &m_comm) t += m_state_comm.tally();
    return t;
  }
  const RunConfig& m_cfg;
  TrainerHooks m_hooks;
  MPI_Comm m_world;
  MpiCommunicator m_comm;         // host values: losses, flags, CRC pieces, memory report
  Backend& m_backend;             // where model state and kernels live
  Communicator& m_state_comm;     // moves backend memory (m_comm on the host, NCCL on a device)
  ProfilerBinding m_profiler;     // --profile (before everything that makes ops)
  MemoryTracker m_memory;
  std::unique_ptr<Task<P>> m_task;  // the model and its data
  MemoryPlan m_plan;
  std::unique_ptr<ParamLayout> m_layout;
  std::unique_ptr<ZeroEngine<P>> m_zero;
  std::unique_ptr<AdamW> m_optim;
  LossScaler m_scaler;
  CollectiveWatchdog m_watchdog;
  WallTimeGuard m_guard;
  std::int64_t m_updates = 0;  // optimizer updates applied (skipped steps excluded)
  std::int64_t m_start_step = 0;  // steps done before this job (the resumed checkpoint's)
  std::int64_t m_samples = 0;     // data cursor: global index of the next training sample
  std::unique_ptr<CheckpointManager> m_ckpt;
  std::string m_resume_note;      // rank 0's "resumed from ..." line
};

template <class P>
typename Run<P>::StepResult Run<P>::train_step(std::int64_t step, double lr) {
  const std::int64_t global_batch = m_cfg.train.batch_size, t = m_task->targets_per_sample();
  const auto [lo, hi] = rank_slice(global_batch, m_comm.rank(), m_comm.size());
  StepResult r;
  r.loss_scale = m_scaler.scale();
  // The backward seed carries the loss scale (1 unless fp16).
  const P dloss(static_cast<float>(r.loss_scale / static_cast<double>(global_batch * t)));
  if (m_hooks.overflow_step == step + 1 && m_hooks.overflow_rank == m_comm.rank())
    m_zero->plant_overflow();
  if (m_hooks.signal_step == step + 1 && m_hooks.signal_rank == m_comm.rank()) raise_stop_flag(SIGUSR1);
  if (m_hooks.throw_step == step + 1 && m_hooks.throw_rank == m_comm.rank())
    SHARDTRAIN_FAIL(fmt::format("test hook --throw-at-step: rank {} fails in step {}", m_comm.rank(), step + 1));

  m_zero->begin_step();
  double loss_sum = 0.0;
  // Every rank runs the same number of micro-batches (sharded stages reduce per
  // micro-batch); a rank whose slice is used up runs empty ones.
  for (std::int64_t m = 0; m < micro_batches(global_batch, m_comm.size(), m_task->max_batch()); ++m)
    loss_sum += m_task->train_micro_batch(m_samples, lo, hi, m, dloss);

  // The summed gradient of the whole global batch: all-reduced (stage 0) or
  // reduce-scattered into each rank's shard (stages 1-3). Its squared norm is
  // one scalar all-reduce of per-shard sums, so an inf/NaN in any rank's shard
  // makes it non-finite on every rank: that is the found-inf reduction.
  if (m_hooks.stall_step == step + 1 && m_hooks.stall_rank == m_comm.rank()) {
    std::fprintf(stderr, "test hook: rank %d stalls before the gradient reduction of step %lld\n", m_comm.rank(),
                 static_cast<long long>(step + 1));
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::minutes(10));
  }
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
  if (m_hooks.perturb_step == step + 1 && m_hooks.perturb_rank == m_comm.rank()) perturb_weight(step);
  return r;
}

template <class P>
typename Run<P>::ShardViews Run<P>::shard_views() {
  ShardViews s;
  std::tie(s.lo, s.hi) = m_layout->shard_range(m_comm.rank());
  const auto [olo, ohi] = m_zero->optimizer_range();
  const auto [plo, phi] = m_zero->stored_param_range();
  SHARDTRAIN_CHECK(olo <= s.lo && s.hi <= ohi && plo <= s.lo && s.hi <= phi,
                   "the rank's shard is not inside the optimizer's and the stored parameters' ranges");
  s.exp_avg = m_optim->exp_avg().data() + (s.lo - olo);
  s.exp_avg_sq = m_optim->exp_avg_sq().data() + (s.lo - olo);
  s.params = m_zero->stored_params() + (s.lo - plo);
  if constexpr (std::is_same_v<P, float>) s.master = s.params;
  else s.master = m_optim->master().data() + (s.lo - olo);
  return s;
}

template <class P>
template <class T>
T* Run<P>::to_host(T* p, std::size_t n, std::vector<unsigned char>& stage) {
  if (m_backend.memory() == nullptr) return p;
  stage.resize(n * sizeof(T));
  m_backend.copy_to_host(stage.data(), p, n * sizeof(T));
  return reinterpret_cast<T*>(stage.data());
}

template <class P>
template <class T>
void Run<P>::from_host(T* p, const T* host, std::size_t n) {
  if (m_backend.memory() != nullptr) m_backend.copy_from_host(p, host, n * sizeof(T));
}

template <class P>
void Run<P>::check_compatible(const CheckpointReader& reader) const {
  const auto& file = reader.layout();
  const auto& mine = m_layout->entries();
  const std::string hint =
      "; to resume, the model (model.type and its model.* sizes, and the data set's vocabulary or classes) "
      "must match the checkpoint's; batch size, rank count, ZeRO stage, precision and the learning-rate "
      "schedule may change";
  auto fail = [&](const std::string& what) {
    throw IncompatibleCheckpoint(fmt::format("{}: the checkpoint's model does not match {}: {}{}", reader.path(),
                                             m_cfg.source_name, what, hint));
  };
  if (reader.meta().alignment != m_layout->alignment())
    fail(fmt::format("layout alignment {} there, {} here", reader.meta().alignment, m_layout->alignment()));
  const std::size_t n = std::min(file.size(), mine.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (file[i].name != mine[i].name)
      fail(fmt::format("tensor {} is '{}' there, '{}' here", i, file[i].name, mine[i].name));
    if (file[i].shape != mine[i].shape)
      fail(fmt::format("tensor '{}' has shape {} there, {} here", mine[i].name, shape_text(file[i].shape),
                       shape_text(mine[i].shape)));
    if (file[i].offset != mine[i].offset)
      fail(fmt::format("tensor '{}' is at offset {} there, {} here", mine[i].name, file[i].offset, mine[i].offset));
  }
  if (file.size() != mine.size())
    fail(fmt::format("{} tensors there, {} here (first unmatched: '{}')", file.size(), mine.size(),
                     file.size() > n ? file[n].name : mine[n].name));
  // Loaded whole vectors must cover the layout: reading past a short vector would give zeros.
  if (reader.meta().padded_size < mine.back().offset + mine.back().numel)
    fail("its state vectors are shorter than the layout");
}

template <class P>
void Run<P>::load_state(CheckpointReader& reader) {
  const ShardViews s = shard_views();
  const std::size_t n = static_cast<std::size_t>(s.hi - s.lo);
  // On a device the file is read into host buffers, checked, then copied over.
  std::vector<unsigned char> st_master, st_m, st_v, st_p;
  float* master = to_host(s.master, n, st_master);
  float* exp_avg = to_host(s.exp_avg, n, st_m);
  float* exp_avg_sq = to_host(s.exp_avg_sq, n, st_v);
  P* params = std::is_same_v<P, float> ? reinterpret_cast<P*>(master) : to_host(s.params, n, st_p);
  reader.read_vector("master", s.lo, s.hi, master);
  reader.read_vector("exp_avg", s.lo, s.hi, exp_avg);
  reader.read_vector("exp_avg_sq", s.lo, s.hi, exp_avg_sq);
  if constexpr (!std::is_same_v<P, float>) {
    // The 16-bit copy as saved; from another precision, the master rounded
    // (which is what the saved copy is, bit for bit).
    const char* name = std::is_same_v<P, f16> ? "params_fp16" : "params_bf16";
    if (reader.has_vector(name)) reader.read_vector(name, s.lo, s.hi, params);
    else convert(master, params, n);
  }
  reader.finish_reads();  // every CRC, before anything is spread further
  from_host(s.master, master, n);
  from_host(s.exp_avg, exp_avg, n);
  from_host(s.exp_avg_sq, exp_avg_sq, n);
  if constexpr (!std::is_same_v<P, float>) from_host(s.params, params, n);
  // Replicate what this stage keeps whole on every rank: the parameters at
  // stages 0-2, the optimizer state (and master weights) at stage 0.
  const int stage = m_cfg.parallel.zero_stage;
  auto gather = [&](auto* shard_start, DType type) {
    // In place: element lo of a whole vector, in backend memory.
    m_state_comm.all_gather(shard_start, shard_start - s.lo, n, type);
  };
  if (stage <= 2) gather(s.params, dtype_of<P>());
  if (stage == 0) {
    gather(s.exp_avg, DType::F32);
    gather(s.exp_avg_sq, DType::F32);
    if constexpr (!std::is_same_v<P, float>) gather(s.master, DType::F32);
  }
}

template <class P>
void Run<P>::resume() {
  const std::vector<std::string> candidates = m_ckpt->resume_candidates();
  std::vector<std::string> damaged;
  for (const std::string& path : candidates) {
    try {
      CheckpointReader reader(path, m_world);
      check_compatible(reader);
      load_state(reader);
      const CheckpointMeta& meta = reader.meta();
      m_start_step = meta.step;
      m_samples = meta.samples_seen;
      m_updates = meta.optimizer_updates;
      if (m_scaler.enabled() && meta.precision == "fp16") {
        // Clamped to this run's precision.* keys, which may have changed.
        const auto& c = m_scaler.config();
        LossScalerState st{std::clamp(meta.loss_scale, c.min_scale, 3.4028234663852886e38),
                           std::min<std::int64_t>(meta.scaler_good_steps, c.growth_interval - 1),
                           static_cast<int>(std::min<std::int64_t>(meta.scaler_hysteresis_left, c.hysteresis)),
                           meta.scaler_consecutive_skips};
        m_scaler.load_state(st);
      }
      if (is_root()) {
        auto ranks = [](std::int64_t n) { return fmt::format("{} rank{}", n, n == 1 ? "" : "s"); };
        m_resume_note = fmt::format("resumed from {}: step {}, {} samples ({} tokens) seen; written by {} "
                   "at ZeRO stage {} in {}, now {} at stage {} in {}{}",
                   path, meta.step, meta.samples_seen, meta.tokens_seen, ranks(meta.world_size), meta.zero_stage,
                   meta.precision, ranks(m_comm.size()), m_cfg.parallel.zero_stage, m_cfg.precision.mode,
                   m_scaler.enabled() ? fmt::format("; loss scale {:g}", m_scaler.scale()) : std::string());
        if (meta.sampler_seed != m_cfg.train.seed)
          fmt::print(stderr, "warning: {}: train.seed was {} there and is {} here: the data order continues "
                     "with the new seed's\n", path, meta.sampler_seed, m_cfg.train.seed);
        const DataIdentity data = m_task->data_identity();
        if (meta.data_train_tokens != data.train_size || meta.data_path != m_cfg.data.path)
          fmt::print(stderr, "warning: {}: trained on {} ({} training {}); this run reads {} ({} {}): "
                     "the sample order is not a continuation of the checkpoint's\n", path, meta.data_path,
                     meta.data_train_tokens, data.unit, m_cfg.data.path, data.train_size, data.unit);
        std::fflush(stderr);
      }
      return;
    } catch (const IncompatibleCheckpoint&) {
      throw;
    } catch (const InputError& e) {
      if (!m_ckpt->resume_auto()) throw;
      // Every rank saw the same bytes and the same error; try the previous one.
      if (is_root()) {
        fmt::print(stderr, "warning: {}; falling back to the previous complete checkpoint\n", e.what());
        std::fflush(stderr);
      }
      damaged.push_back(path);
    }
  }
  if (!damaged.empty())
    throw InputError(fmt::format(
        "{}: checkpoint.resume = \"auto\": none of the {} checkpoint(s) in '{}' can be loaded (each is damaged, "
        "see the warnings above); nothing was overwritten. Set checkpoint.resume to a good file, or use "
        "resume = \"never\" with another checkpoint.dir to start afresh",
        m_cfg.source_name, damaged.size(), m_ckpt->dir()));
}

template <class P>
void Run<P>::save_checkpoint(std::int64_t done) {
  const ShardViews s = shard_views();
  CheckpointMeta meta;
  meta.step = done;
  meta.samples_seen = m_samples;
  const DataIdentity data = m_task->data_identity();
  meta.tokens_seen = m_samples * data.seq_len;
  meta.optimizer_updates = m_updates;
  meta.sampler_seed = m_cfg.train.seed;
  meta.world_size = m_comm.size();
  meta.zero_stage = m_cfg.parallel.zero_stage;
  meta.precision = m_cfg.precision.mode;
  meta.alignment = m_layout->alignment();
  meta.padded_size = m_layout->padded_size();
  const LossScalerState st = m_scaler.state();
  meta.loss_scale = st.scale;
  meta.scaler_good_steps = st.good_steps;
  meta.scaler_hysteresis_left = st.hysteresis_left;
  meta.scaler_consecutive_skips = st.consecutive_skips;
  meta.data_path = m_cfg.data.path;
  meta.data_train_tokens = data.train_size;  // tokens (gpt) or samples (classifiers)
  meta.data_vocab_size = data.vocab_size;
  meta.seq_len = data.seq_len;
  meta.config_text = to_toml(m_cfg);
  meta.created_utc = utc_now();
  meta.version = kVersion;
  std::vector<CheckpointTensor> layout;
  for (const auto& e : m_layout->entries()) layout.push_back({e.name, e.shape, e.offset, e.numel});
  const std::size_t n = static_cast<std::size_t>(s.hi - s.lo);
  std::vector<unsigned char> st_master, st_m, st_v, st_p;  // host copies of device state
  std::vector<CheckpointVectorOut> vectors{{"master", CkptType::F32, to_host(s.master, n, st_master)},
                                           {"exp_avg", CkptType::F32, to_host(s.exp_avg, n, st_m)},
                                           {"exp_avg_sq", CkptType::F32, to_host(s.exp_avg_sq, n, st_v)}};
  if constexpr (std::is_same_v<P, f16>) vectors.push_back({"params_fp16", CkptType::F16, to_host(s.params, n, st_p)});
  if constexpr (std::is_same_v<P, bf16>) vectors.push_back({"params_bf16", CkptType::BF16, to_host(s.params, n, st_p)});
  const std::string path = m_ckpt->commit(done, [&](const std::string& partial, const std::function<void()>& pause) {
    return write_checkpoint(partial, m_world, meta, layout, vectors, s.lo, s.hi, pause);
  });
  if (is_root()) {
    const auto& w = m_ckpt->last_stats();
    const double mb = static_cast<double>(w.bytes) / 1e6, secs = w.write_s + w.sync_s;
    fmt::print("checkpoint step {}: {} | {:.2f} MB in {:.3f} s = {:.1f} MB/s (write {:.3f} s, fsync {:.3f} s; "
               "commit {:.3f} s)\n",
               done, path, mb, secs, secs > 0 ? mb / secs : 0.0, w.write_s, w.sync_s, m_ckpt->last_commit_seconds());
    std::fflush(stdout);
  }
}

// Reason codes: (what << 20) | (2^20 - 1 - rank), so that the maximum over
// ranks names the wall-time guard before a signal, and the lowest rank.
constexpr std::int64_t kStopWallTime = 1000;

template <class P>
typename Run<P>::Boundary Run<P>::agree_at_boundary(double step_s) {
  std::int64_t what = pending_stop_signal();
  if (is_root() && what == 0) {
    // Before the first checkpoint: its cost estimated at 100 MB/s plus half a second.
    const double bytes = static_cast<double>(m_layout->padded_size()) * (12.0 + (std::is_same_v<P, float> ? 0 : 2));
    const double ckpt_s = m_ckpt->last_commit_seconds() > 0 ? m_ckpt->last_commit_seconds() : bytes / 100e6 + 0.5;
    if (m_guard.must_stop(step_s, ckpt_s)) what = kStopWallTime;
  }
  std::int64_t flags[2] = {what == 0 ? 0 : (what << 20) | ((std::int64_t{1} << 20) - 1 - m_comm.rank()),
                           is_root() && m_ckpt->minutes_elapsed() ? 1 : 0};
  m_comm.all_reduce(std::span<std::int64_t>(flags), ReduceOp::Max);
  return {flags[0], flags[1] != 0};
}

template <class P>
std::string Run<P>::describe_stop(std::int64_t reason) const {
  const std::int64_t what = reason >> 20, rank = (std::int64_t{1} << 20) - 1 - (reason & ((1 << 20) - 1));
  if (what == kStopWallTime)
    return fmt::format("the wall-time guard (train.time_limit / SLURM_JOB_END_TIME: {:.0f} s left, less than two "
                       "steps and two checkpoints need)", m_guard.seconds_left());
  return fmt::format("{} received by rank {}", stop_signal_name(static_cast<int>(what)), rank);
}

template <class P>
float* Run<P>::fp32_weights() {
  const auto [olo, ohi] = m_zero->optimizer_range();
  const auto [plo, phi] = m_zero->stored_param_range();
  return m_optim->has_master() ? m_optim->master().data()
                               : reinterpret_cast<float*>(m_zero->stored_params() + (olo - plo));
}

template <class P>
void Run<P>::perturb_weight(std::int64_t step) {
  std::vector<unsigned char> stage;
  float* w = fp32_weights();
  float* host = to_host(w, 1, stage);
  const float before = *host;
  *host = std::nextafter(before, std::numeric_limits<float>::infinity());
  from_host(w, host, 1);
  std::fprintf(stderr, "test hook --perturb-weights: rank %d moves weight %lld from %.9g to %.9g after step %lld\n",
               m_comm.rank(), static_cast<long long>(m_zero->optimizer_range().first), before, *host,
               static_cast<long long>(step + 1));
  std::fflush(stderr);
}

template <class P>
std::uint32_t Run<P>::weights_crc(std::int64_t step) {
  const auto [olo, ohi] = m_zero->optimizer_range();
  std::vector<unsigned char> stage;
  const float* w = to_host(fp32_weights(), static_cast<std::size_t>(ohi - olo), stage);
  // Stage 0: every rank owns the whole vector and hashes its replica; rank 0's
  // is the value, the others' must equal it.
  const bool sharded = m_cfg.parallel.zero_stage > 0;
  std::uint64_t crc = 0, bytes = 0;
  // Up to the end of the last tensor: the final padding depends on the rank count.
  const auto& last = m_layout->entries().back();
  const std::int64_t end = std::min(ohi, last.offset + last.numel);
  if (end > olo) {
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
  const int n = m_comm.size();
  std::vector<std::int64_t> parts(2 * static_cast<std::size_t>(n), 0);
  parts[2 * m_comm.rank()] = static_cast<std::int64_t>(crc);
  parts[2 * m_comm.rank() + 1] = static_cast<std::int64_t>(bytes);
  m_comm.all_reduce(std::span<std::int64_t>(parts), ReduceOp::Sum);
  if (!sharded) {
    // Every rank sees the same parts, so every rank reaches the same verdict.
    // The ranks are grouped by CRC; the message names the smaller groups first
    // and the largest one (on a tie, rank 0's) last, as the replica the others
    // left.
    std::vector<std::vector<int>> groups;  // ranks, by CRC, in order of first appearance
    for (int r = 0; r < n; ++r) {
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const std::vector<int>& ranks) { return parts[2 * ranks[0]] == parts[2 * r]; });
      if (g == groups.end()) groups.push_back({r});
      else g->push_back(r);
    }
    if (groups.size() > 1) {
      std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
        return a.size() != b.size() ? a.size() < b.size() : a[0] > b[0];  // the agreed group last
      });
      auto names = [](const std::vector<int>& ranks) {
        std::string s = ranks.size() == 1 ? "rank " : "ranks ";
        for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
        return s;
      };
      std::string holders;
      for (std::size_t i = 0; i < groups.size(); ++i)
        holders += fmt::format("{}{} {} weights_crc {:08x}", i ? ", " : "", names(groups[i]),
                               groups[i].size() == 1 ? "holds" : "hold",
                               static_cast<std::uint32_t>(parts[2 * groups[i][0]]));
      throw AgreedError(fmt::format(
          "step {}: the ranks' replicas of the weights differ at ZeRO stage 0 (every rank updates the whole "
          "vector from the same all-reduced gradient, so they must stay bitwise equal): {}",
          step, holders));
    }
    return static_cast<std::uint32_t>(parts[0]);
  }
  uLong total = static_cast<uLong>(parts[0]);
  for (int r = 1; r < n; ++r)
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
void Run<P>::report_memory(RunDirectory* dir) {
  constexpr int kCats = MemoryTracker::kCategories;
  const int n = m_comm.size();
  std::vector<std::int64_t> peaks(static_cast<std::size_t>(n) * (kCats + 1), 0);
  for (int c = 0; c < kCats; ++c)
    peaks[m_comm.rank() * (kCats + 1) + c] = static_cast<std::int64_t>(m_memory.peak(static_cast<MemCategory>(c)));
  peaks[m_comm.rank() * (kCats + 1) + kCats] = static_cast<std::int64_t>(m_memory.peak_total());
  m_comm.all_reduce(std::span<std::int64_t>(peaks), ReduceOp::Sum);
  std::vector<std::int64_t> rss(static_cast<std::size_t>(n), 0);
  rss[m_comm.rank()] = process_peak_rss_bytes();
  m_comm.all_reduce(std::span<std::int64_t>(rss), ReduceOp::Sum);
  // Activations as the model measured using them (the recompute stack's
  // high-water, max over steps and micro-batches), beside the tracked
  // allocation, which is the arena the plan sized; the plan's value last.
  std::vector<std::int64_t> used(static_cast<std::size_t>(n) + 1, 0);
  used[m_comm.rank()] = m_task->activation_high_water_bytes();
  m_comm.all_reduce(std::span<std::int64_t>(used), ReduceOp::Sum);
  if (!is_root()) return;
  constexpr int kActs = static_cast<int>(MemCategory::Activations);
  used[n] = m_plan.bytes[kActs];
  std::vector<std::int64_t> plan(m_plan.bytes.begin(), m_plan.bytes.end());
  plan.push_back(m_plan.total());
  dir->write_memory(peaks, plan, used);
  auto row = [](const std::string& who, const std::int64_t* p, std::int64_t measured) {
    auto mib = [](std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
    fmt::print("  {:>4} {:>10.3f} {:>10.3f} {:>10.3f} {:>11.3f} {:>10.3f} {:>10.3f} {:>8.3f} {:>8.3f} {:>10.3f}\n",
               who, mib(p[0]), mib(p[1]), mib(p[2]), mib(p[3]), mib(measured), mib(p[4]), mib(p[5]), mib(p[6]),
               mib(p[kCats]));
  };
  fmt::print("peak memory per rank (MiB, tracked allocator; activations also as measured: the model's "
             "high-water in its arena; also {}/memory.csv and, for the process, process_memory.csv):\n",
             dir->path());
  fmt::print("  {:>4} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10} {:>8} {:>8} {:>10}\n", "rank", "params",
             "grads", "optimizer", "activations", "(measured)", "workspace", "comm", "data", "total");
  for (int r = 0; r < n; ++r) row(std::to_string(r), &peaks[r * (kCats + 1)], used[r]);
  row("plan", plan.data(), used[n]);
  std::string differ;
  for (int r = 0; r < n; ++r)
    if (used[r] != used[n]) differ += fmt::format(" rank {} {} bytes;", r, used[r]);
  if (differ.empty())
    fmt::print("activations measured: the high-water equals the plan ({} bytes) on every rank\n", used[n]);
  else
    fmt::print("activations measured: the high-water differs from the plan ({} bytes):{}\n", used[n],
               differ.substr(0, differ.size() - 1));
  // The process: VmHWM per rank against the predicted process peak (the
  // measured terms of m_plan.process plus the tracked plan; the same on every
  // rank); also process_memory.csv (bytes).
  auto mib = [](std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  auto per_rank = [n](const std::function<std::string(int)>& cell) {
    std::string t;
    for (int r = 0; r < n; ++r) {
      t += ' ';
      t += cell(r);
    }
    return t;
  };
  const ProcessMemory& pm = m_plan.process;
  auto of_rank = [](const std::vector<std::int64_t>& v, int r) {
    return r < static_cast<int>(v.size()) ? v[static_cast<std::size_t>(r)] : std::int64_t{0};
  };
  // Per rank: its own measured terms plus the tracked plan; the limit uses
  // their maximum over ranks (m_plan.process_peak()).
  auto predicted = [&](int r) {
    return of_rank(pm.before_model, r) + m_plan.total() + pm.scratch_of(r);
  };
  fmt::print("process RSS before the model per rank (MiB):{}\n",
             per_rank([&](int r) { return fmt::format("{:.1f}", mib(of_rank(pm.before_model, r))); }));
  fmt::print("MPI collective scratch per rank (MiB, probed before the model):{}\n",
             pm.collective_scratch.empty()
                 ? std::string(" not probed (device collectives)")
                 : per_rank([&](int r) { return fmt::format("{:.1f}", mib(of_rank(pm.collective_scratch, r))); }));
  fmt::print("checkpoint I/O scratch per rank (MiB, probed before the model):{}\n",
             pm.io_scratch.empty()
                 ? std::string(" not probed")
                 : per_rank([&](int r) { return fmt::format("{:.1f}", mib(of_rank(pm.io_scratch, r))); }));
  fmt::print("predicted process peak per rank (MiB, RSS before the model + {:.1f} tracked plan + the larger scratch; "
             "train.memory_limit_mb is checked against their maximum, {:.1f}):{}\n",
             mib(m_plan.total()), mib(m_plan.process_peak()),
             per_rank([&](int r) { return fmt::format("{:.1f}", mib(predicted(r))); }));
  fmt::print("process peak RSS per rank (MiB, VmHWM: the above plus code, libraries, MPI and untracked heap):{}\n",
             per_rank([&](int r) { return rss[r] < 0 ? std::string("n/a") : fmt::format("{:.1f}", mib(rss[r])); }));
  fmt::print("VmHWM / predicted process peak per rank:{}\n", per_rank([&](int r) {
               return rss[r] < 0 || predicted(r) <= 0
                          ? std::string("n/a")
                          : fmt::format("{:.3f}", static_cast<double>(rss[r]) / static_cast<double>(predicted(r)));
             }));
  std::string csv =
      "rank,rss_before_model,collective_scratch,tracked_plan,predicted_process_peak,vmhwm,io_scratch\n";
  for (int r = 0; r < n; ++r)
    csv += fmt::format("{},{},{},{},{},{},{}\n", r, of_rank(pm.before_model, r), of_rank(pm.collective_scratch, r),
                       m_plan.total(), predicted(r), rss[r], of_rank(pm.io_scratch, r));
  dir->write_file("process_memory.csv", csv);
}

template <class P>
void Run<P>::report_profile(RunDirectory* dir) {
  // Per op: seconds summed over ranks (for the mean) and the largest rank's.
  const Profiler::Totals& t = m_profiler.get()->totals();
  constexpr int kOps = Profiler::kOps;
  std::vector<double> mine(t.seconds.begin(), t.seconds.end());
  mine.push_back(t.step_seconds);
  std::vector<double> sum(mine.size()), max(mine.size());
  MPI_Reduce(mine.data(), sum.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_SUM, 0, m_world);
  MPI_Reduce(mine.data(), max.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_MAX, 0, m_world);
  if (!is_root()) return;
  const double ranks = m_comm.size(), steps = static_cast<double>(t.steps);
  std::string out;
  if (t.steps == 0) {
    out = "profile: no step to report (the job's first step is warm-up and is not timed)\n";
  } else {
    const double step_ms = 1e3 * sum[kOps] / ranks / steps;
    out += fmt::format("profile of {} training steps (--profile; the job's first step and evaluations excluded), "
                       "{} rank(s):\n", t.steps, m_comm.size());
    out += fmt::format("  step time {:.2f} ms (mean over ranks)\n", step_ms);
    out += fmt::format("  {:<16} {:<14} {:>10} {:>12} {:>14} {:>7}\n", "op", "class", "calls/step", "ms/step",
                       "max rank ms", "share");
    std::array<double, static_cast<int>(ProfileClass::Count)> by_class{};
    double timed = 0.0;
    for (int i = 0; i < kOps; ++i) {
      if (t.calls[i] == 0 && sum[i] == 0.0) continue;
      const auto op = static_cast<ProfileOp>(i);
      const double ms = 1e3 * sum[i] / ranks / steps;
      by_class[static_cast<int>(profile_op_class(op))] += ms;
      timed += ms;
      out += fmt::format("  {:<16} {:<14} {:>10.1f} {:>12.2f} {:>14.2f} {:>6.1f}%\n", profile_op_name(op),
                         profile_class_name(profile_op_class(op)), static_cast<double>(t.calls[i]) / steps, ms,
                         1e3 * max[i] / steps, 100.0 * ms / step_ms);
    }
    out += fmt::format("  {:<16} {:<14} {:>10} {:>12.2f} {:>14} {:>6.1f}%\n", "(untimed)", "other", "",
                       step_ms - timed, "", 100.0 * (step_ms - timed) / step_ms);
    out += "  by class:";
    for (int c = 0; c < static_cast<int>(ProfileClass::Count); ++c)
      out += fmt::format(" {} {:.1f}% |", profile_class_name(static_cast<ProfileClass>(c)),
                         100.0 * by_class[c] / step_ms);
    out += fmt::format(" other {:.1f}%\n", 100.0 * (step_ms - timed) / step_ms);
  }
  fmt::print("{}", out);
  if (dir) {
    dir->write_file("profile.txt", out);
    fmt::print("  (also {}/profile.txt)\n", dir->path());
  }
  std::fflush(stdout);
}

namespace {

// "123" when v divides by steps, else "123.45": a mean per step.
std::string per_step(double v, std::int64_t steps) {
  const double m = v / static_cast<double>(steps);
  return m == std::floor(m) ? fmt::format("{:.0f}", m) : fmt::format("{:.2f}", m);
}

// What the ring figure is for each kind's payload p at N ranks: all-reduce
// 2 (N-1)/N p, reduce-scatter (N-1)/N p (p: the whole input), all-gather (N-1) p
// (p: the own block), broadcast p at the root; 0 at one rank.
double ring_bytes(Collective kind, double payload, double n) {
  if (n <= 1) return 0.0;
  switch (kind) {
    case Collective::AllReduce: return 2.0 * (n - 1) / n * payload;
    case Collective::ReduceScatter: return (n - 1) / n * payload;
    case Collective::AllGather: return (n - 1) * payload;
    case Collective::Broadcast: return payload;
    case Collective::Barrier: return 0.0;
  }
  return 0.0;
}

}  // namespace

// Per rank and per step of this job: the payload per kind of collective, the
// ring figure for that payload, the model's wire bytes (the bytes the rank
// sends under the algorithm Open MPI picks: MpiCommunicator, dist/mpi/wire_model.hpp)
// with the algorithm named where they differ from the ring figure, and ZeRO's
// theory k Psi (N-1)/N elements, Psi the padded parameter count: k = 2 for
// stages 0-1 (all-reduce; or reduce-scatter + all-gather), M + 1 for stage 2
// (a reduce-scatter per micro-batch, M micro-batches, + the all-gather) and
// 3 M for stage 3 (parameters gathered for forward and backward, gradients
// reduce-scattered, per micro-batch; groups kept from forward to backward are
// not gathered again, so stage 3 moves less than its theory). Then every
// rank's whole tally since the communicators were created (every collective
// they ran, checks and evaluation included): what Open MPI's pml monitoring
// dump measures for the job, less the raw MPI calls outside the communicator
// (start-up, these reports), which the same job with more steps cancels.
template <class P>
void Run<P>::report_communication(const CommTally& job, std::int64_t steps) {
  constexpr int kFields = 5 * kCollectives + 3;
  const CommTally all_time = comm_tally();
  std::vector<std::uint64_t> mine;
  for (const auto* a : {&job.calls, &job.async, &job.payload, &job.model, &job.unmodelled})
    mine.insert(mine.end(), a->begin(), a->end());
  mine.push_back(all_time.payload_total());
  mine.push_back(all_time.model_total());
  mine.push_back(all_time.unmodelled_total());
  const int n = m_comm.size();
  std::vector<std::uint64_t> all(is_root() ? static_cast<std::size_t>(n) * kFields : 0);
  SHARDTRAIN_MPI_CHECK(MPI_Gather(mine.data(), kFields, MPI_UINT64_T, all.data(), kFields, MPI_UINT64_T, 0, m_world));
  if (!is_root()) return;
  const int stage = m_cfg.parallel.zero_stage;
  const std::int64_t m = micro_batches(m_cfg.train.batch_size, n, m_task->max_batch());
  const std::int64_t k = stage <= 1 ? 2 : stage == 2 ? m + 1 : 3 * m;
  const double psi = static_cast<double>(m_layout->padded_size());
  const double theory = static_cast<double>(k) * psi * (n - 1) / n * sizeof(P);
  const bool modelled = m_comm.wire_modelled();
  // The layout the payload follows (for checks that recompute it): group g
  // spans [first, end) of the flat vector.
  std::string groups;
  for (int g = 0; g < m_layout->num_groups(); ++g) {
    const auto [lo, hi] = m_layout->group_range(g);
    groups += fmt::format(" {}:{}-{}", g, lo, hi);
  }
  std::string out = fmt::format(
      "communication layout: {} ranks, stage {}, {} bytes per element, bucket_mb {}, {} micro-batch(es) per step, "
      "padded {}, groups{}\n",
      n, stage, sizeof(P), m_cfg.parallel.bucket_mb, m, m_layout->padded_size(), groups);
  out += fmt::format(
      "communication per step per rank ({} steps, {} micro-batch(es) each; payload: bytes handed to MPI; ring: what "
      "ring algorithms send for that payload; model: bytes the rank sends under the algorithm MPI picks; ZeRO "
      "theory {}*Psi*(N-1)/N, Psi = {} padded):\n",
      steps, m, k, m_layout->padded_size());
  std::array<bool, kCollectives> differs{};
  for (int r = 0; r < n; ++r) {
    const std::uint64_t* v = all.data() + static_cast<std::size_t>(r) * kFields;
    const auto calls = [&](int c) { return v[c]; };
    const auto payload = [&](int c) { return v[2 * kCollectives + c]; };
    const auto model = [&](int c) { return v[3 * kCollectives + c]; };
    const auto unpriced = [&](int c) { return v[4 * kCollectives + c]; };
    std::string kinds, models;
    double payload_sum = 0, ring_sum = 0, model_sum = 0;
    std::uint64_t unpriced_sum = 0;
    for (int c = 0; c < kCollectives; ++c) {
      if (calls(c) == 0) continue;
      const auto kind = static_cast<Collective>(c);
      const double ring = ring_bytes(kind, static_cast<double>(payload(c)), n);
      payload_sum += static_cast<double>(payload(c));
      ring_sum += ring;
      model_sum += static_cast<double>(model(c));
      unpriced_sum += unpriced(c);
      kinds += fmt::format("{}{} {}x {} B", kinds.empty() ? "" : ", ", collective_name(kind),
                           per_step(static_cast<double>(calls(c)), steps), per_step(static_cast<double>(payload(c)), steps));
      models += fmt::format("{}{} {} B", models.empty() ? "" : ", ", collective_name(kind),
                            per_step(static_cast<double>(model(c)), steps));
      if (modelled && static_cast<double>(model(c)) != ring) differs[c] = true;
    }
    out += fmt::format("  rank {}: payload {} B/step [{}] | ring {} B/step", r, per_step(payload_sum, steps), kinds,
                       per_step(ring_sum, steps));
    if (modelled) {
      out += fmt::format(" | model {} B/step [{}]", per_step(model_sum, steps), models);
      if (unpriced_sum > 0) out += fmt::format(" ({} calls not modelled)", unpriced_sum);
    }
    out += fmt::format(" | ZeRO theory {} B/step\n", per_step(theory * static_cast<double>(steps), steps));
  }
  for (int c = 0; c < kCollectives; ++c)
    if (differs[c])
      out += fmt::format("  model != ring for {}: {}\n", collective_name(static_cast<Collective>(c)),
                         m_comm.wire_algorithms(static_cast<Collective>(c)));
  out += fmt::format("communication since start per rank (every collective of the communicator{}):\n",
                     &m_state_comm != &m_comm ? "s" : "");
  for (int r = 0; r < n; ++r) {
    const std::uint64_t* v = all.data() + static_cast<std::size_t>(r) * kFields + 5 * kCollectives;
    out += fmt::format("  rank {}: total payload {} B | total model {} B | not modelled {} calls\n", r, v[0], v[1], v[2]);
  }
  out += fmt::format("  {}{}\n", m_comm.wire_model_status(),
                     &m_state_comm != &m_comm ? "; the NCCL traffic of the model state is not modelled" : "");
  fmt::print("{}", out);
  std::fflush(stdout);
}

template <class P>
TrainResult Run<P>::run() {
  const auto& tc = m_cfg.train;
  // This job runs steps [first, end): from the resumed checkpoint (or 0) to
  // train.steps, or to --stop-after-step.
  const std::int64_t first = std::min(m_start_step, tc.steps);
  std::int64_t end = tc.steps;
  if (m_hooks.stop_after_step > 0) end = std::clamp(m_hooks.stop_after_step, first, tc.steps);
  std::optional<RunDirectory> dir;
  if (is_root()) {
    dir.emplace(m_cfg, m_start_step);
    const TaskText text = m_task->describe();
    fmt::print("shardtrain: {} ranks, ZeRO stage {}, {} | {} | {} parameters | {} | {}\n", m_comm.size(),
               m_cfg.parallel.zero_stage, m_cfg.precision.mode, text.model, m_layout->num_parameters(), text.batch,
               text.data);
    fmt::print("{}", format_plan(m_plan));
    fmt::print("compute: {}\n", m_backend.describe());
    fmt::print("run directory: {}\n", dir->path());
    if (!m_resume_note.empty()) fmt::print("{}\n", m_resume_note);
    if (m_ckpt->enabled())
      fmt::print("checkpoints: {} every {}{}{}, keeping the last {}\n", m_ckpt->dir(),
                 m_cfg.checkpoint.every_steps > 0
                     ? fmt::format("{} steps", m_cfg.checkpoint.every_steps) : std::string(),
                 m_cfg.checkpoint.every_steps > 0 && m_cfg.checkpoint.every_minutes > 0 ? " and every " : "",
                 m_cfg.checkpoint.every_minutes > 0 ? fmt::format("{:g} minutes", m_cfg.checkpoint.every_minutes)
                                                    : std::string(),
                 m_cfg.checkpoint.keep_last);
    if (first >= tc.steps)
      fmt::print("nothing to train: the checkpoint is at step {} and train.steps = {}; evaluating only\n",
                 m_start_step, tc.steps);
    std::fflush(stdout);
  }

  TrainResult result;
  result.first_step = first;
  CommTally comm_job;            // this rank's collectives in training steps (not evaluation)
  Progress progress(tc.steps, tc.batch_size, m_task->tokens_per_sample(), first);
  const auto t0 = Clock::now();
  double longest_step = 0.0;  // seconds, for the wall-time guard
  std::int64_t stop = 0;      // agreed stop reason (agree_at_boundary), 0 while running
  std::optional<EvalResult> final_eval;  // the pass after the last step
  for (std::int64_t step = first; step < end; ++step) {
    const auto step_t0 = Clock::now();
    m_watchdog.set_step(step + 1);
    const double lr = learning_rate(m_cfg.optim, step, tc.steps);
    const CommTally tally_before = comm_tally();
    // --profile times every step of the job but its first (warm-up: first touches, BLAS buffers).
    Profiler* const prof = step > first ? m_profiler.get() : nullptr;
    if (prof) prof->begin_step();
    const StepResult sr = train_step(step, lr);
    ++result.steps_run;
    if (prof) prof->end_step();
    m_samples += tc.batch_size;  // the data cursor moves on skipped steps too
    const CommTally step_tally = comm_tally() - tally_before;
    comm_job += step_tally;
    const std::uint64_t step_bytes = step_tally.payload_total();  // metrics.csv comm_bytes
    const double loss = sr.loss;
    if (sr.skipped) ++result.skipped_steps;
    else result.final_train_loss = loss;
    const std::int64_t done = step + 1;
    progress.step_done(seconds_since(t0));

    std::optional<EvalResult> eval;
    const bool last = done == tc.steps;
    if (last || (tc.eval_every > 0 && done % tc.eval_every == 0))
      eval = m_task->evaluate(last ? 0 : tc.eval_windows);  // the final pass covers the whole split
    const std::optional<double> val = eval ? std::optional<double>(eval->loss) : std::nullopt;
    const bool log_row = done % tc.log_every == 0 || last || val || sr.skipped;
    const std::uint32_t crc = log_row ? weights_crc(done) : 0;  // collective
    if (is_root() && log_row) {
      MetricsRow row{done, loss, val, lr, sr.grad_norm, progress.tokens_per_second(), seconds_since(t0),
                     step_bytes, sr.loss_scale, sr.skipped, crc, progress.samples_per_second(),
                     eval ? eval->accuracy : std::nullopt};
      dir->append(row);
      progress.print(row);
    }
    if (eval) {
      result.final_val_loss = eval->loss;
      result.final_val_accuracy = eval->accuracy;
      if (last) final_eval = std::move(eval);
    }
    longest_step = std::max(longest_step, seconds_since(step_t0));
    const bool job_end = done == end;
    const Boundary at = job_end ? Boundary{} : agree_at_boundary(longest_step);
    stop = at.stop;
    if (m_ckpt->due(done, job_end, at.checkpoint_time) || stop) save_checkpoint(done);
    if (stop) {
      end = done;
      break;
    }
  }
  if (first >= tc.steps) {
    final_eval = m_task->evaluate(0);
    result.final_val_loss = final_eval->loss;
    result.final_val_accuracy = final_eval->accuracy;
  }
  result.last_step = std::max(first, end);
  result.seconds = seconds_since(t0);
  report_memory(dir ? &*dir : nullptr);
  if (m_profiler.get()) report_profile(dir ? &*dir : nullptr);
  if (end > first) report_communication(comm_job, end - first);
  result.requeue = stop != 0;
  if (is_root()) {
    if (stop)
      fmt::print("stopping after step {} of {}: {}; the checkpoint of step {} is complete; exit code {} asks "
                 "the job script to requeue the job, and the run continues from this checkpoint with "
                 "checkpoint.resume = \"auto\"\n",
                 end, tc.steps, describe_stop(stop), end, kExitRequeue);
    else if (end < tc.steps)
      fmt::print("stopped after step {} of {} (--stop-after-step) in {:.1f} s | last train loss {:.4f}{}\n", end,
                 tc.steps, result.seconds, result.final_train_loss,
                 m_ckpt->enabled() ? " | the run continues from its checkpoint with checkpoint.resume = \"auto\""
                                   : " | checkpointing is off: this progress is not saved");
    else
      fmt::print("done: {} steps{} in {:.1f} s | final train loss {:.4f} | final val loss {:.4f}{} "
                 "(whole validation split)\n",
                 tc.steps, first > 0 ? fmt::format(" ({} in this job, from step {})", result.steps_run, first + 1) : "",
                 result.seconds, result.final_train_loss, result.final_val_loss,
                 result.final_val_accuracy
                     ? fmt::format(" | val accuracy {:.4f} (error {:.2f}%)", *result.final_val_accuracy,
                                   100.0 * (1.0 - *result.final_val_accuracy))
                     : std::string());
    if (final_eval && final_eval->confusion) {
      const std::string table = final_eval->confusion->format(m_task->class_names());
      fmt::print("confusion matrix of the validation split ({} samples; rows: true class, columns: predicted; "
                 "also {}/confusion.txt):\n{}",
                 final_eval->samples, dir->path(), table);
      dir->write_file("confusion.txt", table);
    }
    fmt::print("metrics: {}\n", dir->metrics_path());
    std::fflush(stdout);
  }
  return result;
}

}  // namespace

Trainer::Trainer(const RunConfig& config, MPI_Comm world, const TrainerHooks& hooks)
    : m_device(std::make_unique<DeviceContext>()) {
  std::string device = config.train.device;
#ifdef SHARDTRAIN_WITH_CUDA
  if (device == "auto") device = "cuda";
#else
  if (device == "auto") device = "cpu";
  if (device == "cuda")
    throw InputError(fmt::format("{}: train.device = \"cuda\", but this trainer was built without CUDA; rebuild "
                                 "with -DSHARDTRAIN_ENABLE_CUDA=ON (share/doc/gpu.md) or use train.device = \"cpu\"",
                                 config.source_name));
#endif
#ifdef SHARDTRAIN_WITH_CUDA
  if (device == "cuda") {
    // First, before anything is allocated: the device check (agreed by all ranks).
    try {
      m_device->nccl = std::make_unique<NcclCommunicator>(world);
    } catch (const Error& e) {
      throw Error(fmt::format("{}; train.device = \"{}\" trains on one CUDA device per rank: run on GPU nodes, "
                              "or set train.device = \"cpu\" (--set train.device=cpu) to train on the host",
                              e.what(), config.train.device));
    }
    // Stream and cuBLAS handle: may fail on one rank only, so the ranks agree
    // before any of them goes on to the collectives of the run's set-up.
    std::string failure;
    try {
      m_device->cuda = std::make_unique<CudaBackend>(*m_device->nccl);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    int rank = 0, first_failing = 0, size = 0;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    first_failing = failure.empty() ? size : rank;
    MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, world);
    if (first_failing < size) {  // every rank throws the failing rank's message
      int length = static_cast<int>(failure.size());
      MPI_Bcast(&length, 1, MPI_INT, first_failing, world);
      failure.resize(static_cast<std::size_t>(length));
      MPI_Bcast(failure.data(), length, MPI_CHAR, first_failing, world);
      throw Error(failure);
    }
    m_device->backend = m_device->cuda.get();
  }
#endif
  const std::string& mode = config.precision.mode;
  if (mode == "fp16") m_run = std::make_unique<Run<f16>>(config, world, hooks, *m_device);
  else if (mode == "bf16") m_run = std::make_unique<Run<bf16>>(config, world, hooks, *m_device);
  else m_run = std::make_unique<Run<float>>(config, world, hooks, *m_device);
}
Trainer::~Trainer() = default;
TrainResult Trainer::run() { return m_run->run(); }

}  // namespace shardtrain
