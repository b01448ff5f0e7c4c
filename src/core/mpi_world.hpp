// shardtrain/core/mpi_world.hpp
// Owns the small MPI_COMM_WORLD helpers the executables share: the MPI
// lifetime of a tool's main() and this process's rank and the world's size.
// Invariant: MpiSession outlives every MPI and HDF5 object made in its scope
// (declare it first in main), so MPI_Finalize runs after they are closed.
#pragma once

#include <mpi.h>

namespace shardtrain {

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv) { MPI_Init(argc, argv); }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace shardtrain
