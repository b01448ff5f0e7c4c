// shardtrain/io/npy_write.hpp
// Owns the .npy export (`trainer-ckpt export OUT.npy`): one float32 array in
// NumPy's format version 1.0 -- the magic, the version, the header length, a
// Python dict (descr '<f4', C order, the shape) padded with spaces to a 64-byte
// multiple, then the little-endian values. The values are streamed in blocks
// of at most `chunk_elements`, so memory does not grow with the tensor.
// Invariants: OUT is written as OUT.partial and renamed into place only when
// complete (core/durable_file.hpp PartialFile); a failure leaves no OUT.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shardtrain {

// Fills out[0, hi - lo) with elements [lo, hi) of the exported vector (float32).
using ReadFloats = std::function<void(std::int64_t lo, std::int64_t hi, float* out)>;

// The .npy v1.0 header of a little-endian float32 array of `shape`.
std::string npy_header(const std::vector<std::int64_t>& shape);

// Writes the `numel` elements at `offset` of the vector `read` reads as the
// array of `shape` into the .npy file `out`. InputError when OUT cannot be
// created, Error when a write fails; both name OUT.
void write_npy(const std::string& out, const std::vector<std::int64_t>& shape, std::int64_t offset,
               std::int64_t numel, const ReadFloats& read, std::int64_t chunk_elements);

}  // namespace shardtrain
