// The process-wide HDF5 lock (io/h5_lock.hpp).
#include "io/h5_lock.hpp"

namespace shardtrain {

std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace shardtrain
