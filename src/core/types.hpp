// shardtrain/core/types.hpp
// Scalar types shared by kernels, io and the application (no Kokkos, no HDF5).
#pragma once

#include <cstdint>

namespace shardtrain {

using TokenIndex = std::int32_t;  // token ids and class labels; negative = ignored

}  // namespace shardtrain
