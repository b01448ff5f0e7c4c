// Unit tests of the stop signals (session/lifecycle.hpp): once installed they
// are blocked in the installing thread and in every thread started after it,
// a stop signal sent to the process still raises the flag (through the watcher
// thread), and a storm of them while oneDNN runs an f32 matmul with a large K
// on this thread leaves the heap and the result intact. That last one is the
// regression test of the slurm_preempt_requeue crash: oneDNN 2.x's jit GEMM
// kernel ("gemm:jit") runs with its stack pointer on a heap workspace when K is
// large, and a signal handled on that thread wrote its frame over the heap
// ("corrupted size vs. prev_size while consolidating"). Without the blocking
// this test aborts within a fraction of a second on an AVX2 CPU.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "session/lifecycle.hpp"

namespace shardtrain {
namespace {

using namespace std::chrono_literals;

// The stop signals this thread has blocked.
std::vector<int> blocked_stop_signals() {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  std::vector<int> out;
  for (int s : {SIGUSR1, SIGTERM, SIGINT})
    if (sigismember(&now, s) == 1) out.push_back(s);
  return out;
}

bool wait_for_flag(int signal) {
  for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(1ms))
    if (pending_stop_signal() == signal) return true;
  return false;
}

// First in the file: nothing has installed the handlers yet.
TEST(Lifecycle, StopSignalsAreBlockedHereAndInLaterThreads) {
  ASSERT_EQ(pending_stop_signal(), 0);
  install_stop_signal_handlers();
  install_stop_signal_handlers();  // idempotent
  const std::vector<int> all{SIGUSR1, SIGTERM, SIGINT};
  EXPECT_EQ(blocked_stop_signals(), all) << "in the installing thread";
  std::vector<int> in_thread;
  std::thread([&] { in_thread = blocked_stop_signals(); }).join();
  EXPECT_EQ(in_thread, all) << "in a thread started after install_stop_signal_handlers";
}

TEST(Lifecycle, SignalToTheProcessRaisesTheFlag) {
  install_stop_signal_handlers();
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  EXPECT_TRUE(wait_for_flag(SIGUSR1)) << "SIGUSR1 sent to the process did not raise the stop flag in 10 s";
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);  // the first signal received is the one reported
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(pending_stop_signal(), SIGUSR1);
  EXPECT_STREQ(stop_signal_name(pending_stop_signal()), "SIGUSR1");
}

// A storm of stop signals while this thread runs f32 matmuls whose K (4096) is
// above the stack capacity of oneDNN's jit GEMM kernels (252 on AVX2, 2048 on
// AVX-512): every result stays bitwise the first one and nothing aborts.
TEST(Lifecycle, SignalStormDuringLargeKMatmulLeavesTheHeapIntact) {
  install_stop_signal_handlers();
  using dt = dnnl::memory::data_type;
  const dnnl::memory::dim M = 64, N = 64, K = 4096;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc a_md({M, K}, dt::f32, {K, 1}), b_md({K, N}, dt::f32, {N, 1}), c_md({M, N}, dt::f32, {N, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  std::printf("oneDNN %d.%d.%d matmul M %lld N %lld K %lld: implementation %s\n", dnnl::version()->major,
              dnnl::version()->minor, dnnl::version()->patch, static_cast<long long>(M), static_cast<long long>(N),
              static_cast<long long>(K), pd.impl_info_str());
  const dnnl::matmul mm(pd);
  std::vector<float> a(M * K), b(K * N), c(M * N), first;
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7 % 23) - 11) / 16.0f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 5 % 19) - 9) / 16.0f;
  dnnl::memory am(a_md, engine, a.data()), bm(b_md, engine, b.data()), cm(c_md, engine, c.data());
  auto run = [&] {
    mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
    // Heap traffic beside the kernel's own workspace, as the trainer's step has.
    std::vector<char> churn(1000 + c.size() % 7);
    churn[0] = 1;
  };
  run();
  first = c;

  std::atomic<bool> stop{false};
  std::atomic<long> sent{0};
  std::thread storm([&] {  // started after install: SIGUSR1 is blocked here too
    while (!stop.load()) {
      if (kill(getpid(), SIGUSR1) == 0) ++sent;
      std::this_thread::sleep_for(20us);
    }
  });
  long runs = 0, differ = 0;
  for (auto until = std::chrono::steady_clock::now() + 1500ms; std::chrono::steady_clock::now() < until; ++runs) {
    run();
    if (std::memcmp(c.data(), first.data(), c.size() * sizeof(float)) != 0) ++differ;
  }
  stop = true;
  storm.join();
  std::printf("%ld matmuls under %ld SIGUSR1\n", runs, sent.load());
  EXPECT_GT(sent.load(), 1000);
  EXPECT_EQ(differ, 0) << "of " << runs << " matmuls under the signal storm";
  EXPECT_EQ(pending_stop_signal(), SIGUSR1);
}

}  // namespace
}  // namespace shardtrain
