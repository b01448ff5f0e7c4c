// shardtrain/core/memory.hpp
// Owns the tracked allocator. Every buffer of the run (parameters, gradients,
// optimizer state, activations, workspace, communication, data) is a TrackedBuffer
// tagged with one MemCategory, so the run can report current and peak bytes per
// category and check them against the memory plan.
// Invariants: buffers are 64-byte aligned and zero-initialised (determinism);
// the tracker outlives every buffer registered with it; counts are per rank.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace shardtrain {

inline constexpr double kMiB = 1024.0 * 1024.0;  // bytes in a MiB, for figures printed in MiB

enum class MemCategory : int {
  Parameters = 0,
  Gradients,
  OptimizerState,
  Activations,
  Workspace,
  Communication,
  Data,
  CheckpointStaging,  // checkpoint.async: the staged copy of the state shard
  Count
};

std::string_view to_string(MemCategory c);

class MemoryTracker {
 public:
  static constexpr int kCategories = static_cast<int>(MemCategory::Count);

  void on_alloc(MemCategory c, std::size_t bytes);
  void on_free(MemCategory c, std::size_t bytes);

  std::size_t current(MemCategory c) const { return m_current[idx(c)]; }
  std::size_t peak(MemCategory c) const { return m_peak[idx(c)]; }
  std::size_t current_total() const { return m_current_total; }
  std::size_t peak_total() const { return m_peak_total; }

 private:
  static int idx(MemCategory c) { return static_cast<int>(c); }
  std::array<std::size_t, kCategories> m_current{};
  std::array<std::size_t, kCategories> m_peak{};
  std::size_t m_current_total = 0;
  std::size_t m_peak_total = 0;
};

// The process's peak resident set (VmHWM of /proc/self/status) in bytes: what
// the tracked categories hold plus code, libraries, MPI's buffers and the heap
// outside the tracker. -1 where /proc is not available.
std::int64_t process_peak_rss_bytes();

// The process's resident set now (VmRSS of /proc/self/status) in bytes; -1
// where /proc is not available.
std::int64_t process_rss_bytes();

namespace detail {
void* tracked_alloc(std::size_t bytes);
void tracked_free(void* p);
}  // namespace detail

// Where a TrackedBuffer's bytes live when not in host memory (the CUDA backend's
// device memory, src/backend/). allocate returns zeroed memory or throws.
class MemorySpace {
 public:
  virtual ~MemorySpace() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  virtual const char* name() const = 0;
};

// An owning, move-only, zero-initialised array of T whose bytes are counted in
// `tracker` under `category` for its whole lifetime. With a MemorySpace (not
// nullptr) the array lives there: data() is then a device pointer and
// operator[] / span() must not be used on the host.
template <class T>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(MemoryTracker& tracker, MemCategory category, std::size_t count,
                MemorySpace* space = nullptr)
      : m_tracker(&tracker), m_category(category), m_space(space), m_count(count) {
    if (m_count == 0) return;
    m_data = static_cast<T*>(m_space ? m_space->allocate(m_count * sizeof(T))
                                     : detail::tracked_alloc(m_count * sizeof(T)));
    m_tracker->on_alloc(m_category, bytes());
  }
  ~TrackedBuffer() { release(); }
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;
  TrackedBuffer(TrackedBuffer&& o) noexcept { *this = std::move(o); }
  TrackedBuffer& operator=(TrackedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      m_tracker = std::exchange(o.m_tracker, nullptr);
      m_category = o.m_category;
      m_space = o.m_space;
      m_data = std::exchange(o.m_data, nullptr);
      m_count = std::exchange(o.m_count, 0);
    }
    return *this;
  }

  T* data() { return m_data; }
  const T* data() const { return m_data; }
  std::size_t size() const { return m_count; }
  std::size_t bytes() const { return m_count * sizeof(T); }
  std::span<T> span() { return {m_data, m_count}; }
  std::span<const T> span() const { return {m_data, m_count}; }
  MemorySpace* space() const { return m_space; }
  T& operator[](std::size_t i) { return m_data[i]; }
  const T& operator[](std::size_t i) const { return m_data[i]; }

 private:
  void release() {
    if (m_data) {
      m_tracker->on_free(m_category, bytes());
      if (m_space) m_space->deallocate(m_data);
      else detail::tracked_free(m_data);
      m_data = nullptr;
    }
  }
  MemoryTracker* m_tracker = nullptr;
  MemCategory m_category = MemCategory::Workspace;
  MemorySpace* m_space = nullptr;
  T* m_data = nullptr;
  std::size_t m_count = 0;
};

}  // namespace shardtrain
