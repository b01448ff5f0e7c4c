// shardtrain/parallel/model_state.hpp
// Owns the model state of one rank: every vector of the flat ParamLayout the
// rank keeps under ZeRO stage s (Psi padded elements; the shard is
// layout.shard_range(rank), a contiguous range), by the table of
// core/state_vectors.hpp (which vectors, their element types, which stages
// keep each whole and which only the shard, the names a checkpoint saves
// them under). A whole vector is the stage's replicated copy: every rank holds all of it and
// the collectives keep it equal on every rank (ZeroEngine during training,
// replicate_shard() after a checkpoint load). The memory plan
// (plan/memory_plan.cpp) sizes the same table.
// Views, not offsets: callers ask for a ShardView of one contiguous range
// [lo, hi) -- it points at element lo of every vector -- or for element i of
// the flat vector in the parameters or gradients (params_at, grads_at); no
// caller computes where one vector's range starts inside another's.
// The fp32 weights are the master copy of a 16-bit model and the parameters
// themselves in fp32 (ShardView::master then aliases ShardView::params).
// Memory: every vector lives in the backend's memory (device pointers on a
// CUDA backend: never dereferenced on the host) and is a TrackedBuffer of the
// category in the table.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/memory.hpp"
#include "parallel/communicator.hpp"
#include "core/half.hpp"
#include "core/param_layout.hpp"
#include "core/state_vectors.hpp"

namespace shardtrain {

// One contiguous range [lo, hi) of the flat vector in every state vector; each
// span holds hi - lo elements starting at element lo (backend memory).
template <class P>
struct ShardView {
  std::int64_t lo = 0, hi = 0;
  std::span<P> params;                   // compute precision
  std::span<P> grads;
  std::span<float> master;               // the fp32 weights (P = float: params itself)
  std::span<float> exp_avg, exp_avg_sq;  // AdamW's first and second moments
  std::int64_t size() const { return hi - lo; }
  // The span of `v` (Master: params itself for P = float).
  void* data(StateVector v) const;
};

// One vector of a view as a checkpoint saves it: its name and element type
// (core/state_vectors.hpp) and its elements (backend memory).
struct StateSpan {
  const SavedVector* saved;
  void* data;
  std::size_t count;
  std::size_t bytes() const { return count * dtype_size(saved->type); }
};

// What a checkpoint holds of view `s`, in file order (saved_vectors of P).
template <class P>
std::vector<StateSpan> saved_spans(const ShardView<P>& s) {
  std::vector<StateSpan> out;
  for (const SavedVector* v : saved_vectors(dtype_of<P>()))
    out.push_back({v, s.data(v->vector), static_cast<std::size_t>(s.size())});
  return out;
}

template <class P>
class ModelState {
 public:
  using Range = std::pair<std::int64_t, std::int64_t>;
  // A 16-bit model keeps fp32 master weights; an fp32 model's weights are its parameters.
  static constexpr bool kMaster = !std::is_same_v<P, float>;

  // Allocates every vector of the table for `rank` (zeroed). `layout` is
  // finalized for the world size and outlives the state; backend: where the
  // vectors live and the vector kernels run (nullptr: the host).
  ModelState(const ParamLayout& layout, int zero_stage, int rank, MemoryTracker& memory,
             Backend* backend = nullptr);
  ModelState(const ModelState&) = delete;
  ModelState& operator=(const ModelState&) = delete;

  const ParamLayout& layout() const { return m_layout; }
  int zero_stage() const { return m_stage; }
  Backend& backend() const { return m_backend; }

  // Ranges of the flat vector, [first, second):
  Range shard_range() const { return {m_lo, m_hi}; }  // this rank's shard
  Range param_range() const;      // the parameters kept (whole at stages 0-2, the shard at 3)
  Range grad_range() const;       // the gradients kept (whole at stages 0-1, the shard at 2-3)
  Range optimizer_range() const;  // the fp32 weights and moments AdamW updates (whole at 0, the shard at 1-3)

  // The parameters / gradients kept: element param_range().first /
  // grad_range().first first.
  std::span<P> params() { return m_params.span(); }
  std::span<P> grads() { return m_grads.span(); }
  // Element i of the flat vector in the parameters / gradients; i in
  // [first, second] of param_range() / grad_range() (second: one past the end).
  P* params_at(std::int64_t i);
  P* grads_at(std::int64_t i);

  // Every vector over [r.first, r.second), which must lie inside each vector's range.
  ShardView<P> view(Range r);
  // What a checkpoint holds of this rank: the shard.
  ShardView<P> shard_view() { return view(shard_range()); }
  // What AdamW updates: optimizer_range().
  ShardView<P> optimizer_view() { return view(optimizer_range()); }

  // 16-bit models: master := the parameters widened to fp32 over
  // optimizer_range() (after the parameters are initialised); fp32: nothing.
  void init_master();
  // After shard_view() was filled (a checkpoint load): every rank all-gathers
  // the stage's whole vectors from the ranks' shards -- the parameters at
  // stages 0-2, the moments and master weights at stage 0. Collective over
  // `comm`, which moves backend memory.
  void replicate_shard(Communicator& comm);

 private:
  const ParamLayout& m_layout;
  int m_stage;
  Backend& m_backend;
  std::int64_t m_lo = 0, m_hi = 0;  // this rank's shard

  TrackedBuffer<P> m_params;         // param_range()
  TrackedBuffer<P> m_grads;          // grad_range()
  TrackedBuffer<float> m_exp_avg;    // optimizer_range()
  TrackedBuffer<float> m_exp_avg_sq; // optimizer_range()
  TrackedBuffer<float> m_master;     // optimizer_range(); empty for P = float
};

extern template struct ShardView<float>;
extern template struct ShardView<f16>;
extern template struct ShardView<bf16>;
extern template class ModelState<float>;
extern template class ModelState<f16>;
extern template class ModelState<bf16>;

}  // namespace shardtrain
