// NcclCommunicator: device-memory collectives over NCCL on a communication stream
// of its own, bootstrapped over MPI, with MpiCommunicator's payload accounting
// (communicator.hpp: CommTally; NCCL's wire bytes are not measured).
// Every CUDA, NCCL and MPI call is checked. See the header for the stream rules.
#include "parallel/nccl/nccl_communicator.hpp"

#include <cstring>
#include <exception>
#include <string>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "core/mpi_check.hpp"
#include "parallel/device_assignment.hpp"


namespace shardtrain {
namespace {


ncclDataType_t to_nccl(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
  }
  SHARDTRAIN_FAIL("unknown DType");
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  SHARDTRAIN_FAIL("unknown ReduceOp");
}

// True for plain (unregistered, pageable) host memory. Device, managed and
// registered/pinned host memory are all addressable by NCCL kernels.
bool is_plain_host_memory(const void* p) {
  cudaPointerAttributes attributes{};
  const cudaError_t rc = cudaPointerGetAttributes(&attributes, p);
  if (rc == cudaErrorInvalidValue) {  // runtimes before 11.0 answered so for host memory
    cudaGetLastError();
    return true;
  }
  if (rc != cudaSuccess)
    detail::throw_gpu_error(__FILE__, __LINE__, "cudaPointerGetAttributes",
                            detail::cuda_error_text(rc));
  return attributes.type == cudaMemoryTypeUnregistered;
}

void require_device_memory(const void* p, const char* call) {
  if (is_plain_host_memory(p))
    SHARDTRAIN_FAIL(std::string("NcclCommunicator::") + call +
                    ": buffer is plain host memory; NCCL needs device memory (only the "
                    "blocking all_reduce and broadcast stage host buffers)");
}

// Throws for a failed NCCL call made in a loop or group (the macros take a call).
void check_nccl(ncclResult_t rc, const char* file, int line, const std::string& what) {
  if (rc != ncclSuccess) detail::throw_gpu_error(file, line, what.c_str(), detail::nccl_error_text(rc));
}

// Queues the NCCL calls made by `enqueue` (which returns the first failure) as one
// group: ncclGroupStart, the calls, and always ncclGroupEnd, so a failed call
// never leaves the thread inside a group. `what` names the calls in errors.
template <class Enqueue>
void nccl_group(const char* what, Enqueue&& enqueue) {
  SHARDTRAIN_NCCL_CHECK(ncclGroupStart());
  const ncclResult_t rc = enqueue();
  const ncclResult_t end_rc = ncclGroupEnd();
  check_nccl(rc, __FILE__, __LINE__, what);
  check_nccl(end_rc, __FILE__, __LINE__, std::string("ncclGroupEnd (after ") + what + ")");
}

// A collective queued on the comm stream, completed by an event recorded after it.
class NcclRequest final : public Request {
 public:
  // The event is created before the collective is queued, so a failure here
  // leaves nothing running.
  NcclRequest() { SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&m_event, cudaEventDisableTiming)); }
  ~NcclRequest() override {
    if (m_pending) cudaEventSynchronize(m_event);  // never release buffers under a collective
    cudaEventDestroy(m_event);
  }
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;

  void record(cudaStream_t stream) {
    SHARDTRAIN_CUDA_CHECK(cudaEventRecord(m_event, stream));
    m_pending = true;
  }
  void wait() override {
    if (!m_pending) return;
    SHARDTRAIN_CUDA_CHECK(cudaEventSynchronize(m_event));
    m_pending = false;
  }
  bool test() override {
    if (!m_pending) return true;
    const cudaError_t rc = cudaEventQuery(m_event);
    if (rc == cudaErrorNotReady) return false;
    if (rc != cudaSuccess)
      detail::throw_gpu_error(__FILE__, __LINE__, "cudaEventQuery", detail::cuda_error_text(rc));
    m_pending = false;
    return true;
  }

 private:
  cudaEvent_t m_event = nullptr;
  bool m_pending = false;
};

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

// What rank 0 broadcasts: its ncclGetUniqueId result and the id, so a failure
// there reaches every rank instead of leaving them in ncclCommInitRank.
struct UniqueIdMessage {
  int status = ncclSuccess;
  ncclUniqueId id{};
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm) : m_comm(comm) {
  SHARDTRAIN_MPI_CHECK(MPI_Comm_rank(m_comm, &m_rank));
  SHARDTRAIN_MPI_CHECK(MPI_Comm_size(m_comm, &m_size));

  // 1. Devices, before anything is allocated: what this rank sees (UUIDs, in
  // its visible order), shared out among the node's ranks (parallel/device_assignment).
  VisibleDevices visible;
  visible.rank = m_rank;
  int devices = 0;
  const cudaError_t count_rc = cudaGetDeviceCount(&devices);
  if (count_rc != cudaSuccess) {
    cudaGetLastError();
    visible.error = detail::cuda_error_text(count_rc);
  }
  for (int d = 0; visible.error.empty() && d < devices; ++d) {
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
  const std::string who = "rank " + std::to_string(m_rank);
  const DeviceAssignment assignment = assign_node_device(m_comm, visible);
  std::string problem = assignment.problem;
  // Every rank throws if any rank failed, so none waits in a later collective.
  const auto agree = [&](const std::string& local_problem, const char* what) {
    int first_failing = local_problem.empty() ? m_size : m_rank;
    SHARDTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, m_comm));
    if (!local_problem.empty()) SHARDTRAIN_FAIL(local_problem);
    if (first_failing < m_size)
      SHARDTRAIN_FAIL(who + ": rank " + std::to_string(first_failing) + " " + what +
                      " (see its error); NcclCommunicator not created");
  };
  agree(problem, "has no usable CUDA device");

  try {
    // 2. One device per node-local rank; the comm stream and ordering event on it.
    try {
      m_device = assignment.device;
      SHARDTRAIN_CUDA_CHECK(cudaSetDevice(m_device));
      SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
      SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&m_ordering_event, cudaEventDisableTiming));
      problem.clear();
    } catch (const Error& e) {
      problem = e.what();
    }
    agree(problem, "could not set up its CUDA device");

    // 3. NCCL bootstrap over MPI.
    UniqueIdMessage message;
    if (m_rank == 0) message.status = ncclGetUniqueId(&message.id);
    SHARDTRAIN_MPI_CHECK(MPI_Bcast(&message, sizeof message, MPI_BYTE, 0, m_comm));
    check_nccl(static_cast<ncclResult_t>(message.status), __FILE__, __LINE__,
               "ncclGetUniqueId (on rank 0)");
    SHARDTRAIN_NCCL_CHECK(ncclCommInitRank(&m_nccl, m_size, message.id, m_rank));
  } catch (...) {
    release(/*abort=*/true);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() { release(std::uncaught_exceptions() > 0); }

void NcclCommunicator::release(bool abort) noexcept {
  if (m_nccl != nullptr) {
    bool clean = !abort && cudaStreamSynchronize(m_stream) == cudaSuccess;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    clean = clean && ncclCommFinalize(m_nccl) == ncclSuccess;
#endif
    if (clean)
      ncclCommDestroy(m_nccl);
    else
      ncclCommAbort(m_nccl);  // local: never waits for other ranks
    m_nccl = nullptr;
  }
  if (m_scratch != nullptr) cudaFree(m_scratch);
  if (m_ordering_event != nullptr) cudaEventDestroy(m_ordering_event);
  if (m_stream != nullptr) cudaStreamDestroy(m_stream);
  m_scratch = nullptr;
  m_ordering_event = nullptr;
  m_stream = nullptr;
}

void* NcclCommunicator::scratch(std::size_t bytes) {
  if (bytes > m_scratch_bytes) {
    // Only blocking calls use the scratch buffer, so nothing is queued on it here.
    if (m_scratch != nullptr) SHARDTRAIN_CUDA_CHECK(cudaFree(m_scratch));
    m_scratch = nullptr;
    m_scratch_bytes = 0;
    SHARDTRAIN_CUDA_CHECK(cudaMalloc(&m_scratch, bytes));
    m_scratch_bytes = bytes;
  }
  return m_scratch;
}

void NcclCommunicator::all_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) {
  count_call(Collective::AllReduce, count * dtype_size(type));
  if (count == 0) return;
  const std::size_t bytes = count * dtype_size(type);
  if (is_plain_host_memory(buffer)) {
    void* staged = scratch(bytes);
    SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(staged, buffer, bytes, cudaMemcpyHostToDevice, m_stream));
    SHARDTRAIN_NCCL_CHECK(
        ncclAllReduce(staged, staged, count, to_nccl(type), to_nccl(op), m_nccl, m_stream));
    SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(buffer, staged, bytes, cudaMemcpyDeviceToHost, m_stream));
  } else {
    SHARDTRAIN_NCCL_CHECK(
        ncclAllReduce(buffer, buffer, count, to_nccl(type), to_nccl(op), m_nccl, m_stream));
  }
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream));
}

void NcclCommunicator::broadcast(void* buffer, std::size_t count, DType type, int root) {
  count_call(Collective::Broadcast, m_rank == root ? count * dtype_size(type) : 0);
  if (count == 0) return;
  const std::size_t bytes = count * dtype_size(type);
  if (is_plain_host_memory(buffer)) {
    void* staged = scratch(bytes);
    if (m_rank == root)
      SHARDTRAIN_CUDA_CHECK(
          cudaMemcpyAsync(staged, buffer, bytes, cudaMemcpyHostToDevice, m_stream));
    SHARDTRAIN_NCCL_CHECK(ncclBroadcast(staged, staged, count, to_nccl(type), root, m_nccl, m_stream));
    SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(buffer, staged, bytes, cudaMemcpyDeviceToHost, m_stream));
  } else {
    SHARDTRAIN_NCCL_CHECK(ncclBroadcast(buffer, buffer, count, to_nccl(type), root, m_nccl, m_stream));
  }
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream));
}

void NcclCommunicator::barrier() {
  count_call(Collective::Barrier, 0);
  synchronize();
  SHARDTRAIN_MPI_CHECK(MPI_Barrier(m_comm));
}

// The blocking forms are the non-blocking ones waited for (counted there).
void NcclCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                      DType type, ReduceOp op) {
  ireduce_scatter(send, recv, recv_count, type, op)->wait();
}

void NcclCommunicator::all_gather(const void* send, void* recv, std::size_t send_count,
                                  DType type) {
  iall_gather(send, recv, send_count, type)->wait();
}

RequestPtr NcclCommunicator::iall_reduce(void* buffer, std::size_t count, DType type,
                                         ReduceOp op) {
  auto request = std::make_unique<NcclRequest>();
  if (count > 0) {
    require_device_memory(buffer, "iall_reduce");
    SHARDTRAIN_NCCL_CHECK(
        ncclAllReduce(buffer, buffer, count, to_nccl(type), to_nccl(op), m_nccl, m_stream));
  }
  request->record(m_stream);
  count_call(Collective::AllReduce, count * dtype_size(type), /*async=*/true);
  return request;
}

RequestPtr NcclCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                             DType type, ReduceOp op) {
  const ReduceScatterPart part{send, recv, recv_count};
  return ireduce_scatter_group(std::span<const ReduceScatterPart>(&part, 1), type, op);
}

RequestPtr NcclCommunicator::iall_gather(const void* send, void* recv, std::size_t send_count,
                                         DType type) {
  const AllGatherPart part{send, recv, send_count};
  return iall_gather_group(std::span<const AllGatherPart>(&part, 1), type);
}

RequestPtr NcclCommunicator::ireduce_scatter_group(std::span<const ReduceScatterPart> parts,
                                                   DType type, ReduceOp op) {
  auto request = std::make_unique<NcclRequest>();
  std::size_t block_bytes = 0;
  for (const auto& part : parts) {
    if (part.recv_count == 0) continue;
    require_device_memory(part.send, "reduce_scatter");
    require_device_memory(part.recv, "reduce_scatter");
    block_bytes += part.recv_count * dtype_size(type);
  }
  // In place when part.recv == part.send + rank * recv_count: NCCL's own rule.
  nccl_group("ncclReduceScatter", [&] {
    for (const auto& part : parts) {
      if (part.recv_count == 0) continue;
      const ncclResult_t rc = ncclReduceScatter(part.send, part.recv, part.recv_count,
                                                to_nccl(type), to_nccl(op), m_nccl, m_stream);
      if (rc != ncclSuccess) return rc;
    }
    return ncclSuccess;
  });
  request->record(m_stream);
  // One call for the group; payload: every part's whole input.
  count_call(Collective::ReduceScatter, static_cast<std::uint64_t>(m_size) * block_bytes, /*async=*/true);
  return request;
}

RequestPtr NcclCommunicator::iall_gather_group(std::span<const AllGatherPart> parts, DType type) {
  auto request = std::make_unique<NcclRequest>();
  std::size_t block_bytes = 0;
  for (const auto& part : parts) {
    if (part.send_count == 0) continue;
    require_device_memory(part.send, "all_gather");
    require_device_memory(part.recv, "all_gather");
    block_bytes += part.send_count * dtype_size(type);
  }
  // In place when part.send == part.recv + rank * send_count: NCCL's own rule.
  nccl_group("ncclAllGather", [&] {
    for (const auto& part : parts) {
      if (part.send_count == 0) continue;
      const ncclResult_t rc =
          ncclAllGather(part.send, part.recv, part.send_count, to_nccl(type), m_nccl, m_stream);
      if (rc != ncclSuccess) return rc;
    }
    return ncclSuccess;
  });
  request->record(m_stream);
  count_call(Collective::AllGather, block_bytes, /*async=*/true);  // every part's own block
  return request;
}

// NCCL has no variable-block reduce-scatter: one ncclReduce per rank q (root q
// receives the reduction of block q), all in one group; in place when
// recv == send + displ(rank) (ncclReduce's own in-place form at the root).
// Payload as MPI counts it: the whole input, sum(counts) elements.
RequestPtr NcclCommunicator::ireduce_scatter_v(const void* send, void* recv,
                                               std::span<const std::size_t> counts, DType type,
                                               ReduceOp op) {
  SHARDTRAIN_CHECK(counts.size() == static_cast<std::size_t>(m_size), "one count per rank");
  auto request = std::make_unique<NcclRequest>();
  const std::size_t esize = dtype_size(type);
  std::size_t total = 0;
  for (std::size_t c : counts) total += c;
  if (total > 0) require_device_memory(send, "ireduce_scatter_v");
  if (counts[m_rank] > 0) require_device_memory(recv, "ireduce_scatter_v");
  nccl_group("ncclReduce (ireduce_scatter_v)", [&] {
    std::size_t displ = 0;
    for (int q = 0; q < m_size; ++q) {
      const std::size_t c = counts[q];
      if (c > 0) {
        const ncclResult_t rc = ncclReduce(static_cast<const char*>(send) + displ * esize, recv, c,
                                           to_nccl(type), to_nccl(op), q, m_nccl, m_stream);
        if (rc != ncclSuccess) return rc;
      }
      displ += c;
    }
    return ncclSuccess;
  });
  request->record(m_stream);
  count_call(Collective::ReduceScatter, total * esize, /*async=*/true);
  return request;
}

// One ncclBroadcast per rank q (root q sends its block to its offset in every
// rank's recv), all in one group; in place when send == recv + displ(rank).
// Payload as MPI counts it: the rank's own block, counts[rank] elements.
RequestPtr NcclCommunicator::iall_gather_v(const void* send, void* recv,
                                           std::span<const std::size_t> counts, DType type) {
  SHARDTRAIN_CHECK(counts.size() == static_cast<std::size_t>(m_size), "one count per rank");
  auto request = std::make_unique<NcclRequest>();
  const std::size_t esize = dtype_size(type);
  std::size_t total = 0;
  for (std::size_t c : counts) total += c;
  if (counts[m_rank] > 0) require_device_memory(send, "iall_gather_v");
  if (total > 0) require_device_memory(recv, "iall_gather_v");
  nccl_group("ncclBroadcast (iall_gather_v)", [&] {
    std::size_t displ = 0;
    for (int q = 0; q < m_size; ++q) {
      const std::size_t c = counts[q];
      if (c > 0) {
        void* block = static_cast<char*>(recv) + displ * esize;
        const ncclResult_t rc = ncclBroadcast(q == m_rank ? send : block, block, c, to_nccl(type),
                                              q, m_nccl, m_stream);
        if (rc != ncclSuccess) return rc;
      }
      displ += c;
    }
    return ncclSuccess;
  });
  request->record(m_stream);
  count_call(Collective::AllGather, counts[m_rank] * esize, /*async=*/true);
  return request;
}

void NcclCommunicator::wait_for_event(cudaEvent_t ready) {
  SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(m_stream, ready, 0));
}

void NcclCommunicator::wait_for_stream(cudaStream_t producer) {
  // cudaStreamWaitEvent captures the event's latest record, so one event is reused.
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(m_ordering_event, producer));
  SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(m_stream, m_ordering_event, 0));
}

void NcclCommunicator::make_stream_wait(cudaStream_t consumer) {
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(m_ordering_event, m_stream));
  SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(consumer, m_ordering_event, 0));
}

void NcclCommunicator::synchronize() { SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream)); }

}  // namespace shardtrain
