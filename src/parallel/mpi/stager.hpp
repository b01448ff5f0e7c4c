// shardtrain/parallel/mpi/stager.hpp
// Owns the copy mechanism under the staging communicator (staging_communicator.hpp):
// how bytes move between the caller's buffers (device memory on a GPU) and host
// memory that the host MPI library reads and writes, and how the host learns that
// the queued copies are done. The staging logic (what to copy, where each rank's
// piece sits, when a Request completes) is the communicator's, not the stager's.
// Two implementations: HostStager (below; memcpy, for the host tests) and the CUDA
// one (parallel/cuda/cuda_stager.hpp: cudaMemcpyAsync on the collective stream, an
// event per fence, pinned buffers from cudaHostAlloc).
// Invariants:
//  - copies are queued in call order and complete in that order; a fence taken
//    after a copy is ready only once that copy (and every earlier one) is done;
//  - the caller's buffers may be device memory or plain host memory (the base
//    class's all_reduce_value hands a host scalar); staging buffers never are
//    the caller's.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>

namespace shardtrain {

// The point in the stager's queue at which it was taken.
class StagerFence {
 public:
  virtual ~StagerFence() = default;
  // True once every copy queued before the fence is done; never blocks.
  virtual bool ready() = 0;
  // Blocks the host until ready().
  virtual void wait() = 0;
};
using StagerFencePtr = std::unique_ptr<StagerFence>;

class Stager {
 public:
  virtual ~Stager() = default;
  // Host memory the MPI library can use for `bytes` (> 0): pinned for a device.
  // Released by free_host; the communicator pools them.
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void free_host(void* p) noexcept = 0;
  // Queue a copy from the caller's buffer to a staging buffer, and back.
  virtual void to_host(void* staging, const void* buffer, std::size_t bytes) = 0;
  virtual void to_buffer(void* buffer, const void* staging, std::size_t bytes) = 0;
  // A fence after everything queued so far (collective ordering included: on a
  // device, after the work the collective stream was told to wait for).
  virtual StagerFencePtr fence() = 0;
  // Whether the MPI library reads and writes the caller's buffers itself
  // (CUDA-aware MPI): the collectives that only move data (broadcast, all-gather)
  // then pass the caller's pointers after a fence; reductions still stage, since
  // the fixed-order reduction and the 16-bit sums run on the host.
  virtual bool passes_buffers() const = 0;
};

// The host implementation: the caller's buffers are host memory, the copies are
// memcpy (done when queued), every fence is ready. Counts the bytes it moved, so
// the host tests can check what the staging logic copies. `passes_buffers`
// rehearses the CUDA-aware path on the host.
class HostStager final : public Stager {
 public:
  explicit HostStager(bool passes_buffers = false) : m_passes(passes_buffers) {}
  void* allocate_host(std::size_t bytes) override { return ::operator new(bytes); }
  void free_host(void* p) noexcept override { ::operator delete(p); }
  void to_host(void* staging, const void* buffer, std::size_t bytes) override {
    if (bytes > 0) std::memcpy(staging, buffer, bytes);
    m_to_host += bytes;
  }
  void to_buffer(void* buffer, const void* staging, std::size_t bytes) override {
    if (bytes > 0) std::memcpy(buffer, staging, bytes);
    m_to_buffer += bytes;
  }
  StagerFencePtr fence() override {
    ++m_fences;
    return std::make_unique<Ready>();
  }
  bool passes_buffers() const override { return m_passes; }

  std::size_t bytes_to_host() const { return m_to_host; }
  std::size_t bytes_to_buffer() const { return m_to_buffer; }
  std::size_t fences() const { return m_fences; }

 private:
  struct Ready final : StagerFence {
    bool ready() override { return true; }
    void wait() override {}
  };
  bool m_passes;
  std::size_t m_to_host = 0, m_to_buffer = 0, m_fences = 0;
};

}  // namespace shardtrain
