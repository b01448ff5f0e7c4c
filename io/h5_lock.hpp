// shardtrain/io/h5_lock.hpp
// Owns the one lock that makes HDF5 usable from two threads of a process.
// The HDF5 library this project links (Debian's parallel build) is not
// thread-safe (H5is_library_threadsafe is false), and a background checkpoint
// writer (session/background_checkpoint.hpp) calls it beside the training
// loop's data reads. Every HDF5 call that may run while a background write is
// in flight holds this lock: the data set readers' read calls, and the
// checkpoint writer's layout (io/checkpoint.hpp write_checkpoint: rank 0
// alone, into a file in memory).
// Invariants: whoever holds the lock makes no MPI call: the readers under the
// lock are independent (no collective) and the writer's HDF5 work runs on
// rank 0 alone and touches no storage, so every holder finishes and releases it.
// Not recursive: take it once per call chain.
#pragma once

#include <mutex>

namespace shardtrain {

std::mutex& hdf5_mutex();
inline std::unique_lock<std::mutex> lock_hdf5() { return std::unique_lock<std::mutex>(hdf5_mutex()); }

}  // namespace shardtrain
