// Tracked allocator: byte accounting and the aligned host allocation behind TrackedBuffer.
#include "core/memory.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <new>

#include "core/error.hpp"

namespace shardtrain {

std::string_view to_string(MemCategory c) {
  switch (c) {
    case MemCategory::Parameters: return "parameters";
    case MemCategory::Gradients: return "gradients";
    case MemCategory::OptimizerState: return "optimizer_state";
    case MemCategory::Activations: return "activations";
    case MemCategory::Workspace: return "workspace";
    case MemCategory::Communication: return "communication";
    case MemCategory::Data: return "data";
    case MemCategory::CheckpointStaging: return "ckpt_staging";
    case MemCategory::Count: break;
  }
  return "unknown";
}

void MemoryTracker::on_alloc(MemCategory c, std::size_t bytes) {
  const int i = idx(c);
  m_current[i] += bytes;
  m_peak[i] = std::max(m_peak[i], m_current[i]);
  m_current_total += bytes;
  m_peak_total = std::max(m_peak_total, m_current_total);
}

void MemoryTracker::on_free(MemCategory c, std::size_t bytes) {
  const int i = idx(c);
  SHARDTRAIN_CHECK(m_current[i] >= bytes, "freeing more bytes than were allocated");
  m_current[i] -= bytes;
  m_current_total -= bytes;
}

namespace detail {

void* tracked_alloc(std::size_t bytes) {
  constexpr std::size_t kAlign = 64;
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}

void tracked_free(void* p) { std::free(p); }

}  // namespace detail

namespace {

// A "KEY: N kB" field of /proc/self/status in bytes; -1 where it cannot be read.
std::int64_t proc_status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == field) {
      std::int64_t kib = -1;
      status >> kib;
      return kib < 0 ? -1 : kib * 1024;
    }
    status.ignore(1 << 16, '\n');
  }
  return -1;
}

}  // namespace

std::int64_t process_peak_rss_bytes() { return proc_status_bytes("VmHWM:"); }

std::int64_t process_rss_bytes() { return proc_status_bytes("VmRSS:"); }

}  // namespace shardtrain
