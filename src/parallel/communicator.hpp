// shardtrain/parallel/communicator.hpp
// Owns the Communicator interface: the only way the model, optimizer and ZeRO
// engine talk to other ranks. One implementation per backend (mpi/ for host
// memory; nccl/ for device memory in the CUDA build), chosen when the run starts.
// Invariants:
//  - every collective is called by all ranks of the communicator in the same order;
//  - the result of a collective is deterministic for a fixed world size;
//  - every call counts, in tally(), one call of its kind and its payload: the
//    bytes of the buffer this rank hands to the collective (defined per kind at
//    CommTally), never a guess at what the algorithm sends. Beside it, where
//    the backend has one, the model: the bytes this rank sends under the
//    algorithm the library picks for that call (MpiCommunicator:
//    mpi/wire_model.hpp). A model is not a measurement: the measured bytes come
//    from Open MPI's pml monitoring dump, read after the job
//    (tests/mpi/parallel/wire_check.py per call; share/tools/wire_table.py per
//    training step).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/dtype.hpp"
#include "core/half.hpp"

namespace shardtrain {

// The element types (core/dtype.hpp): F16 and BF16 are moved as 16-bit words;
// their reductions convert each pair of elements to fp32, combine, and round back once.
enum class ReduceOp { Sum, Max, Min };

// The kinds of collective the tally tells apart (blocking and non-blocking,
// fixed and variable blocks together).
enum class Collective { AllReduce, Broadcast, ReduceScatter, AllGather, Barrier };
constexpr int kCollectives = 5;
constexpr const char* collective_name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::Broadcast: return "broadcast";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllGather: return "all_gather";
    case Collective::Barrier: return "barrier";
  }
  return "?";
}

// One rank's collectives, per kind (indexed by Collective), since construction.
// payload: the bytes of the buffer this rank hands to the collective, e = the
// element size:
//   all_reduce, iall_reduce         count * e            (every rank)
//   broadcast                       count * e at the root, 0 elsewhere
//   reduce_scatter, ireduce_scatter size() * recv_count * e (the whole input)
//   ireduce_scatter_v               sum(counts) * e      (the whole input)
//   all_gather, iall_gather         send_count * e       (the rank's block)
//   iall_gather_v                   counts[rank()] * e   (the rank's block)
//   barrier                         0
// At one rank too: the payload is what the caller hands over, whatever moves.
// calls: collectives started; async: those of them that were non-blocking.
// model: the bytes this rank sends through the transport for these calls
// under the algorithm the backend's library picks (wire_modelled(); zero where
// it has no model); unmodelled: calls the model could not price (their bytes
// are not in `model`).
struct CommTally {
  std::array<std::uint64_t, kCollectives> calls{}, async{}, payload{}, model{}, unmodelled{};

  std::uint64_t payload_total() const { return sum(payload); }
  std::uint64_t model_total() const { return sum(model); }
  std::uint64_t unmodelled_total() const { return sum(unmodelled); }
  CommTally& operator+=(const CommTally& o) {
    for (int k = 0; k < kCollectives; ++k) {
      calls[k] += o.calls[k];
      async[k] += o.async[k];
      payload[k] += o.payload[k];
      model[k] += o.model[k];
      unmodelled[k] += o.unmodelled[k];
    }
    return *this;
  }
  CommTally operator-(const CommTally& o) const {
    CommTally d = *this;
    for (int k = 0; k < kCollectives; ++k) {
      d.calls[k] -= o.calls[k];
      d.async[k] -= o.async[k];
      d.payload[k] -= o.payload[k];
      d.model[k] -= o.model[k];
      d.unmodelled[k] -= o.unmodelled[k];
    }
    return d;
  }

 private:
  static std::uint64_t sum(const std::array<std::uint64_t, kCollectives>& a) {
    std::uint64_t s = 0;
    for (std::uint64_t v : a) s += v;
    return s;
  }
};

// A pending non-blocking collective. wait() completes it (and rethrows a
// failure); destroying an incomplete request waits for it first, so buffers are
// never released under a running collective.
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  // True once complete (wait() is then free); never blocks.
  virtual bool test() = 0;
};
using RequestPtr = std::unique_ptr<Request>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: every rank ends with op over all ranks' buffers.
  virtual void all_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) = 0;
  // In place: every rank ends with root's buffer.
  virtual void broadcast(void* buffer, std::size_t count, DType type, int root) = 0;
  virtual void barrier() = 0;

  // `send` holds size() blocks of `recv_count` elements; rank r receives in
  // `recv` the op-reduction over all ranks of block r. In place when
  // recv == send + rank() * recv_count (the rank's own block of a flat vector);
  // otherwise send and recv must not overlap.
  virtual void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                              ReduceOp op) = 0;
  // Every rank contributes `send_count` elements; `recv` (size() * send_count)
  // receives them in rank order. In place when send == recv + rank() * send_count.
  virtual void all_gather(const void* send, void* recv, std::size_t send_count, DType type) = 0;

  // Non-blocking variants: same contracts; buffers stay untouched by the caller
  // until the request completes.
  virtual RequestPtr iall_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) = 0;
  virtual RequestPtr ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                     DType type, ReduceOp op) = 0;
  virtual RequestPtr iall_gather(const void* send, void* recv, std::size_t send_count,
                                 DType type) = 0;

  // Variable block sizes (ZeRO buckets that straddle shard boundaries):
  // counts.size() == size(); blocks follow each other in rank order.
  // ireduce_scatter_v: `send` holds sum(counts) elements; rank r receives in
  // `recv` the reduction of its counts[r] elements (counts may be 0). In place
  // when recv == send + displ(rank()) (the rank's own block, where
  // displ(r) = counts[0] + ... + counts[r-1]); otherwise no overlap.
  virtual RequestPtr ireduce_scatter_v(const void* send, void* recv,
                                       std::span<const std::size_t> counts, DType type,
                                       ReduceOp op) = 0;
  // iall_gather_v: rank r contributes counts[r] elements from `send`; every rank
  // receives all blocks in `recv` (sum(counts) elements). The counts span must
  // stay valid only for the call.
  virtual RequestPtr iall_gather_v(const void* send, void* recv,
                                   std::span<const std::size_t> counts, DType type) = 0;

  template <class T>
  void all_reduce(std::span<T> buffer, ReduceOp op = ReduceOp::Sum) {
    all_reduce(buffer.data(), buffer.size(), dtype_of<T>(), op);
  }
  template <class T>
  T all_reduce_value(T value, ReduceOp op = ReduceOp::Sum) {
    all_reduce(&value, 1, dtype_of<T>(), op);
    return value;
  }
  template <class T>
  void broadcast(std::span<T> buffer, int root = 0) {
    broadcast(buffer.data(), buffer.size(), dtype_of<T>(), root);
  }

  template <class T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter(send.data(), recv.data(), recv.size(), dtype_of<T>(), op);
  }
  template <class T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    all_gather(send.data(), recv.data(), send.size(), dtype_of<T>());
  }

  // This rank's calls, payload and (where modelled) wire bytes per kind since
  // construction; see CommTally.
  const CommTally& tally() const { return m_tally; }
  // Whether tally().model holds the backend's wire model; wire_model_status()
  // says which model or why none.
  virtual bool wire_modelled() const { return false; }
  virtual std::string wire_model_status() const { return "wire model: none for this backend"; }
  // The algorithms the model named for `kind`'s calls so far ("; "-separated).
  virtual std::string wire_algorithms(Collective) const { return ""; }

 protected:
  // One call of `kind` handing `payload_bytes` to the backend.
  void count_call(Collective kind, std::uint64_t payload_bytes, bool async = false) {
    const auto k = static_cast<int>(kind);
    ++m_tally.calls[k];
    if (async) ++m_tally.async[k];
    m_tally.payload[k] += payload_bytes;
  }
  // The model's bytes for that call (not modelled: counted in `unmodelled`).
  void count_model(Collective kind, std::uint64_t bytes, bool modelled) {
    const auto k = static_cast<int>(kind);
    if (modelled) m_tally.model[k] += bytes;
    else ++m_tally.unmodelled[k];
  }
  // Calls counted by a communicator this one runs on (the staging communicator's
  // host MpiCommunicator): their tally, added whole.
  void count_tally(const CommTally& calls) { m_tally += calls; }

 private:
  CommTally m_tally;
};

}  // namespace shardtrain
