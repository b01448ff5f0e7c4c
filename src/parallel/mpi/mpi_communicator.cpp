// MpiCommunicator: host-memory collectives over MPI, with payload accounting and
// the wire model of each call (communicator.hpp: CommTally; wire_model.hpp).
// Large buffers are split into chunks of at most INT_MAX elements (MPI counts are int).
#include "parallel/mpi/mpi_communicator.hpp"

#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "core/mpi_check.hpp"
#include "core/vectorize.hpp"
#include "parallel/mpi/wire_model.hpp"

namespace shardtrain {

namespace {

MPI_Datatype to_mpi(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::U8: return MPI_UINT8_T;
    case DType::F16: return MPI_UINT16_T;  // 16-bit words; reductions use our ops
    case DType::BF16: return MPI_UINT16_T;
  }
  SHARDTRAIN_FAIL("unknown DType");
}

MPI_Op to_mpi(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  SHARDTRAIN_FAIL("unknown ReduceOp");
}

constexpr std::size_t kMaxChunk = static_cast<std::size_t>(INT_MAX);

int block_count(std::size_t count, const char* what) {
  if (count > kMaxChunk)
    SHARDTRAIN_FAIL(std::string(what) + ": " + std::to_string(count) +
                    " elements per rank exceed the MPI limit of 2^31 - 1; use more ranks");
  return static_cast<int>(count);
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  return "?";
}

class MpiRequest final : public Request {
 public:
  // `what` names the collective for the watchdog ("wait for ireduce_scatter_v").
  MpiRequest(CollectiveWatchdog* watchdog, const char* what, std::size_t count, DType type)
      : m_watchdog(watchdog), m_what(what), m_count(count), m_type(type) {}
  ~MpiRequest() override {
    if (m_request != MPI_REQUEST_NULL) MPI_Wait(&m_request, MPI_STATUS_IGNORE);
    finish();
  }
  MPI_Request* handle() { return &m_request; }
  // Count and displacement arrays MPI reads until the request completes.
  std::vector<int> counts, displs;
  // In-place reduce-scatter: MPI leaves the result at the start of the buffer;
  // on completion it moves `move_bytes` from `move_from` to `move_to` (once).
  const void* move_from = nullptr;
  void* move_to = nullptr;
  std::size_t move_bytes = 0;
  void wait() override {
    CollectiveWatchdog::Scope watch(m_watchdog, m_what, m_count, dtype_name(m_type));
    SHARDTRAIN_MPI_CHECK(MPI_Wait(&m_request, MPI_STATUS_IGNORE));
    finish();
  }
  bool test() override {
    int done = 0;
    SHARDTRAIN_MPI_CHECK(MPI_Test(&m_request, &done, MPI_STATUS_IGNORE));
    if (done) finish();
    return done != 0;
  }

 private:
  void finish() {
    if (move_bytes > 0 && move_to != move_from) std::memmove(move_to, move_from, move_bytes);
    move_bytes = 0;
  }
  MPI_Request m_request = MPI_REQUEST_NULL;
  CollectiveWatchdog* m_watchdog;
  const char* m_what;
  std::size_t m_count;
  DType m_type;
};

}  // namespace

// Buffers of at least the requested size, uninitialised, reused: take() hands out
// the smallest free buffer that fits (or a new one), give() takes it back. Never
// shrinks: its high-water is the largest set of exchanges in flight at once,
// which is what allocating per exchange held too, without the page faults of
// fresh memory in every bucket of every step (measured: the quickstart GPT's
// grad_reduce 1.4 -> 0.7 ms per step once glibc's mmap threshold is fixed).
class MpiCommunicator::ScratchPool {
 public:
  struct Buffer {
    std::unique_ptr<char[]> data;
    std::size_t size = 0;
  };
  Buffer take(std::size_t bytes) {
    std::size_t best = m_free.size();
    for (std::size_t i = 0; i < m_free.size(); ++i)
      if (m_free[i].size >= bytes && (best == m_free.size() || m_free[i].size < m_free[best].size)) best = i;
    if (best == m_free.size()) return Buffer{std::unique_ptr<char[]>(new char[bytes > 0 ? bytes : 1]), bytes};
    Buffer b = std::move(m_free[best]);
    m_free.erase(m_free.begin() + static_cast<std::ptrdiff_t>(best));
    return b;
  }
  void give(Buffer b) noexcept {
    try {
      m_free.push_back(std::move(b));
    } catch (...) {  // out of memory for the list: the buffer is freed instead
    }
  }

 private:
  std::vector<Buffer> m_free;
};

namespace {

// out[i] = in[i] + own[i], i < n: the first combine of an out-of-place sum in one
// pass, where a copy of own into out and MPI_Reduce_local(in, out) were two. The
// same bits: one IEEE add per element (commutative), and for the 16-bit types
// half_reduce_span's fp32 add and one rounding. Cloned (core/vectorize.hpp).
template <class T>
SHARDTRAIN_TARGET_CLONES
void sum_into(const T* __restrict in, const T* __restrict own, T* __restrict out, int n) {
  for (int i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) out[i] = in[i] + own[i];
    else out[i] = T(static_cast<float>(in[i]) + static_cast<float>(own[i]));
  }
}

// sum_into on the bytes of `type`; false (nothing written) for the integer types.
bool sum_into(DType type, const void* in, const void* own, void* out, int n) {
  switch (type) {
    case DType::F32: sum_into(static_cast<const float*>(in), static_cast<const float*>(own), static_cast<float*>(out), n); return true;
    case DType::F64: sum_into(static_cast<const double*>(in), static_cast<const double*>(own), static_cast<double*>(out), n); return true;
    case DType::F16: sum_into(static_cast<const f16*>(in), static_cast<const f16*>(own), static_cast<f16*>(out), n); return true;
    case DType::BF16: sum_into(static_cast<const bf16*>(in), static_cast<const bf16*>(own), static_cast<bf16*>(out), n); return true;
    default: return false;
  }
}

// Reduce-scatter by pairwise exchange: every rank posts, at once, an Irecv from each
// other rank of that rank's contribution to its own block (into `tmp`, one slot per
// peer) and an Isend to each other rank of the input's block for that rank. When all
// have completed (test() or wait()), the block is combined in a fixed order:
//   own block (copied to recv unless in place; out of place, a sum combines it with
//   tmp[r-1] in the same pass, sum_into), then recv = tmp[r-1] op recv,
//   recv = tmp[r-2] op recv, ..., (peer ranks mod N), with MPI_Reduce_local,
// so the bits depend only on the rank count. Each rank sends (N-1)/N of the input
// once: Open MPI 4.1's libnbc ireduce_scatter first reduces the WHOLE input to
// rank 0 and then scatters it, and measured 3x slower at 2 ranks (share/doc/
// benchmarks.md, "Kept: reduce-scatter as our own pairwise exchange"). Two
// operands commute bitwise, so at 2 ranks the result is the one MPI gave.
class PairwiseReduceScatter final : public Request {
 public:
  using Pool = MpiCommunicator::ScratchPool;
  PairwiseReduceScatter(CollectiveWatchdog* watchdog, const char* what, std::size_t count, DType type,
                        std::shared_ptr<Pool> pool, std::size_t tmp_bytes)
      : m_watchdog(watchdog), m_what(what), m_count(count), m_type(type), m_pool(std::move(pool)),
        m_tmp(m_pool->take(tmp_bytes)), m_tmp_bytes(tmp_bytes) {}
  ~PairwiseReduceScatter() override {  // never throws: completes and combines, errors ignored
    if (m_pending) {
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
      combine(/*check=*/false);
    }
    m_pool->give(std::move(m_tmp));
  }
  // Filled by MpiCommunicator::start_reduce_scatter before the first test/wait.
  std::vector<MPI_Request> requests;
  // slot s-1 of the receive buffer: own_count elements from rank - s (mod N)
  char* tmp() { return m_tmp.data.get(); }
  const void* own = nullptr;               // this rank's block of the input
  void* recv = nullptr;
  int own_count = 0;
  MPI_Datatype mpi_type = MPI_DATATYPE_NULL;
  MPI_Op mpi_op = MPI_OP_NULL;
  bool sum = false;  // the op is ReduceOp::Sum
  // Called before the first message is posted, so that whatever was posted is
  // completed by wait() or the destructor even if a later post fails.
  void start() { m_pending = true; }
  void wait() override {
    if (!m_pending) return;
    CollectiveWatchdog::Scope watch(m_watchdog, m_what, m_count, dtype_name(m_type));
    SHARDTRAIN_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
    combine(/*check=*/true);
  }
  bool test() override {
    if (!m_pending) return true;
    int done = 0;
    SHARDTRAIN_MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                                     MPI_STATUSES_IGNORE));
    if (done) combine(/*check=*/true);
    return done != 0;
  }

 private:
  void combine(bool check) {
    m_pending = false;
    const std::size_t bytes = static_cast<std::size_t>(own_count) * dtype_size(m_type);
    if (own_count == 0) return;
    std::size_t at = 0;  // rank - 1's contribution, then rank - 2's, ...
    if (recv != own) {   // out of place: rank - 1's and our own block combined into recv
      if (sum && m_tmp_bytes > 0 && sum_into(m_type, m_tmp.data.get(), own, recv, own_count)) at = bytes;
      else std::memcpy(recv, own, bytes);
    }
    for (; at < m_tmp_bytes; at += bytes) {
      const void* in = m_tmp.data.get() + at;
      if (check)
        SHARDTRAIN_MPI_CHECK(MPI_Reduce_local(in, recv, own_count, mpi_type, mpi_op));
      else
        MPI_Reduce_local(in, recv, own_count, mpi_type, mpi_op);
    }
  }
  CollectiveWatchdog* m_watchdog;
  const char* m_what;
  std::size_t m_count;
  DType m_type;
  std::shared_ptr<Pool> m_pool;
  Pool::Buffer m_tmp;
  std::size_t m_tmp_bytes;
  bool m_pending = false;
};

// inout[i] = in[i] op inout[i], computed in fp32 and rounded to H once. Cloned
// (core/vectorize.hpp), so that the widening and rounding run in AVX-512 or AVX2
// vectors where the CPU has them (the same bits on every clone: one fp32 operation
// and one rounding per element).
template <class H, ReduceOp Op>
SHARDTRAIN_TARGET_CLONES
void half_reduce_span(const H* __restrict a, H* __restrict b, int n) {
  for (int i = 0; i < n; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    float r;
    if constexpr (Op == ReduceOp::Sum) r = x + y;
    else if constexpr (Op == ReduceOp::Max) r = x > y ? x : y;
    else r = x < y ? x : y;
    b[i] = H(r);
  }
}

template <class H, ReduceOp Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  half_reduce_span<H, Op>(static_cast<const H*>(in), static_cast<H*>(inout), *len);
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : m_scratch(std::make_shared<ScratchPool>()), m_comm(comm) {
  SHARDTRAIN_MPI_CHECK(MPI_Comm_rank(m_comm, &m_rank));
  SHARDTRAIN_MPI_CHECK(MPI_Comm_size(m_comm, &m_size));
  MPI_User_function* fns[2][3] = {
      {half_reduce<f16, ReduceOp::Sum>, half_reduce<f16, ReduceOp::Max>, half_reduce<f16, ReduceOp::Min>},
      {half_reduce<bf16, ReduceOp::Sum>, half_reduce<bf16, ReduceOp::Max>, half_reduce<bf16, ReduceOp::Min>}};
  for (int t = 0; t < 2; ++t)
    for (int o = 0; o < 3; ++o)
      SHARDTRAIN_MPI_CHECK(MPI_Op_create(fns[t][o], /*commute=*/1, &m_half_ops[t][o]));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& ops : m_half_ops)
    for (MPI_Op& op : ops)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
}

void MpiCommunicator::model(Collective kind, const WireEstimate& w) {
  count_model(kind, w.bytes, w.modelled);
  std::string& names = m_algorithms[static_cast<int>(kind)];
  const std::string name = w.modelled ? std::string(w.algorithm) : std::string("not modelled: ") + w.algorithm;
  if (("; " + names + "; ").find("; " + name + "; ") == std::string::npos) names += (names.empty() ? "" : "; ") + name;
}

MPI_Op MpiCommunicator::mpi_op(DType type, ReduceOp op) const {
  const int o = op == ReduceOp::Sum ? 0 : op == ReduceOp::Max ? 1 : 2;
  if (type == DType::F16) return m_half_ops[0][o];
  if (type == DType::BF16) return m_half_ops[1][o];
  return to_mpi(op);
}

void MpiCommunicator::all_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) {
  CollectiveWatchdog::Scope watch(m_watchdog, "all_reduce", count, dtype_name(type));
  const std::size_t esize = dtype_size(type);
  count_call(Collective::AllReduce, count * esize);
  auto* bytes = static_cast<char*>(buffer);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(kMaxChunk, count - done);
    SHARDTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + done * esize, static_cast<int>(n), to_mpi(type),
                            mpi_op(type, op), m_comm));
    model(Collective::AllReduce, wire_all_reduce(m_size, m_rank, n, esize));
    done += n;
  }
}

void MpiCommunicator::broadcast(void* buffer, std::size_t count, DType type, int root) {
  CollectiveWatchdog::Scope watch(m_watchdog, "broadcast", count, dtype_name(type));
  const std::size_t esize = dtype_size(type);
  count_call(Collective::Broadcast, m_rank == root ? count * esize : 0);
  auto* bytes = static_cast<char*>(buffer);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(kMaxChunk, count - done);
    SHARDTRAIN_MPI_CHECK(MPI_Bcast(bytes + done * esize, static_cast<int>(n), to_mpi(type), root, m_comm));
    model(Collective::Broadcast, wire_broadcast(m_size, m_rank, root, n, esize));
    done += n;
  }
}

void MpiCommunicator::barrier() {
  CollectiveWatchdog::Scope watch(m_watchdog, "barrier", 0, "-");
  count_call(Collective::Barrier, 0);
  model(Collective::Barrier, wire_barrier(m_size));
  SHARDTRAIN_MPI_CHECK(MPI_Barrier(m_comm));
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                     DType type, ReduceOp op) {
  const std::size_t block_bytes = recv_count * dtype_size(type);
  count_call(Collective::ReduceScatter, static_cast<std::uint64_t>(m_size) * block_bytes);
  const std::vector<std::size_t> counts(static_cast<std::size_t>(m_size), recv_count);
  start_reduce_scatter("reduce_scatter", send, recv, counts, type, op)->wait();
}

void MpiCommunicator::all_gather(const void* send, void* recv, std::size_t send_count,
                                 DType type) {
  CollectiveWatchdog::Scope watch(m_watchdog, "all_gather", send_count, dtype_name(type));
  const std::size_t block_bytes = send_count * dtype_size(type);
  count_call(Collective::AllGather, block_bytes);
  const bool in_place = send == static_cast<const char*>(recv) + m_rank * block_bytes;
  const int n = block_count(send_count, "all_gather");
  model(Collective::AllGather, wire_all_gather(m_size, m_rank, send_count, dtype_size(type)));
  SHARDTRAIN_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, to_mpi(type), recv, n, to_mpi(type),
                          m_comm));
}

RequestPtr MpiCommunicator::iall_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) {
  auto request = std::make_unique<MpiRequest>(m_watchdog, "wait for iall_reduce", count, type);
  count_call(Collective::AllReduce, count * dtype_size(type), /*async=*/true);
  model(Collective::AllReduce, wire_iall_reduce(m_size, m_rank, count, dtype_size(type)));
  SHARDTRAIN_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buffer, block_count(count, "iall_reduce"), to_mpi(type),
                           mpi_op(type, op), m_comm, request->handle()));
  return request;
}

RequestPtr MpiCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                            DType type, ReduceOp op) {
  const std::size_t block_bytes = recv_count * dtype_size(type);
  count_call(Collective::ReduceScatter, static_cast<std::uint64_t>(m_size) * block_bytes, /*async=*/true);
  const std::vector<std::size_t> counts(static_cast<std::size_t>(m_size), recv_count);
  return start_reduce_scatter("wait for ireduce_scatter", send, recv, counts, type, op);
}

RequestPtr MpiCommunicator::iall_gather(const void* send, void* recv, std::size_t send_count,
                                        DType type) {
  auto request = std::make_unique<MpiRequest>(m_watchdog, "wait for iall_gather", send_count, type);
  const std::size_t block_bytes = send_count * dtype_size(type);
  count_call(Collective::AllGather, block_bytes, /*async=*/true);
  const bool in_place = send == static_cast<const char*>(recv) + m_rank * block_bytes;
  const int n = block_count(send_count, "iall_gather");
  const std::vector<std::size_t> counts(static_cast<std::size_t>(m_size), send_count);
  model(Collective::AllGather, wire_iall_gather(m_size, m_rank, counts, dtype_size(type)));
  SHARDTRAIN_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, to_mpi(type), recv, n,
                           to_mpi(type), m_comm, request->handle()));
  return request;
}

}  // namespace shardtrain

namespace shardtrain {

RequestPtr MpiCommunicator::ireduce_scatter_v(const void* send, void* recv,
                                              std::span<const std::size_t> counts, DType type,
                                              ReduceOp op) {
  SHARDTRAIN_CHECK(counts.size() == static_cast<std::size_t>(m_size), "one count per rank");
  std::size_t total = 0;
  for (std::size_t c : counts) total += c;
  count_call(Collective::ReduceScatter, total * dtype_size(type), /*async=*/true);
  return start_reduce_scatter("wait for ireduce_scatter_v", send, recv, counts, type, op);
}

RequestPtr MpiCommunicator::start_reduce_scatter(const char* what, const void* send, void* recv,
                                                 std::span<const std::size_t> counts, DType type,
                                                 ReduceOp op) {
  const std::size_t esize = dtype_size(type);
  auto request = std::make_unique<PairwiseReduceScatter>(m_watchdog, what, counts[m_rank], type, m_scratch,
                                                         static_cast<std::size_t>(m_size - 1) * counts[m_rank] * esize);
  std::vector<std::size_t> displ(counts.size() + 1, 0);
  for (std::size_t q = 0; q < counts.size(); ++q) {
    block_count(counts[q], what);
    displ[q + 1] = displ[q] + counts[q];
  }
  model(Collective::ReduceScatter, wire_pairwise_reduce_scatter(m_size, m_rank, counts, esize));
  const auto* in = static_cast<const char*>(send);
  const std::size_t own_bytes = counts[m_rank] * esize;
  request->own = in + displ[m_rank] * esize;
  request->recv = recv;
  request->own_count = static_cast<int>(counts[m_rank]);
  request->mpi_type = to_mpi(type);
  request->mpi_op = mpi_op(type, op);
  request->sum = op == ReduceOp::Sum;
  request->requests.reserve(2 * static_cast<std::size_t>(m_size - 1));
  request->start();
  // Peers in the order their contributions are combined: rank - 1, rank - 2, ... (mod N).
  for (int s = 1; s < m_size; ++s) {
    const int from = (m_rank - s + m_size) % m_size;
    const int slot = s - 1;
    if (own_bytes > 0) {
      request->requests.push_back(MPI_REQUEST_NULL);
      SHARDTRAIN_MPI_CHECK(MPI_Irecv(request->tmp() + static_cast<std::size_t>(slot) * own_bytes,
                                     static_cast<int>(counts[m_rank]), request->mpi_type, from,
                                     kTagReduceScatter, m_comm, &request->requests.back()));
    }
  }
  for (int s = 1; s < m_size; ++s) {
    const int to = (m_rank + s) % m_size;
    if (counts[to] == 0) continue;
    request->requests.push_back(MPI_REQUEST_NULL);
    SHARDTRAIN_MPI_CHECK(MPI_Isend(in + displ[to] * esize, static_cast<int>(counts[to]), request->mpi_type, to,
                                   kTagReduceScatter, m_comm, &request->requests.back()));
  }
  return request;
}

RequestPtr MpiCommunicator::iall_gather_v(const void* send, void* recv,
                                          std::span<const std::size_t> counts, DType type) {
  SHARDTRAIN_CHECK(counts.size() == static_cast<std::size_t>(m_size), "one count per rank");
  auto request = std::make_unique<MpiRequest>(m_watchdog, "wait for iall_gather_v", counts[m_rank], type);
  std::size_t displ = 0;
  for (std::size_t c : counts) {
    request->counts.push_back(block_count(c, "iall_gather_v"));
    request->displs.push_back(block_count(displ, "iall_gather_v displacement"));
    displ += c;
  }
  const std::size_t esize = dtype_size(type);
  count_call(Collective::AllGather, counts[m_rank] * esize, /*async=*/true);
  model(Collective::AllGather, wire_iall_gather(m_size, m_rank, counts, esize));
  const bool in_place = send == static_cast<const char*>(recv) + request->displs[m_rank] * esize;
  SHARDTRAIN_MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, request->counts[m_rank], to_mpi(type),
                            recv, request->counts.data(), request->displs.data(), to_mpi(type),
                            m_comm, request->handle()));
  return request;
}

}  // namespace shardtrain
