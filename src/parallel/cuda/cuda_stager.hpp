// shardtrain/parallel/cuda/cuda_stager.hpp
// Owns the CUDA copy mechanism of the MPI device collectives (CUDA build only,
// target shardtrain_cuda_stager): the Stager (parallel/mpi/stager.hpp) that
// StagingCommunicator copies through, and the collective stream the CUDA backend
// orders its compute stream against (backend/cuda/collective_stream.hpp).
//  - The collective stream is this rank's own (non-blocking), created on the
//    rank's device; ranks sharing a device (parallel.share_device) each have one.
//  - Copies are cudaMemcpyAsync (cudaMemcpyDefault: device or host buffers) on
//    that stream, so a copy to host runs after the compute the stream was told to
//    wait for (wait_for_stream), and the compute stream waits for a copy back by
//    make_stream_wait; a fence is an event recorded on the stream.
//  - Staging buffers are pinned (cudaHostAlloc), so the copies are asynchronous
//    DMA and the host MPI library reads them directly.
//  - CUDA-aware MPI is detected at run time (MPIX_Query_cuda_support, where the
//    library declares it in mpi-ext.h); then broadcasts and all-gathers pass the
//    device pointers (passes_buffers()).
// Also lists the devices this rank sees, for parallel/device_assignment.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/collective_stream.hpp"
#include "parallel/device_assignment.hpp"
#include "parallel/mpi/stager.hpp"

namespace shardtrain {

// What rank `rank` sees: its visible devices' UUIDs in CUDA's order, or the
// error of cudaGetDeviceCount / cudaGetDeviceProperties.
VisibleDevices visible_cuda_devices(int rank);

// Whether the MPI library can read and write device memory, asked at run time.
bool mpi_is_cuda_aware();

class CudaStager final : public Stager, public CollectiveStream {
 public:
  // Makes `device` current for the calling thread and creates the stream there.
  // `cuda_aware`: pass device pointers to the movement-only collectives.
  CudaStager(int device, bool cuda_aware);
  ~CudaStager() override;
  CudaStager(const CudaStager&) = delete;
  CudaStager& operator=(const CudaStager&) = delete;

  void* allocate_host(std::size_t bytes) override;
  void free_host(void* p) noexcept override;
  void to_host(void* staging, const void* buffer, std::size_t bytes) override;
  void to_buffer(void* buffer, const void* staging, std::size_t bytes) override;
  StagerFencePtr fence() override;
  bool passes_buffers() const override { return m_cuda_aware; }

  int device() const override { return m_device; }
  void wait_for_stream(cudaStream_t producer) override;
  void make_stream_wait(cudaStream_t consumer) override;
  cudaStream_t stream() const { return m_stream; }

 private:
  int m_device;
  bool m_cuda_aware;
  cudaStream_t m_stream = nullptr;
  cudaEvent_t m_ordering_event = nullptr;  // reused by wait_for_stream / make_stream_wait
};

}  // namespace shardtrain
