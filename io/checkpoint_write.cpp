// Writes checkpoint files (share/doc/checkpoint-format.md) in agreed phases
// (io/checkpoint_phase.hpp): every rank's CRC pieces of its staged shard are
// combined first, so rank 0 lays the whole file out with HDF5 in memory --
// every attribute, the state vectors' crc32 values included, at their final
// values -- and copies it; every rank pwrites its hyperslab of the global state
// vectors at the offsets HDF5 chose; every rank fsyncs. Nothing HDF5 wrote is
// patched afterwards, so the file format (pinned by h5::set_format_bounds:
// version-2 object headers, which carry checksums) is HDF5's own business.
// The format's table and the limits are io/checkpoint_format.hpp, shared with
// the reader (checkpoint_read.cpp).
#include "io/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/durable_file.hpp"
#include "core/error.hpp"
#include "io/checkpoint_format.hpp"
#include "io/checkpoint_phase.hpp"
#include "io/h5_check.hpp"
#include "io/h5_lock.hpp"
#include "io/h5_write.hpp"

namespace shardtrain {

using namespace shardtrain::ckpt;
using Clock = std::chrono::steady_clock;

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
  {  // and read back as a resume reads (rank 0's HDF5 validation, every rank's pread)
    CheckpointReader reader(path, comm);
    (void)reader.verify_all();
  }
  MPI_Barrier(comm);  // every rank has closed the file
  if (rank == 0) std::remove(path.c_str());
}

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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

// This rank's CRC piece of every vector: elements [lo, hi) as they will be stored.
std::vector<CrcPiece> crc_pieces(const std::vector<CheckpointVectorOut>& vectors, std::int64_t lo, std::int64_t hi) {
  std::vector<CrcPiece> pieces(vectors.size());
  for (std::size_t i = 0; i < vectors.size(); ++i)
    pieces[i].add(vectors[i].data, static_cast<std::uint64_t>(hi - lo) * dtype_size(vectors[i].type));
  return pieces;
}

// Writes elements [lo, hi) of every vector at its dataset's byte offset in
// `path` with pwrite. Throws SystemIoError (with errno).
void write_at_offsets(const std::string& path, const std::vector<CheckpointVectorOut>& vectors,
                      const std::vector<std::int64_t>& offsets, std::int64_t lo, std::int64_t hi) {
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
// the state vectors and their views.
void write_header(hid_t file, const CheckpointMeta& meta, const std::vector<CheckpointTensor>& layout) {
  struct Put {
    hid_t obj;
    void i64(const char* name, std::int64_t v, std::int64_t, std::int64_t) { write_i64_attr(obj, name, v); }
    void u64(const char* name, std::uint64_t v) { write_i64_attr(obj, name, static_cast<std::int64_t>(v)); }
    void f64(const char* name, double v, std::string (*)(double)) { write_f64_attr(obj, name, v); }
    void str(const char* name, const std::string& v, std::string (*)(const std::string&)) {
      write_fixed_string_attr(obj, name, v, true);
    }
    void optional_str(const char* name, const std::string& v) { write_fixed_string_attr(obj, name, v, true); }
  } put{file};
  write_fixed_string_attr(file, "format", std::string(kCheckpointFormat), true);
  write_i64_attr(file, "schema_version", kCheckpointSchema);
  visit_meta(meta, put);
  write_u32_attr(file, "meta_crc32", checkpoint_meta_crc(meta));

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
    SHARDTRAIN_H5_CHECK(H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, padded.data()));
    write_u32_attr(ds, "crc32", crc_of(text.data(), text.size()));
  }
  // /layout: name, ndim, offset, numel, shape[4] per tensor.
  {
    LayoutType lt;
    const std::vector<unsigned char> rows = pack_layout(layout, lt);
    H5Datatype t = lt.type();
    const hsize_t n = layout.size();
    H5Dataspace s(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
    H5Dataset ds(SHARDTRAIN_H5_CHECK(H5Dcreate2(file, "layout", t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    SHARDTRAIN_H5_CHECK(H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()));
    write_u32_attr(ds, "crc32", crc_of(rows.data(), rows.size()));
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
// checkpoint file with its own pwrite. Every attribute is written with its
// final value (the state vectors' crc32s were combined before), so the image
// is a complete HDF5 file but for the state data, which lies in the holes.
struct LayoutImage {
  std::vector<std::pair<std::int64_t, std::vector<unsigned char>>> extents;  // (offset, bytes HDF5 wrote)
  std::int64_t size = 0;                      // the file's length (HDF5's end of file)
  std::vector<std::int64_t> data_offsets;     // per state vector: its dataset's data
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

// `crcs[i]` is the CRC-32 of vector i's whole stored bytes (every rank's pieces combined).
LayoutImage build_layout_image(const CheckpointMeta& meta, const std::vector<CheckpointTensor>& layout,
                               const std::vector<CheckpointVectorOut>& vectors,
                               const std::vector<std::uint32_t>& crcs) {
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
    set_format_bounds(fapl);  // the format the reader and h5py expect (io/h5_write.hpp)
    // Large datasets start on 1 MiB boundaries (file-system stripes and blocks).
    SHARDTRAIN_H5_CHECK(H5Pset_alignment(fapl, 1 << 20, 1 << 20));
    SHARDTRAIN_H5_CHECK(H5Pset_file_locking(fapl, false, true));
    H5File file(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    if (!file.valid()) SHARDTRAIN_FAIL("cannot lay out the checkpoint in memory: " + error_stack_text());
    write_header(file, meta, layout);
    H5Group state(SHARDTRAIN_H5_CHECK(H5Gcreate2(file, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    for (std::size_t i = 0; i < vectors.size(); ++i) {
      H5Dataset ds = create_state_dataset(state, vectors[i].name, vectors[i].type, meta.padded_size);
      const haddr_t off = H5Dget_offset(ds);
      SHARDTRAIN_CHECK(off != HADDR_UNDEF, "/state/" + vectors[i].name + " has no file offset");
      image.data_offsets.push_back(static_cast<std::int64_t>(off));
      write_u32_attr(ds, "crc32", crcs[i]);
    }
    create_param_views(file, layout, meta.padded_size);
    SHARDTRAIN_H5_CLOSE(state);
    SHARDTRAIN_H5_CLOSE(file);
  }
  struct stat st {};
  SHARDTRAIN_CHECK(::fstat(mem, &st) == 0, "cannot stat the checkpoint layout in memory");
  image.size = static_cast<std::int64_t>(st.st_size);
  image.extents = data_extents(mem, image.size);
  return image;
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

}  // namespace

CheckpointWriteStats write_checkpoint(const std::string& path, MPI_Comm comm, const CheckpointMeta& meta,
                                      const std::vector<CheckpointTensor>& layout,
                                      const std::vector<CheckpointVectorOut>& vectors, std::int64_t lo,
                                      std::int64_t hi, const std::function<void()>& pause, IoDeadline* deadline) {
  SHARDTRAIN_CHECK(0 <= lo && lo <= hi && hi <= meta.padded_size, "checkpoint shard out of range");
  CheckpointWriteStats stats;
  for (const auto& v : vectors) stats.bytes += static_cast<std::uint64_t>(meta.padded_size) * dtype_size(v.type);
  const auto t0 = Clock::now();
  // 0. The CRC-32 of every vector, before anything is written: each rank's
  //    piece of its staged shard, combined in rank order (collective, no I/O).
  std::vector<std::uint32_t> crcs;
  for (const CrcPiece& c : combine_pieces(comm, crc_pieces(vectors, lo, hi))) crcs.push_back(c.crc);
  // 1. create: rank 0 lays the file out with HDF5, in memory -- the header,
  //    every state dataset allocated (its offset is then fixed) with its
  //    crc32, the views; no state data -- and writes that layout into the file.
  LayoutImage image;
  checkpoint_phase(comm, deadline, "create", path, true, [&] {
    image = build_layout_image(meta, layout, vectors, crcs);
    write_layout(path, image);
  });
  std::vector<std::int64_t> offsets = image.data_offsets;
  offsets.resize(vectors.size(), -1);
  if (!offsets.empty())
    MPI_Bcast(offsets.data(), static_cast<int>(offsets.size()), MPI_INT64_T, 0, comm);
  // 2. write: each rank writes its hyperslab's bytes where HDF5 put the
  //    dataset (plain pwrite: no HDF5, no MPI).
  checkpoint_phase(comm, deadline, "write", path, false,
                   [&] { write_at_offsets(path, vectors, offsets, lo, hi); });
  if (pause) pause();  // the test hook: the file is complete (checksums included), not yet fsynced
  stats.write_s = seconds_since(t0);
  // 3. fsync: every rank (on a parallel file system each client flushes its own writes).
  const auto t1 = Clock::now();
  checkpoint_phase(comm, deadline, "fsync", path, false, [&] { fsync_checkpoint(path); });
  stats.sync_s = seconds_since(t1);
  return stats;
}

}  // namespace shardtrain
