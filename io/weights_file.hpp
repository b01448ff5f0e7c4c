// shardtrain/io/weights_file.hpp
// Owns reading a file of named weights that `trainer-ckpt export` writes (and
// that others write in the same formats): a safetensors file (an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape
// and data_offsets, and "__metadata__", then the raw bytes), or an HDF5 file
// with one float32 dataset per tensor (`trainer-ckpt export --format hdf5`;
// datasets anywhere below the root, named by their path without the leading '/').
// What the names mean (ours or GPT-2's) is the caller's business
// (task/init_from.*, tools/gpt_sample.*); this file knows the formats.
// Reading: read() copies elements [lo, hi) of one tensor, in the file's element
// order, with pread at the tensor's byte offset (for HDF5 the contiguous
// dataset's offset, H5Dget_offset), so a caller reads only the bytes it needs
// and never holds more than its own buffer; no MPI and no collective here: each
// rank opens the file by itself.
// Invariants: every size and offset read from the file is bounded before it is
// used (the header length by kMaxHeaderBytes, each tensor's bytes inside the
// file, no overlap checks needed for reading); a damaged or foreign file is an
// InputError "PATH: ...", never a crash. Only F32 tensors are read (others are
// listed with their dtype and refused when read). HDF5 is called only here and
// under the HDF5 lock (io/h5_lock.hpp); a dataset stored in chunks, compressed
// or external is refused naming it (rewrite it contiguous, as export does), and
// so is a checkpoint (export it first).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain {

struct WeightsTensor {
  std::string name;
  std::string dtype;                // "F32", "F16", "BF16", "F64", "I64", ... (safetensors' names)
  std::vector<std::int64_t> shape;  // 0 or more dimensions
  std::int64_t numel = 0;
  std::uint64_t file_offset = 0;    // of the first element, in bytes from the file's start
};

class WeightsFile {
 public:
  static constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{100} << 20;  // safetensors' own limit

  // Opens and indexes `path`: safetensors when its name ends in .safetensors,
  // HDF5 when it ends in .h5 or .hdf5 (or, for other names, when its first
  // bytes are HDF5's signature). InputError naming the file otherwise. Local.
  explicit WeightsFile(const std::string& path);
  ~WeightsFile();
  WeightsFile(const WeightsFile&) = delete;
  WeightsFile& operator=(const WeightsFile&) = delete;

  // Whether `path` is an HDF5 file whose root attribute format is
  // "shardtrain-checkpoint" (io/checkpoint.hpp): a checkpoint, not an export.
  // Local; false for anything else, unreadable files included.
  static bool is_checkpoint(const std::string& path);

  const std::string& path() const { return m_path; }
  const std::string& format() const { return m_format; }  // "safetensors" | "hdf5"
  // In file order (safetensors: by data offset; HDF5: by name).
  const std::vector<WeightsTensor>& tensors() const { return m_tensors; }
  const WeightsTensor* find(std::string_view name) const;
  // safetensors' "__metadata__" (string values); HDF5: the root's string and
  // integer attributes (integers as decimal text).
  const std::map<std::string, std::string>& metadata() const { return m_metadata; }
  std::string metadata_or(const std::string& key, const std::string& fallback) const;

  // Elements [lo, hi) of `t` (flat, in the file's row-major order) as float32
  // into dst. InputError if t is not F32 or the range is outside it; Error on
  // an I/O failure. Thread-compatible (pread only).
  void read(const WeightsTensor& t, std::int64_t lo, std::int64_t hi, float* dst) const;

 private:
  void index_safetensors();
  void index_hdf5();

  std::string m_path, m_format;
  int m_fd = -1;
  std::uint64_t m_file_bytes = 0;
  std::vector<WeightsTensor> m_tensors;
  std::map<std::string, std::string> m_metadata;
};

// The top-level members of the JSON object in the file `path` (Hugging Face's
// config.json) whose values are strings, numbers or booleans, as text (a
// string's characters, a number as written, "true" / "false"); nested objects
// and arrays are skipped. InputError naming the file when it cannot be read or
// is not a JSON object. Local.
std::map<std::string, std::string> read_json_scalars(const std::string& path);

}  // namespace shardtrain
