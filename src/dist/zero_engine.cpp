// ZeroEngine: shards, buckets and the collectives of ZeRO stages 0-3.
// Determinism: gradient buckets complete strictly in the order they were
// started (FIFO), so the shard accumulator adds micro-batches in a fixed order.
#include "dist/zero_engine.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "core/error.hpp"
#include "optim/adamw.hpp"

namespace shardtrain {

namespace {

constexpr int kBuckets = 3;  // one held through backward (tied embeddings) + current + next

// Sizes of the bucket pool: the largest group, then twice the second largest.
std::vector<std::int64_t> pool_sizes(const ParamLayout& layout) {
  std::vector<std::int64_t> sizes;
  for (int g = 0; g < layout.num_groups(); ++g) {
    const auto [a, b] = layout.group_range(g);
    sizes.push_back(b - a);
  }
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  const std::int64_t first = sizes.empty() ? 0 : sizes[0];
  const std::int64_t second = sizes.size() > 1 ? sizes[1] : first;
  return {first, second, second};
}

}  // namespace

ZeroEngine::ZeroEngine(const ParamLayout& layout, int stage, Communicator& comm,
                       MemoryTracker& memory, bool overlap)
    : m_layout(layout), m_stage(stage), m_comm(comm), m_overlap(overlap) {
  SHARDTRAIN_CHECK(stage >= 0 && stage <= 3, "ZeRO stage must be 0, 1, 2 or 3");
  SHARDTRAIN_CHECK(layout.world_size() == comm.size(), "layout padded for another world size");
  std::tie(m_lo, m_hi) = layout.shard_range(comm.rank());
  const std::int64_t n = layout.padded_size(), shard = m_hi - m_lo;
  m_params = TrackedBuffer<float>(memory, MemCategory::Parameters, stage == 3 ? shard : n);
  m_grads = TrackedBuffer<float>(memory, MemCategory::Gradients, stage >= 2 ? shard : n);
  for (int g = 0; g < layout.num_groups(); ++g) m_counts.push_back(shard_counts(g));
  if (stage >= 2) {
    for (std::int64_t size : pool_sizes(layout)) {
      Bucket b;
      b.data = TrackedBuffer<float>(memory, MemCategory::Communication, size);
      b.recv = TrackedBuffer<float>(memory, MemCategory::Communication, std::min(size, shard));
      m_grad_buckets.push_back(std::move(b));
    }
  }
  if (stage == 3) {
    for (std::int64_t size : pool_sizes(layout)) {
      Bucket b;
      b.data = TrackedBuffer<float>(memory, MemCategory::Communication, size);
      m_param_buckets.push_back(std::move(b));
    }
  }
}

ZeroEngine::~ZeroEngine() {
  // Requests wait in their destructors; make sure none outlives its buffers.
  for (auto& b : m_grad_buckets) b.pending.reset();
  for (auto& b : m_param_buckets) b.pending.reset();
}

std::int64_t ZeroEngine::bucket_elems(const ParamLayout& layout, int stage) {
  if (stage < 2) return 0;
  const std::int64_t shard = layout.shard_size();
  std::int64_t total = 0;
  for (std::int64_t size : pool_sizes(layout)) total += size + std::min(size, shard);
  if (stage == 3)
    for (std::int64_t size : pool_sizes(layout)) total += size;
  return total;
}

std::pair<std::int64_t, std::int64_t> ZeroEngine::optimizer_range() const {
  if (m_stage == 0) return {0, m_layout.padded_size()};
  return {m_lo, m_hi};
}

std::pair<std::int64_t, std::int64_t> ZeroEngine::stored_param_range() const {
  if (m_stage == 3) return {m_lo, m_hi};
  return {0, m_layout.padded_size()};
}

float* ZeroEngine::stored_params() { return m_params.data(); }

std::int64_t ZeroEngine::group_size(int g) const {
  const auto [a, b] = m_layout.group_range(g);
  return b - a;
}

std::vector<std::size_t> ZeroEngine::shard_counts(int g) const {
  const auto [a, b] = m_layout.group_range(g);
  std::vector<std::size_t> counts(m_comm.size());
  for (int r = 0; r < m_comm.size(); ++r) {
    const auto [lo, hi] = m_layout.shard_range(r);
    counts[r] = static_cast<std::size_t>(std::max<std::int64_t>(0, std::min(b, hi) - std::max(a, lo)));
  }
  return counts;
}

std::pair<std::int64_t, std::int64_t> ZeroEngine::shard_part(int g) const {
  const auto [a, b] = m_layout.group_range(g);
  const std::int64_t lo = std::max(a, m_lo), hi = std::min(b, m_hi);
  return {lo, std::max(lo, hi)};
}

// ---------------------------------------------------------------- gradients

ZeroEngine::Bucket& ZeroEngine::take_grad_bucket(int g) {
  const std::int64_t need = group_size(g);
  for (;;) {
    Bucket* best = nullptr;
    for (auto& b : m_grad_buckets)
      if (b.group < 0 && static_cast<std::int64_t>(b.data.size()) >= need &&
          (!best || b.data.size() < best->data.size()))
        best = &b;
    if (best) {
      best->group = g;
      std::memset(best->data.data(), 0, static_cast<std::size_t>(need) * sizeof(float));
      return *best;
    }
    // All fitting buckets are busy: complete the oldest in-flight reduction.
    Bucket* oldest = oldest_pending_grad_bucket();
    SHARDTRAIN_CHECK(oldest != nullptr, "no gradient bucket free for group " + std::to_string(g));
    complete_grad_bucket(*oldest);
  }
}

ZeroEngine::Bucket* ZeroEngine::oldest_pending_grad_bucket() {
  Bucket* oldest = nullptr;
  for (auto& b : m_grad_buckets)
    if (b.pending && (!oldest || b.order < oldest->order)) oldest = &b;
  return oldest;
}

void ZeroEngine::complete_grad_bucket(Bucket& b) {
  b.pending->wait();
  b.pending.reset();
  const auto [lo, hi] = shard_part(b.group);
  float* dst = m_grads.data() + (lo - m_lo);
  const float* src = b.recv.data();
  for (std::int64_t i = 0; i < hi - lo; ++i) dst[i] += src[i];
  b.group = -1;
}

float* ZeroEngine::acquire_grads(int g) {
  if (m_stage < 2) return m_grads.data() + m_layout.group_range(g).first;
  return take_grad_bucket(g).data.data();
}

void ZeroEngine::grads_ready(int g) {
  if (m_stage < 2) return;
  for (auto& b : m_grad_buckets) {
    if (b.group != g || b.pending) continue;
    b.order = ++m_clock;
    b.pending = m_comm.ireduce_scatter_v(b.data.data(), b.recv.data(), m_counts[g], DType::F32,
                                         ReduceOp::Sum);
    if (!m_overlap) complete_grad_bucket(b);
    return;
  }
  SHARDTRAIN_FAIL("grads_ready(" + std::to_string(g) + ") without acquire_grads");
}

void ZeroEngine::begin_step() {
  std::fill(m_grads.data(), m_grads.data() + m_grads.size(), 0.0f);
}

double ZeroEngine::finish_gradients() {
  switch (m_stage) {
    case 0:
      m_comm.all_reduce(m_grads.span(), ReduceOp::Sum);
      return sum_of_squares(m_layout, m_grads.data(), 0, m_layout.padded_size());
    case 1:
      m_comm.reduce_scatter(m_grads.data(), m_grads.data() + m_lo,
                            static_cast<std::size_t>(m_hi - m_lo), DType::F32, ReduceOp::Sum);
      return m_comm.all_reduce_value(sum_of_squares(m_layout, m_grads.data() + m_lo, m_lo, m_hi));
    default:
      while (Bucket* oldest = oldest_pending_grad_bucket()) complete_grad_bucket(*oldest);
      return m_comm.all_reduce_value(sum_of_squares(m_layout, m_grads.data(), m_lo, m_hi));
  }
}

void ZeroEngine::apply_optimizer(AdamW& optim, double lr, float grad_scale, std::int64_t step) {
  const auto [lo, hi] = optimizer_range();
  SHARDTRAIN_CHECK(optim.lo() == lo && optim.hi() == hi, "optimizer range does not match the shard");
  float* params = m_stage == 3 ? m_params.data() : m_params.data() + lo;
  const float* grads = m_stage >= 2 ? m_grads.data() : m_grads.data() + lo;
  optim.step(params, grads, lr, grad_scale, step);
  if (m_stage == 1 || m_stage == 2)
    m_comm.all_gather(m_params.data() + m_lo, m_params.data(),
                      static_cast<std::size_t>(m_hi - m_lo), DType::F32);
  if (m_stage == 3)
    for (auto& b : m_param_buckets) {
      SHARDTRAIN_CHECK(b.users == 0, "optimizer step while parameters are in use");
      b.pending.reset();
      b.group = -1;  // cached groups are stale now
    }
}

// ---------------------------------------------------------------- parameters

ZeroEngine::Bucket* ZeroEngine::find_param_bucket(int g) {
  for (auto& b : m_param_buckets)
    if (b.group == g) return &b;
  return nullptr;
}

ZeroEngine::Bucket& ZeroEngine::take_param_bucket(int g) {
  const std::int64_t need = group_size(g);
  // An unused bucket that fits: empty ones first, then the least recently used.
  Bucket* best = nullptr;
  for (auto& b : m_param_buckets) {
    if (b.users > 0 || static_cast<std::int64_t>(b.data.size()) < need) continue;
    const bool better = !best || (best->group >= 0 && b.group < 0) ||
                        ((best->group >= 0) == (b.group >= 0) && b.order < best->order);
    if (better) best = &b;
  }
  SHARDTRAIN_CHECK(best != nullptr, "no parameter bucket free for group " + std::to_string(g));
  if (best->pending) best->pending->wait();  // a prefetch being evicted
  best->pending.reset();
  best->group = g;
  best->order = ++m_clock;
  return *best;
}

void ZeroEngine::start_gather(Bucket& b, int g) {
  const auto [lo, hi] = shard_part(g);
  const float* mine = hi > lo ? m_params.data() + (lo - m_lo) : m_params.data();
  b.pending = m_comm.iall_gather_v(mine, b.data.data(), m_counts[g], DType::F32);
}

void ZeroEngine::prefetch(int next) {
  if (m_stage < 3) return;
  if (next < 0 || next >= m_layout.num_groups() || find_param_bucket(next)) return;
  const std::int64_t need = group_size(next);
  if (std::none_of(m_param_buckets.begin(), m_param_buckets.end(), [&](const Bucket& b) {
        return b.users == 0 && static_cast<std::int64_t>(b.data.size()) >= need;
      }))
    return;  // every bucket that fits is in use: gather on demand instead
  start_gather(take_param_bucket(next), next);
}

float* ZeroEngine::acquire_params(int g) {
  if (m_stage < 3) return m_params.data() + m_layout.group_range(g).first;
  Bucket* b = find_param_bucket(g);
  if (!b) {
    b = &take_param_bucket(g);
    start_gather(*b, g);
  }
  if (b->pending) {
    b->pending->wait();
    b->pending.reset();
  }
  ++b->users;
  b->order = ++m_clock;
  return b->data.data();
}

void ZeroEngine::release_params(int g) {
  if (m_stage < 3) return;
  Bucket* b = find_param_bucket(g);
  SHARDTRAIN_CHECK(b && b->users > 0, "release_params(" + std::to_string(g) + ") without acquire");
  --b->users;
}

}  // namespace shardtrain
