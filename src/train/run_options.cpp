// The command-line run options acting inside a training step (run_options.hpp).
#include "train/run_options.hpp"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <limits>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "backend/host_staging.hpp"
#include "session/lifecycle.hpp"

namespace shardtrain {

template <class P>
void StepHooks<P>::at_step_start(std::int64_t step) {
  if (mine(m_hooks.overflow_step, m_hooks.overflow_rank, step)) m_zero.plant_overflow();
  if (mine(m_hooks.signal_step, m_hooks.signal_rank, step)) raise_stop_flag(SIGUSR1);
  if (mine(m_hooks.throw_step, m_hooks.throw_rank, step))
    SHARDTRAIN_FAIL(fmt::format("test hook --throw-at-step: rank {} fails in step {}", m_rank, step));
}

template <class P>
void StepHooks<P>::before_reduction(std::int64_t step) {
  if (!mine(m_hooks.stall_step, m_hooks.stall_rank, step)) return;
  std::fprintf(stderr, "test hook: rank %d stalls before the gradient reduction of step %lld\n", m_rank,
               static_cast<long long>(step));
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::minutes(10));
}

template <class P>
void StepHooks<P>::after_update(std::int64_t step) {
  if (!mine(m_hooks.perturb_step, m_hooks.perturb_rank, step)) return;
  Backend& backend = m_state.backend();
  const ShardView<P> owned = m_state.optimizer_view();
  std::vector<unsigned char> stage;
  float* w = owned.master.data();
  float* host = to_host(backend, w, 1, stage);
  const float before = *host;
  *host = std::nextafter(before, std::numeric_limits<float>::infinity());
  from_host(backend, w, host, 1);
  std::fprintf(stderr, "test hook --perturb-weights: rank %d moves weight %lld from %.9g to %.9g after step %lld\n",
               m_rank, static_cast<long long>(owned.lo), before, *host, static_cast<long long>(step));
  std::fflush(stderr);
}

template class StepHooks<float>;
template class StepHooks<f16>;
template class StepHooks<bf16>;

}  // namespace shardtrain
