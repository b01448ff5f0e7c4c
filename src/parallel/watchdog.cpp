// The collective watchdog thread (see watchdog.hpp).
#include "parallel/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace shardtrain {

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

CollectiveWatchdog::CollectiveWatchdog(double timeout_s, int rank) : m_timeout_s(timeout_s), m_rank(rank) {
  // Checks ten times per timeout (at most once a second, at least every 10 ms).
  if (m_timeout_s > 0)
    m_poll.start(std::chrono::duration<double>(std::min(1.0, std::max(0.01, m_timeout_s / 10))), [this] { check(); });
}

void CollectiveWatchdog::check() {
  const std::int64_t since = m_since_ns.load(std::memory_order_acquire);
  if (since == 0) return;
  const double waited = static_cast<double>(now_ns() - since) * 1e-9;
  if (waited >= m_timeout_s + m_grace_s.load(std::memory_order_relaxed)) fire(waited);
}

void CollectiveWatchdog::fire(double waited_s) {
  const char* what = m_what.load(std::memory_order_acquire);
  const char* type = m_type.load(std::memory_order_acquire);
  std::fprintf(stderr,
               "error (rank %d): watchdog: %s (%zu x %s) at step %lld has not completed after %.1f s "
               "(parallel.collective_timeout_s = %g%s): another rank is stalled or has died; ending the job\n",
               m_rank, what ? what : "collective", m_count.load(), type ? type : "?",
               static_cast<long long>(m_step.load(std::memory_order_relaxed)), waited_s, m_timeout_s,
               m_grace_s.load() > 0 ? ", plus checkpoint.io_timeout_s while a checkpoint is in flight" : "");
  std::fflush(stderr);
  std::fflush(stdout);
  std::_Exit(1);
}

CollectiveWatchdog::Scope::Scope(CollectiveWatchdog* w, const char* what, std::size_t count, const char* type)
    : m_w(w && w->enabled() ? w : nullptr) {
  if (!m_w) return;
  m_w->m_what.store(what, std::memory_order_relaxed);
  m_w->m_count.store(count, std::memory_order_relaxed);
  m_w->m_type.store(type, std::memory_order_relaxed);
  m_w->m_since_ns.store(now_ns(), std::memory_order_release);
}

CollectiveWatchdog::Scope::~Scope() {
  if (m_w) m_w->m_since_ns.store(0, std::memory_order_release);
}

}  // namespace shardtrain
