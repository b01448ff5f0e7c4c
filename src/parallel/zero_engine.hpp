// shardtrain/parallel/zero_engine.hpp
// Owns the communication of ZeRO (Rajbhandari et al. 2020) for one rank and
// serves the model state (parallel/model_state.hpp: which vectors a stage keeps
// whole and which as the rank's shard) to the model through ParamProvider:
//   stage 0  full parameters, full gradients; gradients all-reduced; the
//            optimizer updates the whole vector on every rank.
//   stage 1  full parameters, full gradients; gradients reduce-scattered (in
//            place) once per step; the optimizer updates the rank's shard;
//            parameters all-gathered (in place) after the update.
//   stage 2  full parameters; gradients live in bucket-sized staging buffers
//            only while the backward pass writes them; each bucket is
//            reduce-scattered (in place) to its owners as soon as the model
//            has reported every group in it ready (non-blocking, overlapped
//            with the rest of backward) and added into the rank's gradient shard.
//   stage 3  stage 2, and parameters too are sharded: each bucket is gathered
//            just before use and freed after; the bucket the model says it
//            needs next is prefetched while the current one computes.
// Buckets: consecutive parameter groups (a transformer block each) coalesced
// while the bucket stays within bucket_mb MiB; a group larger than that is a
// bucket alone (bucket_mb = 0: one bucket per group). The model never sees
// buckets: it asks for groups.
// A shard is the contiguous range layout.shard_range(rank) of the padded flat
// vector; buckets straddling shard boundaries use variable-block collectives.
// The engine owns no model state: parameters and gradients are ModelState's;
// the optimizer (optim/adamw.hpp) updates ModelState::optimizer_view() between
// finish_gradients() and params_updated().
// Precision: P is the storage type of parameters and gradients (float, f16 or
// bf16); reductions of 16-bit gradients combine in fp32 and round once per
// combine (Communicator F16/BF16).
// Memory: the bucket pools (three gradient buffers in stages 2-3, three gather
// buffers in stage 3, sized by the largest buckets) are tracked in the
// Communication category, declared by bucket_elems().
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/memory.hpp"
#include "core/half.hpp"
#include "parallel/communicator.hpp"
#include "parallel/model_state.hpp"
#include "core/param_layout.hpp"
#include "core/param_provider.hpp"

namespace shardtrain {

// The buckets for elements of `elem_bytes` bytes: [first, last] group of each,
// in layout order.
std::vector<std::pair<int, int>> zero_plan_buckets(const ParamLayout& layout, double bucket_mb,
                                                   std::size_t elem_bytes);
// Elements of bucket [first, last] (groups) in each rank's shard of `layout`
// (finalized for `world` ranks), in rank order: the per-rank counts of the
// bucket's variable-block reduce-scatter and all-gather. Rank r receives
// counts[r] elements; a bucket wholly inside rank 0's shard (the embedding, say)
// gives {size, 0, ...}. ZeroEngine and the collective-scratch probe
// (rundir/process_memory.hpp) both use it.
std::vector<std::size_t> zero_bucket_counts(const ParamLayout& layout, int first, int last, int world);
// Elements of the bucket pools (gradient staging + parameter gather), for the memory plan.
std::int64_t zero_bucket_elems(const ParamLayout& layout, int stage, double bucket_mb,
                               std::size_t elem_bytes);

template <class P>
class ZeroEngine final : public ParamProvider<P> {
 public:
  struct Options {
    bool overlap = true;    // stages 2-3: start gradient reductions without waiting for them
    double bucket_mb = 0;   // coalesce consecutive groups up to this many MiB (0: one per group)
  };
  // Serves `state` (its stage, layout and backend; it outlives the engine);
  // `comm` must move the backend's memory (NcclCommunicator for a CUDA
  // backend). The bucket pools are tracked in `memory`.
  // Stream order: before a collective reads what kernels wrote the engine calls
  // backend.collectives_after_compute(); after waiting for a collective whose
  // result kernels read, backend.compute_after_collectives().
  ZeroEngine(ModelState<P>& state, const Options& options, Communicator& comm, MemoryTracker& memory);
  ~ZeroEngine() override;

  int stage() const { return m_stage; }

  // ParamProvider
  P* acquire_params(int group) override;
  void release_params(int group) override;
  P* acquire_grads(int group) override;
  void grads_ready(int group) override;
  // Stages 0-1: no grads_ready(g) since begin_step; stages 2-3: none since the
  // group's bucket took a (zeroed) staging buffer.
  bool grads_zero(int group) const override;
  void prefetch(int group) override;

  // Starts a step's gradients: stages 0-1 zero them; stages 2-3 let each span's
  // first reduction overwrite the shard's part (zeroing the shard only the first
  // time). Call before the first micro-batch of a step.
  void begin_step();
  // Completes every gradient reduction of the step; returns the global squared
  // L2 norm of the gradient (identical on every rank; inf or NaN when any
  // rank's shard holds an inf or NaN: the one scalar all-reduce is also the
  // found-inf reduction).
  double finish_gradients();
  // After finish_gradients: the flat index of the first non-finite gradient
  // over all ranks (each rank scans ModelState::optimizer_range()), or -1.
  // Collective.
  std::int64_t first_non_finite_gradient();
  // Test hook: the next gradient reduction this rank starts (stages 2-3) or the
  // step's reduction (stages 0-1) carries +inf in its first element, so an
  // overflow reaches the reduction exactly as a real one would.
  void plant_overflow() { m_plant_overflow = true; }
  // Test hook: as plant_overflow, with a NaN instead of +inf.
  void plant_nan() {
    m_plant_overflow = true;
    m_plant_nan = true;
  }
  // The numeric guard's diagnosis of a non-finite step (session/numeric_guard.hpp):
  // while on, every gradient reduction first scans this rank's own contribution
  // (a pass over it: only for the replay of a faulty step, never in a normal
  // one). local_non_finite(): the flat index of the first inf/NaN this rank
  // contributed since begin_step, or -1.
  void check_local_contributions(bool on) { m_check_local = on; }
  std::int64_t local_non_finite() const { return m_local_first; }
  // After the optimizer updated ModelState::optimizer_view(): stages 1-2
  // all-gather the parameters (in place); stage 3 drops the gathered buckets,
  // which are stale now (none may be acquired).
  void params_updated();

  Backend& backend() { return m_backend; }

  int num_buckets() const { return static_cast<int>(m_spans.size()); }

 private:
  // One bucket of the plan: groups [first, last], elements [lo, hi) of the flat vector.
  struct Span {
    int first = 0, last = 0;
    std::int64_t lo = 0, hi = 0;
    std::vector<std::size_t> counts;  // elements of [lo, hi) per rank's shard
    std::int64_t own_displ = 0;       // offset of this rank's block within the bucket
  };
  // A pool buffer holding one span's gradients (staging) or parameters (gather).
  struct Buffer {
    TrackedBuffer<P> data;
    int span = -1;                 // span held, -1 when free
    int users = 0;                 // params: acquisitions not yet released
    int ready = 0;                 // grads: groups reported ready
    std::uint64_t order = 0;       // grads: start order of the reduction; params: last use
    RequestPtr pending;            // in-flight collective on this buffer
  };

  std::int64_t span_size(int s) const { return m_spans[s].hi - m_spans[s].lo; }
  std::int64_t offset_in_span(int g) const;
  Buffer& take_grad_buffer(int s);
  Buffer* active_grad_buffer(int s);
  Buffer* oldest_pending_grad_buffer();
  void complete_grad_buffer(Buffer& b);
  Buffer* find_param_buffer(int s);
  Buffer& take_param_buffer(int s);
  void start_gather(Buffer& b, int s);

  ModelState<P>& m_state;
  const ParamLayout& m_layout;
  int m_stage;
  Communicator& m_comm;
  Backend& m_backend;
  VectorOps<P>& m_ops;
  bool m_overlap;
  std::int64_t m_lo = 0, m_hi = 0;     // this rank's shard

  std::vector<Span> m_spans;            // the buckets, fixed by layout and bucket_mb
  std::vector<int> m_span_of_group;
  std::vector<Buffer> m_grad_buffers;   // stages 2-3: sized [largest, second, second] span
  std::vector<Buffer> m_param_buffers;  // stage 3: the same sizes
  std::uint64_t m_clock = 0;            // orders buffer events
  // Per group: 1 once grads_ready reported it since its gradient memory was last
  // zeroed (begin_step, or its bucket's take_grad_buffer); 1 before any begin_step.
  std::vector<char> m_grads_written;
  // Stages 2-3, per span: 1 once a reduction of the step has written its part of
  // the shard's gradients (the next one adds); reset by begin_step.
  std::vector<char> m_shard_written;
  bool m_shard_zeroed = false;  // the shard's gradients were zeroed once (stages 2-3)
  bool m_plant_overflow = false;
  bool m_plant_nan = false;      // the planted value is a NaN (plant_nan), else +inf
  bool m_check_local = false;    // check_local_contributions
  std::int64_t m_local_first = -1;
  // The planted +inf or NaN at backend pointer x (the test hooks).
  void plant(P* x);
  // check_local_contributions: the first inf/NaN of n gradients starting at flat index lo.
  void scan_local(const P* x, std::int64_t lo, std::int64_t n);
};

extern template class ZeroEngine<float>;
extern template class ZeroEngine<f16>;
extern template class ZeroEngine<bf16>;

}  // namespace shardtrain
