// shardtrain/dist/mpi/mpi_communicator.hpp
// Communicator over MPI for host memory. Wraps (does not own) an MPI_Comm.
// Every MPI call is checked; a failure throws shardtrain::Error naming the call.
#pragma once

#include <mpi.h>

#include "dist/communicator.hpp"

namespace shardtrain {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm);

  int rank() const override { return m_rank; }
  int size() const override { return m_size; }
  void all_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) override;
  void broadcast(void* buffer, std::size_t count, DType type, int root) override;
  void barrier() override;

  using Communicator::all_reduce;
  using Communicator::broadcast;

  MPI_Comm comm() const { return m_comm; }

 private:
  MPI_Comm m_comm;
  int m_rank = 0;
  int m_size = 1;
};

}  // namespace shardtrain
