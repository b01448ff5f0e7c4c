// shardtrain/tests/bench/core_latency.cpp
// The one-way latency of a cache-line hand-off between the first two CPUs of
// this process's affinity mask: two threads, one pinned to each, pass a counter
// back and forth through one atomic. tests/bench/torch_parity_speed.sh runs it
// before and after every timed run to record where the machine's two cores sit
// relative to each other at that moment.
//
// Why: on the 2-vCPU VM this project is measured on, the host moves the two
// vCPUs between placements that share a last-level cache (one-way hand-off
// about 26-36 ns) and placements that do not (about 170 ns), for minutes at a
// time. Setups whose GEMMs run on 2 threads of one process (OpenBLAS syncs its
// threads inside every GEMM) run 1.4x slower in the second placement; measured
// 2026-11-25: ours-1x2 quickstart 45-47 ms a step at 26-36 ns, 66-67 ms at
// 168-175 ns, 14 runs, each probed before and after.
//
// --rt: both threads run SCHED_FIFO (priority 1) for the measurement, each
// after it is pinned to its CPU, so that a probe taken while both CPUs are busy
// (the benchmark probes during every run) measures the hand-off, not the
// scheduler: a normal-priority probe on a loaded machine waits for time
// slices (hundreds of ns). Costs both CPUs about 1-4 ms per probe (the default
// trips of --rt are fewer); needs root or CAP_SYS_NICE (exit 3 otherwise).
// Each thread leaves its loop when the other has not answered for 200 ms; a
// repetition whose echo thread left that way is dropped (on a loaded machine a
// normal-priority measuring thread can be descheduled that long), and when no
// repetition completes the probe fails (exit 4) instead of spinning forever.
//
// Prints one line:
//   core_latency cpu A cpu B one_way_ns X
// where X is the median over REPS repetitions of (time of ROUNDTRIPS round
// trips, or of those made in 100 ms) / (2 * round trips), each repetition
// after 64 untimed round trips. Exit 2 when the process may run on fewer than
// 2 CPUs (nothing to measure).
// Usage: core_latency [--rt] [ROUNDTRIPS=20000 (--rt: 2000)] [REPS=7 (--rt: 5)]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <vector>

namespace {

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// The calling thread to SCHED_FIFO priority 1 (true) or back to SCHED_OTHER.
bool realtime(bool on) {
  sched_param p{};
  p.sched_priority = on ? 1 : 0;
  return pthread_setschedparam(pthread_self(), on ? SCHED_FIFO : SCHED_OTHER, &p) == 0;
}

double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct alignas(64) Line {
  std::atomic<long> value{0};
};

}  // namespace

int main(int argc, char** argv) {
  const bool rt = argc > 1 && std::string_view(argv[1]) == "--rt";
  if (rt) --argc, ++argv;
  const long trips = argc > 1 ? std::atol(argv[1]) : (rt ? 2000 : 20000);
  const int reps = argc > 2 ? std::atoi(argv[2]) : (rt ? 5 : 7);
  if (trips < 1 || reps < 1) {
    std::fprintf(stderr, "core_latency: usage: core_latency [--rt] [ROUNDTRIPS>=1] [REPS>=1]\n");
    return 2;
  }
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) {
    std::perror("core_latency: sched_getaffinity");
    return 1;
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  if (cpus.size() < 2) {
    std::fprintf(stderr, "core_latency: this process may run on %zu CPU(s); need 2\n", cpus.size());
    return 2;
  }

  // Each repetition stops after ROUNDTRIPS round trips or 100 ms, whichever
  // comes first, so that a probe on a loaded machine (the other thread
  // descheduled) stays short; the latency is over the trips made.
  constexpr double kRepBudgetNs = 100e6;
  Line line;
  std::vector<double> ns;
  // The measuring thread is pinned before any thread runs real-time: a
  // real-time thread spinning on the CPU where the other waits to be moved
  // would never let it run.
  bool pinned = pin(cpus[0]);
  bool rt_ok = true;
  for (int r = 0; r < reps && pinned; ++r) {
    line.value.store(0, std::memory_order_relaxed);
    std::atomic<int> ready{0};  // 1: echo pinned (and real-time with --rt); -1: not pinned; -2: not real-time
    std::atomic<bool> echo_left{false};  // the echo thread has left its loop (stopped, or gave up after 200 ms)
    std::thread echo([&] {
      if (!pin(cpus[1])) {
        ready = -1;
        return;
      }
      if (rt && !realtime(true)) {
        ready = -2;
        return;
      }
      ready = 1;
      double heard = now_ns();
      for (long spins = 0;; ++spins) {  // odd: a ping to answer with value + 1; -1: stop
        const long v = line.value.load(std::memory_order_acquire);
        if (v < 0) break;
        if (v & 1) {
          line.value.store(v + 1, std::memory_order_release);
          heard = now_ns();
        } else if ((spins & 4095) == 0 && now_ns() - heard > 200e6) {
          break;  // the measuring thread is gone or starved: never spin on
        }
      }
      echo_left.store(true, std::memory_order_release);
    });
    while (ready.load() == 0) {
    }
    if (ready.load() < 0 || (rt && !realtime(true))) {
      if (ready.load() == -1) pinned = false;
      else rt_ok = false;
      line.value.store(-1, std::memory_order_release);
      echo.join();
      break;
    }
    long done = 0;
    auto trip = [&] {  // false: the echo thread left without answering
      const long sent = 2 * done + 1;
      line.value.store(sent, std::memory_order_release);
      while (line.value.load(std::memory_order_acquire) != sent + 1) {
        if (echo_left.load(std::memory_order_acquire) && line.value.load(std::memory_order_acquire) != sent + 1)
          return false;
      }
      ++done;
      return true;
    };
    bool answered = true;
    while (done < 64 && answered) answered = trip();  // both threads running and pinned
    done = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0;
    while (done < trips && answered) {
      answered = trip();
      if ((done & 255) == 0) {
        elapsed = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
        if (elapsed > kRepBudgetNs) break;
      }
    }
    elapsed = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    line.value.store(-1, std::memory_order_release);
    if (rt) realtime(false);
    echo.join();
    if (answered) ns.push_back(elapsed / (2.0 * static_cast<double>(done)));
  }
  if (rt && !rt_ok) {
    std::fprintf(stderr, "core_latency: --rt: cannot run SCHED_FIFO (needs root or CAP_SYS_NICE)\n");
    return 3;
  }
  if (!pinned) {
    std::fprintf(stderr, "core_latency: could not pin the threads to CPUs %d and %d\n", cpus[0], cpus[1]);
    return 1;
  }
  if (ns.empty()) {
    std::fprintf(stderr, "core_latency: no repetition completed (each time the echo thread heard nothing for 200 ms)\n");
    return 4;
  }
  std::sort(ns.begin(), ns.end());
  std::printf("core_latency cpu %d cpu %d one_way_ns %.1f\n", cpus[0], cpus[1], ns[ns.size() / 2]);
  return 0;
}
