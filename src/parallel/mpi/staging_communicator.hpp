// shardtrain/parallel/mpi/staging_communicator.hpp
// Communicator for buffers the host MPI library cannot use directly (device
// memory): each collective copies the caller's buffer into host staging memory
// through a Stager (stager.hpp), runs the host MpiCommunicator's collective on the
// staging memory, and copies the result back. Chosen on a GPU by
// parallel.device_collectives = "mpi" (NCCL stays the default); on the host the
// tests run it with HostStager against the plain MpiCommunicator.
// Invariants:
//  - the results are the host MpiCommunicator's, bit for bit: the same MPI calls
//    on the same bytes (its pairwise reduce-scatter in its fixed order, its
//    fp32-combined F16/BF16 reductions), only on staging copies;
//  - the tally is the host communicator's (the calls it ran, their payload and
//    wire model): staging copies are not wire bytes;
//  - a non-blocking call returns once its input is staged and the MPI call is
//    started (the host waits for the copy to host: on a device, for the compute
//    the collective stream was told to wait for); its Request completes when MPI
//    has and the copy back is done; destroying it waits for both, so staging
//    memory is never reused under a running collective or copy;
//  - where each rank's piece sits: reduce-scatter (fixed or variable blocks)
//    stages the whole input and reduces in place in it, so this rank's result is
//    at displ(rank) of the staging buffer; all-gather stages this rank's block at
//    displ(rank) and gathers in place (displ(r) = counts[0] + ... + counts[r-1]);
//  - with a stager that passes buffers (CUDA-aware MPI), broadcast and all-gather
//    hand MPI the caller's pointers after a fence; reductions always stage.
// Staging buffers come from the stager (pinned on a device), pooled as the host
// communicator pools its scratch: a step's buckets reuse the previous step's.
// The MPI communicator is wrapped, not owned; this object owns its host
// MpiCommunicator over it.
#pragma once

#include <mpi.h>

#include <memory>
#include <span>
#include <string>

#include "parallel/communicator.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/mpi/stager.hpp"

namespace shardtrain {

class StagingCommunicator final : public Communicator {
 public:
  StagingCommunicator(MPI_Comm comm, std::unique_ptr<Stager> stager);
  ~StagingCommunicator() override;
  StagingCommunicator(const StagingCommunicator&) = delete;
  StagingCommunicator& operator=(const StagingCommunicator&) = delete;

  int rank() const override { return m_host.rank(); }
  int size() const override { return m_host.size(); }
  void all_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) override;
  void broadcast(void* buffer, std::size_t count, DType type, int root) override;
  // A fence (every queued copy done), then the host communicator's barrier.
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

  bool wire_modelled() const override { return m_host.wire_modelled(); }
  std::string wire_model_status() const override { return m_host.wire_model_status(); }
  std::string wire_algorithms(Collective kind) const override { return m_host.wire_algorithms(kind); }

  Stager& stager();
  // The host communicator the collectives run on (its watchdog watches them).
  MpiCommunicator& host() { return m_host; }

  // The staging memory and its stager, shared with the requests (which may
  // outlive the communicator).
  struct Shared;

 private:
  // Runs `call` on the host communicator and adds the calls it counted to ours.
  template <class Call>
  auto on_host(Call&& call);
  RequestPtr staged_reduce_scatter(const void* send, void* recv, std::span<const std::size_t> counts,
                                   DType type, ReduceOp op, bool fixed);
  RequestPtr staged_all_gather(const void* send, void* recv, std::span<const std::size_t> counts, DType type,
                               bool fixed);

  std::shared_ptr<Shared> m_shared;
  MpiCommunicator m_host;
};

}  // namespace shardtrain
