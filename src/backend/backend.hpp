// shardtrain/backend/backend.hpp
// Owns the choice of where a run computes. A Backend is the host (Kokkos
// kernels, host memory; host_backend()) or one CUDA device (kernels/cuda,
// device memory, a compute stream; backend/cuda/cuda_backend.hpp, CUDA build
// only). The model (model/gpt), the ZeRO engine (parallel/zero_engine) and AdamW
// (optim/adamw) are written once against this interface:
//  - memory(): where parameters, gradients, optimizer state, activations,
//    workspace and bucket buffers live (TrackedBuffer's MemorySpace);
//  - vector_ops<P>(): the few vector kernels around the model (zeroing,
//    accumulating reduced buckets, the gradient norm, the inf/NaN scan, fp32
//    master widening and rounding, the AdamW update);
//  - make_model_ops<T>() (backend/model_ops.hpp): the layer kernels;
//  - the stream ordering of collectives on backend memory (below).
// The Communicator that moves backend memory is chosen with the backend
// (MpiCommunicator for the host, NcclCommunicator for a device) and passed
// separately, so tests can wrap either.
// Invariants: every call of a backend is made from one host thread; kernels are
// queued in call order on one compute stream, so two kernels never race; a
// collective and a kernel are ordered only through the two fences below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.hpp"
#include "core/precision.hpp"
#include "core/memory.hpp"
#include "core/profiler.hpp"
#include "core/half.hpp"
#include "core/param_layout.hpp"

namespace shardtrain {

enum class BackendKind { Host, Cuda };

// One AdamW update (Loshchilov & Hutter 2019) of the range [lo, hi) of the flat
// vector, tensor by tensor (ParamEntry::weight_decay), padding untouched.
struct AdamWUpdate {
  std::int64_t lo = 0, hi = 0;
  double lr = 0.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  float grad_scale = 1.0f;  // multiplies every gradient first (unscaling, clipping)
  std::int64_t step = 0;    // 0-based count of updates taken before this one
};

// Vector kernels on the backend's memory. Pointers are backend pointers.
template <class P>
class VectorOps {
 public:
  virtual ~VectorOps() = default;
  virtual void fill_zero(P* x, std::int64_t n) = 0;
  // dst += src, element by element in fp32, rounded to P once.
  virtual void accumulate(const P* src, P* dst, std::int64_t n) = 0;
  // dst = src (ranges do not overlap).
  virtual void copy(const P* src, P* dst, std::int64_t n) = 0;
  // x[0] = +inf (the test hook that plants an overflow).
  virtual void set_inf(P* x) = 0;
  // Sum of squares (in double, a fixed order) of g[lo, hi) restricted to the
  // parameter tensors (padding excluded); g points at element lo.
  virtual double sum_of_squares(const ParamLayout& layout, const P* g, std::int64_t lo,
                                std::int64_t hi) = 0;
  // Index of the first inf/NaN of x[0, n), or -1.
  virtual std::int64_t first_non_finite(const P* x, std::int64_t n) = 0;
  virtual void widen(const P* x, float* y, std::int64_t n) = 0;   // y = float(x)
  virtual void narrow(const float* x, P* y, std::int64_t n) = 0;  // y = round-to-nearest-even(x)
  // AdamW over u.lo..u.hi; every pointer points at element u.lo. master ==
  // nullptr (P = float only): params are the fp32 weights, updated in place;
  // otherwise master is updated and params := master rounded to P.
  virtual void adamw(const ParamLayout& layout, const AdamWUpdate& u, P* params, const P* grads,
                     float* master, float* exp_avg, float* exp_avg_sq) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  // One line for the run's header: "host (Kokkos Serial)", "CUDA device 0 (NVIDIA H100 ...)".
  virtual std::string describe() const = 0;
  // The arithmetic limit of one rank for models stored as `precision` with `threads` threads per rank, measured now on the calling
  // thread (the host: this core's rate on the unit oneDNN uses for that precision,
  // AMX, AVX512-BF16 or FMA, named in `what`; kernels/core_peak.hpp): the denominator of the FLOP floor that --plan and
  // --profile print. gflops = 0 when the backend has no probe.
  struct ComputePeak {
    double gflops = 0;
    std::string what;  // e.g. "fp32 on AVX-512 FMA vfmadd231ps 265.0 GFLOP/s per core x 1 thread; oneDNN ISA AVX-512 AMX"
  };
  virtual ComputePeak compute_peak(PrecisionMode precision, int threads) {
    (void)precision;
    (void)threads;
    return {0.0, "no peak probe for " + describe()};
  }
  // Where model state and activations live; nullptr = host memory.
  virtual MemorySpace* memory() = 0;
  // Blocking copies between host memory and the backend's memory; they also
  // wait for the kernels queued before them.
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t bytes) = 0;
  // The host waits for every kernel queued so far.
  virtual void synchronize() = 0;
  // The CRC-32s (zlib's crc32) of the consecutive `piece`-byte pieces of the `bytes`
  // bytes at `p` in this backend's memory (the last piece may be shorter), into
  // out[0, ceil(bytes / piece)), after the kernels queued before: a device backend
  // hashes where the bytes are, so a CRC of the weights (rundir/weights_crc) moves
  // 4 bytes per piece to the host instead of the weights; io/crc32.hpp crc32_join
  // makes the whole buffer's CRC of them. Returns false, writing nothing, where the
  // memory is the host's (the default): the caller hashes it in place.
  virtual bool crc32_pieces(const void* p, std::size_t bytes, std::size_t piece, std::uint32_t* out) {
    (void)p;
    (void)bytes;
    (void)piece;
    (void)out;
    return false;
  }

  // Fences between the compute stream and the communicator's stream (no-ops on
  // the host, where a kernel has finished when it returns):
  //  - collectives_after_compute(): collectives issued from now on start after
  //    every kernel queued so far (call before a collective reads what kernels
  //    wrote: a gradient bucket, the optimizer's new shard);
  //  - compute_after_collectives(): kernels queued from now on start after every
  //    collective issued so far (call before kernels read what a collective
  //    wrote: a reduced bucket, gathered parameters).
  virtual void collectives_after_compute() {}
  virtual void compute_after_collectives() {}

  template <class P>
  VectorOps<P>& vector_ops() { return ops_for(static_cast<P*>(nullptr)); }

  // The run's `--profile` timers (core/profiler.hpp), or nullptr (the default):
  // model ops made while it is set time their calls, and the ZeRO engine times
  // its communication and optimizer step. The run that sets it clears it.
  void set_profiler(Profiler* profiler) { m_profiler = profiler; }
  Profiler* profiler() const { return m_profiler; }

 protected:
  virtual VectorOps<float>& ops_for(float*) = 0;
  virtual VectorOps<double>& ops_for(double*) = 0;
  virtual VectorOps<f16>& ops_for(f16*) = 0;
  virtual VectorOps<bf16>& ops_for(bf16*) = 0;

 private:
  Profiler* m_profiler = nullptr;
};

// The host backend (stateless, one per process).
Backend& host_backend();

// Threads per rank of the heavy host kernels (oneDNN's and OpenBLAS's pools;
// kernels/cpu_compute.hpp): parallel.threads, set once before a run's ops exist.
void set_host_compute_threads(int threads);
// Loads the heavy host kernels' library and thread pool (kernels/cpu_compute.hpp
// warm_up_compute), and for a 16-bit `storage` the GELU tables of that type
// (kernels/gelu.hpp), so that a process RSS measured after it includes them.
void warm_up_host_compute(DType storage);
// Whether the host runs bf16 GEMMs natively (AVX512-BF16; kernels/cpu_compute.hpp).
bool host_bf16_native();
// The host libraries' kernels for this CPU: "OpenBLAS core Haswell (OpenBLAS
// 0.3.21), oneDNN ISA avx2 (oneDNN 2.6.3)" (kernels/cpu_compute.hpp).
std::string host_libraries_describe();
// The Kokkos the host kernels were built against: "Kokkos 3.4.1 Serial", and once
// Kokkos is initialized its host space's threads ("Kokkos 3.4.1 OpenMP, 2 threads").
std::string host_kokkos_describe();

}  // namespace shardtrain
