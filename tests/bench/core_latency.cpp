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
// Prints one line:
//   core_latency cpu A cpu B one_way_ns X
// where X is the median over REPS repetitions of (time of ROUNDTRIPS round
// trips, or of those made in 100 ms) / (2 * round trips), each repetition
// after 64 untimed round trips. Exit 2 when the process may run on fewer than
// 2 CPUs (nothing to measure).
// Usage: core_latency [ROUNDTRIPS=20000] [REPS=7]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

struct alignas(64) Line {
  std::atomic<long> value{0};
};

}  // namespace

int main(int argc, char** argv) {
  const long trips = argc > 1 ? std::atol(argv[1]) : 20000;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  if (trips < 1 || reps < 1) {
    std::fprintf(stderr, "core_latency: usage: core_latency [ROUNDTRIPS>=1] [REPS>=1]\n");
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
  bool pinned = true;
  for (int r = 0; r < reps; ++r) {
    line.value.store(0, std::memory_order_relaxed);
    std::atomic<bool> ok{true};
    std::thread echo([&] {
      ok = pin(cpus[1]);
      for (;;) {  // odd: a ping to answer with value + 1; -1: stop
        const long v = line.value.load(std::memory_order_acquire);
        if (v < 0) break;
        if (v & 1) line.value.store(v + 1, std::memory_order_release);
      }
    });
    pinned = pin(cpus[0]) && pinned;
    long done = 0;
    auto trip = [&] {
      const long sent = 2 * done + 1;
      line.value.store(sent, std::memory_order_release);
      while (line.value.load(std::memory_order_acquire) != sent + 1) {
      }
      ++done;
    };
    while (done < 64) trip();  // both threads running and pinned
    done = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0;
    while (done < trips) {
      trip();
      if ((done & 255) == 0) {
        elapsed = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
        if (elapsed > kRepBudgetNs) break;
      }
    }
    elapsed = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    line.value.store(-1, std::memory_order_release);
    echo.join();
    pinned = pinned && ok;
    ns.push_back(elapsed / (2.0 * static_cast<double>(done)));
  }
  if (!pinned) {
    std::fprintf(stderr, "core_latency: could not pin the threads to CPUs %d and %d\n", cpus[0], cpus[1]);
    return 1;
  }
  std::sort(ns.begin(), ns.end());
  std::printf("core_latency cpu %d cpu %d one_way_ns %.1f\n", cpus[0], cpus[1], ns[ns.size() / 2]);
  return 0;
}
