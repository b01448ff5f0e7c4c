// shardtrain/core/clock.hpp
// Owns the two clocks a run reads: the steady clock that times its work
// (seconds_since) and the wall clock as ISO 8601 UTC text ("2026-11-27T13:50:49Z")
// for the records a run writes about itself (checkpoint headers, the
// run-directory lock).
#pragma once

#include <chrono>
#include <ctime>
#include <string>

namespace shardtrain {

using SteadyClock = std::chrono::steady_clock;

// Seconds from t0 to now on the steady clock.
inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

inline std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace shardtrain
