// shardtrain/io/safetensors_write.hpp
// Owns the safetensors export (`trainer-ckpt export OUT.safetensors`): the
// little-endian uint64 header length N, N bytes of JSON header (every tensor's
// dtype F32, shape and data_offsets, and "__metadata__"; padded with spaces so
// the data starts at a multiple of 8), then the tensors' float32 bytes back to
// back in entry order. Streams: the header needs only names and shapes, then
// each tensor is copied in blocks of whole rows of at most `chunk_elements`
// (a transposed block goes out as one strided piece per output row).
// Invariants: OUT is written as OUT.partial and renamed into place only when
// complete (core/durable_file.hpp PartialFile); a failure leaves no OUT.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint.hpp"
#include "io/npy_write.hpp"

namespace shardtrain {

// One tensor of a safetensors file: its name and shape in the file, the
// tensor of the exported vector it holds, and whether it is that tensor
// transposed (an (out, in) Linear weight stored as GPT-2's Conv1D, (in, out)).
// row0 / rows: the entry is rows [row0, row0 + rows) of the tensor only (rows
// < 0: all of it; not with transpose): Hugging Face BERT's query / key / value,
// three pieces of our fused c_attn (io/hf_bert_names.hpp).
struct SafetensorsEntry {
  std::string name;
  const CheckpointTensor* tensor = nullptr;
  std::vector<std::int64_t> shape;
  bool transpose = false;
  std::int64_t row0 = 0;
  std::int64_t rows = -1;
};

// The header (its 8-byte length and the padded JSON) of `entries` with `metadata`.
// InputError naming `out` when two entries share a name.
std::string safetensors_header(const std::vector<SafetensorsEntry>& entries,
                               const std::vector<std::pair<std::string, std::string>>& metadata,
                               const std::string& out);

// Writes `entries`, their values read by `read`, and `metadata` as the
// safetensors file `out`. InputError when OUT cannot be created or two entries
// share a name, Error when a write fails; both name OUT.
void write_safetensors(const std::string& out, const std::vector<SafetensorsEntry>& entries,
                       const std::vector<std::pair<std::string, std::string>>& metadata, const ReadFloats& read,
                       std::int64_t chunk_elements);

}  // namespace shardtrain
