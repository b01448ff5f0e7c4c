// shardtrain/parallel/mpi/mpi_communicator.hpp
// Communicator over MPI for host memory. Wraps (does not own) an MPI_Comm.
// Every MPI call is checked; a failure throws shardtrain::Error naming the call.
// Blocking calls split buffers above INT_MAX elements into chunks; reduce-scatter
// and all-gather blocks must fit in an int (2^31 - 1 elements per rank).
// Reduce-scatter (blocking and non-blocking) is our own pairwise exchange of
// point-to-point messages (tag kTagReduceScatter on the wrapped communicator), not
// MPI's collective: each rank sends (N-1)/N of the input once, where Open MPI's
// libnbc reduces the whole input to rank 0 first (mpi_communicator.cpp).
// With a CollectiveWatchdog set, every blocking call (and every wait on a
// request) is watched: a stall is reported by name and ends the job.
// Wire model: every call adds to tally().model the bytes this rank sends under
// the algorithm the call runs (Open MPI 4.1.x's pick, or our reduce-scatter;
// wire_model.hpp); measure the real
// figure with Open MPI's pml monitoring dump (wire_model_status()).
#pragma once

#include <array>
#include <memory>
#include <string>

#include <mpi.h>

#include "parallel/communicator.hpp"
#include "parallel/mpi/wire_model.hpp"
#include "parallel/watchdog.hpp"

namespace shardtrain {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return m_rank; }
  int size() const override { return m_size; }
  void all_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) override;
  void broadcast(void* buffer, std::size_t count, DType type, int root) override;
  void barrier() override;
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                      ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::size_t send_count, DType type) override;
  RequestPtr iall_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) override;
  RequestPtr ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                             ReduceOp op) override;
  RequestPtr iall_gather(const void* send, void* recv, std::size_t send_count,
                         DType type) override;
  RequestPtr ireduce_scatter_v(const void* send, void* recv, std::span<const std::size_t> counts,
                               DType type, ReduceOp op) override;
  RequestPtr iall_gather_v(const void* send, void* recv, std::span<const std::size_t> counts,
                           DType type) override;

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::broadcast;
  using Communicator::reduce_scatter;

  bool wire_modelled() const override { return true; }
  std::string wire_model_status() const override { return kWireModelStatus; }
  std::string wire_algorithms(Collective kind) const override { return m_algorithms[static_cast<int>(kind)]; }
  static constexpr const char* kWireModelStatus =
      "wire model: bytes each rank sends under Open MPI 4.1's default algorithms (coll/tuned fixed rules, "
      "coll/libnbc) and, for reduce-scatter, our pairwise exchange; to measure them run with "
      "OMPI_MCA_pml_monitoring_enable=1 "
      "OMPI_MCA_pml_monitoring_enable_output=3 OMPI_MCA_pml_monitoring_filename=DIR/prof and read "
      "DIR/prof.<rank>.prof after the job: share/tools/wire_table.py compares two runs that differ only in "
      "train.steps with the model (share/doc/training.md, \"Bytes on the wire\")";

  MPI_Comm comm() const { return m_comm; }
  // Watches blocking calls from now on (nullptr: none). Not owned.
  void set_watchdog(CollectiveWatchdog* watchdog) { m_watchdog = watchdog; }
  CollectiveWatchdog* watchdog() const { return m_watchdog; }

 private:
  // The MPI reduction for (type, op): predefined, or ours for F16/BF16.
  MPI_Op mpi_op(DType type, ReduceOp op) const;

  // Adds one call's modelled bytes and names its algorithm.
  void model(Collective kind, const WireEstimate& w);

  // Every reduce-scatter form: the pairwise exchange of mpi_communicator.cpp
  // (PairwiseReduceScatter), started; `counts` one per rank, `recv` may be the
  // rank's own block of `send` (in place).
  RequestPtr start_reduce_scatter(const char* what, const void* send, void* recv,
                                  std::span<const std::size_t> counts, DType type, ReduceOp op);
  static constexpr int kTagReduceScatter = 0x5253;  // point-to-point tag of that exchange

 public:
  // The receive buffers of those exchanges, kept for reuse: a buffer goes back
  // to the pool when its request is destroyed, so a step's buckets reuse the
  // previous step's memory instead of allocating (and page-faulting in) a fresh
  // one per bucket. Shared with the requests, which may outlive the communicator.
  class ScratchPool;

 private:
  std::shared_ptr<ScratchPool> m_scratch;

  MPI_Comm m_comm;
  std::array<std::string, kCollectives> m_algorithms;  // per kind, "; "-separated
  CollectiveWatchdog* m_watchdog = nullptr;
  int m_rank = 0;
  int m_size = 1;
  MPI_Op m_half_ops[2][3] = {};  // [F16, BF16][Sum, Max, Min], created by the constructor
};

}  // namespace shardtrain
