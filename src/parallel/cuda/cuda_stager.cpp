// CudaStager: the MPI device collectives' copies on this rank's collective stream
// (see the header). Every CUDA call is checked.
#include "parallel/cuda/cuda_stager.hpp"

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support
#endif

#include <string>

#include "core/cuda_check.hpp"
#include "core/error.hpp"

namespace shardtrain {

namespace {

// A device's UUID as nvidia-smi prints it (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx).
std::string uuid_text(const cudaUUID_t& u) {
  static const char* hex = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    const auto b = static_cast<unsigned char>(u.bytes[i]);
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

class CudaFence final : public StagerFence {
 public:
  explicit CudaFence(cudaStream_t stream) {
    SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&m_event, cudaEventDisableTiming));
    const cudaError_t rc = cudaEventRecord(m_event, stream);
    if (rc != cudaSuccess) {
      cudaEventDestroy(m_event);
      detail::throw_gpu_error(__FILE__, __LINE__, "cudaEventRecord", detail::cuda_error_text(rc));
    }
  }
  ~CudaFence() override { cudaEventDestroy(m_event); }
  CudaFence(const CudaFence&) = delete;
  CudaFence& operator=(const CudaFence&) = delete;
  bool ready() override {
    const cudaError_t rc = cudaEventQuery(m_event);
    if (rc == cudaErrorNotReady) return false;
    if (rc != cudaSuccess) detail::throw_gpu_error(__FILE__, __LINE__, "cudaEventQuery", detail::cuda_error_text(rc));
    return true;
  }
  void wait() override { SHARDTRAIN_CUDA_CHECK(cudaEventSynchronize(m_event)); }

 private:
  cudaEvent_t m_event = nullptr;
};

}  // namespace

VisibleDevices visible_cuda_devices(int rank) {
  VisibleDevices visible;
  visible.rank = rank;
  int devices = 0;
  const cudaError_t count_rc = cudaGetDeviceCount(&devices);
  if (count_rc != cudaSuccess) {
    cudaGetLastError();
    visible.error = detail::cuda_error_text(count_rc);
    return visible;
  }
  for (int d = 0; d < devices; ++d) {
    cudaDeviceProp prop{};
    const cudaError_t rc = cudaGetDeviceProperties(&prop, d);
    if (rc != cudaSuccess) {
      cudaGetLastError();
      visible.error = "cudaGetDeviceProperties(" + std::to_string(d) + "): " + detail::cuda_error_text(rc);
      visible.uuids.clear();
      break;
    }
    visible.uuids.push_back(uuid_text(prop.uuid));
  }
  return visible;
}

bool mpi_is_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  return MPIX_Query_cuda_support() == 1;  // the library's run-time answer, whatever it was built with
#else
  return false;  // the library cannot say: stage every call
#endif
}

CudaStager::CudaStager(int device, bool cuda_aware) : m_device(device), m_cuda_aware(cuda_aware) {
  SHARDTRAIN_CUDA_CHECK(cudaSetDevice(m_device));
  SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
  const cudaError_t rc = cudaEventCreateWithFlags(&m_ordering_event, cudaEventDisableTiming);
  if (rc != cudaSuccess) {
    cudaStreamDestroy(m_stream);
    detail::throw_gpu_error(__FILE__, __LINE__, "cudaEventCreateWithFlags", detail::cuda_error_text(rc));
  }
}

CudaStager::~CudaStager() {
  if (m_stream) SHARDTRAIN_CUDA_WARN(cudaStreamSynchronize(m_stream));
  if (m_ordering_event) SHARDTRAIN_CUDA_WARN(cudaEventDestroy(m_ordering_event));
  if (m_stream) SHARDTRAIN_CUDA_WARN(cudaStreamDestroy(m_stream));
}

void* CudaStager::allocate_host(std::size_t bytes) {
  void* p = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return p;
}

void CudaStager::free_host(void* p) noexcept { SHARDTRAIN_CUDA_WARN(cudaFreeHost(p)); }

void CudaStager::to_host(void* staging, const void* buffer, std::size_t bytes) {
  if (bytes > 0) SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(staging, buffer, bytes, cudaMemcpyDefault, m_stream));
}

void CudaStager::to_buffer(void* buffer, const void* staging, std::size_t bytes) {
  if (bytes > 0) SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(buffer, staging, bytes, cudaMemcpyDefault, m_stream));
}

StagerFencePtr CudaStager::fence() { return std::make_unique<CudaFence>(m_stream); }

void CudaStager::wait_for_stream(cudaStream_t producer) {
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(m_ordering_event, producer));
  SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(m_stream, m_ordering_event, 0));
}

void CudaStager::make_stream_wait(cudaStream_t consumer) {
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(m_ordering_event, m_stream));
  SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(consumer, m_ordering_event, 0));
}

}  // namespace shardtrain
