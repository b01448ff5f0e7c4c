// shardtrain/io/h5_lock.hpp
// Owns the one lock that makes HDF5 usable from two threads of a process.
// The HDF5 library this project links (Debian's parallel build) is not
// thread-safe (H5is_library_threadsafe is false), and a background checkpoint
// writer (train/background_checkpoint.hpp) calls it beside the training
// loop's data reads. Every HDF5 call that may run while a background write is
// in flight holds this lock: the data set readers' read calls, and the
// writer's metadata phases (io/checkpoint.hpp write_checkpoint_background).
// Invariants: whoever holds the lock makes no MPI call that waits for another
// rank's thread that might itself wait for this lock, except collective HDF5
// calls of the writer, which wait only for other ranks' writers: the readers
// under the lock are independent (no collective), so they always finish and
// release it. Not recursive: take it once per call chain.
#pragma once

#include <mutex>

namespace shardtrain {

std::mutex& hdf5_mutex();
inline std::unique_lock<std::mutex> lock_hdf5() { return std::unique_lock<std::mutex>(hdf5_mutex()); }

}  // namespace shardtrain
