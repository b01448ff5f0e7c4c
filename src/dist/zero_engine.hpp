// shardtrain/dist/zero_engine.hpp
// Owns the model state of one rank under ZeRO (Rajbhandari et al. 2020) and
// serves it to the model through ParamProvider:
//   stage 0  full parameters, full gradients; gradients all-reduced; the
//            optimizer updates the whole vector on every rank.
//   stage 1  full parameters, full gradients; gradients reduce-scattered (in
//            place) once per step; the optimizer updates the rank's shard;
//            parameters all-gathered (in place) after the update.
//   stage 2  full parameters; gradients live in group-sized staging buckets
//            only while the backward pass writes them; each bucket is
//            reduce-scattered to its owners as soon as the model reports it
//            ready (non-blocking, overlapped with the rest of backward) and
//            added into the rank's gradient shard.
//   stage 3  stage 2, and parameters too are sharded: each group is gathered
//            just before use into a bucket and freed after; the group the
//            model says it needs next is prefetched while the current one computes.
// A shard is the contiguous range layout.shard_range(rank) of the padded flat
// vector; buckets straddling shard boundaries use variable-block collectives.
// Optimizer moments live with the optimizer (AdamW over optimizer_range()).
// Memory: every buffer is tracked; stage buffers (staging, gather) are in the
// Communication category, declared by bucket_elems().
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/memory.hpp"
#include "dist/communicator.hpp"
#include "model/param_layout.hpp"
#include "model/param_provider.hpp"

namespace shardtrain {

class AdamW;

class ZeroEngine final : public ParamProvider<float> {
 public:
  // overlap (stages 2-3): start gradient reductions without waiting for them.
  ZeroEngine(const ParamLayout& layout, int stage, Communicator& comm, MemoryTracker& memory,
             bool overlap = true);
  ~ZeroEngine() override;

  int stage() const { return m_stage; }
  // The range of the flat vector this rank's optimizer updates.
  std::pair<std::int64_t, std::int64_t> optimizer_range() const;
  // The parameters this rank stores: [lo, hi) of the flat vector, to initialise
  // (stages 0-2: the whole vector; stage 3: the shard).
  std::pair<std::int64_t, std::int64_t> stored_param_range() const;
  float* stored_params();

  // ParamProvider
  float* acquire_params(int group) override;
  void release_params(int group) override;
  float* acquire_grads(int group) override;
  void grads_ready(int group) override;
  void prefetch(int group) override;

  // Zeroes the gradient accumulators; call before the first micro-batch of a step.
  void begin_step();
  // Completes every gradient reduction of the step; returns the global squared
  // L2 norm of the gradient (identical on every rank).
  double finish_gradients();
  // grads *= grad_scale, AdamW on optimizer_range(), then (stages 1, 2) the
  // parameters are all-gathered again.
  void apply_optimizer(AdamW& optim, double lr, float grad_scale, std::int64_t step);

  // Elements of the stage buffers (staging + gather), for the memory plan.
  static std::int64_t bucket_elems(const ParamLayout& layout, int stage);

 private:
  struct Bucket {
    TrackedBuffer<float> data;     // group-sized staging (grads) or gather (params) storage
    TrackedBuffer<float> recv;     // reduce-scatter result (gradient buckets)
    int group = -1;                // group held, -1 when free
    int users = 0;                 // acquisitions not yet released (gather buckets)
    std::uint64_t order = 0;       // grads: start order of the reduction; params: last use
    RequestPtr pending;            // in-flight collective on this bucket
  };

  std::int64_t group_size(int g) const;
  std::vector<std::size_t> shard_counts(int g) const;  // elements of group g per rank (set-up)
  std::pair<std::int64_t, std::int64_t> shard_part(int g) const;  // group g ∩ own shard
  Bucket& take_grad_bucket(int g);
  Bucket* oldest_pending_grad_bucket();
  void complete_grad_bucket(Bucket& b);
  Bucket* find_param_bucket(int g);
  Bucket& take_param_bucket(int g);
  void start_gather(Bucket& b, int g);

  const ParamLayout& m_layout;
  int m_stage;
  Communicator& m_comm;
  bool m_overlap;
  std::int64_t m_lo = 0, m_hi = 0;     // this rank's shard

  TrackedBuffer<float> m_params;        // stages 0-2: full; stage 3: shard
  TrackedBuffer<float> m_grads;         // stages 0-1: full; stages 2-3: shard accumulator
  std::vector<std::vector<std::size_t>> m_counts;  // shard_counts(g) per group, fixed by the layout
  std::vector<Bucket> m_grad_buckets;   // stages 2-3: [0] embeddings group, [1], [2] the rest
  std::vector<Bucket> m_param_buckets;  // stage 3: [0] embeddings group, [1], [2] the rest
  std::uint64_t m_clock = 0;            // orders bucket events
};

}  // namespace shardtrain
