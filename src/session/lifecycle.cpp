// Stop signals and the wall-time guard (see lifecycle.hpp).
#include "session/lifecycle.hpp"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>

namespace shardtrain {

namespace {

constexpr int kStopSignals[] = {SIGUSR1, SIGTERM, SIGINT};

std::atomic<int> g_stop_signal{0};  // the only process-wide state: a signal handler has nowhere else to write
static_assert(std::atomic<int>::is_always_lock_free, "the stop flag must be async-signal-safe");

// When the process started (static initialisation, before main).
const std::chrono::steady_clock::time_point g_process_start = std::chrono::steady_clock::now();

extern "C" void on_stop_signal(int signal) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signal);
}

}  // namespace

// Why the stop signals are blocked in every thread but one (lifecycle.hpp):
// a handler runs on the stack of the thread the kernel picks, and that thread
// is usually the one computing. oneDNN 2.x's jit f32 GEMM kernels
// (jit_avx_gemm_f32 on AVX2, jit_avx512_common_gemm_f32 on AVX-512: the
// matmul's "gemm:jit") point rsp at a heap workspace when K is large (above
// 252 on AVX2), so the signal frame the kernel writes below rsp (about 3 KB
// with the AVX state) lands on the heap chunks before that workspace: glibc
// then aborts with "corrupted size vs. prev_size" (oneDNN issue 4845, fixed
// upstream in 2026 by PR 4855; Debian 12 ships 2.6.3). With the signals
// blocked, no frame is ever written on a computing thread: the watcher thread
// takes them with sigwait.
void install_stop_signal_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    sigset_t stop;
    sigemptyset(&stop);
    for (int s : kStopSignals) sigaddset(&stop, s);
    // The handler as well, for the threads that do not block these signals:
    // those a library started before main (OpenBLAS's pool, from its
    // constructor; idle, and never running oneDNN) and any that unblocks them.
    // There the flag is raised rather than SIGUSR1 ending the process.
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // blocking calls in progress (MPI, I/O) go on; the flag is read at the step boundary
    for (int s : kStopSignals) sigaction(s, &sa, nullptr);
    // Blocked in this thread, and so in every thread it starts from now on
    // (MPI's, PMIx's, OpenMP's, OpenBLAS's, the trainer's): a signal that
    // arrives before the watcher waits stays pending, it is not lost.
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    std::thread([stop] {
      pthread_setname_np(pthread_self(), "stop-signals");
      for (;;) {
        int s = 0;
        if (sigwait(&stop, &s) == 0) on_stop_signal(s);
      }
    }).detach();  // lives until the process ends; it touches only g_stop_signal
  });
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
