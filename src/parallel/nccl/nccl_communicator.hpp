// shardtrain/parallel/nccl/nccl_communicator.hpp
// Communicator over NCCL for DEVICE memory (CUDA build only, target shardtrain_nccl).
// One NCCL communicator over the ranks of an MPI communicator, one GPU per rank.
//
// Construction (collective over the MPI communicator):
//  1. Devices first, before anything is allocated: each rank lists the devices
//     it sees (cudaGetDeviceCount, then each one's UUID), and the ranks of a node
//     share them out by parallel/device_assignment's rule: ranks that see the same
//     devices take them in node-local rank order (mpirun: device = node-local
//     rank; srun --gpus-per-task=1: each rank its one visible device;
//     --gpu-bind=closest: the ranks of a socket share that socket's GPUs). No
//     device, a CUDA error (35 = insufficient driver on a machine without a
//     GPU), more ranks sharing a view than it has devices, or two ranks landing
//     on one physical GPU throws shardtrain::Error ("no CUDA device available
//     to rank R (cudaGetDeviceCount: error 35 ...)") before anything is
//     allocated. The outcome is agreed on with one MPI_Allreduce, so when one
//     rank has no device EVERY rank throws (the others name the failing rank)
//     and none is left waiting in the ncclUniqueId broadcast.
//  2. The chosen device is made current with cudaSetDevice for the calling thread.
//     The communication stream (non-blocking, its own) is created there too;
//     the ranks agree on the outcome again before the bootstrap.
//  3. Rank 0's ncclUniqueId (and its ncclGetUniqueId status) is broadcast over
//     MPI, then ncclCommInitRank (collective: a rank failing inside it can leave
//     the others waiting until the job is aborted; NCCL's own limitation).
// The MPI communicator is wrapped, not owned (as MpiCommunicator): it must
// outlive this object; barrier() uses it.
//
// Streams and ordering (the Communicator interface has no stream argument):
//  - Every collective runs on stream(). It does NOT wait for work the caller
//    queued on other streams: before a collective reads a buffer that a kernel
//    on a compute stream wrote, call wait_for_stream(compute) (or
//    wait_for_event(ev) with an event recorded after the producer). Synchronising
//    the producer on the host also works.
//  - Blocking calls return when the result is in place (the comm stream is
//    synchronised), so any stream may read it afterwards.
//  - Non-blocking calls return a Request backed by a cudaEvent recorded on the
//    comm stream after the collective: test() = cudaEventQuery, wait() =
//    cudaEventSynchronize, destruction waits. To let a compute stream consume a
//    result without blocking the host, call make_stream_wait(compute) after the
//    i* call (it orders `compute` after everything queued on the comm stream).
//  - Overlap pattern per bucket (as llm.c's zero.cuh): record/queue backward on
//    `compute`, wait_for_stream(compute), ireduce_scatter(...), continue backward.
//
// Memory: buffers are device (or managed) memory. Plain host memory is accepted
// only by the BLOCKING all_reduce and broadcast, which stage it through a device
// scratch buffer, so the base class's all_reduce_value(x) (loss, inf/NaN flag)
// works; every other call throws on plain host memory rather than let NCCL fail
// obscurely.
//
// Byte accounting is MpiCommunicator's (ring algorithm): all_reduce 2(N-1)/N of
// the buffer; reduce_scatter and all_gather (N-1) blocks; ireduce_scatter_v every
// block but the own one; iall_gather_v the own block N-1 times; broadcast the
// buffer at the root; barrier nothing. Counted when the call is issued. In-place
// reduce_scatter / all_gather (the own block of a flat vector) are NCCL's own
// in-place forms.
//
// Destruction synchronises the comm stream and finalises the NCCL communicator
// (collective). While an exception is unwinding it calls ncclCommAbort instead,
// which never waits for other ranks.
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <span>

#include "backend/cuda/collective_stream.hpp"
#include "parallel/communicator.hpp"

namespace shardtrain {

class NcclCommunicator final : public Communicator, public CollectiveStream {
 public:
  explicit NcclCommunicator(MPI_Comm comm);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return m_rank; }
  int size() const override { return m_size; }
  void all_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) override;
  void broadcast(void* buffer, std::size_t count, DType type, int root) override;
  // Synchronises the comm stream, then MPI_Barrier on the wrapped communicator.
  void barrier() override;
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                      ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::size_t send_count, DType type) override;
  RequestPtr iall_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) override;
  RequestPtr ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                             ReduceOp op) override;
  RequestPtr iall_gather(const void* send, void* recv, std::size_t send_count,
                         DType type) override;
  // NCCL has no -v collectives: a group of ncclReduce (resp. ncclBroadcast), one
  // per rank with a non-empty block. Correct for any counts, but slower than the
  // ring ncclReduceScatter/ncclAllGather; prefer equal blocks for large buckets.
  RequestPtr ireduce_scatter_v(const void* send, void* recv, std::span<const std::size_t> counts,
                               DType type, ReduceOp op) override;
  RequestPtr iall_gather_v(const void* send, void* recv, std::span<const std::size_t> counts,
                           DType type) override;

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::broadcast;
  using Communicator::reduce_scatter;

  // --- Several buckets in one NCCL group (ncclGroupStart/End): one launch, one
  // Request completing when all parts have. Same contracts and byte accounting as
  // the single calls, summed over the parts; all parts share `type` (and `op`).
  struct ReduceScatterPart {
    const void* send;        // size() * recv_count elements
    void* recv;              // recv_count elements
    std::size_t recv_count;
  };
  struct AllGatherPart {
    const void* send;        // send_count elements (may be recv + rank() * send_count)
    void* recv;              // size() * send_count elements
    std::size_t send_count;
  };
  RequestPtr ireduce_scatter_group(std::span<const ReduceScatterPart> parts, DType type,
                                   ReduceOp op);
  RequestPtr iall_gather_group(std::span<const AllGatherPart> parts, DType type);

  // --- Streams (see the ordering notes at the top).
  cudaStream_t stream() const { return m_stream; }
  int device() const override { return m_device; }
  ncclComm_t nccl_comm() const { return m_nccl; }
  // The comm stream waits (on the device, the host does not block) for `ready`.
  void wait_for_event(cudaEvent_t ready);
  // The comm stream waits for everything queued on `producer` so far.
  void wait_for_stream(cudaStream_t producer) override;
  // `consumer` waits for everything queued on the comm stream so far.
  void make_stream_wait(cudaStream_t consumer) override;
  // The host waits for everything queued on the comm stream.
  void synchronize();

 private:
  // Returns a device pointer holding `bytes` (grown on demand; blocking calls only).
  void* scratch(std::size_t bytes);
  // Frees everything; abort = ncclCommAbort (local) instead of finalize + destroy.
  void release(bool abort) noexcept;

  MPI_Comm m_comm;
  int m_rank = 0;
  int m_size = 1;
  int m_device = -1;
  ncclComm_t m_nccl = nullptr;
  cudaStream_t m_stream = nullptr;
  cudaEvent_t m_ordering_event = nullptr;  // reused by wait_for_stream / make_stream_wait
  void* m_scratch = nullptr;
  std::size_t m_scratch_bytes = 0;
};

}  // namespace shardtrain
