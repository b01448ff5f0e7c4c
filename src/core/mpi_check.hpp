// shardtrain/core/mpi_check.hpp
// SHARDTRAIN_MPI_CHECK(call): checks an MPI call's return code; on failure throws
// shardtrain::Error naming the call, the source location and MPI's error string.
// (MPI's default error handler aborts before returning; communicators that set
// MPI_ERRORS_RETURN get the exception.)
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.hpp"

#define SHARDTRAIN_MPI_CHECK(call)                                                   \
  do {                                                                               \
    int mpi_check_rc_ = (call);                                                      \
    if (mpi_check_rc_ != MPI_SUCCESS) {                                              \
      char mpi_check_msg_[MPI_MAX_ERROR_STRING];                                     \
      int mpi_check_len_ = 0;                                                        \
      MPI_Error_string(mpi_check_rc_, mpi_check_msg_, &mpi_check_len_);              \
      SHARDTRAIN_FAIL(std::string(#call) + " failed: " + mpi_check_msg_);            \
    }                                                                                \
  } while (0)
