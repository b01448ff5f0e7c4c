// shardtrain/core/poll_thread.hpp
// A thread that calls a check every `period` until its owner destroys it: the
// scaffold shared by the collective watchdog (parallel/watchdog.hpp) and the
// checkpoint I/O deadline (io/checkpoint_phase.hpp).
// Invariants: the check runs on the poll thread with mutex() held, so state the
// owner guards with mutex() cannot change during a check; the destructor stops
// and joins the thread before it returns. An owner declares its PollThread as its
// LAST member, so the thread is joined before any state the check reads is
// destroyed. Never started (a timeout of 0): no thread, nothing to join.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace shardtrain {

class PollThread {
 public:
  PollThread() = default;
  ~PollThread() {
    if (!m_thread.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_stop = true;
    }
    m_wake.notify_all();
    m_thread.join();
  }
  PollThread(const PollThread&) = delete;
  PollThread& operator=(const PollThread&) = delete;

  // Starts the thread; call once.
  void start(std::chrono::duration<double> period, std::function<void()> check) {
    m_thread = std::thread([this, period, check = std::move(check)] {
      std::unique_lock<std::mutex> lock(m_mutex);
      while (!m_stop) {
        m_wake.wait_for(lock, period);
        if (!m_stop) check();
      }
    });
  }

  std::mutex& mutex() { return m_mutex; }

 private:
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stop = false;
  std::thread m_thread;
};

}  // namespace shardtrain
