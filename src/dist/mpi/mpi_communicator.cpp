// MpiCommunicator: host-memory collectives over MPI, with byte accounting.
// Large buffers are split into chunks of at most INT_MAX elements (MPI counts are int).
#include "dist/mpi/mpi_communicator.hpp"

#include <climits>
#include <string>

#include "core/error.hpp"

#define MPI_CHECK(call)                                                              \
  do {                                                                               \
    int mpi_check_rc_ = (call);                                                      \
    if (mpi_check_rc_ != MPI_SUCCESS) {                                              \
      char mpi_check_msg_[MPI_MAX_ERROR_STRING];                                     \
      int mpi_check_len_ = 0;                                                        \
      MPI_Error_string(mpi_check_rc_, mpi_check_msg_, &mpi_check_len_);              \
      SHARDTRAIN_FAIL(std::string(#call) + " failed: " + mpi_check_msg_);            \
    }                                                                                \
  } while (0)

namespace shardtrain {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

namespace {

MPI_Datatype to_mpi(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::U8: return MPI_UINT8_T;
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

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : m_comm(comm) {
  MPI_CHECK(MPI_Comm_rank(m_comm, &m_rank));
  MPI_CHECK(MPI_Comm_size(m_comm, &m_size));
}

void MpiCommunicator::all_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) {
  const std::size_t esize = dtype_size(type);
  auto* bytes = static_cast<char*>(buffer);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(kMaxChunk, count - done);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + done * esize, static_cast<int>(n), to_mpi(type),
                            to_mpi(op), m_comm));
    done += n;
  }
  // Ring all-reduce: reduce-scatter then all-gather, each sending (N-1)/N of the data.
  if (m_size > 1) count_sent(2 * count * esize * (m_size - 1) / m_size);
}

void MpiCommunicator::broadcast(void* buffer, std::size_t count, DType type, int root) {
  const std::size_t esize = dtype_size(type);
  auto* bytes = static_cast<char*>(buffer);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(kMaxChunk, count - done);
    MPI_CHECK(MPI_Bcast(bytes + done * esize, static_cast<int>(n), to_mpi(type), root, m_comm));
    done += n;
  }
  if (m_rank == root && m_size > 1) count_sent(count * esize);
}

void MpiCommunicator::barrier() { MPI_CHECK(MPI_Barrier(m_comm)); }

}  // namespace shardtrain
