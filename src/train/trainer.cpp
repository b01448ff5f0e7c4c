// This file is long because the step's stages share the Trainer's state (banner, reports, resume, save live elsewhere).
// The step loop: assembles one run (model state, ZeRO engine, model, optimizer,
// checkpoint session) and runs its steps -- data -> forward/backward per
// micro-batch -> gradient reduction -> clip -> AdamW -- with evaluation,
// progress lines and metrics rows, agreeing at each step boundary whether to
// save or stop (session/stop_agreement.hpp), and asking the test hooks at
// their points of a step. The numeric guard's detection is here, on what the
// step has on the host anyway (the loss, the gradient norm) and on the replica
// CRCs (rundir/weights_crc.hpp); what a fault does is session/numeric_guard's
// decision, the rollback session/checkpoint_session's. Resume and save are
// session/checkpoint_session's, the banner and the end summary
// rundir/banner's, the end-of-job reports rundir/run_reports', device bring-up
// parallel/device_context's.
#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/clock.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/profiler.hpp"
#include "parallel/device_context.hpp"
#include "parallel/mpi/staging_communicator.hpp"
#include "parallel/model_state.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/zero_engine.hpp"
#include "core/param_layout.hpp"
#include "optim/adamw.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/lr_schedule.hpp"
#include "plan/memory_plan.hpp"
#include "rundir/banner.hpp"
#include "rundir/process_memory.hpp"
#include "rundir/progress.hpp"
#include "rundir/run_directory.hpp"
#include "rundir/run_lock.hpp"
#include "rundir/run_reports.hpp"
#include "rundir/weights_crc.hpp"
#include "session/checkpoint_session.hpp"
#include "session/checkpointing.hpp"
#include "session/lifecycle.hpp"
#include "session/numeric_guard.hpp"
#include "session/stop_agreement.hpp"
#include "task/batch_sampler.hpp"
#include "task/run_sample.hpp"
#include "task/task.hpp"
#include "task/task_factory.hpp"
#include "train/run_options.hpp"

namespace shardtrain {

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

// The directories this job must own alone (rundir/run_lock.hpp): the run
// directory, and the checkpoint directory when checkpoints are on and it lies
// outside the run directory.
std::vector<std::pair<std::string, std::string>> owned_dirs(const RunConfig& cfg) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> dirs{{"train.run_dir", cfg.train.run_dir}};
  const bool checkpoints = cfg.checkpoint.every_steps > 0 || cfg.checkpoint.every_minutes > 0;
  if (checkpoints && !cfg.checkpoint.dir.empty()) {
    std::error_code ec;
    const std::string run = fs::weakly_canonical(fs::absolute(cfg.train.run_dir, ec), ec).string();
    const std::string ckpt = fs::weakly_canonical(fs::absolute(cfg.checkpoint.dir, ec), ec).string();
    if (ckpt != run && !ckpt.starts_with(run + "/")) dirs.emplace_back("checkpoint.dir", cfg.checkpoint.dir);
  }
  return dirs;
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
  Run(const RunConfig& cfg, MPI_Comm world, const RunOptions& hooks, DeviceContext& device)
      : m_cfg(cfg),
        m_hooks(hooks),
        m_comm(world),
        m_lock(owned_dirs(cfg), cfg.source_name, world),
        m_backend(*device.backend),
        m_state_comm(device.comm() ? *device.comm() : static_cast<Communicator&>(m_comm)),
        m_profiler(m_backend, hooks.profile),
        m_task(make_task<P>(cfg, m_comm, m_comm.size())),
        m_scaler(scaler_config(cfg.precision)),
        m_guard(cfg),
        m_watchdog(cfg.parallel.collective_timeout_s, m_comm.rank()) {
    m_comm.set_watchdog(&m_watchdog);
    if (device.staging) {  // the MPI device collectives run on their own host communicator
      m_staging_host = &device.staging->host();
      m_staging_host->set_watchdog(&m_watchdog);
    }
    m_plan = m_task->plan();
    // The predicted process peak (its measured terms: train/process_memory.hpp)
    // against train.memory_limit_mb, before anything large is allocated.
    measure_process_before_model(m_plan, m_comm, cfg, m_task->make_layout());
    check_memory_limit(m_plan, cfg, device.device_sharers, device.device_bytes);

    m_layout = std::make_unique<ParamLayout>(m_task->make_layout());
    m_layout->finalize(m_comm.size());
    if (m_backend.memory() == nullptr) {  // host collectives (a device's go through NCCL: not probed)
      measure_collective_scratch(m_plan, cfg, *m_layout, dtype_of<P>(), m_comm);
      check_memory_limit(m_plan, cfg, device.device_sharers, device.device_bytes);
    }
    m_state = std::make_unique<ModelState<P>>(*m_layout, cfg.parallel.zero_stage, m_comm.rank(), m_memory,
                                              &m_backend);
    m_zero = std::make_unique<ZeroEngine<P>>(
        *m_state, typename ZeroEngine<P>::Options{cfg.parallel.overlap, cfg.parallel.bucket_mb}, m_state_comm,
        m_memory);
    const auto [plo, phi] = m_state->param_range();
    if (m_backend.memory() == nullptr) {
      m_task->init_params(*m_layout, m_state->params().data(), plo, phi);
    } else {  // initialised on the host (the same values), then copied to the device
      std::vector<P> init(static_cast<std::size_t>(phi - plo));
      m_task->init_params(*m_layout, init.data(), plo, phi);
      m_backend.copy_from_host(m_state->params().data(), init.data(), init.size() * sizeof(P));
    }
    m_task->build(*m_layout, m_memory, m_backend, *m_zero);
    m_optim = std::make_unique<AdamW>(cfg.optim, *m_layout);
    m_state->init_master();
    m_step_hooks = std::make_unique<StepHooks<P>>(hooks, m_comm.rank(), *m_zero, *m_state);
    m_session = std::make_unique<CheckpointSession<P>>(cfg, m_comm, m_state_comm, *m_state, m_scaler, *m_task,
                                                       hooks.pause_checkpoint_step, m_memory);
    m_stop = std::make_unique<StopAgreement>(m_comm, cfg.train.time_limit_minutes, m_session->checkpoint_bytes());
  }

  ~Run() override {
    if (m_staging_host) m_staging_host->set_watchdog(nullptr);  // the device context outlives the run
  }

  TrainResult run() override;

 private:
  static LossScalerConfig scaler_config(const PrecisionConfig& p) {
    LossScalerConfig c;
    c.enabled = p.mode == PrecisionMode::Fp16;
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
    bool skipped = false;     // no update: inf/NaN gradient (fp16), or a fault the guard acts on
    NumericFault fault = NumericFault::None;  // a fault for the numeric guard (session/numeric_guard.hpp)
    std::string fault_what;   // the fault, the tensor, the ranks (for its message)
    bool scaler_gave_up = false;  // fp16: precision.max_consecutive_skips reached
  };
  StepResult train_step(std::int64_t step, double lr);
  // Handles an inf/NaN gradient or loss found at `step` (0-based): the scaler's
  // decision and its log line (fp16), and whether that is a fault for the
  // numeric guard (bf16 and fp32: always; fp16: when the scaler gives up).
  void handle_overflow(std::int64_t step, StepResult& r, std::int64_t lo, std::int64_t hi, P dloss, double factor);
  // The numeric guard's diagnosis of a non-finite step: the step is run again
  // with every rank scanning its own contribution before each reduction; names
  // the ranks whose own gradient or loss held an inf/NaN. Collective.
  std::string non_finite_ranks(std::int64_t step, std::int64_t lo, std::int64_t hi, P dloss, double factor);
  // The replicas' verdict in an AgreedError or a guard message.
  std::string replica_text(const ReplicaCheck& v) const;
  std::string tensor_of(std::int64_t flat_index) const;
  bool is_root() const { return m_comm.rank() == 0; }
  // This rank's collectives through both communicators (communicator.hpp).
  CommTally comm_tally() const {
    CommTally t = m_comm.tally();
    if (&m_state_comm != &m_comm) t += m_state_comm.tally();
    return t;
  }
  // The end-of-job reports (rundir/run_reports.hpp), appended to `full` (rank 0's
  // RUN_DIR/report.txt). Collective; dir is rank 0's. Returns the summary's memory line.
  std::string report(const CommTally& job, std::int64_t steps, RunDirectory* dir, std::string& full);

  const RunConfig& m_cfg;
  RunOptions m_hooks;
  MpiCommunicator m_comm;         // host values: losses, flags, CRC pieces, memory report
  RunLock m_lock;                 // this job alone in its run directory (before anything is read or written there)
  Backend& m_backend;             // where model state and kernels live
  Communicator& m_state_comm;     // moves backend memory (m_comm on the host; NCCL or the MPI device collectives on a device)
  ProfilerBinding m_profiler;     // --profile (before everything that makes ops)
  MemoryTracker m_memory;
  std::unique_ptr<Task<P>> m_task;  // the model and its data
  MemoryPlan m_plan;
  std::unique_ptr<ParamLayout> m_layout;
  std::unique_ptr<ModelState<P>> m_state;  // parameters, gradients, fp32 weights, moments
  std::unique_ptr<ZeroEngine<P>> m_zero;   // their collectives, served to the model
  std::unique_ptr<AdamW> m_optim;
  LossScaler m_scaler;
  NumericGuard m_guard;           // what a numerical fault does ([guard])
  CollectiveWatchdog m_watchdog;
  MpiCommunicator* m_staging_host = nullptr;  // the MPI device collectives' (watched too), or none
  std::unique_ptr<StepHooks<P>> m_step_hooks;  // the test hooks inside a step
  std::unique_ptr<CheckpointSession<P>> m_session;  // counters, resume, save
  std::unique_ptr<StopAgreement> m_stop;              // the agreement at each step boundary
};

template <class P>
typename Run<P>::StepResult Run<P>::train_step(std::int64_t step, double lr) {
  const std::int64_t global_batch = m_cfg.train.batch_size, t = m_task->targets_per_sample();
  const auto [lo, hi] = rank_slice(global_batch, m_comm.rank(), m_comm.size());
  StepResult r;
  r.loss_scale = m_scaler.scale();
  // The backward seed carries the loss scale (1 unless fp16), and --multiply-loss's factor.
  const double factor = m_step_hooks->take_loss_factor(step + 1);
  const P dloss(static_cast<float>(r.loss_scale * factor / static_cast<double>(global_batch * t)));
  m_step_hooks->at_step_start(step + 1);

  m_zero->begin_step();
  double loss_sum = 0.0;
  // Every rank runs the same number of micro-batches (sharded stages reduce per
  // micro-batch); a rank whose slice is used up runs empty ones.
  for (std::int64_t m = 0; m < micro_batches(global_batch, m_comm.size(), m_task->max_batch()); ++m)
    loss_sum += m_task->train_micro_batch(m_session->samples(), lo, hi, m, dloss);
  if (factor != 1.0) loss_sum *= factor;

  // The summed gradient of the whole global batch: all-reduced (stage 0) or
  // reduce-scattered into each rank's shard (stages 1-3). Its squared norm is
  // one scalar all-reduce of per-shard sums, so an inf/NaN in any rank's shard
  // makes it non-finite on every rank: that is the found-inf reduction.
  m_step_hooks->before_reduction(step + 1);
  const double norm2 = m_zero->finish_gradients();
  loss_sum = m_comm.all_reduce_value(loss_sum);
  r.loss = loss_sum / static_cast<double>(global_batch * t);
  r.grad_norm = std::sqrt(norm2) / r.loss_scale;
  if (!std::isfinite(norm2) || !std::isfinite(r.loss)) {
    r.skipped = true;
    handle_overflow(step, r, lo, hi, dloss, factor);
    return r;
  }
  // The loss is on the host already (every rank holds the same): the spike
  // check is a comparison, and no rank can decide otherwise than the others.
  if (m_guard.is_spike(step + 1, r.loss)) {
    r.skipped = true;
    r.fault = NumericFault::LossSpike;
    r.fault_what = fmt::format("loss spike: loss {:.6g} > guard.spike_factor {} x {:.6g} (the mean loss of the "
                               "last {} updated steps)",
                               r.loss, m_cfg.guard.spike_factor, m_guard.window_mean(), m_cfg.guard.spike_window);
    return r;
  }
  const auto decision = m_scaler.update(false);
  m_guard.clean_step();
  if (decision.scale_changed && is_root()) fmt::print("{}\n", m_scaler.describe(decision, step + 1));
  float clip = 1.0f;
  if (m_cfg.optim.grad_clip > 0 && r.grad_norm > m_cfg.optim.grad_clip)
    clip = static_cast<float>(m_cfg.optim.grad_clip / (r.grad_norm + 1e-6));
  {
    Profiler::Scope timed(m_backend.profiler(), ProfileOp::Optimizer);
    m_optim->step(m_backend.vector_ops<P>(), m_state->optimizer_view(), lr, static_cast<float>(clip / r.loss_scale),
                  m_session->take_update());
  }
  m_zero->params_updated();
  m_step_hooks->after_update(step + 1);
  m_guard.accepted(r.loss);
  return r;
}

template <class P>
std::string Run<P>::tensor_of(std::int64_t i) const {
  for (const auto& e : m_layout->entries())
    if (i >= e.offset && i < e.offset + e.numel) return e.name;
  return "padding";
}

template <class P>
void Run<P>::handle_overflow(std::int64_t step, StepResult& r, std::int64_t lo, std::int64_t hi, P dloss,
                             double factor) {
  const std::int64_t first = m_zero->first_non_finite_gradient();  // collective
  const std::string where =
      first >= 0 ? fmt::format("first non-finite gradient in {}", tensor_of(first))
                 : std::string("the loss is not finite, the gradients are");
  if (!m_scaler.enabled()) {
    r.fault = NumericFault::NonFinite;
    r.fault_what = fmt::format("{} ({}); {}", first >= 0 ? "gradient overflow (inf/NaN)" : "loss overflow (inf/NaN)",
                               where, non_finite_ranks(step, lo, hi, dloss, factor));
    return;
  }
  const auto decision = m_scaler.update(true);
  if (is_root()) {
    fmt::print("{}; {}\n", m_scaler.describe(decision, step + 1), where);
    if (decision.at_min_scale && !decision.abort)
      fmt::print(stderr, "warning: step {}: loss scale is at precision.min_scale ({}) and the "
                 "gradient still overflows; steps keep being skipped\n", step + 1,
                 m_cfg.precision.min_scale);
    std::fflush(stdout);
  }
  const bool at_min_fault = m_guard.min_scale_overflow(decision.at_min_scale);
  if (decision.abort) {
    r.fault = NumericFault::NonFinite;
    r.scaler_gave_up = true;
    r.fault_what = fmt::format(
        "{} consecutive steps skipped for inf/NaN gradients (precision.max_consecutive_skips = {}) at loss scale {}",
        decision.consecutive_skips, m_cfg.precision.max_consecutive_skips, decision.new_scale);
  } else if (at_min_fault) {
    r.fault = NumericFault::NonFinite;
    r.fault_what = fmt::format("{} overflowing steps in a row at the minimum loss scale {} (guard.min_scale_steps "
                               "= {}); {}",
                               m_cfg.guard.min_scale_steps, m_cfg.precision.min_scale, m_cfg.guard.min_scale_steps,
                               non_finite_ranks(step, lo, hi, dloss, factor));
  }
}

template <class P>
std::string Run<P>::non_finite_ranks(std::int64_t step, std::int64_t lo, std::int64_t hi, P dloss, double factor) {
  m_zero->check_local_contributions(true);
  m_step_hooks->rearm_gradient_faults(step + 1);  // an injected fault, as the step saw it
  m_zero->begin_step();
  double loss_sum = 0.0;
  for (std::int64_t m = 0; m < micro_batches(m_cfg.train.batch_size, m_comm.size(), m_task->max_batch()); ++m)
    loss_sum += m_task->train_micro_batch(m_session->samples(), lo, hi, m, dloss);
  if (factor != 1.0) loss_sum *= factor;
  (void)m_zero->finish_gradients();  // collective; the step's update is dropped whatever it says
  m_zero->check_local_contributions(false);
  const int n = m_comm.size();
  // Per rank: 1 + the flat index of its first inf/NaN contribution (0: none), its loss not finite.
  std::vector<std::int64_t> flags(2 * static_cast<std::size_t>(n), 0);
  const std::int64_t local = m_zero->local_non_finite();
  flags[2 * m_comm.rank()] = local >= 0 ? local + 1 : 0;
  flags[2 * m_comm.rank() + 1] = std::isfinite(loss_sum) ? 0 : 1;
  m_comm.all_reduce(std::span<std::int64_t>(flags), ReduceOp::Sum);
  std::string grads, losses;
  for (int k = 0; k < n; ++k) {
    if (flags[2 * k] > 0)
      grads += fmt::format("{}rank {} (in {})", grads.empty() ? "" : ", ", k, tensor_of(flags[2 * k] - 1));
    if (flags[2 * k + 1] > 0) losses += fmt::format("{}rank {}", losses.empty() ? "" : ", ", k);
  }
  if (grads.empty() && losses.empty())
    return "run again, no rank's own gradient or loss is inf/NaN (a transient fault)";
  std::string out;
  if (!grads.empty()) out = "the inf/NaN came from the own gradient of " + grads + " before the reduction";
  if (!losses.empty()) out += (out.empty() ? "" : "; ") + std::string("the own loss of ") + losses + " is inf/NaN";
  return out;
}

template <class P>
std::string Run<P>::replica_text(const ReplicaCheck& v) const {
  if (m_cfg.parallel.zero_stage == 0)
    return fmt::format("the ranks' replicas of the weights differ at ZeRO stage 0 (every rank updates the whole "
                       "vector from the same all-reduced gradient, so they must stay bitwise equal): {}",
                       v.holders);
  return fmt::format("the ranks' replicas of the parameters differ at ZeRO stage {} (every rank all-gathers them "
                     "from the same shards, so they must stay bitwise equal): {}",
                     m_cfg.parallel.zero_stage, v.holders);
}

template <class P>
std::string Run<P>::report(const CommTally& job, std::int64_t steps, RunDirectory* dir, std::string& full) {
  std::string memory_line = report_memory(m_comm, m_memory, m_plan, m_task->activation_high_water_bytes(), dir, full);
  if (m_profiler.get()) {
    const FlopFloor floor = measure_flop_floor(m_comm.comm(), m_backend, m_cfg.precision.mode,
                                               m_cfg.parallel.threads, m_plan.step_flops / m_plan.world);
    report_profile(m_comm, *m_profiler.get(), floor, dir, full);
  }
  if (steps > 0)
    report_communication(m_comm, job, comm_tally(), steps,
                         {*m_layout, m_cfg.parallel.zero_stage, sizeof(P), m_cfg.parallel.bucket_mb,
                          micro_batches(m_cfg.train.batch_size, m_comm.size(), m_task->max_batch()),
                          &m_state_comm != &m_comm},
                         full);
  return memory_line;
}

template <class P>
TrainResult Run<P>::run() {
  const auto& tc = m_cfg.train;
  // This job runs steps [first, end): from the resumed checkpoint (or 0) to
  // train.steps, or to --stop-after-step.
  const std::int64_t first = std::min(m_session->start_step(), tc.steps);
  std::int64_t end = tc.steps;
  if (m_hooks.stop_after_step > 0) end = std::clamp(m_hooks.stop_after_step, first, tc.steps);
  std::optional<RunDirectory> dir;
  if (is_root()) {
    dir.emplace(m_cfg, m_session->start_step());
    const TaskText text = m_task->describe();
    const CheckpointManager& ckpt = m_session->checkpoints();
    print_start_banner(m_cfg, m_comm.size(), m_plan, m_backend,
                       {text.model, text.batch, text.data, m_layout->num_parameters(), m_session->resume_note(),
                        ckpt.enabled(), ckpt.dir(), m_session->start_step()},
                       *dir);
  }

  TrainResult result;
  result.first_step = first;
  CommTally comm_job;            // this rank's collectives in training steps (not evaluation)
  Progress progress(tc.steps, tc.batch_size, m_task->tokens_per_sample(), first);
  const auto t0 = SteadyClock::now();
  double longest_step = 0.0;  // seconds, for the wall-time guard
  std::int64_t stop = 0;      // agreed stop reason (agree_at_boundary), 0 while running
  std::optional<EvalResult> final_eval;  // the pass after the last step
  std::string guard_lines;  // rank 0: the numeric guard's rollbacks, for the report
  const int stage = m_cfg.parallel.zero_stage;
  const bool replicas_compared = stage <= 2 && m_comm.size() > 1;
  const std::int64_t replica_every = m_cfg.guard.replica_every;
  // The numeric guard's decision on `fault` at step `done` (1-based): an
  // AgreedError (abort), false (skip: the step's update is already dropped), or
  // true after a rollback, with `step` set to go on after the checkpoint's step
  // and the faulty step's row written (fault, skipped samples, the weights CRC
  // after the rollback).
  auto act_on = [&](NumericFault fault, const std::string& what, std::int64_t& step, const MetricsRow& row_of_step,
                    bool scaler_gave_up) -> bool {
    const std::int64_t done = step + 1;
    const GuardAction action = m_guard.decide(fault);
    if (action == GuardAction::Abort) {
      // The defaults' messages stay as they were (fp16's give-up, stage 0's replicas).
      if (scaler_gave_up && !m_guard.bound_reached())
        throw AgreedError(fmt::format("step {}: {}; the model diverged: lower optim.lr, raise optim.warmup_steps, "
                                      "or use precision.mode = \"bf16\"",
                                      done, what));
      if (fault == NumericFault::Replica && !m_guard.bound_reached())
        throw AgreedError(fmt::format("step {}: {}", done, what));
      throw AgreedError(m_guard.abort_message(fault, done, what));
    }
    if (action == GuardAction::Skip) return false;
    const auto back = m_session->rollback(done);  // collective
    m_zero->params_updated();  // stage 3: the gathered buckets are stale now (stages 1-2: gathered again)
    m_guard.rolled_back();
    const std::uint32_t crc = weights_crc(*m_state, m_comm, done);  // after it: the replicas must agree (stage 0)
    std::string agreed;
    if (replicas_compared) {  // the reload spread every rank's shard to every replica: they must agree now
      const ReplicaCheck after = check_replicas(*m_state, m_comm);  // collective
      if (!after.agree())
        throw AgreedError(fmt::format(
            "step {}: after the rollback to step {} the replicas still differ ({}); a rank whose copy differs "
            "right after a reload has faulty memory or arithmetic: check that node's hardware",
            done, back.step, after.holders));
      agreed = fmt::format("; the replicas agree again ({} on {} ranks)", after.what, m_comm.size());
    }
    if (is_root()) {
      const std::string line = fmt::format(
          "guard: step {}: {}; guard.{} = \"rollback\": every rank reloaded {} (step {}) and skips the {} samples "
          "[{}, {}) that led to the fault (rollback {} of at most {}){}\n",
          done, what, fault_name(fault), back.path, back.step, back.skip_hi - back.skip_lo, back.skip_lo,
          back.skip_hi, m_guard.rollbacks(), m_cfg.guard.max_rollbacks, agreed);
      fmt::print("{}", line);
      std::fflush(stdout);
      guard_lines += "  " + line;  // the report's list
      MetricsRow row = row_of_step;
      row.skipped = true;
      row.weights_crc = crc;
      row.fault = fmt::format("{}/rollback", fault_name(fault));
      row.skipped_samples = fmt::format("{}-{}", back.skip_lo, back.skip_hi);
      dir->append(row);
    }
    step = back.step - 1;  // the loop's ++step: the step after the checkpoint's; the LR follows the counter
    return true;
  };
  for (std::int64_t step = first; step < end; ++step) {
    const auto step_t0 = SteadyClock::now();
    m_watchdog.set_step(step + 1);
    const double lr = learning_rate(m_cfg.optim, step, tc.steps);
    const CommTally tally_before = comm_tally();
    // --profile times every step of the job but its first (warm-up: first touches, BLAS buffers).
    Profiler* const prof = step > first ? m_profiler.get() : nullptr;
    if (prof) prof->begin_step();
    const StepResult sr = train_step(step, lr);
    const double step_ms = 1e3 * seconds_since(step_t0);  // the step alone: no evaluation, CRC or logging
    const double step_end_unix =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    ++result.steps_run;
    if (prof) prof->end_step();
    m_session->advance_samples(tc.batch_size);  // the data cursor moves on skipped steps too
    m_step_hooks->at_step_end(step + 1);          // --flip-bit
    const CommTally step_tally = comm_tally() - tally_before;
    comm_job += step_tally;
    const std::uint64_t step_bytes = step_tally.payload_total();  // metrics.csv comm_bytes
    const double loss = sr.loss;
    if (sr.skipped) ++result.skipped_steps;
    else result.final_train_loss = loss;
    const std::int64_t done = step + 1;
    progress.step_done(seconds_since(t0));
    // The row of this step as far as the step itself knows it (a rollback's row).
    const MetricsRow step_row{done, loss, std::nullopt, lr, sr.grad_norm, progress.tokens_per_second(),
                              seconds_since(t0), step_bytes, sr.loss_scale, sr.skipped, 0,
                              progress.samples_per_second(), std::nullopt, step_ms, step_end_unix, {}, {}};
    if (sr.fault != NumericFault::None && act_on(sr.fault, sr.fault_what, step, step_row, sr.scaler_gave_up))
      continue;

    std::optional<EvalResult> eval;
    const bool last = done == tc.steps;
    if (last || (tc.eval_every > 0 && done % tc.eval_every == 0))
      eval = m_task->evaluate(last ? 0 : tc.eval_windows);  // the final pass covers the whole split
    const std::optional<double> val = eval ? std::optional<double>(eval->loss) : std::nullopt;
    const bool log_row = done % tc.log_every == 0 || last || val || sr.skipped;
    // Stage 0's weights CRC compares the replicas too; the guard's check
    // (guard.replica_every) runs where it did not.
    ReplicaCheck replicas;
    const std::uint32_t crc = log_row ? weights_crc(*m_state, m_comm, done, &replicas) : 0;  // collective
    if (!replicas.compared && replicas_compared && replica_every > 0 && done % replica_every == 0)
      replicas = check_replicas(*m_state, m_comm);  // collective
    if (!replicas.agree() && act_on(NumericFault::Replica, replica_text(replicas), step, step_row, false)) continue;
    if (is_root() && log_row) {
      MetricsRow row{done, loss, val, lr, sr.grad_norm, progress.tokens_per_second(), seconds_since(t0),
                     step_bytes, sr.loss_scale, sr.skipped, crc, progress.samples_per_second(),
                     eval ? eval->accuracy : std::nullopt, step_ms, step_end_unix, {}, {}};
      if (sr.fault != NumericFault::None) row.fault = fmt::format("{}/skip", fault_name(sr.fault));
      dir->append(row);
      progress.print(row);
    }
    if (eval && tc.sample_every > 0 && done % tc.sample_every == 0) {  // collective; rank 0 prints
      const std::string line = sample_line(*m_state, *m_task, m_comm, done);
      if (is_root()) {
        fmt::print("{}\n", line);
        std::fflush(stdout);
      }
    }
    if (eval) {
      result.final_val_loss = eval->loss;
      result.final_val_accuracy = eval->accuracy;
      if (last) final_eval = std::move(eval);
    }
    longest_step = std::max(longest_step, seconds_since(step_t0));
    const bool job_end = done == end;
    const Boundary at = job_end ? Boundary{} : m_session->agree_at_boundary(*m_stop, longest_step);
    stop = at.stop;
    const bool save_due = m_session->checkpoints().due(done, job_end, at.checkpoint_time) || stop;
    // A checkpoint holds state the replicas agreed on (guard.replica_every > 0),
    // so that a rollback goes back to verified state.
    if (save_due && !replicas.compared && replicas_compared && replica_every > 0) {
      replicas = check_replicas(*m_state, m_comm);  // collective
      if (!replicas.agree() && act_on(NumericFault::Replica, replica_text(replicas), step, step_row, false)) {
        stop = 0;  // a requested stop is asked again at the next boundary
        continue;
      }
    }
    if (save_due)
      m_session->save(done, stop ? m_stop->describe(stop)
                          : job_end ? (done == tc.steps ? std::string("the end of the run")
                                                        : std::string("the end of this job (--stop-after-step)"))
                                    : std::string());
    if (stop) {
      end = done;
      break;
    }
  }
  m_session->finish_checkpoints();  // checkpoint.async: the last write in flight
  std::string full;  // RUN_DIR/report.txt (rank 0): the whole end-of-job report
  if (is_root() && m_session->checkpoints_committed() > 0) {
    const std::string line = checkpoints_line(m_session->checkpoints_committed(),
                                              m_session->writes_in_background(),
                                              m_session->checkpoint_blocked_seconds());
    fmt::print("{}", line);
    full += line;
    std::fflush(stdout);
  }
  if (is_root() && (m_guard.rollbacks() > 0 || m_guard.skips() > 0)) {
    const std::string line = fmt::format("numeric guard: {} rollback(s), {} step(s) skipped for a fault\n{}",
                                         m_guard.rollbacks(), m_guard.skips(), guard_lines);
    fmt::print("{}", line);
    full += line;
    std::fflush(stdout);
  }
  if (first >= tc.steps) {
    final_eval = m_task->evaluate(0);
    result.final_val_loss = final_eval->loss;
    result.final_val_accuracy = final_eval->accuracy;
  }
  result.last_step = std::max(first, end);
  result.seconds = seconds_since(t0);
  const std::string memory_line = report(comm_job, end - first, dir ? &*dir : nullptr, full);
  result.requeue = stop != 0;
  if (is_root()) {
    const CheckpointManager& ckpt = m_session->checkpoints();
    const auto written = ckpt.enabled() ? list_checkpoints(ckpt.dir()) : std::vector<CheckpointFile>{};
    JobSummary summary{first, end, result.steps_run, result.seconds, result.final_train_loss,
                       result.final_val_loss, result.final_val_accuracy,
                       stop ? m_stop->describe(stop) : std::string(), ckpt.enabled(),
                       written.empty() ? std::nullopt : std::optional<std::string>(written.front().path),
                       written.empty() ? 0 : written.front().step, m_task->tokens_per_sample(), memory_line,
                       m_profiler.get() != nullptr, std::nullopt, 0};
    if (final_eval && final_eval->confusion) {
      summary.confusion = final_eval->confusion->format(m_task->class_names());
      summary.confusion_samples = final_eval->samples;
    }
    print_job_summary(m_cfg, summary, *dir, full);
  }
  return result;
}

}  // namespace

namespace {
// The host compute threads first (parallel.threads; the host kernels run even
// beside a device), then the device.
// model.attention = "fused" is cuDNN's and "flash" our CUDA kernels', model.gemm =
// "cublaslt" and model.gelu = "epilogue" cuBLASLt's: refused where
// the run computes on the host (every rank has the same config and device kind, so
// every rank refuses). The host has one attention (kernels/attention.hpp, already
// tiled per (sequence, head) pair); "flash" is not mapped onto it silently, so a
// config names what runs.
std::unique_ptr<DeviceContext> bring_up(const RunConfig& config, MPI_Comm world) {
  set_host_compute_threads(config.parallel.threads);
  auto context = bring_up_device(
      DeviceChoice{config.train.device, config.parallel.device_collectives, config.parallel.share_device,
                   config.model.gemm, config.train.device_kernels},
      config.source_name, world);
  if (config.model.type == ModelType::Gpt && config.model.attention == AttentionImpl::Fused &&
      context->backend->kind() == BackendKind::Host)
    throw InputError(fmt::format(
        "{}: model.attention = \"fused\" is cuDNN's flash attention and needs a CUDA device, but this run "
        "computes on the host (train.device = \"{}\"); use model.attention = \"unfused\" on the host",
        config.source_name, name_of(config.train.device)));
  if (config.model.type == ModelType::Gpt && config.model.attention == AttentionImpl::Flash &&
      context->backend->kind() == BackendKind::Host)
    throw InputError(fmt::format(
        "{}: model.attention = \"flash\" is our tiled CUDA attention and needs a CUDA device, but this run "
        "computes on the host (train.device = \"{}\"); use model.attention = \"unfused\" on the host",
        config.source_name, name_of(config.train.device)));
  if (config.train.device_kernels == DeviceKernels::Candidate && context->backend->kind() == BackendKind::Host)
    throw InputError(fmt::format(
        "{}: train.device_kernels = \"candidate\" selects CUDA kernels not yet run on a device, but this run "
        "computes on the host (train.device = \"{}\"); leave train.device_kernels = \"validated\" (the "
        "default) on the host", config.source_name, name_of(config.train.device)));
  if (config.model.gemm == GemmImpl::Cublaslt && context->backend->kind() == BackendKind::Host)
    throw InputError(fmt::format(
        "{}: model.gemm = \"cublaslt\" runs the Linear layers through cuBLASLt and needs a CUDA device, but "
        "this run computes on the host (train.device = \"{}\"); use model.gemm = \"cublas\" (the default) on "
        "the host", config.source_name, name_of(config.train.device)));
  if (config.model.type == ModelType::Gpt && config.model.gelu == GeluImpl::Epilogue &&
      context->backend->kind() == BackendKind::Host)
    throw InputError(fmt::format(
        "{}: model.gelu = \"epilogue\" runs the GELU in the epilogues of cuBLASLt's matmuls and needs a CUDA "
        "device, but this run computes on the host (train.device = \"{}\"); use model.gelu = \"separate\" (the "
        "default) on the host", config.source_name, name_of(config.train.device)));
  return context;
}
}  // namespace

Trainer::Trainer(const RunConfig& config, MPI_Comm world, const RunOptions& hooks)
    : m_device(bring_up(config, world)) {
  with_storage_type(config.precision.mode,
                    [&]<class P>() { m_run = std::make_unique<Run<P>>(config, world, hooks, *m_device); });
}
Trainer::~Trainer() = default;
TrainResult Trainer::run() { return m_run->run(); }

}  // namespace shardtrain
