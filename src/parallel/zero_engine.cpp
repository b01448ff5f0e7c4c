// ZeroEngine: shards, buckets and the collectives of ZeRO stages 0-3.
// Determinism: gradient buckets complete strictly in the order they were
// started (FIFO), so the shard accumulator adds micro-batches in a fixed order.
#include "parallel/zero_engine.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>

#include "backend/host_staging.hpp"
#include "core/error.hpp"

namespace shardtrain {

namespace {

// Sizes of a buffer pool: the largest bucket, then twice the second largest
// (one buffer held through backward for the tied embeddings, one being written,
// one in flight); fewer when there are fewer buckets.
std::vector<std::int64_t> pool_sizes(std::vector<std::int64_t> sizes) {
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  std::vector<std::int64_t> pool;
  for (std::size_t i = 0; i < std::min<std::size_t>(3, sizes.size()); ++i)
    pool.push_back(sizes[std::min<std::size_t>(i, 1)]);
  return pool;
}

std::vector<std::int64_t> span_sizes(const ParamLayout& layout, double bucket_mb,
                                     std::size_t elem_bytes) {
  std::vector<std::int64_t> sizes;
  for (const auto& [first, last] : zero_plan_buckets(layout, bucket_mb, elem_bytes))
    sizes.push_back(layout.group_range(last).second - layout.group_range(first).first);
  return sizes;
}

}  // namespace

std::vector<std::pair<int, int>> zero_plan_buckets(const ParamLayout& layout, double bucket_mb,
                                                   std::size_t elem_bytes) {
  const double cap = bucket_mb * 1024.0 * 1024.0 / static_cast<double>(elem_bytes);  // elements
  std::vector<std::pair<int, int>> spans;
  for (int g = 0; g < layout.num_groups(); ++g) {
    if (!spans.empty()) {
      const std::int64_t merged = layout.group_range(g).second -
                                  layout.group_range(spans.back().first).first;
      if (static_cast<double>(merged) <= cap) {
        spans.back().second = g;
        continue;
      }
    }
    spans.emplace_back(g, g);
  }
  return spans;
}

std::vector<std::size_t> zero_bucket_counts(const ParamLayout& layout, int first, int last, int world) {
  SHARDTRAIN_CHECK(layout.world_size() == world, "layout padded for another world size");
  SHARDTRAIN_CHECK(0 <= first && first <= last && last < layout.num_groups(), "bucket outside the layout's groups");
  const std::int64_t b_lo = layout.group_range(first).first, b_hi = layout.group_range(last).second;
  std::vector<std::size_t> counts;
  for (int r = 0; r < world; ++r) {
    const auto [lo, hi] = layout.shard_range(r);
    counts.push_back(static_cast<std::size_t>(std::max<std::int64_t>(0, std::min(b_hi, hi) - std::max(b_lo, lo))));
  }
  return counts;
}

std::int64_t zero_bucket_elems(const ParamLayout& layout, int stage, double bucket_mb,
                               std::size_t elem_bytes) {
  if (stage < 2) return 0;
  std::int64_t total = 0;
  for (std::int64_t size : pool_sizes(span_sizes(layout, bucket_mb, elem_bytes)))
    total += (stage == 3 ? 2 : 1) * size;
  return total;
}

template <class P>
ZeroEngine<P>::ZeroEngine(ModelState<P>& state, const Options& options, Communicator& comm, MemoryTracker& memory)
    : m_state(state),
      m_layout(state.layout()),
      m_stage(state.zero_stage()),
      m_comm(comm),
      m_backend(state.backend()),
      m_ops(m_backend.vector_ops<P>()),
      m_overlap(options.overlap) {
  const ParamLayout& layout = m_layout;
  SHARDTRAIN_CHECK(options.bucket_mb >= 0, "bucket_mb must be >= 0");
  SHARDTRAIN_CHECK(layout.world_size() == comm.size(), "layout padded for another world size");
  std::tie(m_lo, m_hi) = state.shard_range();
  SHARDTRAIN_CHECK(state.shard_range() == layout.shard_range(comm.rank()), "the model state is another rank's");
  MemorySpace* space = m_backend.memory();

  m_span_of_group.assign(layout.num_groups(), -1);
  m_grads_written.assign(static_cast<std::size_t>(layout.num_groups()), char(1));
  for (const auto& [first, last] : zero_plan_buckets(layout, options.bucket_mb, sizeof(P))) {
    Span sp;
    sp.first = first;
    sp.last = last;
    sp.lo = layout.group_range(first).first;
    sp.hi = layout.group_range(last).second;
    sp.counts = zero_bucket_counts(layout, first, last, comm.size());
    std::int64_t displ = 0;
    for (int r = 0; r < comm.rank(); ++r) displ += static_cast<std::int64_t>(sp.counts[static_cast<std::size_t>(r)]);
    sp.own_displ = displ;
    for (int g = first; g <= last; ++g) m_span_of_group[g] = static_cast<int>(m_spans.size());
    m_spans.push_back(std::move(sp));
  }
  m_shard_written.assign(m_spans.size(), char(1));  // until begin_step: accumulate, as before

  std::vector<std::int64_t> sizes;
  for (int s = 0; s < num_buckets(); ++s) sizes.push_back(span_size(s));
  auto make_pool = [&](std::vector<Buffer>& pool) {
    for (std::int64_t size : pool_sizes(sizes)) {
      Buffer b;
      b.data = TrackedBuffer<P>(memory, MemCategory::Communication, size, space);
      pool.push_back(std::move(b));
    }
  };
  if (m_stage >= 2) make_pool(m_grad_buffers);
  if (m_stage == 3) make_pool(m_param_buffers);
}

template <class P>
ZeroEngine<P>::~ZeroEngine() {
  // Requests wait in their destructors; make sure none outlives its buffers.
  for (auto& b : m_grad_buffers) b.pending.reset();
  for (auto& b : m_param_buffers) b.pending.reset();
}

template <class P>
std::int64_t ZeroEngine<P>::offset_in_span(int g) const {
  return m_layout.group_range(g).first - m_spans[m_span_of_group[g]].lo;
}

// ---------------------------------------------------------------- gradients

template <class P>
typename ZeroEngine<P>::Buffer& ZeroEngine<P>::take_grad_buffer(int s) {
  const std::int64_t need = span_size(s);
  for (;;) {
    Buffer* best = nullptr;
    for (auto& b : m_grad_buffers)
      if (b.span < 0 && static_cast<std::int64_t>(b.data.size()) >= need &&
          (!best || b.data.size() < best->data.size()))
        best = &b;
    if (best) {
      best->span = s;
      best->ready = 0;
      Profiler::Scope timed(m_backend.profiler(), ProfileOp::GradZero);
      m_ops.fill_zero(best->data.data(), need);
      for (int g = m_spans[s].first; g <= m_spans[s].last; ++g) m_grads_written[g] = 0;
      return *best;
    }
    // All fitting buffers are busy: complete the oldest in-flight reduction.
    Buffer* oldest = oldest_pending_grad_buffer();
    SHARDTRAIN_CHECK(oldest != nullptr, "no gradient buffer free for bucket " + std::to_string(s));
    complete_grad_buffer(*oldest);
  }
}

template <class P>
typename ZeroEngine<P>::Buffer* ZeroEngine<P>::active_grad_buffer(int s) {
  for (auto& b : m_grad_buffers)
    if (b.span == s && !b.pending) return &b;
  return nullptr;
}

template <class P>
typename ZeroEngine<P>::Buffer* ZeroEngine<P>::oldest_pending_grad_buffer() {
  Buffer* oldest = nullptr;
  for (auto& b : m_grad_buffers)
    if (b.pending && (!oldest || b.order < oldest->order)) oldest = &b;
  return oldest;
}

template <class P>
void ZeroEngine<P>::complete_grad_buffer(Buffer& b) {
  Profiler::Scope timed(m_backend.profiler(), ProfileOp::GradReduce);
  b.pending->wait();
  b.pending.reset();
  m_backend.compute_after_collectives();
  const Span& sp = m_spans[b.span];
  const std::int64_t count = static_cast<std::int64_t>(sp.counts[m_comm.rank()]);
  if (count > 0) {
    // The reduced block sits at the rank's own place in the buffer (in place). The
    // step's first reduction of the span writes the shard's gradients, later ones
    // (micro-batches) add to them: the bits of adding to zeros, without the zeros.
    P* dst = m_state.grads_at(std::max(sp.lo, m_lo));
    if (m_shard_written[b.span])
      m_ops.accumulate(b.data.data() + sp.own_displ, dst, count);
    else
      m_ops.copy(b.data.data() + sp.own_displ, dst, count);
  }
  m_shard_written[b.span] = 1;
  b.span = -1;
}

template <class P>
P* ZeroEngine<P>::acquire_grads(int g) {
  if (m_stage < 2) return m_state.grads_at(m_layout.group_range(g).first);
  const int s = m_span_of_group[g];
  Buffer* b = active_grad_buffer(s);
  if (!b) b = &take_grad_buffer(s);
  return b->data.data() + offset_in_span(g);
}

template <class P>
bool ZeroEngine<P>::grads_zero(int g) const {
  return m_grads_written.at(static_cast<std::size_t>(g)) == 0;
}

template <class P>
void ZeroEngine<P>::grads_ready(int g) {
  m_grads_written.at(static_cast<std::size_t>(g)) = 1;
  if (m_stage < 2) return;
  const int s = m_span_of_group[g];
  Buffer* b = active_grad_buffer(s);
  if (!b) SHARDTRAIN_FAIL("grads_ready(" + std::to_string(g) + ") without acquire_grads");
  const Span& sp = m_spans[s];
  if (++b->ready < sp.last - sp.first + 1) return;  // the bucket waits for its other groups
  b->order = ++m_clock;
  if (m_plant_overflow) plant(b->data.data());
  if (m_check_local) scan_local(b->data.data(), sp.lo, span_size(s));
  {
    Profiler::Scope timed(m_backend.profiler(), ProfileOp::GradReduce);
    m_backend.collectives_after_compute();  // the backward kernels that wrote the bucket
    b->pending = m_comm.ireduce_scatter_v(b->data.data(), b->data.data() + sp.own_displ, sp.counts,
                                          dtype_of<P>(), ReduceOp::Sum);
  }
  if (!m_overlap) complete_grad_buffer(*b);
}

template <class P>
void ZeroEngine<P>::plant(P* x) {
  if (m_plant_nan) {
    const P nan(std::numeric_limits<float>::quiet_NaN());
    std::vector<unsigned char> stage;
    P* host = to_host(m_backend, x, 1, stage);
    *host = nan;
    from_host(m_backend, x, host, 1);
  } else {
    m_ops.set_inf(x);
  }
  m_plant_overflow = false;
  m_plant_nan = false;
}

template <class P>
void ZeroEngine<P>::scan_local(const P* x, std::int64_t lo, std::int64_t n) {
  const std::int64_t k = m_ops.first_non_finite(x, n);
  if (k >= 0 && (m_local_first < 0 || lo + k < m_local_first)) m_local_first = lo + k;
}

template <class P>
void ZeroEngine<P>::begin_step() {
  m_local_first = -1;
  Profiler::Scope timed(m_backend.profiler(), ProfileOp::GradZero);
  const std::span<P> grads = m_state.grads();
  if (m_stage < 2) {
    m_ops.fill_zero(grads.data(), static_cast<std::int64_t>(grads.size()));
    std::fill(m_grads_written.begin(), m_grads_written.end(), char(0));
    return;
  }
  // Stages 2-3 stage the model's gradients in buckets (zeroed when taken, which
  // resets m_grads_written), and each span's first reduction of the step
  // overwrites its part of the shard; the shard is zeroed once, for what no span
  // covers (padding).
  if (!m_shard_zeroed) m_ops.fill_zero(grads.data(), static_cast<std::int64_t>(grads.size()));
  m_shard_zeroed = true;
  std::fill(m_shard_written.begin(), m_shard_written.end(), char(0));
}

template <class P>
double ZeroEngine<P>::finish_gradients() {
  if (m_stage < 2 && m_plant_overflow) plant(m_state.grads().data());
  if (m_stage < 2 && m_check_local)
    scan_local(m_state.grads().data(), 0, static_cast<std::int64_t>(m_state.grads().size()));
  Profiler* const prof = m_backend.profiler();
  switch (m_stage) {
    case 0: {
      {
        Profiler::Scope timed(prof, ProfileOp::GradReduce);
        m_backend.collectives_after_compute();
        m_comm.all_reduce(m_state.grads().data(), m_state.grads().size(), dtype_of<P>(), ReduceOp::Sum);
        m_backend.compute_after_collectives();
      }
      Profiler::Scope timed(prof, ProfileOp::GradNorm);
      return m_ops.sum_of_squares(m_layout, m_state.grads_at(0), 0, m_layout.padded_size());
    }
    case 1: {
      {
        Profiler::Scope timed(prof, ProfileOp::GradReduce);
        m_backend.collectives_after_compute();
        m_comm.reduce_scatter(m_state.grads_at(0), m_state.grads_at(m_lo),
                              static_cast<std::size_t>(m_hi - m_lo), dtype_of<P>(), ReduceOp::Sum);
        m_backend.compute_after_collectives();
      }
      Profiler::Scope timed(prof, ProfileOp::GradNorm);
      return m_comm.all_reduce_value(m_ops.sum_of_squares(m_layout, m_state.grads_at(m_lo), m_lo, m_hi));
    }
    default: {
      for (const auto& b : m_grad_buffers)
        SHARDTRAIN_CHECK(b.span < 0 || b.pending, "a gradient bucket was never reported ready");
      while (Buffer* oldest = oldest_pending_grad_buffer()) complete_grad_buffer(*oldest);
      Profiler::Scope timed(prof, ProfileOp::GradNorm);
      return m_comm.all_reduce_value(m_ops.sum_of_squares(m_layout, m_state.grads_at(m_lo), m_lo, m_hi));
    }
  }
}

template <class P>
std::int64_t ZeroEngine<P>::first_non_finite_gradient() {
  const ShardView<P> owned = m_state.optimizer_view();
  const std::int64_t k = m_ops.first_non_finite(owned.grads.data(), owned.size());
  const std::int64_t mine = k < 0 ? std::numeric_limits<std::int64_t>::max() : owned.lo + k;
  const std::int64_t first = m_comm.all_reduce_value(mine, ReduceOp::Min);
  return first == std::numeric_limits<std::int64_t>::max() ? -1 : first;
}

template <class P>
void ZeroEngine<P>::params_updated() {
  if (m_stage == 1 || m_stage == 2) {
    Profiler::Scope timed(m_backend.profiler(), ProfileOp::ParamGather);
    m_backend.collectives_after_compute();  // the optimizer's new shard
    m_comm.all_gather(m_state.params_at(m_lo), m_state.params_at(0),
                      static_cast<std::size_t>(m_hi - m_lo), dtype_of<P>());
    m_backend.compute_after_collectives();
  }
  if (m_stage == 3)
    for (auto& b : m_param_buffers) {
      SHARDTRAIN_CHECK(b.users == 0, "optimizer step while parameters are in use");
      b.pending.reset();
      b.span = -1;  // cached buckets are stale now
    }
}

// ---------------------------------------------------------------- parameters

template <class P>
typename ZeroEngine<P>::Buffer* ZeroEngine<P>::find_param_buffer(int s) {
  for (auto& b : m_param_buffers)
    if (b.span == s) return &b;
  return nullptr;
}

template <class P>
typename ZeroEngine<P>::Buffer& ZeroEngine<P>::take_param_buffer(int s) {
  const std::int64_t need = span_size(s);
  // An unused buffer that fits: empty ones first, then the least recently used.
  Buffer* best = nullptr;
  for (auto& b : m_param_buffers) {
    if (b.users > 0 || static_cast<std::int64_t>(b.data.size()) < need) continue;
    const bool better = !best || (best->span >= 0 && b.span < 0) ||
                        ((best->span >= 0) == (b.span >= 0) && b.order < best->order);
    if (better) best = &b;
  }
  SHARDTRAIN_CHECK(best != nullptr, "no parameter buffer free for bucket " + std::to_string(s));
  if (best->pending) {  // a prefetch being evicted
    Profiler::Scope timed(m_backend.profiler(), ProfileOp::ParamGather);
    best->pending->wait();
  }
  best->pending.reset();
  best->span = s;
  best->order = ++m_clock;
  return *best;
}

template <class P>
void ZeroEngine<P>::start_gather(Buffer& b, int s) {
  const Span& sp = m_spans[s];
  const P* mine = m_state.params_at(sp.counts[m_comm.rank()] > 0 ? std::max(sp.lo, m_lo) : m_lo);
  Profiler::Scope timed(m_backend.profiler(), ProfileOp::ParamGather);
  m_backend.collectives_after_compute();  // the optimizer's update of the shard
  b.pending = m_comm.iall_gather_v(mine, b.data.data(), sp.counts, dtype_of<P>());
}

template <class P>
void ZeroEngine<P>::prefetch(int next) {
  if (m_stage < 3) return;
  if (next < 0 || next >= m_layout.num_groups()) return;
  const int s = m_span_of_group[next];
  if (find_param_buffer(s)) return;
  const std::int64_t need = span_size(s);
  if (std::none_of(m_param_buffers.begin(), m_param_buffers.end(), [&](const Buffer& b) {
        return b.users == 0 && static_cast<std::int64_t>(b.data.size()) >= need;
      }))
    return;  // every buffer that fits is in use: gather on demand instead
  start_gather(take_param_buffer(s), s);
}

template <class P>
P* ZeroEngine<P>::acquire_params(int g) {
  if (m_stage < 3) return m_state.params_at(m_layout.group_range(g).first);
  const int s = m_span_of_group[g];
  Buffer* b = find_param_buffer(s);
  if (!b) {
    b = &take_param_buffer(s);
    start_gather(*b, s);
  }
  if (b->pending) {
    Profiler::Scope timed(m_backend.profiler(), ProfileOp::ParamGather);
    b->pending->wait();
    b->pending.reset();
    m_backend.compute_after_collectives();
  }
  ++b->users;
  b->order = ++m_clock;
  return b->data.data() + offset_in_span(g);
}

template <class P>
void ZeroEngine<P>::release_params(int g) {
  if (m_stage < 3) return;
  Buffer* b = find_param_buffer(m_span_of_group[g]);
  SHARDTRAIN_CHECK(b && b->users > 0, "release_params(" + std::to_string(g) + ") without acquire");
  --b->users;
}

template class ZeroEngine<float>;
template class ZeroEngine<f16>;
template class ZeroEngine<bf16>;

}  // namespace shardtrain
