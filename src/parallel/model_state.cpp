// ModelState: the rank's state vectors by ZeRO stage, and views of one range of them.
#include "parallel/model_state.hpp"

#include <string>

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardtrain {

namespace {

bool inside(std::pair<std::int64_t, std::int64_t> r, std::pair<std::int64_t, std::int64_t> in) {
  return in.first <= r.first && r.first <= r.second && r.second <= in.second;
}

std::string range_text(std::pair<std::int64_t, std::int64_t> r) {
  return fmt::format("[{}, {})", r.first, r.second);
}

}  // namespace

template <class P>
ModelState<P>::ModelState(const ParamLayout& layout, int zero_stage, int rank, MemoryTracker& memory,
                          Backend* backend)
    : m_layout(layout), m_stage(zero_stage), m_backend(backend ? *backend : host_backend()) {
  SHARDTRAIN_CHECK(m_stage >= 0 && m_stage <= 3, "ZeRO stage must be 0, 1, 2 or 3");
  SHARDTRAIN_CHECK(rank >= 0 && rank < layout.world_size(), "rank outside the layout's world size");
  std::tie(m_lo, m_hi) = layout.shard_range(rank);
  MemorySpace* space = m_backend.memory();
  auto size = [](Range r) { return static_cast<std::size_t>(r.second - r.first); };
  m_params = TrackedBuffer<P>(memory, category(StateVector::Params), size(param_range()), space);
  m_grads = TrackedBuffer<P>(memory, category(StateVector::Grads), size(grad_range()), space);
  const std::size_t n = size(optimizer_range());
  m_exp_avg = TrackedBuffer<float>(memory, category(StateVector::ExpAvg), n, space);
  m_exp_avg_sq = TrackedBuffer<float>(memory, category(StateVector::ExpAvgSq), n, space);
  if constexpr (kMaster) m_master = TrackedBuffer<float>(memory, category(StateVector::Master), n, space);
}

template <class P>
typename ModelState<P>::Range ModelState<P>::param_range() const {
  if (sharded(StateVector::Params, m_stage)) return {m_lo, m_hi};
  return {0, m_layout.padded_size()};
}

template <class P>
typename ModelState<P>::Range ModelState<P>::grad_range() const {
  if (sharded(StateVector::Grads, m_stage)) return {m_lo, m_hi};
  return {0, m_layout.padded_size()};
}

template <class P>
typename ModelState<P>::Range ModelState<P>::optimizer_range() const {
  // master, exp_avg and exp_avg_sq: one rule (core/state_vectors.hpp)
  static_assert(shard_from_stage(StateVector::Master) == shard_from_stage(StateVector::ExpAvg) &&
                shard_from_stage(StateVector::ExpAvg) == shard_from_stage(StateVector::ExpAvgSq));
  if (sharded(StateVector::ExpAvg, m_stage)) return {m_lo, m_hi};
  return {0, m_layout.padded_size()};
}

template <class P>
void* ShardView<P>::data(StateVector v) const {
  switch (v) {
    case StateVector::Params: return params.data();
    case StateVector::Grads: return grads.data();
    case StateVector::Master: return master.data();
    case StateVector::ExpAvg: return exp_avg.data();
    case StateVector::ExpAvgSq: return exp_avg_sq.data();
  }
  return nullptr;
}

template <class P>
P* ModelState<P>::params_at(std::int64_t i) {
  const Range r = param_range();
  SHARDTRAIN_CHECK(r.first <= i && i <= r.second,
                   fmt::format("element {} is not in the parameters kept, {}", i, range_text(r)));
  return m_params.data() + (i - r.first);
}

template <class P>
P* ModelState<P>::grads_at(std::int64_t i) {
  const Range r = grad_range();
  SHARDTRAIN_CHECK(r.first <= i && i <= r.second,
                   fmt::format("element {} is not in the gradients kept, {}", i, range_text(r)));
  return m_grads.data() + (i - r.first);
}

template <class P>
ShardView<P> ModelState<P>::view(Range r) {
  const Range o = optimizer_range();
  SHARDTRAIN_CHECK(inside(r, param_range()) && inside(r, grad_range()) && inside(r, o),
                   fmt::format("range {} is not kept whole by every state vector at ZeRO stage {}", range_text(r),
                               m_stage));
  const auto n = static_cast<std::size_t>(r.second - r.first);
  ShardView<P> v;
  v.lo = r.first;
  v.hi = r.second;
  v.params = {params_at(r.first), n};
  v.grads = {grads_at(r.first), n};
  v.exp_avg = {m_exp_avg.data() + (r.first - o.first), n};
  v.exp_avg_sq = {m_exp_avg_sq.data() + (r.first - o.first), n};
  if constexpr (kMaster) v.master = {m_master.data() + (r.first - o.first), n};
  else v.master = v.params;
  return v;
}

template <class P>
void ModelState<P>::init_master() {
  if constexpr (kMaster) {
    const ShardView<P> v = optimizer_view();
    m_backend.vector_ops<P>().widen(v.params.data(), v.master.data(), v.size());
  }
}

template <class P>
void ModelState<P>::replicate_shard(Communicator& comm) {
  const ShardView<P> s = shard_view();
  const auto n = static_cast<std::size_t>(s.size());
  // In place: the rank's block sits at its own place in the whole vector.
  auto gather = [&](auto* whole, const auto* shard, DType type) { comm.all_gather(shard, whole, n, type); };
  if (!sharded(StateVector::Params, m_stage)) gather(params_at(0), s.params.data(), dtype_of<P>());
  if (!sharded(StateVector::ExpAvg, m_stage)) {
    gather(m_exp_avg.data(), s.exp_avg.data(), DType::F32);
    gather(m_exp_avg_sq.data(), s.exp_avg_sq.data(), DType::F32);
    if constexpr (kMaster) gather(m_master.data(), s.master.data(), DType::F32);
  }
}

template struct ShardView<float>;
template struct ShardView<f16>;
template struct ShardView<bf16>;
template class ModelState<float>;
template class ModelState<f16>;
template class ModelState<bf16>;

}  // namespace shardtrain
