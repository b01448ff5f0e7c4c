// Resume, save and the failure policy of a run's checkpoints (checkpoint_session.hpp).
#include "session/checkpoint_session.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <span>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "backend/host_staging.hpp"
#include "config/parse.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/state_vectors.hpp"
#include "core/text.hpp"
#include "task/init_from.hpp"
#include "version.hpp"

namespace shardtrain {

namespace {

// A checkpoint whose model does not match the config: no other checkpoint of
// the same directory would do better, so resume = "auto" does not fall back.
class IncompatibleCheckpoint : public InputError {
 public:
  using InputError::InputError;
};

}  // namespace

template <class P>
CheckpointSession<P>::CheckpointSession(const RunConfig& cfg, MpiCommunicator& comm, Communicator& state_comm,
                                        ModelState<P>& state, LossScaler& scaler, const Task<P>& task,
                                        std::int64_t pause_checkpoint_step, MemoryTracker& memory)
    : m_cfg(cfg),
      m_comm(comm),
      m_state_comm(state_comm),
      m_state(state),
      m_scaler(scaler),
      m_task(task),
      m_ckpt(cfg.checkpoint, cfg.source_name, comm) {
  m_ckpt.set_pause_step(pause_checkpoint_step);
  m_ckpt.prepare();
  resume();
  if (cfg.checkpoint.async && m_ckpt.enabled()) {
    // The state shard as checkpoints hold it: master, both moments, the 16-bit copy.
    const std::size_t per_element = saved_bytes_per_element(dtype_of<P>());
    m_background = std::make_unique<BackgroundCheckpoint>(
        m_comm.comm(), memory, static_cast<std::size_t>(m_state.shard_view().size()) * per_element);
  }
}

template <class P>
void CheckpointSession<P>::check_compatible(const CheckpointReader& reader) const {
  const auto& file = reader.layout();
  const auto& mine = m_state.layout().entries();
  const std::string hint =
      "; to resume, the model (model.type and its model.* sizes, and the data set's vocabulary or classes) "
      "must match the checkpoint's; batch size, rank count, ZeRO stage, precision and the learning-rate "
      "schedule may change";
  auto fail = [&](const std::string& what) {
    throw IncompatibleCheckpoint(fmt::format("{}: the checkpoint's model does not match {}: {}{}", reader.path(),
                                             m_cfg.source_name, what, hint));
  };
  if (reader.meta().alignment != m_state.layout().alignment())
    fail(fmt::format("layout alignment {} there, {} here", reader.meta().alignment, m_state.layout().alignment()));
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
void CheckpointSession<P>::load(CheckpointReader& reader) {
  const ShardView<P> s = m_state.shard_view();
  const std::size_t n = static_cast<std::size_t>(s.size());
  // What the checkpoint holds of the shard: master, both moments, the 16-bit
  // copy (an fp32 model's parameters are its master weights). On a device the
  // file is read into host buffers (not first filled from the device: every
  // byte is overwritten), checked, then copied over.
  const std::vector<StateSpan> spans = saved_spans(s);
  std::vector<std::vector<unsigned char>> stage(spans.size());
  std::vector<unsigned char*> host(spans.size());
  for (std::size_t i = 0; i < spans.size(); ++i)
    host[i] = for_host_overwrite(m_state.backend(), static_cast<unsigned char*>(spans[i].data), spans[i].bytes(),
                                 stage[i]);
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const SavedVector& v = *spans[i].saved;
    // The 16-bit copy as saved; from another precision, the master rounded
    // (which is what the saved copy is, bit for bit; master is read first).
    if constexpr (!std::is_same_v<P, float>) {
      if (v.vector == StateVector::Params && !reader.has_vector(v.name)) {
        SHARDTRAIN_CHECK(spans[0].saved->vector == StateVector::Master, "the checkpoint's master weights come first");
        convert(reinterpret_cast<const float*>(host[0]), reinterpret_cast<P*>(host[i]), n);
        continue;
      }
    }
    reader.read_vector(v.name, s.lo, s.hi, host[i]);
  }
  reader.finish_reads();  // every CRC, before anything is spread further
  for (std::size_t i = 0; i < spans.size(); ++i)
    from_host(m_state.backend(), static_cast<unsigned char*>(spans[i].data), host[i], spans[i].bytes());
  m_state.replicate_shard(m_state_comm);
}

template <class P>
void CheckpointSession<P>::adopt(const CheckpointMeta& meta) {
  m_last_good_step = meta.step;
  m_samples = meta.samples_seen;
  m_updates = meta.optimizer_updates;
  if (m_scaler.enabled() && enum_named<PrecisionMode>(meta.precision) == PrecisionMode::Fp16) {
    // Clamped to this run's precision.* keys, which may have changed.
    const auto& c = m_scaler.config();
    LossScalerState st{std::clamp(meta.loss_scale, c.min_scale, 3.4028234663852886e38),
                       std::min<std::int64_t>(meta.scaler_good_steps, c.growth_interval - 1),
                       static_cast<int>(std::min<std::int64_t>(meta.scaler_hysteresis_left, c.hysteresis)),
                       meta.scaler_consecutive_skips};
    m_scaler.load_state(st);
  }
}

template <class P>
typename CheckpointSession<P>::Rollback CheckpointSession<P>::rollback(std::int64_t fault_step) {
  finish_checkpoints();  // a write in flight may be the newest good checkpoint
  if (m_last_good_step < 0)
    throw AgreedError(fmt::format(
        "step {}: the numeric guard would roll back, but this run has no checkpoint yet (checkpoint.every_steps "
        "= {}); write checkpoints more often, or let the fault skip the step (\"skip\")",
        fault_step, m_cfg.checkpoint.every_steps));
  Rollback r;
  r.path = (std::filesystem::path(m_ckpt.dir()) / checkpoint_file_name(m_last_good_step)).string();
  r.skip_hi = m_samples;  // the cursor after the faulty step's batch
  try {
    CheckpointReader reader(r.path, m_comm.comm(), m_ckpt.io_deadline());
    check_compatible(reader);
    load(reader);
    adopt(reader.meta());
    r.step = reader.meta().step;
    r.skip_lo = reader.meta().samples_seen;
  } catch (const InputError& e) {  // the same on every rank: the file's bytes are everyone's
    throw AgreedError(fmt::format("step {}: the numeric guard's rollback cannot read the last checkpoint: {}",
                                  fault_step, e.what()));
  }
  m_samples = r.skip_hi;  // past the window that led to the fault
  m_ckpt.resumed_from(r.path);  // collective: the next checkpoint's parent is this file
  return r;
}

template <class P>
void CheckpointSession<P>::resume() {
  const std::vector<std::string> candidates = m_ckpt.resume_candidates();
  std::vector<std::string> damaged;
  for (std::size_t ci = 0; ci < candidates.size(); ++ci) {
    const std::string& path = candidates[ci];
    try {
      CheckpointReader reader(path, m_comm.comm(), m_ckpt.io_deadline());  // its phases under the I/O deadline
      check_compatible(reader);
      load(reader);
      const CheckpointMeta& meta = reader.meta();
      m_ckpt.resumed_from(path);  // collective: the next checkpoint's parent is this file
      m_start_step = meta.step;
      adopt(meta);
      if (m_comm.rank() == 0) {
        auto ranks = [](std::int64_t n) { return fmt::format("{} rank{}", n, n == 1 ? "" : "s"); };
        m_resume_note = fmt::format("resumed from {}: step {}, {} samples ({} tokens) seen; written by {} "
                   "at ZeRO stage {} in {}, now {} at stage {} in {}{}",
                   path, meta.step, meta.samples_seen, meta.tokens_seen, ranks(meta.world_size), meta.zero_stage,
                   meta.precision, ranks(m_comm.size()), m_cfg.parallel.zero_stage, name_of(m_cfg.precision.mode),
                   m_scaler.enabled() ? fmt::format("; loss scale {:g}", m_scaler.scale()) : std::string());
        if (!m_ckpt.resume_reason().empty())
          m_resume_note += fmt::format("\nresume: checkpoint.resume = \"auto\": {}{}", m_ckpt.resume_reason(),
                                       damaged.empty() ? std::string()
                                                       : fmt::format("; loaded {} after {} damaged one(s)",
                                                                     std::filesystem::path(path).filename().string(),
                                                                     damaged.size()));
        if (meta.sampler_seed != m_cfg.train.seed)
          fmt::print(stderr, "warning: {}: train.seed was {} there and is {} here: the data order continues "
                     "with the new seed's\n", path, meta.sampler_seed, m_cfg.train.seed);
        const DataIdentity data = m_task.data_identity();
        if (meta.data_train_tokens != data.train_size || meta.data_path != m_cfg.data.path)
          fmt::print(stderr, "warning: {}: trained on {} ({} training {}); this run reads {} ({} {}): "
                     "the sample order is not a continuation of the checkpoint's\n", path, meta.data_path,
                     meta.data_train_tokens, data.unit, m_cfg.data.path, data.train_size, data.unit);
        std::fflush(stderr);
        if (!m_cfg.model.init_from.empty())  // resume wins: the checkpoint holds the run's own progress
          m_resume_note += fmt::format("\ninit_from: model.init_from = {} is not used: the run resumes from its "
                                       "checkpoint {} (a checkpoint to resume from wins over init_from)",
                                       m_cfg.model.init_from, path);
      }
      return;
    } catch (const IncompatibleCheckpoint&) {
      throw;
    } catch (const InputError& e) {
      if (!m_ckpt.resume_auto()) throw;
      // Every rank saw the same bytes and the same error; try the previous one.
      if (m_comm.rank() == 0) {
        if (ci + 1 < candidates.size())
          fmt::print(stderr, "warning: {}; falling back to the previous complete checkpoint of its lineage, {}\n",
                     e.what(), candidates[ci + 1]);
        else
          fmt::print(stderr, "warning: {}; no older checkpoint of its lineage is left to fall back to\n", e.what());
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
        m_cfg.source_name, damaged.size(), m_ckpt.dir()));
  if (!m_cfg.model.init_from.empty())  // a fresh start: the weights of model.init_from
    m_resume_note = start_from_exported_weights(m_cfg, m_comm, m_state_comm, m_state, m_task.data_identity());
}

template <class P>
CheckpointMeta CheckpointSession<P>::checkpoint_meta(std::int64_t done) const {
  CheckpointMeta meta;
  meta.step = done;
  meta.samples_seen = m_samples;
  const DataIdentity data = m_task.data_identity();
  meta.tokens_seen = m_samples * data.seq_len;
  meta.optimizer_updates = m_updates;
  meta.sampler_seed = m_cfg.train.seed;
  meta.world_size = m_comm.size();
  meta.zero_stage = m_cfg.parallel.zero_stage;
  meta.precision = name_of(m_cfg.precision.mode);
  meta.alignment = m_state.layout().alignment();
  meta.padded_size = m_state.layout().padded_size();
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
  meta.parent = m_ckpt.lineage_head();
  return meta;
}

namespace {

// The checkpoint's layout table: the model's tensors in the flat layout.
std::vector<CheckpointTensor> checkpoint_tensors(const ParamLayout& layout) {
  std::vector<CheckpointTensor> out;
  for (const auto& e : layout.entries()) out.push_back({e.name, e.shape, e.offset, e.numel});
  return out;
}

// Rank 0's line for a committed checkpoint; `tail` follows the commit time.
void print_commit(std::int64_t step, const std::string& path, const CheckpointWriteStats& w, double commit_s,
                  const std::string& tail) {
  const double mb = static_cast<double>(w.bytes) / 1e6, secs = w.write_s + w.sync_s;
  fmt::print("checkpoint step {}: {} | {:.2f} MB in {:.3f} s = {:.1f} MB/s (write {:.3f} s, fsync {:.3f} s; "
             "commit {:.3f} s){}\n",
             step, path, mb, secs, secs > 0 ? mb / secs : 0.0, w.write_s, w.sync_s, commit_s, tail);
  std::fflush(stdout);
}

}  // namespace

template <class P>
void CheckpointSession<P>::checkpoint_committed(std::int64_t step) {
  ++m_ckpt_count;
  m_failures_in_row = 0;
  m_last_good_step = step;
}

template <class P>
void CheckpointSession<P>::checkpoint_failed(const CheckpointIoError& e, std::int64_t step,
                                             const std::string& required_by) {
  const std::string last_good =
      m_last_good_step >= 0
          ? fmt::format("the last good checkpoint is step {} ({}/{})", m_last_good_step, m_ckpt.dir(),
                        checkpoint_file_name(m_last_good_step))
          : std::string("this run has no good checkpoint");
  if (!required_by.empty())
    throw AgreedError(fmt::format(
        "checkpoint step {} failed: {}. This job cannot do without it ({}): ending with exit code 1, not {} "
        "(a requeue would resume from older state than this job reached); {}",
        step, e.what(), required_by, kExitRequeue, last_good));
  ++m_failures_in_row;
  const std::int64_t max = m_cfg.checkpoint.max_failures;
  if (m_failures_in_row >= max)
    throw AgreedError(fmt::format(
        "checkpoint step {} failed: {}. That is {} failed checkpoint(s) in a row (checkpoint.max_failures = {}): "
        "ending the job with exit code 1; {}",
        step, e.what(), m_failures_in_row, max, last_good));
  if (m_comm.rank() == 0) {
    fmt::print(stderr,
               "warning: checkpoint step {} failed: {}. The attempt is abandoned on every rank (its .partial "
               "removed, `latest` untouched; {}); training goes on and the next scheduled checkpoint tries again "
               "({} failed in a row, checkpoint.max_failures = {})\n",
               step, e.what(), last_good, m_failures_in_row, max);
    std::fflush(stderr);
  }
}

template <class P>
void CheckpointSession<P>::save(std::int64_t done, const std::string& required_by) {
  if (m_background) {
    save_background(done, required_by);
    return;
  }
  const auto t0 = SteadyClock::now();
  const ShardView<P> s = m_state.shard_view();
  const CheckpointMeta meta = checkpoint_meta(done);
  const std::vector<CheckpointTensor> layout = checkpoint_tensors(m_state.layout());
  // The shard's vectors as a checkpoint holds them (parallel/model_state.hpp saved_spans):
  // `data` is in the backend's memory (the device's on GPUs).
  const std::vector<StateSpan> shard = saved_spans(s);
  std::vector<std::vector<unsigned char>> host(shard.size());  // host copies of device state
  std::vector<CheckpointVectorOut> vectors;
  for (std::size_t i = 0; i < shard.size(); ++i)
    vectors.push_back({std::string(shard[i].saved->name), shard[i].saved->type,
                       to_host(m_state.backend(), static_cast<const unsigned char*>(shard[i].data), shard[i].bytes(),
                               host[i])});
  std::string path;
  try {
    path = m_ckpt.commit(done, [&](const std::string& partial, const std::function<void()>& pause,
                                   IoDeadline* deadline) {
      return write_checkpoint(partial, m_comm.comm(), meta, layout, vectors, s.lo, s.hi, pause, deadline);
    });
  } catch (const CheckpointIoError& e) {
    m_ckpt_blocked_s += seconds_since(t0);
    checkpoint_failed(e, done, required_by);
    return;
  }
  if (m_comm.rank() == 0) print_commit(done, path, m_ckpt.last_stats(), m_ckpt.last_commit_seconds(), "");
  m_ckpt_blocked_s += seconds_since(t0);
  checkpoint_committed(done);
}

template <class P>
void CheckpointSession<P>::save_background(std::int64_t done, const std::string& required_by) {
  if (m_background->in_flight()) complete_background();  // at most one write in flight
  const auto t_stage = SteadyClock::now();
  const ShardView<P> s = m_state.shard_view();
  const CheckpointMeta meta = checkpoint_meta(done);
  const std::vector<CheckpointTensor> layout = checkpoint_tensors(m_state.layout());
  // Copy the shard into the staging buffer (from the device on GPUs).
  const std::span<unsigned char> buffer = m_background->staging();
  std::size_t used = 0;
  std::vector<CheckpointVectorOut> vectors;
  for (const StateSpan& v : saved_spans(s)) {
    SHARDTRAIN_CHECK(used + v.bytes() <= buffer.size(), "checkpoint staging buffer too small");
    unsigned char* at = buffer.data() + used;
    if (m_state.backend().memory() == nullptr) std::memcpy(at, v.data, v.bytes());
    else m_state.backend().copy_to_host(at, v.data, v.bytes());
    vectors.push_back({std::string(v.saved->name), v.saved->type, at});
    used += v.bytes();
  }
  const std::int64_t lo = s.lo, hi = s.hi;
  m_ckpt.checkpoint_started();
  const CheckpointManager& ckpt = m_ckpt;
  m_background->start(done, [&ckpt, done, meta, layout, vectors, lo, hi](MPI_Comm comm) {
    return ckpt.commit_on(comm, done, [&](const std::string& partial, const std::function<void()>& pause,
                                          IoDeadline* deadline) {
      return write_checkpoint(partial, comm, meta, layout, vectors, lo, hi, pause, deadline);
    });
  });
  m_background_required_by = required_by;
  // The training thread may now wait on the writer (the HDF5 lock), which the
  // I/O deadline watches: the collective watchdog allows that much longer.
  if (CollectiveWatchdog* w = m_comm.watchdog()) w->set_grace(m_cfg.checkpoint.io_timeout_s);
  m_staged_s = seconds_since(t_stage);
  m_ckpt_blocked_s += m_staged_s;
  if (m_comm.rank() == 0) {
    fmt::print("checkpoint step {}: staged {:.2f} MB in {:.3f} s; writing in the background\n", done,
               static_cast<double>(used) / 1e6, m_staged_s);
    std::fflush(stdout);
  }
}

template <class P>
void CheckpointSession<P>::complete_background() {
  const auto t0 = SteadyClock::now();
  const std::int64_t step = m_background->step();
  CheckpointManager::Committed c;
  try {
    c = m_background->finish(m_comm.comm());
  } catch (const CheckpointIoError& e) {
    if (CollectiveWatchdog* w = m_comm.watchdog()) w->set_grace(0);
    m_ckpt_blocked_s += seconds_since(t0);
    checkpoint_failed(e, step, m_background_required_by);
    return;
  }
  if (CollectiveWatchdog* w = m_comm.watchdog()) w->set_grace(0);
  const double waited = seconds_since(t0);
  m_ckpt_blocked_s += waited;
  checkpoint_committed(step);
  m_ckpt.record(c);
  if (m_comm.rank() == 0)
    print_commit(step, c.path, c.stats, c.seconds,
                 fmt::format(" in the background | training blocked {:.3f} s (staging {:.3f} s, waiting {:.3f} s)",
                             m_staged_s + waited, m_staged_s, waited));
}

template <class P>
void CheckpointSession<P>::finish_checkpoints() {
  if (m_background && m_background->in_flight()) complete_background();
}

template <class P>
double CheckpointSession<P>::checkpoint_bytes() const {
  return static_cast<double>(m_state.layout().padded_size()) *
         static_cast<double>(saved_bytes_per_element(dtype_of<P>()));
}

template <class P>
Boundary CheckpointSession<P>::agree_at_boundary(StopAgreement& stop, double step_s) {
  bool writes_done = false;
  const Boundary at = stop.agree(step_s, m_ckpt, m_background.get(), &writes_done);
  if (writes_done) complete_background();  // every rank's writer is done: commit it
  return at;
}

template class CheckpointSession<float>;
template class CheckpointSession<f16>;
template class CheckpointSession<bf16>;

}  // namespace shardtrain
