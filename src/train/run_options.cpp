// The command-line run options acting inside a training step (run_options.hpp).
#include "train/run_options.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <type_traits>
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
void StepHooks<P>::rearm_gradient_faults(std::int64_t step) {
  if (m_planted_step != step) return;
  if (mine(m_hooks.overflow_step, m_hooks.overflow_rank, step)) m_zero.plant_overflow();
  if (mine(m_hooks.nan_step, m_hooks.nan_rank, step)) m_zero.plant_nan();
}

template <class P>
void StepHooks<P>::at_step_start(std::int64_t step) {
  if (once(m_hooks.overflow_step, m_hooks.overflow_rank, step, m_overflow_fired)) {
    m_zero.plant_overflow();
    m_planted_step = step;
  }
  if (once(m_hooks.nan_step, m_hooks.nan_rank, step, m_nan_fired)) {
    m_zero.plant_nan();
    m_planted_step = step;
  }
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

namespace {

// The highest mantissa bit of T's encoding.
template <class T>
void flip_top_mantissa_bit(T& x) {
  if constexpr (sizeof(T) == 4) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    u ^= std::uint32_t{1} << 22;
    std::memcpy(&x, &u, 4);
  } else {
    static_assert(sizeof(T) == 2);
    std::uint16_t u;
    std::memcpy(&u, static_cast<const void*>(&x), 2);
    u ^= static_cast<std::uint16_t>(std::is_same_v<T, bf16> ? 1u << 6 : 1u << 9);  // bf16: 7 mantissa bits; f16: 10
    std::memcpy(static_cast<void*>(&x), &u, 2);
  }
}

template <class T>
void flip_at(Backend& backend, T* p, int rank, std::int64_t index, const char* what, std::int64_t step) {
  std::vector<unsigned char> stage;
  T* host = to_host(backend, p, 1, stage);
  const float before = static_cast<float>(*host);
  flip_top_mantissa_bit(*host);
  from_host(backend, p, host, 1);
  std::fprintf(stderr, "test hook --flip-bit: rank %d flips a bit of %s %lld after step %lld: %.9g -> %.9g\n",
               rank, what, static_cast<long long>(index), static_cast<long long>(step), before,
               static_cast<float>(*host));
  std::fflush(stderr);
}

}  // namespace

template <class P>
void StepHooks<P>::at_step_end(std::int64_t step) {
  if (!once(m_hooks.flip_step, m_hooks.flip_rank, step, m_flip_fired)) return;
  Backend& backend = m_state.backend();
  const int stage = m_state.zero_stage();
  if (stage == 1 || stage == 2) {
    const auto [lo, hi] = m_state.shard_range();
    const std::int64_t size = m_state.param_range().second;
    const std::int64_t i = lo > 0 ? 0 : (hi < size ? hi : 0);
    flip_at(backend, m_state.params_at(i), m_rank, i, "the parameter", step);
    return;
  }
  const ShardView<P> owned = m_state.optimizer_view();
  flip_at(backend, owned.master.data(), m_rank, owned.lo, "the fp32 weight", step);
}

template class StepHooks<float>;
template class StepHooks<f16>;
template class StepHooks<bf16>;

}  // namespace shardtrain
