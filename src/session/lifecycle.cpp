// Stop signals and the wall-time guard (see lifecycle.hpp).
#include "session/lifecycle.hpp"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <string>

namespace shardtrain {

namespace {

std::atomic<int> g_stop_signal{0};  // the only process-wide state: a signal handler has nowhere else to write
static_assert(std::atomic<int>::is_always_lock_free, "the stop flag must be async-signal-safe");

// When the process started (static initialisation, before main).
const std::chrono::steady_clock::time_point g_process_start = std::chrono::steady_clock::now();

extern "C" void on_stop_signal(int signal) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signal);
}

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls in progress (MPI, I/O) go on; the flag is read at the step boundary
  for (int s : {SIGUSR1, SIGTERM, SIGINT}) sigaction(s, &sa, nullptr);
}

int pending_stop_signal() { return g_stop_signal.load(); }

void raise_stop_flag(int signal) { on_stop_signal(signal); }

const char* stop_signal_name(int signal) {
  switch (signal) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
  }
  return "a signal";
}

WallTimeGuard::WallTimeGuard(double time_limit_minutes) {
  const auto now = std::chrono::steady_clock::now();
  if (time_limit_minutes > 0) {
    m_enabled = true;
    m_end = g_process_start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(time_limit_minutes * 60.0));
  }
  if (const char* env = std::getenv("SLURM_JOB_END_TIME")) {
    char* tail = nullptr;
    const long long end_unix = std::strtoll(env, &tail, 10);
    if (tail != env && *tail == '\0' && end_unix > 0) {
      const double left = static_cast<double>(end_unix - static_cast<long long>(std::time(nullptr)));
      const auto end = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(left));
      if (!m_enabled || end < m_end) m_end = end;
      m_enabled = true;
    }
  }
}

double WallTimeGuard::seconds_left() const {
  return std::chrono::duration<double>(m_end - std::chrono::steady_clock::now()).count();
}

bool WallTimeGuard::must_stop(double step_s, double checkpoint_s) const {
  return m_enabled && seconds_left() < needed_seconds(step_s, checkpoint_s);
}

}  // namespace shardtrain
