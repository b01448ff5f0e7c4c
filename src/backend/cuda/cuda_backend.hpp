// shardtrain/backend/cuda/cuda_backend.hpp
// Owns the CUDA backend (CUDA build only, target shardtrain_cuda_backend): one
// device per rank, the one chosen by the communicator it is built on (a
// CollectiveStream: the NcclCommunicator of parallel/nccl, which
// checked the devices and agreed on the outcome before anything was allocated:
// no device, or fewer than the node's ranks, is an Error on every rank, exit 1).
// Streams: one compute stream (non-blocking) for every kernel and copy; the
// communicator's stream for collectives. collectives_after_compute() makes the
// comm stream wait for the compute stream (CollectiveStream::wait_for_stream),
// compute_after_collectives() the other way round (make_stream_wait); neither
// blocks the host. Handles: one cuBLAS handle bound to the compute stream
// (tensor-core GEMMs with fp32 accumulation, kernels/cuda/gemm.cuh), and with
// model.gemm = "cublaslt" one cuda::LtContext (kernels/cuda/lt_linear.cuh: the
// cuBLASLt handle, its 32 MiB workspace and algorithm cache) that every model's
// op table on this device runs its Linear layers through (lt() is nullptr with
// the default "cublas"). The GEMM choice lives here, not in ModelOpsLimits,
// because it is the device's, for every model type alike, and its workspace and
// cache are shared by every op table the run makes on the device.
// Memory: cudaMalloc'd, tracked like host memory (TrackedBuffer with memory()),
// zeroed by a cudaMemsetAsync on the compute stream that the comm stream is
// then made to wait for (device-side): both streams see the zeros before any
// later work of theirs, and the host does not block.
// Every CUDA, cuBLAS and NCCL call is checked (core/cuda_check.hpp: call, file,
// line, rank).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "backend/cuda/collective_stream.hpp"
#include "backend/model_ops.hpp"
#include "core/run_choices.hpp"

namespace shardtrain {

namespace cuda {
class LtContext;
}

class CudaBackend final : public Backend {
 public:
  // kernels: DeviceKernels::Candidate also runs the kernels not yet run on a
  // device (train.device_kernels; share/doc/gpu.md, "Candidate kernels").
  explicit CudaBackend(CollectiveStream& comm, GemmImpl gemm = GemmImpl::Cublas,
                       DeviceKernels kernels = DeviceKernels::Validated);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  BackendKind kind() const override { return BackendKind::Cuda; }
  std::string describe() const override { return m_description; }
  MemorySpace* memory() override;
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override;
  void copy_from_host(void* dst, const void* host_src, std::size_t bytes) override;
  void synchronize() override;
  bool crc32_pieces(const void* p, std::size_t bytes, std::size_t piece, std::uint32_t* out) override;
  void collectives_after_compute() override;
  void compute_after_collectives() override;

  cudaStream_t stream() const { return m_stream; }
  cublasHandle_t cublas() const { return m_cublas; }
  int device() const { return m_device; }
  // train.device_kernels = "candidate": the kernels not yet run on a device.
  bool candidate_kernels() const { return m_candidate; }
  // The cuBLASLt context for the Linear layers (model.gemm = "cublaslt"), or nullptr.
  cuda::LtContext* lt() const;

 protected:
  VectorOps<float>& ops_for(float*) override;
  VectorOps<double>& ops_for(double*) override;
  VectorOps<f16>& ops_for(f16*) override;
  VectorOps<bf16>& ops_for(bf16*) override;

 private:
  struct Impl;
  CollectiveStream& m_comm;
  int m_device = -1;
  cudaStream_t m_stream = nullptr;
  cublasHandle_t m_cublas = nullptr;
  std::string m_description;
  bool m_candidate = false;  // train.device_kernels = "candidate"
  std::unique_ptr<Impl> m_impl;  // device memory space and the vector ops
};

// The layer kernels of kernels/cuda on `backend` (a CudaBackend).
template <class T>
std::unique_ptr<ModelOps<T>> make_cuda_model_ops(Backend& backend, const ModelOpsLimits& limits,
                                                 MemoryTracker& memory);

}  // namespace shardtrain
