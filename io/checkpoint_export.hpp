// shardtrain/io/checkpoint_export.hpp
// Owns trainer-ckpt export's HDF5 output (tools/ckpt_export.cpp): parameters
// of one state vector of a checkpoint as plain HDF5, one float32 dataset per
// tensor, named by it (names with '/' make groups), in its shape; h5py and
// h5dump read it. The tool owns the output file's creation, its .partial name
// and the rename into place; this file only writes HDF5 (io/ is the only code
// that does).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint.hpp"

namespace shardtrain {

// Creates the HDF5 file `path` (truncating it) and writes `tensors` of state
// vector `vector` of `ckpt` into it, read with read_range in blocks of whole
// rows (first dimension) of at most `chunk_elements` elements unless one row
// is larger. Root attributes: source_checkpoint (ckpt's path), vector, step,
// and `metadata` (values of up to 18 decimal digits as 64-bit integers, the
// rest as fixed-length UTF-8 strings). Messages name `shown` (the final path):
// InputError when a tensor name cannot be a dataset path, Error otherwise.
void export_tensors_h5(CheckpointReader& ckpt, const std::string& vector,
                       const std::vector<const CheckpointTensor*>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata, const std::string& path,
                       const std::string& shown, std::int64_t chunk_elements);

}  // namespace shardtrain
