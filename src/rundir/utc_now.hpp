// shardtrain/src/train/utc_now.hpp
// The wall clock as ISO 8601 UTC text ("2026-11-27T13:50:49Z"), for the
// records a run writes about itself (checkpoint headers, the run-directory lock).
#pragma once

#include <ctime>
#include <string>

namespace shardtrain {

inline std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace shardtrain
