// The CUDA backend: device memory, the compute stream and its fences with the
// NCCL stream, and the vector ops (kernels/cuda/vector_reduce, adamw, elementwise).
#include "backend/cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/device_types.hpp"
#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "core/named_enum.hpp"
#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/crc32.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/lt_linear.cuh"
#include "kernels/cuda/vector_reduce.cuh"

namespace shardtrain {

namespace {

class DeviceMemory final : public MemorySpace {
 public:
  DeviceMemory(cudaStream_t compute, CollectiveStream& comm) : m_stream(compute), m_comm(comm) {}
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc != cudaSuccess) {
      std::size_t free_b = 0, total_b = 0;
      cudaGetLastError();  // clears the (non-sticky) allocation error; its code is rc
      SHARDTRAIN_CUDA_WARN(cudaMemGetInfo(&free_b, &total_b));
      SHARDTRAIN_FAIL(fmt::format("{}: cudaMalloc of {:.1f} MiB failed ({}); the device has {:.1f} of {:.1f} MiB free: "
                                  "lower train.micro_batch, use a higher parallel.zero_stage or set a "
                                  "recompute budget",
                                  detail::mpi_rank_label(), static_cast<double>(bytes) / 1048576.0, detail::cuda_error_text(rc),
                                  static_cast<double>(free_b) / 1048576.0, static_cast<double>(total_b) / 1048576.0));
    }
    // TrackedBuffer's zero-initialisation, ordered before every use of the buffer:
    //  - compute stream: the fill is queued there, and every kernel, cuBLAS/cuDNN
    //    call and host copy of the backend runs on that stream, after it. (A
    //    cudaMemset on the legacy default stream would be ordered with nothing:
    //    the compute and NCCL streams are non-blocking, so the zeros could land
    //    after real data.)
    //  - NCCL stream: it waits for the compute stream only at the engine's
    //    collectives_after_compute() fences, and a collective may WRITE a fresh
    //    buffer (an all-gather into new parameters, a reduce-scatter into a new
    //    shard) with no kernel, hence no fence, in between; the fill could then
    //    land after NCCL's result. So the comm stream is made to wait for the
    //    compute stream here (an event, CollectiveStream::wait_for_stream): every
    //    collective queued after this call is ordered after the fill on the
    //    device. No cudaStreamSynchronize is needed for that (stream order is
    //    enough, and a host sync would drain the compute queue on every
    //    mid-run allocation, e.g. a cuDNN workspace made on first use); the
    //    host itself never reads device memory except through the compute
    //    stream (copy_to_host).
    try {
      if (bytes > 0) SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, m_stream));
      m_comm.wait_for_stream(m_stream);
    } catch (...) {
      SHARDTRAIN_CUDA_WARN(cudaFree(p));
      throw;
    }
    return p;
  }
  void deallocate(void* p) noexcept override { SHARDTRAIN_CUDA_WARN(cudaFree(p)); }
  const char* name() const override { return "cuda"; }

 private:
  cudaStream_t m_stream;
  CollectiveStream& m_comm;
};

// A host array and its device copy, uploaded again only when the host array
// changes (the pieces of a layout's range: the same every step).
template <class E>
class DeviceArrayCache {
 public:
  DeviceArrayCache() = default;
  DeviceArrayCache(const DeviceArrayCache&) = delete;
  DeviceArrayCache& operator=(const DeviceArrayCache&) = delete;
  ~DeviceArrayCache() {
    if (m_device) SHARDTRAIN_CUDA_WARN(cudaFree(m_device));
  }
  // The device copy of `host` (ordered on `stream`).
  const E* get(const std::vector<E>& host, cudaStream_t stream) {
    const std::size_t bytes = host.size() * sizeof(E);
    if (m_device != nullptr && host.size() == m_host.size() &&
        (bytes == 0 || std::memcmp(host.data(), m_host.data(), bytes) == 0))
      return m_device;
    if (host.size() > m_capacity) {
      SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));  // earlier users of the old copy are done
      if (m_device) SHARDTRAIN_CUDA_CHECK(cudaFree(m_device));
      m_device = nullptr;
      SHARDTRAIN_CUDA_CHECK(cudaMalloc(&m_device, std::max<std::size_t>(bytes, 1)));
      m_capacity = host.size();
    }
    m_host = host;  // the source of the copy below: it outlives the call
    if (bytes > 0)
      SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(m_device, m_host.data(), bytes, cudaMemcpyHostToDevice, stream));
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));  // m_host may change at the next upload
    return m_device;
  }

 private:
  std::vector<E> m_host;
  E* m_device = nullptr;
  std::size_t m_capacity = 0;
};

// Vector ops on the compute stream. Results the host needs (norm, first
// inf/NaN) are copied back, which waits for the stream. `one_launch`
// (train.device_kernels = "candidate"): the sums of squares of the gradient norm
// and AdamW over a range in one launch each instead of one per tensor piece,
// bitwise the same results (kernels/cuda/vector_reduce.cuh, adamw.cuh).
template <class P>
class CudaVectorOps final : public VectorOps<P> {
 public:
  CudaVectorOps(cudaStream_t stream, bool one_launch) : m_stream(stream), m_one_launch(one_launch) {}
  ~CudaVectorOps() override {
    if (m_scratch) SHARDTRAIN_CUDA_WARN(cudaFree(m_scratch));
  }
  void fill_zero(P* x, std::int64_t n) override {
    if (n > 0) SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(x, 0, static_cast<std::size_t>(n) * sizeof(P), m_stream));
  }
  void accumulate(const P* src, P* dst, std::int64_t n) override { cuda::accumulate(dev(src), dev(dst), n, m_stream); }
  void copy(const P* src, P* dst, std::int64_t n) override {
    if (n > 0)
      SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(P), cudaMemcpyDeviceToDevice,
                                            m_stream));
  }
  void set_inf(P* x) override {
    const P inf(std::numeric_limits<float>::infinity());
    SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(x, &inf, sizeof(P), cudaMemcpyHostToDevice, m_stream));
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream));  // &inf is a stack variable
  }
  double sum_of_squares(const ParamLayout& layout, const P* g, std::int64_t lo, std::int64_t hi) override {
    // One fixed-grid partial-sum launch per tensor piece in [lo, hi), in layout order.
    std::vector<cuda::ReducePiece> pieces;
    for (const auto& e : layout.entries()) {
      const std::int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.numel);
      if (a < b) pieces.push_back({a - lo, b - a});
    }
    if (pieces.empty()) return 0.0;
    const std::size_t n_partials = pieces.size() * cuda::kReduceGrid;
    double* partials = static_cast<double*>(scratch(n_partials * sizeof(double)));
    if (m_one_launch && pieces.size() <= 65535) {
      cuda::sum_of_squares_pieces_partials(dev(g), m_pieces.get(pieces, m_stream),
                                           static_cast<std::int64_t>(pieces.size()), partials, m_stream);
    } else {
      for (std::size_t k = 0; k < pieces.size(); ++k)
        cuda::sum_of_squares_partials(dev(g + pieces[k].offset), pieces[k].n, partials + k * cuda::kReduceGrid,
                                      m_stream);
    }
    std::vector<double> host(n_partials);
    SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(host.data(), partials, n_partials * sizeof(double),
                                          cudaMemcpyDeviceToHost, m_stream));
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream));
    double total = 0.0;
    for (double p : host) total += p;  // fixed order
    return total;
  }
  std::int64_t first_non_finite(const P* x, std::int64_t n) override {
    auto* first = static_cast<unsigned long long*>(scratch(sizeof(unsigned long long)));
    SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(first, 0xff, sizeof(unsigned long long), m_stream));
    cuda::first_non_finite(dev(x), n, first, m_stream);
    unsigned long long host = 0;
    SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(&host, first, sizeof host, cudaMemcpyDeviceToHost, m_stream));
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream));
    return host == ~0ull ? -1 : static_cast<std::int64_t>(host);
  }
  void widen(const P* x, float* y, std::int64_t n) override {
    if constexpr (std::is_same_v<P, float>) {
      if (n > 0) SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, m_stream));
    } else {
      cuda::widen(dev(x), y, n, m_stream);
    }
  }
  void narrow(const float* x, P* y, std::int64_t n) override {
    if constexpr (std::is_same_v<P, float>) {
      if (n > 0) SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, m_stream));
    } else {
      cuda::narrow(x, dev(y), n, m_stream);
    }
  }
  void adamw(const ParamLayout& layout, const AdamWUpdate& u, P* params, const P* grads, float* master, float* m,
             float* v) override {
    std::vector<cuda::AdamWSegment> segments;  // host array, as adamw_step takes it
    for (const auto& e : layout.entries()) {
      const std::int64_t a = std::max(u.lo, e.offset), b = std::min(u.hi, e.offset + e.numel);
      if (a < b) segments.push_back({a - u.lo, b - u.lo, e.weight_decay});
    }
    cuda::AdamWHyper h;
    h.lr = u.lr;
    h.beta1 = u.beta1;
    h.beta2 = u.beta2;
    h.eps = u.eps;
    h.weight_decay = u.weight_decay;
    h.grad_scale = u.grad_scale;
    h.step = u.step;
    if (m_one_launch)
      cuda::adamw_step_one_launch(dev(params), dev(grads), master, m, v, m_segments.get(segments, m_stream),
                                  segments.data(), segments.size(), h, m_stream);
    else
      cuda::adamw_step(dev(params), dev(grads), master, m, v, segments.data(), segments.size(), h, m_stream);
  }

 private:
  // Device scratch of at least `bytes`, reused across calls (the stream orders its users).
  void* scratch(std::size_t bytes) {
    if (bytes > m_scratch_bytes) {
      SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream));
      if (m_scratch) SHARDTRAIN_CUDA_CHECK(cudaFree(m_scratch));
      m_scratch = nullptr;
      SHARDTRAIN_CUDA_CHECK(cudaMalloc(&m_scratch, bytes));
      m_scratch_bytes = bytes;
    }
    return m_scratch;
  }
  cudaStream_t m_stream;
  bool m_one_launch;
  void* m_scratch = nullptr;
  std::size_t m_scratch_bytes = 0;
  DeviceArrayCache<cuda::ReducePiece> m_pieces;
  DeviceArrayCache<cuda::AdamWSegment> m_segments;
};

// fp64 is the host's gradient-check type; a device run never asks for it.
class NoDoubleOps final : public VectorOps<double> {
  [[noreturn]] static void fail() { SHARDTRAIN_FAIL("the CUDA backend has no fp64 vector ops"); }
 public:
  void fill_zero(double*, std::int64_t) override { fail(); }
  void accumulate(const double*, double*, std::int64_t) override { fail(); }
  void copy(const double*, double*, std::int64_t) override { fail(); }
  void set_inf(double*) override { fail(); }
  double sum_of_squares(const ParamLayout&, const double*, std::int64_t, std::int64_t) override { fail(); }
  std::int64_t first_non_finite(const double*, std::int64_t) override { fail(); }
  void widen(const double*, float*, std::int64_t) override { fail(); }
  void narrow(const float*, double*, std::int64_t) override { fail(); }
  void adamw(const ParamLayout&, const AdamWUpdate&, double*, const double*, float*, float*, float*) override {
    fail();
  }
};

}  // namespace

struct CudaBackend::Impl {
  Impl(cudaStream_t s, CollectiveStream& comm, bool one_launch)
      : memory(s, comm), f32(s, one_launch), f16_ops(s, one_launch), bf16_ops(s, one_launch) {}
  DeviceMemory memory;
  CudaVectorOps<float> f32;
  CudaVectorOps<f16> f16_ops;
  CudaVectorOps<bf16> bf16_ops;
  NoDoubleOps f64;
  std::unique_ptr<cuda::LtContext> lt;  // model.gemm = "cublaslt" or "auto" only
};

CudaBackend::CudaBackend(CollectiveStream& comm, GemmImpl gemm, DeviceKernels kernels)
    : m_comm(comm), m_device(comm.device()) {
  // The communicator made the device current for this thread.
  SHARDTRAIN_CUDA_CHECK(cudaSetDevice(m_device));
  cudaDeviceProp prop{};
  SHARDTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, m_device));
  m_description = fmt::format("CUDA device {} ({}, compute capability {}.{}, {:.1f} GiB)", m_device, prop.name,
                              prop.major, prop.minor, static_cast<double>(prop.totalGlobalMem) / 1073741824.0);
  try {
    SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
    SHARDTRAIN_CUBLAS_CHECK(cublasCreate(&m_cublas));
    SHARDTRAIN_CUBLAS_CHECK(cublasSetStream(m_cublas, m_stream));
    m_candidate = kernels == DeviceKernels::Candidate;
    m_impl = std::make_unique<Impl>(m_stream, m_comm, m_candidate);
    if (kernels == DeviceKernels::Candidate)
      m_description += "; candidate kernels (train.device_kernels = \"candidate\": one-launch gradient norm and AdamW, LayerNorm's row kernels and one-pass backward, cross-entropy's backward on the forward's row statistics, the weights CRC's pieces a block each)";
    if (gemm == GemmImpl::Cublaslt || gemm == GemmImpl::Auto) {
      m_impl->lt = std::make_unique<cuda::LtContext>();
      m_description += fmt::format("; Linear layers through cuBLASLt (model.gemm = \"{}\")", name_of(gemm));
    }
  } catch (...) {
    m_impl.reset();                                    // before the stream its memory orders against
    if (m_cublas) cublasDestroy(m_cublas);             // already failing: the first error is the one reported
    if (m_stream) SHARDTRAIN_CUDA_WARN(cudaStreamDestroy(m_stream));
    throw;
  }
}

CudaBackend::~CudaBackend() {
  if (m_stream) SHARDTRAIN_CUDA_WARN(cudaStreamSynchronize(m_stream));
  m_impl.reset();
  if (m_cublas && cublasDestroy(m_cublas) != CUBLAS_STATUS_SUCCESS)
    std::fprintf(stderr, "warning: %s: cublasDestroy failed\n", detail::mpi_rank_label().c_str());
  if (m_stream) SHARDTRAIN_CUDA_WARN(cudaStreamDestroy(m_stream));
}

MemorySpace* CudaBackend::memory() { return &m_impl->memory; }

cuda::LtContext* CudaBackend::lt() const { return m_impl->lt.get(); }

void CudaBackend::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, m_stream));
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream));
}

void CudaBackend::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, m_stream));
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream));
}

void CudaBackend::synchronize() { SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream)); }

bool CudaBackend::crc32_pieces(const void* p, std::size_t bytes, std::size_t piece, std::uint32_t* out) {
  if (bytes == 0) return true;
  SHARDTRAIN_CHECK(piece > 0, "CudaBackend::crc32_pieces: piece size must be positive");
  const std::size_t n = (bytes + piece - 1) / piece;
  // The pieces' CRCs: a stream-ordered allocation freed behind the copy (4 bytes a piece).
  void* d = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaMallocAsync(&d, n * sizeof(std::uint32_t), m_stream));
  try {
    cuda::crc32_pieces(p, bytes, piece, static_cast<std::uint32_t*>(d), m_stream, m_candidate);
    SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(out, d, n * sizeof(std::uint32_t), cudaMemcpyDeviceToHost, m_stream));
  } catch (...) {
    SHARDTRAIN_CUDA_WARN(cudaFreeAsync(d, m_stream));
    throw;
  }
  SHARDTRAIN_CUDA_CHECK(cudaFreeAsync(d, m_stream));
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream));
  return true;
}
void CudaBackend::collectives_after_compute() { m_comm.wait_for_stream(m_stream); }
void CudaBackend::compute_after_collectives() { m_comm.make_stream_wait(m_stream); }

VectorOps<float>& CudaBackend::ops_for(float*) { return m_impl->f32; }
VectorOps<double>& CudaBackend::ops_for(double*) { return m_impl->f64; }
VectorOps<f16>& CudaBackend::ops_for(f16*) { return m_impl->f16_ops; }
VectorOps<bf16>& CudaBackend::ops_for(bf16*) { return m_impl->bf16_ops; }

}  // namespace shardtrain
