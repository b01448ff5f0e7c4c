// The background checkpoint writer (session/background_checkpoint.hpp).
#include "session/background_checkpoint.hpp"

#include <utility>

#include "core/error.hpp"
#include "parallel/mpi/agreement.hpp"
#include "io/checkpoint_phase.hpp"

namespace shardtrain {


BackgroundCheckpoint::BackgroundCheckpoint(MPI_Comm comm, MemoryTracker& memory, std::size_t staging_bytes)
    : m_staging(memory, MemCategory::CheckpointStaging, staging_bytes) {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level != MPI_THREAD_MULTIPLE)
    throw InputError("checkpoint.async = true needs an MPI library with MPI_THREAD_MULTIPLE (the writer thread "
                     "calls MPI beside the training thread), and this one provides less; set checkpoint.async = "
                     "false");
  MPI_Comm_dup(comm, &m_writer_comm);
}

BackgroundCheckpoint::~BackgroundCheckpoint() {
  if (m_thread.joinable()) m_thread.join();
  if (m_writer_comm != MPI_COMM_NULL) MPI_Comm_free(&m_writer_comm);
}

void BackgroundCheckpoint::start(std::int64_t step, Job job) {
  SHARDTRAIN_CHECK(!in_flight(), "a background checkpoint is already in flight");
  m_step = step;
  m_error = nullptr;
  m_written.store(false, std::memory_order_release);
  m_thread = std::thread([this, job = std::move(job)] {
    try {
      m_result = job(m_writer_comm);
    } catch (...) {
      m_error = std::current_exception();
    }
    m_written.store(true, std::memory_order_release);
  });
}

CheckpointManager::Committed BackgroundCheckpoint::finish(MPI_Comm comm) {
  SHARDTRAIN_CHECK(in_flight(), "no background checkpoint in flight");
  m_thread.join();
  m_step = 0;
  const std::exception_ptr error = std::exchange(m_error, nullptr);
  const Agreement a = agree_on_failure(comm, [&] {
    if (error) std::rethrow_exception(error);
  });
  if (a.failed()) {
    // A failed phase gave every rank's writer the same CheckpointIoError
    // (io/checkpoint_phase.hpp): pass it on as it is, failing rank and errno included.
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const CheckpointIoError& e) {
        if (a.first_failing >= 0 && a.message == e.what()) throw;
      } catch (...) {
      }
    }
    if (a.worst == Outcome::BadInput) throw InputError(a.message);
    throw AgreedError(a.message);
  }
  return std::move(m_result);
}

}  // namespace shardtrain
