// Checkpoint files (share/doc/checkpoint-format.md): writes in agreed phases
// (rank 0 lays the file out with HDF5 in memory and copies it, every rank
// pwrites its hyperslab of the global state vectors: io/checkpoint_phase.hpp),
// collective MPI-IO reads,
// CRC-32 per dataset, and validation of every file-supplied size before it
// sizes anything.
// Length (~820 lines, over the ~500 the project aims at): each dataset's writer and its
// reader, with the reader's size validation, are kept side by side so a change to the
// format is made to both halves in one place; split, they would drift apart.
#include "io/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "core/durable_file.hpp"
#include "core/error.hpp"
#include "core/state_vectors.hpp"
#include "io/checkpoint_phase.hpp"
#include "io/crc32.hpp"
#include "io/h5_check.hpp"
#include "io/h5_lock.hpp"
#include "io/h5_read.hpp"
#include "io/h5_write.hpp"

namespace shardtrain {

namespace {

using namespace shardtrain::h5;
using Clock = std::chrono::steady_clock;

// Limits that separate a real checkpoint from a damaged or hostile file.
constexpr std::int64_t kMaxTensors = 1 << 16;
constexpr std::size_t kMaxNameBytes = 256;
constexpr std::size_t kMaxAttrStringBytes = 4096;
constexpr std::size_t kMaxConfigBytes = 1 << 20;
constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;
constexpr std::int64_t kMaxWorld = 1 << 24;
constexpr std::int64_t kMaxAlignment = 1 << 20;
constexpr int kMaxDims = 4;
constexpr std::int64_t kChunk = std::int64_t{1} << 20;  // elements per bounded read
// HDF5 inflates a whole chunk to read any element of it, so the chunk size a
// file declares sizes HDF5's own buffers; a deflated chunk of GiBs of zeros
// costs only KiBs of file. h5py and h5repack choose chunks of at most ~1 MiB.
constexpr std::uint64_t kMaxChunkBytes = std::uint64_t{64} << 20;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::uint32_t crc_of(const void* p, std::uint64_t bytes, std::uint32_t crc = 0) {
  return crc32_ieee(crc, p, static_cast<std::size_t>(bytes));
}

// A CRC over a byte range, built from pieces in order.
struct CrcPiece {
  std::uint32_t crc = 0;
  std::uint64_t bytes = 0;
  void add(const void* p, std::uint64_t n) {
    if (n == 0) return;
    const std::uint32_t c = crc_of(p, n);
    crc = bytes == 0 ? c : static_cast<std::uint32_t>(crc32_combine(crc, c, static_cast<z_off_t>(n)));
    bytes += n;
  }
};

// Combines every rank's pieces of `k` CRCs (rank order) into k whole CRCs; collective.
std::vector<CrcPiece> combine_pieces(MPI_Comm comm, const std::vector<CrcPiece>& mine) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  const std::size_t k = mine.size();
  std::vector<std::uint64_t> send(2 * k), all(2 * k * static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < k; ++i) {
    send[2 * i] = mine[i].crc;
    send[2 * i + 1] = mine[i].bytes;
  }
  if (k > 0)
    MPI_Allgather(send.data(), static_cast<int>(2 * k), MPI_UINT64_T, all.data(), static_cast<int>(2 * k),
                  MPI_UINT64_T, comm);
  std::vector<CrcPiece> out(k);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < k; ++i) {
      const std::uint64_t c = all[(static_cast<std::size_t>(r) * k + i) * 2];
      const std::uint64_t b = all[(static_cast<std::size_t>(r) * k + i) * 2 + 1];
      if (b == 0) continue;
      out[i].crc = out[i].bytes == 0
                       ? static_cast<std::uint32_t>(c)
                       : static_cast<std::uint32_t>(crc32_combine(out[i].crc, static_cast<uLong>(c),
                                                                  static_cast<z_off_t>(b)));
      out[i].bytes += b;
    }
  return out;
}

H5Datatype make_type(DType t) {
  SHARDTRAIN_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16,
                   "a checkpoint's state vectors hold float32, float16 or bfloat16");
  H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Tcopy(H5T_IEEE_F32LE)));
  if (t == DType::F16) {  // IEEE binary16: what h5py and numpy call float16
    SHARDTRAIN_H5_CHECK(H5Tset_fields(ft, 15, 10, 5, 0, 10));
    SHARDTRAIN_H5_CHECK(H5Tset_size(ft, 2));
    SHARDTRAIN_H5_CHECK(H5Tset_ebias(ft, 15));
  } else if (t == DType::BF16) {  // bfloat16: the top half of an fp32
    SHARDTRAIN_H5_CHECK(H5Tset_fields(ft, 15, 7, 8, 0, 7));
    SHARDTRAIN_H5_CHECK(H5Tset_size(ft, 2));
    SHARDTRAIN_H5_CHECK(H5Tset_ebias(ft, 127));
  }
  return ft;
}

// The DType of a file type, or nullopt when it is none of the three.
std::optional<DType> type_of(hid_t t) {
  if (H5Tget_class(t) != H5T_FLOAT) return std::nullopt;
  if (H5Tget_order(t) != H5T_ORDER_LE) return std::nullopt;
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) return std::nullopt;
  const size_t size = H5Tget_size(t), bias = H5Tget_ebias(t);
  if (size == 4 && spos == 31 && esize == 8 && msize == 23 && bias == 127 && mpos == 0)
    return DType::F32;
  if (size == 2 && spos == 15 && esize == 5 && msize == 10 && bias == 15 && mpos == 0)
    return DType::F16;
  if (size == 2 && spos == 15 && esize == 8 && msize == 7 && bias == 127 && mpos == 0)
    return DType::BF16;
  return std::nullopt;
}

H5PropList mpio_fapl(MPI_Comm comm) {
  H5PropList fapl(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  SHARDTRAIN_H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
  SHARDTRAIN_H5_CHECK(H5Pset_all_coll_metadata_ops(fapl, true));
  SHARDTRAIN_H5_CHECK(H5Pset_coll_metadata_write(fapl, true));
  return fapl;
}

H5PropList xfer(bool collective) {
  H5PropList dxpl(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  SHARDTRAIN_H5_CHECK(H5Pset_dxpl_mpio(dxpl, collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT));
  return dxpl;
}

// ------------------------------------------------------------------ attributes

void put_i64(hid_t obj, const char* name, std::int64_t v) {
  write_scalar_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
void put_u32(hid_t obj, const char* name, std::uint32_t v) {
  write_scalar_attr(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &v);
}
void put_f64(hid_t obj, const char* name, double v) {
  write_scalar_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}
void put_str(hid_t obj, const char* name, const std::string& v) {
  // Null-terminated, with room for the terminator: a C reader sizing its buffer
  // from the file type gets a terminated string.
  H5Datatype t(SHARDTRAIN_H5_CHECK(H5Tcopy(H5T_C_S1)));
  SHARDTRAIN_H5_CHECK(H5Tset_size(t, v.size() + 1));
  SHARDTRAIN_H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  write_scalar_attr(obj, name, t, t, v.c_str());
}

// Opens attribute `name` of `obj` and checks it is a scalar of `cls`.
H5Attribute open_attr(const std::string& path, hid_t obj, const std::string& where, const char* name,
                      H5T_class_t cls, const char* what) {
  const htri_t exists = H5Aexists(obj, name);
  if (exists <= 0) bad_input(path, where + " has no attribute '" + name + "' (not a complete shardtrain checkpoint)");
  H5Attribute a(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a.valid()) bad_input(path, where + " attribute '" + name + "' cannot be opened");
  H5Dataspace s(H5Aget_space(a));
  H5Datatype t(H5Aget_type(a));
  if (!s.valid() || !t.valid() || H5Sget_simple_extent_type(s) != H5S_SCALAR || H5Tget_class(t) != cls)
    bad_input(path, where + " attribute '" + name + "' must be a scalar " + what);
  return a;
}

std::int64_t get_i64(const std::string& path, hid_t obj, const std::string& where, const char* name,
                     std::int64_t lo, std::int64_t hi) {
  H5Attribute a = open_attr(path, obj, where, name, H5T_INTEGER, "integer");
  std::int64_t v = 0;
  if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0) bad_input(path, where + " attribute '" + name + "' cannot be read");
  if (v < lo || v > hi)
    bad_input(path, where + " attribute '" + name + "' = " + std::to_string(v) + " is outside [" +
                        std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

double get_f64(const std::string& path, hid_t obj, const std::string& where, const char* name) {
  H5Attribute a = open_attr(path, obj, where, name, H5T_FLOAT, "float");
  double v = 0;
  if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0) bad_input(path, where + " attribute '" + name + "' cannot be read");
  return v;
}

std::string get_str(const std::string& path, hid_t obj, const std::string& where, const char* name) {
  H5Attribute a = open_attr(path, obj, where, name, H5T_STRING, "string");
  H5Datatype ft(H5Aget_type(a));
  const htri_t variable = H5Tis_variable_str(ft);
  const std::size_t size = H5Tget_size(ft);
  if (variable != 0 || size == 0 || size > kMaxAttrStringBytes)
    bad_input(path, where + " attribute '" + name + "' must be a fixed-length string of at most " +
                        std::to_string(kMaxAttrStringBytes) + " bytes");
  // HDF5 converts strings only between types of the same character set: read in the file's.
  const H5T_cset_t cset = H5Tget_cset(ft);
  if (cset != H5T_CSET_ASCII && cset != H5T_CSET_UTF8)
    bad_input(path, where + " attribute '" + name + "' has an unknown character set");
  H5Datatype mt(SHARDTRAIN_H5_CHECK(H5Tcopy(H5T_C_S1)));
  SHARDTRAIN_H5_CHECK(H5Tset_size(mt, size + 1));
  SHARDTRAIN_H5_CHECK(H5Tset_cset(mt, cset));
  std::string v(size + 1, '\0');
  if (H5Aread(a, mt, v.data()) < 0) bad_input(path, where + " attribute '" + name + "' cannot be read");
  v.resize(std::strlen(v.c_str()));
  return v;
}

// --------------------------------------------------------------------- layout

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

std::vector<unsigned char> pack_layout(const std::vector<CheckpointTensor>& layout, LayoutType& lt) {
  std::size_t longest = 1;
  for (const auto& e : layout) longest = std::max(longest, e.name.size() + 1);
  SHARDTRAIN_CHECK(longest <= kMaxNameBytes, "tensor name longer than the checkpoint format allows");
  for (const auto& e : layout)  // each name is also an HDF5 link name under /params
    SHARDTRAIN_CHECK(!e.name.empty() && e.name != "." && e.name.find('/') == std::string::npos,
                     "tensor name '" + e.name + "' cannot name a /params dataset (empty, '.' or holds '/')");
  lt.name_bytes = (longest + 7) / 8 * 8;
  std::vector<unsigned char> rows(layout.size() * lt.row_bytes(), 0);
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const auto& e = layout[i];
    SHARDTRAIN_CHECK(e.shape.size() <= static_cast<std::size_t>(kMaxDims), "tensor of more than 4 dims");
    unsigned char* r = rows.data() + i * lt.row_bytes();
    std::memcpy(r, e.name.data(), e.name.size());
    std::int64_t nums[kRowNumbers] = {static_cast<std::int64_t>(e.shape.size()), e.offset, e.numel, 0, 0, 0, 0};
    for (std::size_t d = 0; d < e.shape.size(); ++d) nums[3 + d] = e.shape[d];
    std::memcpy(r + lt.name_bytes, nums, sizeof nums);
  }
  return rows;
}

// Selects [lo, hi) of a 1-D space (none when empty).
void select_range(hid_t space, std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) {
    SHARDTRAIN_H5_CHECK(H5Sselect_none(space));
    return;
  }
  const hsize_t start = static_cast<hsize_t>(lo), count = static_cast<hsize_t>(hi - lo);
  SHARDTRAIN_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
}

H5Dataspace memory_space(std::int64_t n) {
  const hsize_t dim = static_cast<hsize_t>(std::max<std::int64_t>(n, 1));
  H5Dataspace s(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &dim, nullptr)));
  if (n == 0) SHARDTRAIN_H5_CHECK(H5Sselect_none(s));
  return s;
}

// Writes a small dataset's bytes from rank 0 (the others take part with an empty selection).
void write_from_root(hid_t ds, hid_t mem_type, const void* data, bool root, bool scalar) {
  H5Dataspace fs(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
  H5Dataspace ms(SHARDTRAIN_H5_CHECK(H5Scopy(fs)));
  if (!root) {
    SHARDTRAIN_H5_CHECK(H5Sselect_none(fs));
    SHARDTRAIN_H5_CHECK(H5Sselect_none(ms));
  }
  (void)scalar;
  // Collective through MPI-IO, or plain when rank 0 writes the file alone (POSIX driver).
  H5File f(SHARDTRAIN_H5_CHECK(H5Iget_file_id(ds)));
  H5PropList fapl(SHARDTRAIN_H5_CHECK(H5Fget_access_plist(f)));
  H5PropList dxpl = H5Pget_driver(fapl) == H5FD_MPIO ? xfer(true) : H5PropList(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  SHARDTRAIN_H5_CHECK(H5Dwrite(ds, mem_type, ms, fs, dxpl, data));
}


}  // namespace

std::uint32_t checkpoint_meta_crc(const CheckpointMeta& m) {
  std::string text;
  auto i64 = [&text](const char* name, std::int64_t v) { text += std::string(name) + "=" + std::to_string(v) + "\n"; };
  auto str = [&text](const char* name, const std::string& v) { text += std::string(name) + "=" + v + "\n"; };
  str("format", std::string(kCheckpointFormat));
  i64("schema_version", kCheckpointSchema);
  i64("step", m.step);
  i64("samples_seen", m.samples_seen);
  i64("tokens_seen", m.tokens_seen);
  i64("optimizer_updates", m.optimizer_updates);
  i64("sampler_seed", static_cast<std::int64_t>(m.sampler_seed));
  i64("world_size", m.world_size);
  i64("zero_stage", m.zero_stage);
  str("precision", m.precision);
  i64("alignment", m.alignment);
  i64("padded_size", m.padded_size);
  std::uint64_t scale_bits = 0;
  std::memcpy(&scale_bits, &m.loss_scale, sizeof scale_bits);
  i64("loss_scale", static_cast<std::int64_t>(scale_bits));
  i64("scaler_good_steps", m.scaler_good_steps);
  i64("scaler_hysteresis_left", m.scaler_hysteresis_left);
  i64("scaler_consecutive_skips", m.scaler_consecutive_skips);
  str("data_path", m.data_path);
  i64("data_train_tokens", m.data_train_tokens);
  i64("data_vocab_size", m.data_vocab_size);
  i64("seq_len", m.seq_len);
  str("created_utc", m.created_utc);
  str("shardtrain_version", m.version);
  str("parent", m.parent);
  return crc_of(text.data(), text.size());
}

// ---------------------------------------------------------------------- write

void warm_checkpoint_io(const std::string& dir, MPI_Comm comm, const CheckpointMeta& like,
                        const std::vector<std::string>& tensor_names,
                        const std::vector<std::pair<std::string, DType>>& vectors) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // One name for the job (rank 0's pid), so two jobs sharing a directory do not collide.
  long job = rank == 0 ? static_cast<long>(getpid()) : 0;
  MPI_Bcast(&job, 1, MPI_LONG, 0, comm);
  const std::string path = dir + "/.shardtrain-io-probe-" + std::to_string(job) + ".h5";
  // The model's twin: a one-element tensor per name, padded to a whole number
  // of elements per rank; each rank writes its block of every vector.
  const std::int64_t count = std::max<std::int64_t>(1, static_cast<std::int64_t>(tensor_names.size()));
  const std::int64_t per_rank = (count + size - 1) / size;
  CheckpointMeta meta = like;
  meta.world_size = size;
  meta.alignment = 1;
  meta.padded_size = per_rank * size;
  std::vector<CheckpointTensor> layout;
  for (std::size_t i = 0; i < tensor_names.size(); ++i)
    layout.push_back({tensor_names[i], {1}, static_cast<std::int64_t>(i), 1});
  const std::vector<float> zeros(static_cast<std::size_t>(per_rank), 0.0f);  // 0.0f is 0 in every DType
  std::vector<CheckpointVectorOut> out;
  for (const auto& [name, type] : vectors) out.push_back({name, type, zeros.data()});
  write_checkpoint(path, comm, meta, layout, out, per_rank * rank, per_rank * (rank + 1));
  {  // and read back as a resume reads (collective MPI-IO: what it loads stays resident)
    CheckpointReader reader(path, comm);
    (void)reader.verify_all();
  }
  MPI_Barrier(comm);  // every rank has closed the file
  if (rank == 0) std::remove(path.c_str());
}

namespace {

// Writes elements [lo, hi) of every vector at its dataset's byte offset in
// `path` with pwrite, and their CRC pieces. Throws SystemIoError (with errno).
void write_at_offsets(const std::string& path, const std::vector<CheckpointVectorOut>& vectors,
                      const std::vector<std::int64_t>& offsets, std::int64_t lo, std::int64_t hi,
                      std::vector<CrcPiece>& pieces) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw SystemIoError(path + ": cannot open for the state data: " + std::strerror(err), err);
  }
  int err = 0;
  std::string what;
  for (std::size_t i = 0; i < vectors.size() && err == 0; ++i) {
    const std::size_t eb = dtype_size(vectors[i].type);
    const auto* p = static_cast<const unsigned char*>(vectors[i].data);
    const std::uint64_t bytes = static_cast<std::uint64_t>(hi - lo) * eb;
    const std::uint64_t at = static_cast<std::uint64_t>(offsets[i] + lo * static_cast<std::int64_t>(eb));
    err = pwrite_all(fd, p, static_cast<std::size_t>(bytes), at);
    if (err != 0) what = "writing /state/" + vectors[i].name;
    else pieces[i].add(p, bytes);
  }
  // close reports write errors some file systems (NFS) defer to it.
  if (::close(fd) != 0 && err == 0) {
    err = errno;
    what = "closing it after the state data";
  }
  if (err != 0) throw SystemIoError(path + ": " + what + ": " + std::strerror(err), err);
}

// fsync of the checkpoint file on this rank. Throws SystemIoError (with errno).
void fsync_checkpoint(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw SystemIoError(path + ": cannot open to fsync: " + std::strerror(err), err);
  }
  int err = ::fsync(fd) != 0 ? errno : 0;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) throw SystemIoError(path + ": fsync failed: " + std::strerror(err), err);
}

// The root attributes, /config and /layout: everything of a checkpoint but
// the state vectors and their views. Collective (rank 0's data is written).
void write_header(hid_t file, const CheckpointMeta& meta, const std::vector<CheckpointTensor>& layout, bool root) {
  put_str(file, "format", std::string(kCheckpointFormat));
  put_i64(file, "schema_version", kCheckpointSchema);
  put_i64(file, "step", meta.step);
  put_i64(file, "samples_seen", meta.samples_seen);
  put_i64(file, "tokens_seen", meta.tokens_seen);
  put_i64(file, "optimizer_updates", meta.optimizer_updates);
  put_i64(file, "sampler_seed", static_cast<std::int64_t>(meta.sampler_seed));
  put_i64(file, "world_size", meta.world_size);
  put_i64(file, "zero_stage", meta.zero_stage);
  put_str(file, "precision", meta.precision);
  put_i64(file, "alignment", meta.alignment);
  put_i64(file, "padded_size", meta.padded_size);
  put_f64(file, "loss_scale", meta.loss_scale);
  put_i64(file, "scaler_good_steps", meta.scaler_good_steps);
  put_i64(file, "scaler_hysteresis_left", meta.scaler_hysteresis_left);
  put_i64(file, "scaler_consecutive_skips", meta.scaler_consecutive_skips);
  put_str(file, "data_path", meta.data_path);
  put_i64(file, "data_train_tokens", meta.data_train_tokens);
  put_i64(file, "data_vocab_size", meta.data_vocab_size);
  put_i64(file, "seq_len", meta.seq_len);
  put_str(file, "created_utc", meta.created_utc);
  put_str(file, "shardtrain_version", meta.version);
  put_str(file, "parent", meta.parent);
  put_u32(file, "meta_crc32", checkpoint_meta_crc(meta));

  // /config: the resolved config text.
  {
    const std::string& text = meta.config_text;
    SHARDTRAIN_CHECK(text.size() <= kMaxConfigBytes, "config text too long for a checkpoint");
    H5Datatype t(SHARDTRAIN_H5_CHECK(H5Tcopy(H5T_C_S1)));
    SHARDTRAIN_H5_CHECK(H5Tset_size(t, std::max<std::size_t>(text.size(), 1)));
    SHARDTRAIN_H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
    SHARDTRAIN_H5_CHECK(H5Tset_strpad(t, H5T_STR_NULLPAD));
    H5Dataspace s(SHARDTRAIN_H5_CHECK(H5Screate(H5S_SCALAR)));
    H5Dataset ds(SHARDTRAIN_H5_CHECK(H5Dcreate2(file, "config", t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    std::string padded = text;
    padded.resize(std::max<std::size_t>(text.size(), 1), '\0');
    write_from_root(ds, t, padded.data(), root, true);
    put_u32(ds, "crc32", crc_of(text.data(), text.size()));
  }
  // /layout: name, ndim, offset, numel, shape[4] per tensor.
  {
    LayoutType lt;
    const std::vector<unsigned char> rows = pack_layout(layout, lt);
    H5Datatype t = lt.type();
    const hsize_t n = layout.size();
    H5Dataspace s(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
    H5Dataset ds(SHARDTRAIN_H5_CHECK(H5Dcreate2(file, "layout", t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    write_from_root(ds, t, rows.data(), root, false);
    put_u32(ds, "crc32", crc_of(rows.data(), rows.size()));
  }
}

// /state/<name>: a contiguous 1-D dataset of `n` elements, its space allocated
// now (so its file offset is fixed) and never filled (every element is written).
H5Dataset create_state_dataset(hid_t state, const std::string& name, DType type, std::int64_t n) {
  H5Datatype t = make_type(type);
  const hsize_t dims = static_cast<hsize_t>(n);
  H5Dataspace fs(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &dims, nullptr)));
  H5PropList dcpl(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  SHARDTRAIN_H5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
  SHARDTRAIN_H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
  SHARDTRAIN_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));  // every element is written
  return H5Dataset(SHARDTRAIN_H5_CHECK(H5Dcreate2(state, name.c_str(), t, fs, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
}

// /params/<name>: virtual views of /state/master, one per tensor, in its shape.
void create_param_views(hid_t file, const std::vector<CheckpointTensor>& layout, std::int64_t padded_size) {
  H5Group params(SHARDTRAIN_H5_CHECK(H5Gcreate2(file, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  const hsize_t n = static_cast<hsize_t>(padded_size);
  H5Dataspace src(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  H5Datatype f32 = make_type(DType::F32);
  for (const auto& e : layout) {
    std::vector<hsize_t> dims(e.shape.begin(), e.shape.end());
    H5Dataspace vs(dims.empty() ? SHARDTRAIN_H5_CHECK(H5Screate(H5S_SCALAR))
                                : SHARDTRAIN_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()),
                                                                       dims.data(), nullptr)));
    select_range(src, e.offset, e.offset + e.numel);
    H5PropList dcpl(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    SHARDTRAIN_H5_CHECK(H5Pset_virtual(dcpl, vs, ".", "/state/master", src));
    H5Dataset ds(SHARDTRAIN_H5_CHECK(H5Dcreate2(params, e.name.c_str(), f32, vs, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  }
  SHARDTRAIN_H5_CLOSE(params);
}

// The file's layout, built by HDF5 in memory on rank 0: HDF5 never touches the
// checkpoint's storage. A write failure inside HDF5 (its metadata flush in
// H5Fcreate or H5Fclose) leaves the library with a half-destroyed file that
// crashes its termination at exit (seen: SIGSEGV in H5F__close_cb after ENOSPC
// on a flush), and HDF5 reports no errno; so HDF5 writes the layout into a
// file in memory (tmpfs; the datasets' allocated space stays a hole and costs
// nothing), and rank 0 copies the bytes HDF5 wrote (SEEK_DATA) into the
// checkpoint file with its own pwrite. Each state dataset's `crc32` attribute is written
// with a placeholder value found exactly once in the image, so the checksums
// phase patches those 4 bytes in place (object headers of this format carry
// no checksum of their own) instead of reopening the file with HDF5.
struct LayoutImage {
  std::vector<std::pair<std::int64_t, std::vector<unsigned char>>> extents;  // (offset, bytes HDF5 wrote)
  std::int64_t size = 0;                      // the file's length (HDF5's end of file)
  std::vector<std::int64_t> data_offsets;     // per state vector: its dataset's data
  std::vector<std::int64_t> crc_offsets;      // per state vector: its crc32 attribute's value
};

// Reads the data extents of `fd` (SEEK_DATA/SEEK_HOLE: the holes are the datasets' unwritten space).
std::vector<std::pair<std::int64_t, std::vector<unsigned char>>> data_extents(int fd, std::int64_t size) {
  std::vector<std::pair<std::int64_t, std::vector<unsigned char>>> out;
  off_t at = 0;
  while (at < size) {
    const off_t data = ::lseek(fd, at, SEEK_DATA);
    if (data < 0) break;  // ENXIO: no data beyond `at`
    off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole < 0 || hole > size) hole = size;
    std::vector<unsigned char> bytes(static_cast<std::size_t>(hole - data));
    SHARDTRAIN_CHECK(::pread(fd, bytes.data(), bytes.size(), data) == static_cast<ssize_t>(bytes.size()),
                     "cannot read back the checkpoint layout from memory");
    out.emplace_back(data, std::move(bytes));
    at = hole;
  }
  return out;
}

LayoutImage build_layout_image(const CheckpointMeta& meta, const std::vector<CheckpointTensor>& layout,
                               const std::vector<CheckpointVectorOut>& vectors) {
  for (std::uint32_t attempt = 0; attempt < 16; ++attempt) {
    std::vector<std::uint32_t> placeholder(vectors.size());
    for (std::size_t i = 0; i < vectors.size(); ++i)
      placeholder[i] = 0x5A17C0DEu ^ (0x9E3779B9u * (attempt * 8u + static_cast<std::uint32_t>(i) + 1u));
    // A file in memory (tmpfs: /dev/shm, else TMPDIR or /tmp), by name: HDF5
    // resolves symbolic links, so a memfd's /proc/self/fd path will not do.
    std::error_code ec;
    const char* tmpdir = std::getenv("TMPDIR");
    std::string name = (std::filesystem::is_directory("/dev/shm", ec) ? std::string("/dev/shm")
                        : tmpdir                                       ? std::string(tmpdir)
                                                                       : std::string("/tmp")) +
                       "/shardtrain-checkpoint-layout-XXXXXX";
    const int mem = ::mkstemp(name.data());
    if (mem < 0)
      SHARDTRAIN_FAIL(name + ": cannot create the in-memory file for the checkpoint layout: " + std::strerror(errno));
    struct Closer {
      int fd;
      std::string name;
      ~Closer() {
        ::unlink(name.c_str());
        ::close(fd);
      }
    } closer{mem, name};
    LayoutImage image;
    {
      const auto hdf5 = lock_hdf5();
      quiet_errors();
      H5PropList fapl(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
      SHARDTRAIN_H5_CHECK(H5Pset_fapl_sec2(fapl));
      // Large datasets start on 1 MiB boundaries (file-system stripes and blocks).
      SHARDTRAIN_H5_CHECK(H5Pset_alignment(fapl, 1 << 20, 1 << 20));
      SHARDTRAIN_H5_CHECK(H5Pset_file_locking(fapl, false, true));
      H5File file(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
      if (!file.valid()) SHARDTRAIN_FAIL("cannot lay out the checkpoint in memory: " + error_stack_text());
      write_header(file, meta, layout, true);
      H5Group state(SHARDTRAIN_H5_CHECK(H5Gcreate2(file, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
      for (std::size_t i = 0; i < vectors.size(); ++i) {
        H5Dataset ds = create_state_dataset(state, vectors[i].name, vectors[i].type, meta.padded_size);
        const haddr_t off = H5Dget_offset(ds);
        SHARDTRAIN_CHECK(off != HADDR_UNDEF, "/state/" + vectors[i].name + " has no file offset");
        image.data_offsets.push_back(static_cast<std::int64_t>(off));
        put_u32(ds, "crc32", placeholder[i]);
      }
      create_param_views(file, layout, meta.padded_size);
      SHARDTRAIN_H5_CLOSE(state);
      SHARDTRAIN_H5_CLOSE(file);
    }
    struct stat st {};
    SHARDTRAIN_CHECK(::fstat(mem, &st) == 0, "cannot stat the checkpoint layout in memory");
    image.size = static_cast<std::int64_t>(st.st_size);
    image.extents = data_extents(mem, image.size);
    // Each placeholder must occur exactly once in what HDF5 wrote.
    bool unique = true;
    for (std::size_t i = 0; i < vectors.size() && unique; ++i) {
      unsigned char pat[4];
      for (int b = 0; b < 4; ++b) pat[b] = static_cast<unsigned char>(placeholder[i] >> (8 * b));  // little-endian
      int found = 0;
      std::int64_t where = -1;
      for (const auto& [off, bytes] : image.extents)
        for (auto it = std::search(bytes.begin(), bytes.end(), pat, pat + 4); it != bytes.end();
             it = std::search(it + 1, bytes.end(), pat, pat + 4)) {
          ++found;
          where = off + (it - bytes.begin());
        }
      unique = found == 1;
      image.crc_offsets.push_back(where);
    }
    if (unique) return image;
  }
  SHARDTRAIN_FAIL("no unique placeholders for the checkpoint's crc32 attributes after 16 tries");
}

// Rank 0: creates (or truncates) `path` and writes the layout HDF5 made into it.
// Throws SystemIoError (with errno).
void write_layout(const std::string& path, const LayoutImage& image) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw SystemIoError(path + ": cannot create the checkpoint file: " + std::strerror(err), err);
  }
  int err = 0;
  std::string what;
  if (::ftruncate(fd, static_cast<off_t>(image.size)) != 0) {
    err = errno;
    what = "extending it to " + std::to_string(image.size) + " bytes";
  }
  for (std::size_t i = 0; i < image.extents.size() && err == 0; ++i) {
    const auto& [off, bytes] = image.extents[i];
    err = pwrite_all(fd, bytes.data(), bytes.size(), static_cast<std::uint64_t>(off));
    if (err != 0) what = "writing its layout (HDF5 metadata)";
  }
  if (::close(fd) != 0 && err == 0) {
    err = errno;
    what = "closing it after its layout";
  }
  if (err != 0) throw SystemIoError(path + ": " + what + ": " + std::strerror(err), err);
}

// Rank 0: writes each state vector's CRC over its placeholder. Throws SystemIoError (with errno).
void write_checksums(const std::string& path, const LayoutImage& image, const std::vector<std::uint32_t>& crcs) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw SystemIoError(path + ": cannot reopen for the checksums: " + std::strerror(err), err);
  }
  int err = 0;
  for (std::size_t i = 0; i < crcs.size() && err == 0; ++i) {
    unsigned char le[4];
    for (int b = 0; b < 4; ++b) le[b] = static_cast<unsigned char>(crcs[i] >> (8 * b));
    err = pwrite_all(fd, le, 4, static_cast<std::uint64_t>(image.crc_offsets[i]));
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) throw SystemIoError(path + ": writing the checksums: " + std::strerror(err), err);
}

}  // namespace

CheckpointWriteStats write_checkpoint(const std::string& path, MPI_Comm comm, const CheckpointMeta& meta,
                                      const std::vector<CheckpointTensor>& layout,
                                      const std::vector<CheckpointVectorOut>& vectors, std::int64_t lo,
                                      std::int64_t hi, const std::function<void()>& pause, IoDeadline* deadline) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  SHARDTRAIN_CHECK(0 <= lo && lo <= hi && hi <= meta.padded_size, "checkpoint shard out of range");
  CheckpointWriteStats stats;
  for (const auto& v : vectors) stats.bytes += static_cast<std::uint64_t>(meta.padded_size) * dtype_size(v.type);
  const auto t0 = Clock::now();
  // 1. create: rank 0 lays the file out with HDF5, in memory -- the header,
  //    every state dataset allocated (its offset is then fixed), the views; no
  //    state data -- and writes that layout into the file.
  LayoutImage image;
  checkpoint_phase(comm, deadline, "create", path, true, [&] {
    image = build_layout_image(meta, layout, vectors);
    write_layout(path, image);
  });
  std::vector<std::int64_t> offsets = image.data_offsets;
  offsets.resize(vectors.size(), -1);
  if (!offsets.empty())
    MPI_Bcast(offsets.data(), static_cast<int>(offsets.size()), MPI_INT64_T, 0, comm);
  // 2. write: each rank writes its hyperslab's bytes where HDF5 put the
  //    dataset (plain pwrite: no HDF5, no MPI), with its CRC piece.
  std::vector<CrcPiece> pieces(vectors.size());
  checkpoint_phase(comm, deadline, "write", path, false,
                   [&] { write_at_offsets(path, vectors, offsets, lo, hi, pieces); });
  if (pause) pause();  // the test hook: every rank's data is written, the checksums are not
  // 3. checksums: rank 0 writes each vector's CRC, from every rank's pieces.
  const std::vector<CrcPiece> whole = combine_pieces(comm, pieces);
  checkpoint_phase(comm, deadline, "checksums", path, true, [&] {
    std::vector<std::uint32_t> crcs;
    for (const CrcPiece& c : whole) crcs.push_back(c.crc);
    write_checksums(path, image, crcs);
  });
  stats.write_s = seconds_since(t0);
  // 4. fsync: every rank (on a parallel file system each client flushes its own writes).
  const auto t1 = Clock::now();
  checkpoint_phase(comm, deadline, "fsync", path, false, [&] { fsync_checkpoint(path); });
  stats.sync_s = seconds_since(t1);
  return stats;
}

// ----------------------------------------------------------------------- read

struct CheckpointReader::Impl {
  std::string path;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  H5File file;
  CheckpointMeta meta;
  std::vector<CheckpointTensor> layout;
  std::vector<std::pair<std::string, DType>> vectors;
  std::map<std::string, std::uint32_t, std::less<>> stored_crc;  // by dataset path
  std::map<std::string, CrcPiece, std::less<>> read_pieces;      // vectors read, this rank's piece

  [[noreturn]] void fail(const std::string& msg) const { bad_input(path, msg); }

  void read_meta() {
    const std::string where = "root group";
    const std::string format = get_str(path, file, where, "format");
    if (format != kCheckpointFormat)
      fail("not a shardtrain checkpoint (format attribute is '" + format + "', expected '" +
           std::string(kCheckpointFormat) + "')");
    const std::int64_t schema = get_i64(path, file, where, "schema_version", 0, kMaxElements);
    if (schema != kCheckpointSchema)
      fail("checkpoint schema version " + std::to_string(schema) + "; this build reads version " +
           std::to_string(kCheckpointSchema));
    auto& m = meta;
    m.step = get_i64(path, file, where, "step", 0, kMaxElements);
    m.samples_seen = get_i64(path, file, where, "samples_seen", 0, std::numeric_limits<std::int64_t>::max());
    m.tokens_seen = get_i64(path, file, where, "tokens_seen", 0, std::numeric_limits<std::int64_t>::max());
    m.optimizer_updates = get_i64(path, file, where, "optimizer_updates", 0, m.step);
    m.sampler_seed = static_cast<std::uint64_t>(
        get_i64(path, file, where, "sampler_seed", std::numeric_limits<std::int64_t>::min(),
                std::numeric_limits<std::int64_t>::max()));
    m.world_size = get_i64(path, file, where, "world_size", 1, kMaxWorld);
    m.zero_stage = get_i64(path, file, where, "zero_stage", 0, 3);
    m.precision = get_str(path, file, where, "precision");
    if (m.precision != "fp32" && m.precision != "fp16" && m.precision != "bf16")
      fail("root attribute 'precision' is '" + m.precision + "', expected fp32, fp16 or bf16");
    m.alignment = get_i64(path, file, where, "alignment", 1, kMaxAlignment);
    m.padded_size = get_i64(path, file, where, "padded_size", 1, kMaxElements);
    m.loss_scale = get_f64(path, file, where, "loss_scale");
    if (!(m.loss_scale > 0) || !(m.loss_scale <= 3.4e38))
      fail("root attribute 'loss_scale' must be a positive finite float, got " + std::to_string(m.loss_scale));
    m.scaler_good_steps = get_i64(path, file, where, "scaler_good_steps", 0, kMaxElements);
    m.scaler_hysteresis_left = get_i64(path, file, where, "scaler_hysteresis_left", 0, 1000000);
    m.scaler_consecutive_skips = get_i64(path, file, where, "scaler_consecutive_skips", 0, kMaxElements);
    m.data_path = get_str(path, file, where, "data_path");
    m.data_train_tokens = get_i64(path, file, where, "data_train_tokens", 0, kMaxElements);
    m.data_vocab_size = get_i64(path, file, where, "data_vocab_size", 0, std::int64_t{1} << 24);
    m.seq_len = get_i64(path, file, where, "seq_len", 0, std::int64_t{1} << 30);
    m.created_utc = get_str(path, file, where, "created_utc");
    m.version = get_str(path, file, where, "shardtrain_version");
    // Both absent in files written before lineages and the root CRC were
    // recorded: such a file reads as before (no parent, no root CRC).
    if (H5Aexists(file, "parent") > 0) m.parent = get_str(path, file, where, "parent");
    m.meta_crc_present = H5Aexists(file, "meta_crc32") > 0;
    (void)error_stack_text();
    if (m.meta_crc_present) {
      const auto stored = static_cast<std::uint32_t>(get_i64(path, file, where, "meta_crc32", 0, 0xFFFFFFFFll));
      const std::uint32_t computed = checkpoint_meta_crc(m);
      if (stored != computed)
        fail("root attributes: checksum mismatch (stored meta_crc32 " + std::to_string(stored) +
             ", the attributes give " + std::to_string(computed) + "): the file is damaged");
    }
  }

  H5Dataset open_dataset(const char* name, const std::string& what) const {
    const htri_t exists = H5Lexists(file, name, H5P_DEFAULT);
    if (exists <= 0) fail("missing dataset " + what + " (not a complete shardtrain checkpoint)");
    H5Dataset ds(H5Dopen2(file, name, H5P_DEFAULT));
    if (!ds.valid()) fail(what + " is not a dataset");
    return ds;
  }

  // Refuses storage that would make HDF5 allocate from the file's claims (chunks
  // above kMaxChunkBytes) or read other files (virtual or external storage).
  // Contiguous (what write_checkpoint makes), compact and small chunks pass.
  void check_storage(hid_t ds, const std::string& what, std::size_t elem_bytes) const {
    H5PropList dcpl(H5Dget_create_plist(ds));
    if (!dcpl.valid()) fail(what + ": storage properties cannot be read");
    const std::string problem = storage_problem(dcpl, elem_bytes, kMaxChunkBytes);
    if (!problem.empty()) fail(what + " " + problem);
  }

  std::uint32_t crc_attr(hid_t ds, const std::string& what) const {
    const std::int64_t v = get_i64(path, ds, what, "crc32", 0, 0xFFFFFFFFll);
    return static_cast<std::uint32_t>(v);
  }

  void read_config() {
    H5Dataset ds = open_dataset("/config", "/config");
    H5Datatype t(H5Dget_type(ds));
    H5Dataspace s(H5Dget_space(ds));
    if (!t.valid() || !s.valid() || H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) != 0 ||
        H5Sget_simple_extent_type(s) != H5S_SCALAR)
      fail("/config must be a scalar fixed-length string");
    const std::size_t size = H5Tget_size(t);
    if (size == 0 || size > kMaxConfigBytes)
      fail("/config is " + std::to_string(size) + " bytes (at most " + std::to_string(kMaxConfigBytes) + ")");
    check_storage(ds, "/config", size);
    const H5T_cset_t cset = H5Tget_cset(t);  // strings convert only within one character set
    if (cset != H5T_CSET_ASCII && cset != H5T_CSET_UTF8) fail("/config has an unknown character set");
    H5Datatype mt(SHARDTRAIN_H5_CHECK(H5Tcopy(H5T_C_S1)));
    SHARDTRAIN_H5_CHECK(H5Tset_size(mt, size));
    SHARDTRAIN_H5_CHECK(H5Tset_strpad(mt, H5T_STR_NULLPAD));
    SHARDTRAIN_H5_CHECK(H5Tset_cset(mt, cset));
    std::string text(size, '\0');
    H5PropList dxpl = xfer(false);
    if (H5Dread(ds, mt, H5S_ALL, H5S_ALL, dxpl, text.data()) < 0) fail("/config cannot be read");
    text.resize(std::strlen(text.c_str()));
    if (crc_of(text.data(), text.size()) != crc_attr(ds, "/config"))
      fail("dataset /config: checksum mismatch (the file is damaged)");
    meta.config_text = std::move(text);
  }

  void read_layout() {
    H5Dataset ds = open_dataset("/layout", "/layout");
    H5Datatype ft(H5Dget_type(ds));
    H5Dataspace s(H5Dget_space(ds));
    if (!ft.valid() || !s.valid() || H5Tget_class(ft) != H5T_COMPOUND || H5Sget_simple_extent_ndims(s) != 1)
      fail("/layout must be a 1-D compound dataset (name, ndim, offset, numel, shape)");
    hsize_t n = 0;
    SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_dims(s, &n, nullptr));
    if (n < 1 || n > static_cast<hsize_t>(kMaxTensors))
      fail("/layout has " + std::to_string(n) + " rows (expected 1 to " + std::to_string(kMaxTensors) + ")");
    const int name_index = H5Tget_member_index(ft, "name");
    if (name_index < 0) fail("/layout has no member 'name'");
    H5Datatype name_type(H5Tget_member_type(ft, static_cast<unsigned>(name_index)));
    if (!name_type.valid() || H5Tget_class(name_type) != H5T_STRING || H5Tis_variable_str(name_type) != 0 ||
        H5Tget_size(name_type) == 0 || H5Tget_size(name_type) > kMaxNameBytes)
      fail("/layout member 'name' must be a fixed-length string of at most " + std::to_string(kMaxNameBytes) +
           " bytes");
    LayoutType lt;
    lt.name_bytes = (H5Tget_size(name_type) + 7) / 8 * 8;
    lt.cset = H5Tget_cset(name_type);
    if (lt.cset != H5T_CSET_ASCII && lt.cset != H5T_CSET_UTF8) fail("/layout member 'name' has an unknown character set");
    // The CRC covers the rows in the packed form the writer used (name padded to
    // 8 bytes); a table stored in any other form is not one this format wrote.
    // Checked BEFORE the read: HDF5 sizes its conversion buffers from the file's
    // row type, which a hostile file can make hundreds of MiB.
    if (H5Tget_size(ft) != lt.row_bytes())
      fail("/layout rows are " + std::to_string(H5Tget_size(ft)) + " bytes, expected " +
           std::to_string(lt.row_bytes()) + " (name, ndim, offset, numel, shape[4] packed)");
    check_storage(ds, "/layout", lt.row_bytes());
    H5Datatype mt = lt.type();
    std::vector<unsigned char> rows(static_cast<std::size_t>(n) * lt.row_bytes(), 0);
    H5PropList dxpl = xfer(false);
    if (H5Dread(ds, mt, H5S_ALL, H5S_ALL, dxpl, rows.data()) < 0)
      fail("/layout cannot be read as (name, ndim, offset, numel, shape[4]): " + error_stack_text());
    if (crc_of(rows.data(), rows.size()) != crc_attr(ds, "/layout"))
      fail("dataset /layout: checksum mismatch (the file is damaged)");
    std::set<std::string> names;
    std::int64_t end = 0;
    for (hsize_t i = 0; i < n; ++i) {
      const unsigned char* r = rows.data() + i * lt.row_bytes();
      CheckpointTensor e;
      e.name.assign(reinterpret_cast<const char*>(r), strnlen(reinterpret_cast<const char*>(r), lt.name_bytes));
      std::int64_t nums[kRowNumbers];
      std::memcpy(nums, r + lt.name_bytes, sizeof nums);
      const std::string row = "/layout row " + std::to_string(i) + " ('" + e.name + "')";
      if (e.name.empty() || !names.insert(e.name).second) fail(row + ": empty or repeated tensor name");
      if (nums[0] < 0 || nums[0] > kMaxDims) fail(row + ": ndim must be 0 to 4");
      e.offset = nums[1];
      e.numel = nums[2];
      std::int64_t prod = 1;
      for (std::int64_t d = 0; d < nums[0]; ++d) {
        const std::int64_t dim = nums[3 + d];
        if (dim < 0 || dim > kMaxElements || (dim > 0 && prod > kMaxElements / dim))
          fail(row + ": shape dimension out of range");
        prod *= dim;
        e.shape.push_back(dim);
      }
      if (prod != e.numel) fail(row + ": numel " + std::to_string(e.numel) + " is not the product of its shape");
      if (e.offset < end || e.offset > kMaxElements || e.numel > kMaxElements - e.offset)
        fail(row + ": offset " + std::to_string(e.offset) + " overlaps the previous tensor or is out of range");
      end = e.offset + e.numel;
      layout.push_back(std::move(e));
    }
    if (end > meta.padded_size)
      fail("/layout ends at element " + std::to_string(end) + ", beyond padded_size " +
           std::to_string(meta.padded_size));
  }

  void read_vectors() {
    for (const SavedVector& saved : kSavedVectors) {
      const std::string name(saved.name);
      const std::string p = "/state/" + name;
      if (H5Lexists(file, "/state", H5P_DEFAULT) <= 0) fail("missing group /state (not a complete shardtrain checkpoint)");
      if (H5Lexists(file, p.c_str(), H5P_DEFAULT) <= 0) continue;
      H5Dataset ds(H5Dopen2(file, p.c_str(), H5P_DEFAULT));
      if (!ds.valid()) fail(p + " is not a dataset");
      H5Datatype t(H5Dget_type(ds));
      H5Dataspace s(H5Dget_space(ds));
      const auto type = t.valid() ? type_of(t) : std::nullopt;
      if (!type) fail(p + " must hold little-endian float32, float16 or bfloat16 values");
      if (*type != saved.type)
        fail(p + " has element type " + std::string(numpy_name(*type)) + ", which does not fit its name");
      hsize_t len = 0;
      if (!s.valid() || H5Sget_simple_extent_ndims(s) != 1 || H5Sget_simple_extent_dims(s, &len, nullptr) < 0)
        fail(p + " must be 1-D");
      if (static_cast<std::int64_t>(len) != meta.padded_size)
        fail(p + " has " + std::to_string(len) + " elements; padded_size says " + std::to_string(meta.padded_size) +
             " (truncated or foreign file)");
      check_storage(ds, p, dtype_size(*type));
      stored_crc[p] = crc_attr(ds, p);
      vectors.emplace_back(name, *type);
    }
    for (const SavedVector& saved : kSavedVectors)
      if (saved.required && stored_crc.count("/state/" + std::string(saved.name)) == 0)
        fail("missing dataset /state/" + std::string(saved.name) + " (not a complete shardtrain checkpoint)");
  }

  DType type_of_vector(std::string_view name) const {
    for (const auto& [n, t] : vectors)
      if (n == name) return t;
    fail("no state vector '" + std::string(name) + "'");
  }

  // Reads [lo, hi) of /state/name (clipped to the file) into dst; adds to the CRC piece.
  void read_part(std::string_view name, std::int64_t lo, std::int64_t hi, unsigned char* dst, bool collective,
                 CrcPiece* crc) {
    const std::string p = "/state/" + std::string(name);
    const DType type = type_of_vector(name);
    H5Dataset ds(SHARDTRAIN_H5_CHECK(H5Dopen2(file, p.c_str(), H5P_DEFAULT)));
    H5Datatype t = make_type(type);
    H5Dataspace fs(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
    select_range(fs, lo, hi);
    H5Dataspace ms = memory_space(std::max<std::int64_t>(hi - lo, 0));
    H5PropList dxpl = xfer(collective);
    if (H5Dread(ds, t, ms, fs, dxpl, dst) < 0) fail(p + ": read failed: " + error_stack_text());
    if (crc && hi > lo) crc->add(dst, static_cast<std::uint64_t>(hi - lo) * dtype_size(type));
  }
};

CheckpointReader::CheckpointReader(const std::string& path, MPI_Comm comm) : m(std::make_unique<Impl>()) {
  quiet_errors();
  m->path = path;
  m->comm = comm;
  MPI_Comm_rank(comm, &m->rank);
  MPI_Comm_size(comm, &m->size);
  H5PropList fapl = mpio_fapl(comm);
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) bad_input(path, "cannot open checkpoint: " + std::string(std::strerror(errno)));
    std::fclose(f);
    bad_input(path, "not an HDF5 file, or damaged or truncated (HDF5 cannot open it)");
  }
  m->file = H5File(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
  if (!m->file.valid()) bad_input(path, "cannot open as HDF5 (damaged or truncated?): " + error_stack_text());
  m->read_meta();
  m->read_config();
  m->read_layout();
  m->read_vectors();
}

CheckpointReader::~CheckpointReader() = default;

const std::string& CheckpointReader::path() const { return m->path; }
const CheckpointMeta& CheckpointReader::meta() const { return m->meta; }
const std::vector<CheckpointTensor>& CheckpointReader::layout() const { return m->layout; }
const std::vector<std::pair<std::string, DType>>& CheckpointReader::vectors() const { return m->vectors; }
bool CheckpointReader::has_vector(std::string_view name) const {
  for (const auto& v : m->vectors)
    if (v.first == name) return true;
  return false;
}

void CheckpointReader::read_vector(std::string_view name, std::int64_t lo, std::int64_t hi, void* dst) {
  SHARDTRAIN_CHECK(0 <= lo && lo <= hi, "bad checkpoint read range");
  const std::int64_t len = m->meta.padded_size;
  const std::size_t eb = dtype_size(m->type_of_vector(name));
  auto* out = static_cast<unsigned char*>(dst);
  // File elements [a, b) are read; they start at dst[0] whenever there are any
  // (a == lo when lo < len). A rank whose range starts at or beyond the file's
  // end (N > len) reads nothing, and its zeros start at dst[0], not at b - lo < 0.
  const std::int64_t a = std::min(lo, len), b = std::min(hi, len);
  CrcPiece& crc = m->read_pieces[std::string(name)];
  m->read_part(name, a, b, out, true, &crc);
  const std::int64_t zeros_from = std::max(lo, b);
  if (hi > zeros_from)
    std::memset(out + static_cast<std::size_t>(zeros_from - lo) * eb, 0, static_cast<std::size_t>(hi - zeros_from) * eb);
  // The last rank also reads the file's tail beyond the new vector's end, in
  // bounded pieces, for the CRC alone. Everyone takes part in each collective read.
  std::int64_t tail_lo = m->rank == m->size - 1 ? std::max(hi, a) : len;
  std::int64_t rounds = m->rank == m->size - 1 ? (len - std::min(tail_lo, len) + kChunk - 1) / kChunk : 0;
  MPI_Allreduce(MPI_IN_PLACE, &rounds, 1, MPI_INT64_T, MPI_MAX, m->comm);
  std::vector<unsigned char> buf(rounds > 0 ? static_cast<std::size_t>(std::min(kChunk, len)) * eb : 0);
  for (std::int64_t i = 0; i < rounds; ++i) {
    const std::int64_t s = std::min(tail_lo, len), e = std::min(s + kChunk, len);
    m->read_part(name, s, e, buf.data(), true, &crc);
    tail_lo = e;
  }
}

void CheckpointReader::read_range(std::string_view name, std::int64_t lo, std::int64_t hi, void* dst) {
  SHARDTRAIN_CHECK(0 <= lo && lo <= hi && hi <= m->meta.padded_size, "bad checkpoint read range");
  m->read_part(name, lo, hi, static_cast<unsigned char*>(dst), false, nullptr);
}

void CheckpointReader::finish_reads() {
  std::vector<std::string> names;
  std::vector<CrcPiece> pieces;
  for (const auto& [name, piece] : m->read_pieces) {
    names.push_back(name);
    pieces.push_back(piece);
  }
  m->read_pieces.clear();
  const std::vector<CrcPiece> whole = combine_pieces(m->comm, pieces);
  std::string errors;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string p = "/state/" + names[i];
    const std::uint64_t want_bytes = static_cast<std::uint64_t>(m->meta.padded_size) *
                                     dtype_size(m->type_of_vector(names[i]));
    SHARDTRAIN_CHECK(whole[i].bytes == want_bytes, "checkpoint reads did not cover " + p);
    const std::uint32_t want = m->stored_crc.at(p);
    if (whole[i].crc != want)
      errors += (errors.empty() ? "" : "; ") +
                ("dataset " + p + ": checksum mismatch (stored crc32 " + std::to_string(want) + ", data has " +
                 std::to_string(whole[i].crc) + "): the file is damaged");
  }
  if (!errors.empty()) m->fail(errors);
}

std::vector<std::string> CheckpointReader::verify_all() {
  std::vector<std::string> lines{"/config  ok", "/layout  ok"};  // both checked when the file was opened
  const std::int64_t len = m->meta.padded_size;
  const auto [lo, hi] = [&] {
    const std::int64_t base = len / m->size, extra = len % m->size, r = m->rank;
    const std::int64_t l = r * base + std::min(r, extra);
    return std::pair{l, l + base + (r < extra ? 1 : 0)};
  }();
  std::vector<CrcPiece> pieces;
  std::vector<unsigned char> buf(static_cast<std::size_t>(std::min(kChunk, std::max<std::int64_t>(hi - lo, 1))) * 4);
  const std::int64_t rounds_mine = (hi - lo + kChunk - 1) / kChunk;
  std::int64_t rounds = rounds_mine;
  MPI_Allreduce(MPI_IN_PLACE, &rounds, 1, MPI_INT64_T, MPI_MAX, m->comm);
  for (const auto& [name, type] : m->vectors) {
    CrcPiece crc;
    for (std::int64_t i = 0; i < rounds; ++i) {
      const std::int64_t s = std::min(lo + i * kChunk, hi), e = std::min(s + kChunk, hi);
      m->read_part(name, s, e, buf.data(), true, &crc);
    }
    pieces.push_back(crc);
  }
  const std::vector<CrcPiece> whole = combine_pieces(m->comm, pieces);
  std::string errors;
  for (std::size_t i = 0; i < m->vectors.size(); ++i) {
    const std::string p = "/state/" + m->vectors[i].first;
    const std::uint32_t want = m->stored_crc.at(p);
    const bool ok = whole[i].crc == want;
    lines.push_back(p + (ok ? "  ok" : "  CHECKSUM MISMATCH") + "  crc32 stored " + std::to_string(want) +
                    ", computed " + std::to_string(whole[i].crc));
    if (!ok) errors += (errors.empty() ? "" : "; ") + ("dataset " + p + ": checksum mismatch");
  }
  if (!errors.empty()) m->fail(errors + ": the file is damaged");
  return lines;
}

std::int64_t CheckpointReader::data_offset(std::string_view dataset) const {
  const std::string p(dataset);
  if (H5Lexists(m->file, p.c_str(), H5P_DEFAULT) <= 0) return -1;
  H5Dataset ds(H5Dopen2(m->file, p.c_str(), H5P_DEFAULT));
  if (!ds.valid()) return -1;
  const haddr_t off = H5Dget_offset(ds);
  (void)error_stack_text();
  return off == HADDR_UNDEF ? -1 : static_cast<std::int64_t>(off);
}

}  // namespace shardtrain
