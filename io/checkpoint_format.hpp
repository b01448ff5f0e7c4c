// shardtrain/io/checkpoint_format.hpp (internal to io/)
// Owns the checkpoint format both directions share (share/doc/checkpoint-format.md):
// the limits a reader holds a file to, the element types of the state vectors
// in HDF5, the /layout row type, the root attributes in file order (one table,
// visit_meta: the writer writes it, the reader reads and bounds it, the root
// CRC is taken over it), the CRC-32 pieces and the 1-D selections. The writer
// (checkpoint_write.cpp) and the reader (checkpoint_read.cpp) use it; no other
// file does.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "io/checkpoint.hpp"
#include "io/h5_check.hpp"

namespace shardtrain::ckpt {

using namespace shardtrain::h5;

// Limits that separate a real checkpoint from a damaged or hostile file.
inline constexpr std::int64_t kMaxTensors = 1 << 16;
inline constexpr std::size_t kMaxNameBytes = 256;
inline constexpr std::size_t kMaxConfigBytes = 1 << 20;
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;
inline constexpr std::int64_t kMaxWorld = 1 << 24;
inline constexpr std::int64_t kMaxAlignment = 1 << 20;
inline constexpr int kMaxDims = 4;
inline constexpr std::int64_t kChunk = std::int64_t{1} << 20;  // elements per bounded read
// HDF5 inflates a whole chunk to read any element of it, so the chunk size a
// file declares sizes HDF5's own buffers; a deflated chunk of GiBs of zeros
// costs only KiBs of file. h5py and h5repack choose chunks of at most ~1 MiB.
inline constexpr std::uint64_t kMaxChunkBytes = std::uint64_t{64} << 20;

// The root attributes after `format` and `schema_version`, in file order:
// each with its bounds (a reader refuses values outside them) and, for some,
// a check of the value (an error phrase, "" when it is fine). The writer, the
// reader and checkpoint_meta_crc all walk this one list: V has
//   i64(name, field, lo, hi), u64(name, field) (stored as a 64-bit integer),
//   f64(name, field, check), str(name, field, check),
//   optional_str(name, field) (absent in files written before it was recorded).
// M is CheckpointMeta or const CheckpointMeta.
std::string check_precision(const std::string& precision);
std::string check_loss_scale(double loss_scale);
template <class M, class V>
void visit_meta(M& m, V&& v) {
  constexpr std::int64_t kAny = std::numeric_limits<std::int64_t>::max();
  v.i64("step", m.step, 0, kMaxElements);
  v.i64("samples_seen", m.samples_seen, 0, kAny);
  v.i64("tokens_seen", m.tokens_seen, 0, kAny);
  v.i64("optimizer_updates", m.optimizer_updates, 0, m.step);
  v.u64("sampler_seed", m.sampler_seed);
  v.i64("world_size", m.world_size, 1, kMaxWorld);
  v.i64("zero_stage", m.zero_stage, 0, 3);
  v.str("precision", m.precision, check_precision);
  v.i64("alignment", m.alignment, 1, kMaxAlignment);
  v.i64("padded_size", m.padded_size, 1, kMaxElements);
  v.f64("loss_scale", m.loss_scale, check_loss_scale);
  v.i64("scaler_good_steps", m.scaler_good_steps, 0, kMaxElements);
  v.i64("scaler_hysteresis_left", m.scaler_hysteresis_left, 0, 1000000);
  v.i64("scaler_consecutive_skips", m.scaler_consecutive_skips, 0, kMaxElements);
  v.str("data_path", m.data_path, nullptr);
  v.i64("data_train_tokens", m.data_train_tokens, 0, kMaxElements);
  v.i64("data_vocab_size", m.data_vocab_size, 0, std::int64_t{1} << 24);
  v.i64("seq_len", m.seq_len, 0, std::int64_t{1} << 30);
  v.str("created_utc", m.created_utc, nullptr);
  v.str("shardtrain_version", m.version, nullptr);
  v.optional_str("parent", m.parent);
}

// CRC-32 of `bytes` at p, continuing `crc`.
std::uint32_t crc_of(const void* p, std::uint64_t bytes, std::uint32_t crc = 0);

// A CRC over a byte range, built from pieces in order.
struct CrcPiece {
  std::uint32_t crc = 0;
  std::uint64_t bytes = 0;
  void add(const void* p, std::uint64_t n);
};

// Combines every rank's pieces of `k` CRCs (rank order) into k whole CRCs; collective.
std::vector<CrcPiece> combine_pieces(MPI_Comm comm, const std::vector<CrcPiece>& mine);

// The HDF5 file type of a state vector's elements (F32, F16 or BF16).
H5Datatype make_type(DType t);
// The DType of a file type, or nullopt when it is none of the three.
std::optional<DType> type_of(hid_t t);

// One row of /layout in memory; name is the first member, sized per file.
constexpr std::size_t kRowNumbers = 3 + kMaxDims;  // ndim, offset, numel, shape[4]

struct LayoutType {
  std::size_t name_bytes = 0;  // multiple of 8
  H5T_cset_t cset = H5T_CSET_UTF8;  // the writer's; a reader uses the file's (no conversion between sets)
  std::size_t row_bytes() const { return name_bytes + kRowNumbers * 8; }
  H5Datatype type() const {
    H5Datatype name(SHARDTRAIN_H5_CHECK(H5Tcopy(H5T_C_S1)));
    SHARDTRAIN_H5_CHECK(H5Tset_size(name, name_bytes));
    SHARDTRAIN_H5_CHECK(H5Tset_cset(name, cset));
    const hsize_t dims = kMaxDims;
    H5Datatype shape(SHARDTRAIN_H5_CHECK(H5Tarray_create2(H5T_STD_I64LE, 1, &dims)));
    H5Datatype row(SHARDTRAIN_H5_CHECK(H5Tcreate(H5T_COMPOUND, row_bytes())));
    SHARDTRAIN_H5_CHECK(H5Tinsert(row, "name", 0, name));
    SHARDTRAIN_H5_CHECK(H5Tinsert(row, "ndim", name_bytes, H5T_STD_I64LE));
    SHARDTRAIN_H5_CHECK(H5Tinsert(row, "offset", name_bytes + 8, H5T_STD_I64LE));
    SHARDTRAIN_H5_CHECK(H5Tinsert(row, "numel", name_bytes + 16, H5T_STD_I64LE));
    SHARDTRAIN_H5_CHECK(H5Tinsert(row, "shape", name_bytes + 24, shape));
    return row;
  }
};

// Selects [lo, hi) of a 1-D space (none when empty).
void select_range(hid_t space, std::int64_t lo, std::int64_t hi);

}  // namespace shardtrain::ckpt
