// tests/gpu/device_buffer.hpp
// What the gpu tests share: DeviceBuffer, a device allocation of T elements
// (NaN-poisoned when made empty), filled from and copied back to host vectors of any type H with the same size
// and bits (the host's f16/bf16 and CUDA's __half/__nv_bfloat16), every call
// checked (SHARDTRAIN_CUDA_CHECK), upload() complete on return (any stream may
// read the buffer next), download() synchronizing the device first;
// and random_values, seeded uniform host inputs in any storage type.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"

namespace shardtrain::test {

template <class T>
class DeviceBuffer {
 public:
  // Every byte 0xFF (complete on return): NaN in float, double, __half and
  // __nv_bfloat16, -1 in signed integers. An output a kernel should overwrite
  // starts as NaN, so an element the kernel skips fails the comparison.
  explicit DeviceBuffer(std::size_t n) : DeviceBuffer(n, Poison{}) {}
  template <class H>
  explicit DeviceBuffer(const std::vector<H>& host) : DeviceBuffer(host.size(), NoPoison{}) {
    upload(host);
  }
  ~DeviceBuffer() { cudaFree(m_data); }
  // Poisons the whole buffer again (every byte 0xFF), ordered against every
  // stream and complete on return, as upload().
  void fill_nan() {
    SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
    SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(m_data, 0xFF, m_size * sizeof(T), cudaStreamLegacy));
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return static_cast<T*>(m_data); }
  std::size_t size() const { return m_size; }
  // The same bytes seen as the device storage type D (same size and bit layout).
  template <class D>
  D* as() {
    static_assert(sizeof(D) == sizeof(T));
    return static_cast<D*>(m_data);
  }
  // Ordered against every stream, and complete when it returns, whatever stream
  // reads the buffer next. It first waits for all queued device work (a kernel
  // on a non-blocking stream may still read the old contents: the legacy stream
  // the copy runs on does not wait for such streams), then copies and waits for
  // the copy (a plain cudaMemcpy from pageable memory may return once the source
  // is staged, with the DMA still queued -- CUDA's "API synchronization
  // behavior").
  template <class H>
  void upload(const std::vector<H>& host) {
    static_assert(sizeof(H) == sizeof(T));
    SHARDTRAIN_CHECK(host.size() <= m_size, "DeviceBuffer::upload: more values than the buffer holds");
    SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
    SHARDTRAIN_CUDA_CHECK(
        cudaMemcpyAsync(m_data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, cudaStreamLegacy));
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  // The (nrows, ncols) block at (row0, col0) of the row-major matrix with row
  // stride ld the buffer holds, after synchronizing the device: sampled rows or
  // columns of a large output without copying all of it.
  template <class H = T>
  std::vector<H> download_block(std::size_t ld, std::size_t row0, std::size_t col0, std::size_t nrows,
                                std::size_t ncols) const {
    static_assert(sizeof(H) == sizeof(T));
    SHARDTRAIN_CHECK(col0 + ncols <= ld && (nrows == 0 || (row0 + nrows - 1) * ld + col0 + ncols <= m_size),
                     "DeviceBuffer::download_block: block outside the buffer");
    SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<H> host(nrows * ncols);
    if (host.empty()) return host;
    SHARDTRAIN_CUDA_CHECK(cudaMemcpy2D(host.data(), ncols * sizeof(T), static_cast<const T*>(m_data) + row0 * ld + col0,
                                       ld * sizeof(T), ncols * sizeof(T), nrows, cudaMemcpyDeviceToHost));
    return host;
  }
  // Elements [begin, begin + count), after synchronizing the device.
  template <class H = T>
  std::vector<H> download_range(std::size_t begin, std::size_t count) const {
    static_assert(sizeof(H) == sizeof(T));
    SHARDTRAIN_CHECK(begin + count <= m_size, "DeviceBuffer::download_range: range outside the buffer");
    SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<H> host(count);
    if (count > 0)
      SHARDTRAIN_CUDA_CHECK(cudaMemcpy(host.data(), static_cast<const T*>(m_data) + begin, count * sizeof(T),
                                       cudaMemcpyDeviceToHost));
    return host;
  }
  template <class H = T>
  std::vector<H> download() const {
    static_assert(sizeof(H) == sizeof(T));
    SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<H> host(m_size);
    SHARDTRAIN_CUDA_CHECK(cudaMemcpy(host.data(), m_data, m_size * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  struct Poison {};
  struct NoPoison {};
  DeviceBuffer(std::size_t n, NoPoison) : m_size(n) {
    SHARDTRAIN_CUDA_CHECK(cudaMalloc(&m_data, std::max<std::size_t>(n, 1) * sizeof(T)));
  }
  DeviceBuffer(std::size_t n, Poison) : DeviceBuffer(n, NoPoison{}) { fill_nan(); }

  void* m_data = nullptr;
  std::size_t m_size = 0;
};

// Why no CUDA device is usable ("" when one is): cudaGetDeviceCount's error or "0 devices".
inline std::string device_problem() {
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc == cudaSuccess && devices > 0) return std::string();
  if (rc == cudaSuccess) return "cudaGetDeviceCount: 0 devices";
  return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc);
}

// For a gpu test's main(): true (after printing why, naming `test`) when no
// CUDA device is usable; the test then exits 1 -- gpu tests fail, never skip.
inline bool no_device(const char* test) {
  const std::string why = device_problem();
  if (why.empty()) return false;
  std::fprintf(stderr, "error: %s needs a CUDA device and found none (%s); the gpu tests fail, they do not skip\n",
               test, why.c_str());
  return true;
}

// n values uniform in [lo, hi) from a seeded mt19937, rounded to H.
template <class H>
std::vector<H> random_values(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<H> v(n);
  for (auto& x : v) x = static_cast<H>(dist(gen));
  return v;
}

}  // namespace shardtrain::test
