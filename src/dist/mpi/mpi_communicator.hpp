// shardtrain/dist/mpi/mpi_communicator.hpp
// Communicator over MPI for host memory. Wraps (does not own) an MPI_Comm.
// Every MPI call is checked; a failure throws shardtrain::Error naming the call.
// Blocking calls split buffers above INT_MAX elements into chunks; reduce-scatter
// and all-gather blocks must fit in an int (2^31 - 1 elements per rank).
// With a CollectiveWatchdog set, every blocking call (and every wait on a
// request) is watched: a stall is reported by name and ends the job.
// Wire bytes: with Open MPI's pml monitoring on (OMPI_MCA_pml_monitoring_enable=1)
// every call, and every wait or test on a request, adds the bytes the PML sent
// meanwhile to its kind in tally().wire (see WireMonitor and CommTally).
#pragma once

#include <memory>
#include <string>

#include <mpi.h>

#include "dist/communicator.hpp"
#include "dist/mpi/wire_monitor.hpp"
#include "dist/watchdog.hpp"

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

  bool wire_measured() const override { return m_wire_monitor.measured(); }
  std::string wire_status() const override { return m_wire_monitor.status(); }
  // Bytes this process has sent through the PML so far, by anyone (0 when not
  // measured): the per-step total, including what no collective here sent.
  std::uint64_t wire_bytes_now() { return m_wire_monitor.bytes_sent(); }

  MPI_Comm comm() const { return m_comm; }
  // Watches blocking calls from now on (nullptr: none). Not owned.
  void set_watchdog(CollectiveWatchdog* watchdog) { m_watchdog = watchdog; }

 private:
  // The MPI reduction for (type, op): predefined, or ours for F16/BF16.
  MPI_Op mpi_op(DType type, ReduceOp op) const;

  // The monitor when it measures, else nullptr (no MPI_T reads then).
  WireMonitor* wire() { return m_wire_monitor.measured() ? &m_wire_monitor : nullptr; }

  MPI_Comm m_comm;
  WireMonitor m_wire_monitor;
  CollectiveWatchdog* m_watchdog = nullptr;
  int m_rank = 0;
  int m_size = 1;
  MPI_Op m_half_ops[2][3] = {};  // [F16, BF16][Sum, Max, Min], created by the constructor
};

}  // namespace shardtrain
