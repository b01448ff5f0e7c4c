// This file is long because the open phase validates every field the writer lays out, beside the reads it guards.
// Reads checkpoint files (share/doc/checkpoint-format.md) in agreed phases
// (io/checkpoint_phase.hpp read_phase), mirroring the writer:
//   open  rank 0 alone opens the file with HDF5's POSIX (sec2) driver and
//         validates it (root attributes and meta_crc32, /config and /layout
//         with their CRCs, every state vector's type, length, storage, stored
//         crc32 and, when contiguous, its data's byte offset), closes it and
//         broadcasts what it found -- or every rank throws the same error;
//   read  every rank preads its slice of a vector at the offset rank 0
//         validated, with its CRC piece (a vector stored otherwise -- small
//         chunks, as h5repack writes them -- is read through HDF5's sec2
//         driver on each rank instead).
// No MPI call runs inside a phase and `deadline` watches each one, so storage
// that stops answering on any rank ends the job (exit 1) naming the rank, the
// phase and the file, and a failing read (EIO) is a CheckpointIoError on every
// rank; a bad file stays the InputError it always was (resume = "auto" falls
// back on it). Why pread and not collective MPI-IO: share/doc/benchmarks.md
// ("Checkpoint reads"). The format's table and the limits are
// io/checkpoint_format.hpp, shared with the writer (checkpoint_write.cpp).
// Length (~650 lines): every check of a file-supplied value (rank 0's open) and
// both read paths share one Impl, the validated state the broadcast carries.
#include "io/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "core/error.hpp"
#include "core/state_vectors.hpp"
#include "io/checkpoint_format.hpp"
#include "io/checkpoint_phase.hpp"
#include "io/h5_check.hpp"
#include "io/h5_lock.hpp"
#include "io/h5_read.hpp"

namespace shardtrain {

using namespace shardtrain::ckpt;

namespace {

// What a missing attribute or dataset adds to its message.
constexpr const char* kIncomplete = " (not a complete shardtrain checkpoint)";

H5PropList sec2_fapl() { return sec2_read_fapl(); }  // io/h5_read.hpp: POSIX driver, no flock

// What rank 0 validated, as bytes for the broadcast (native layout: every rank
// runs the same binary on the same kind of machine).
struct Packer {
  std::string bytes;
  void i64(std::int64_t v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& v) {
    i64(static_cast<std::int64_t>(v.size()));
    bytes += v;
  }
};
struct Unpacker {
  const std::string& bytes;
  std::size_t at = 0;
  std::int64_t i64() {
    std::int64_t v = 0;
    SHARDTRAIN_CHECK(at + sizeof v <= bytes.size(), "checkpoint reader: short broadcast");
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = static_cast<std::size_t>(i64());
    SHARDTRAIN_CHECK(n <= bytes.size() - at, "checkpoint reader: short broadcast");
    std::string v = bytes.substr(at, n);
    at += n;
    return v;
  }
};

// visit_meta's visitor that packs (Write) or unpacks the root attributes.
template <bool Write>
struct MetaCodec {
  Packer* out;
  Unpacker* in;
  void i64(const char*, std::int64_t& v, std::int64_t, std::int64_t) { Write ? out->i64(v) : void(v = in->i64()); }
  void u64(const char*, std::uint64_t& v) {
    if constexpr (Write) out->i64(static_cast<std::int64_t>(v));
    else v = static_cast<std::uint64_t>(in->i64());
  }
  void f64(const char*, double& v, std::string (*)(double)) {
    std::int64_t bits = 0;
    if constexpr (Write) {
      std::memcpy(&bits, &v, sizeof v);
      out->i64(bits);
    } else {
      bits = in->i64();
      std::memcpy(&v, &bits, sizeof v);
    }
  }
  void str(const char*, std::string& v, std::string (*)(const std::string&)) { Write ? out->str(v) : void(v = in->str()); }
  void optional_str(const char*, std::string& v) { Write ? out->str(v) : void(v = in->str()); }
};

H5Dataspace memory_space(std::int64_t n) {
  const hsize_t dim = static_cast<hsize_t>(std::max<std::int64_t>(n, 1));
  H5Dataspace s(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &dim, nullptr)));
  if (n == 0) SHARDTRAIN_H5_CHECK(H5Sselect_none(s));
  return s;
}

}  // namespace

struct CheckpointReader::Impl {
  std::string path;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  IoDeadline* deadline = nullptr;
  H5File file;  // rank 0, inside the open phase only
  // What the open phase validated (the same on every rank after the broadcast).
  CheckpointMeta meta;
  std::vector<CheckpointTensor> layout;
  std::vector<std::pair<std::string, DType>> vectors;
  std::map<std::string, std::uint32_t, std::less<>> stored_crc;  // by dataset path
  // Byte offset of a dataset's data in the file (/config, /layout, /state/*),
  // -1 when it is not stored contiguous (read through HDF5 then).
  std::map<std::string, std::int64_t, std::less<>> offsets;
  std::map<std::string, CrcPiece, std::less<>> read_pieces;      // vectors read, this rank's piece
  int fd = -1;  // this rank's descriptor for the preads (opened by the first read)
  H5File h5;    // this rank's HDF5 handle, for a vector not stored contiguous

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (fd >= 0) ::close(fd);
    if (h5.valid()) {
      const auto hdf5 = lock_hdf5();
      h5 = H5File();
    }
  }

  [[noreturn]] void fail(const std::string& msg) const { bad_input(path, msg); }
  // A raw HDF5 call failed: a failed read in the system is the storage's
  // error (SystemIoError, with its errno); otherwise the file is bad, and the
  // message ends with HDF5's error stack.
  [[noreturn]] void fail_with_stack(const std::string& msg) const {
    const std::string stack = error_stack_text();
    if (const int err = read_errno(stack); err != 0)
      throw SystemIoError(path + ": " + msg + ": a read failed: " + std::strerror(err), err);
    bad_input(path, msg + (stack.empty() ? std::string() : ": " + stack));
  }
  // The byte offset of contiguous, unfiltered data with its storage allocated, else -1.
  std::int64_t contiguous_offset(hid_t ds) const {
    H5PropList dcpl(H5Dget_create_plist(ds));
    if (!dcpl.valid() || H5Pget_layout(dcpl) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl) != 0 ||
        H5Pget_external_count(dcpl) != 0) {
      (void)error_stack_text();
      return -1;
    }
    const haddr_t off = H5Dget_offset(ds);
    (void)error_stack_text();
    return off == HADDR_UNDEF ? -1 : static_cast<std::int64_t>(off);
  }

  void read_meta() {
    const std::string where = "root group";
    const std::string format = read_fixed_string_attr(path, file, where, "format", kIncomplete);
    if (format != kCheckpointFormat)
      fail("not a shardtrain checkpoint (format attribute is '" + format + "', expected '" +
           std::string(kCheckpointFormat) + "')");
    const std::int64_t schema = read_i64_attr(path, file, where, "schema_version", 0, kMaxElements, kIncomplete);
    if (schema != kCheckpointSchema)
      fail("checkpoint schema version " + std::to_string(schema) + "; this build reads version " +
           std::to_string(kCheckpointSchema));
    struct Get {
      const Impl& r;
      const std::string& where;
      void i64(const char* name, std::int64_t& v, std::int64_t lo, std::int64_t hi) {
        v = read_i64_attr(r.path, r.file, where, name, lo, hi, kIncomplete);
      }
      void u64(const char* name, std::uint64_t& v) {
        v = static_cast<std::uint64_t>(read_i64_attr(r.path, r.file, where, name,
                                                     std::numeric_limits<std::int64_t>::min(),
                                                     std::numeric_limits<std::int64_t>::max(), kIncomplete));
      }
      void f64(const char* name, double& v, std::string (*check)(double)) {
        v = read_f64_attr(r.path, r.file, where, name, kIncomplete);
        if (const std::string problem = check ? check(v) : std::string(); !problem.empty())
          r.fail("root attribute '" + std::string(name) + "' " + problem);
      }
      void str(const char* name, std::string& v, std::string (*check)(const std::string&)) {
        v = read_fixed_string_attr(r.path, r.file, where, name, kIncomplete);
        if (const std::string problem = check ? check(v) : std::string(); !problem.empty())
          r.fail("root attribute '" + std::string(name) + "' " + problem);
      }
      void optional_str(const char* name, std::string& v) {
        if (H5Aexists(r.file, name) > 0) v = read_fixed_string_attr(r.path, r.file, where, name, kIncomplete);
      }
    } get{*this, where};
    // `parent` and `meta_crc32` are absent in files written before lineages and
    // the root CRC were recorded: such a file reads as before (no parent, no root CRC).
    visit_meta(meta, get);
    auto& m = meta;
    m.meta_crc_present = H5Aexists(file, "meta_crc32") > 0;
    (void)error_stack_text();
    if (m.meta_crc_present) {
      const auto stored = static_cast<std::uint32_t>(read_i64_attr(path, file, where, "meta_crc32", 0, 0xFFFFFFFFll, kIncomplete));
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
    const std::int64_t v = read_i64_attr(path, ds, what, "crc32", 0, 0xFFFFFFFFll, kIncomplete);
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
    if (H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) < 0) fail_with_stack("/config cannot be read");
    text.resize(std::strlen(text.c_str()));
    if (crc_of(text.data(), text.size()) != crc_attr(ds, "/config"))
      fail("dataset /config: checksum mismatch (the file is damaged)");
    meta.config_text = std::move(text);
    offsets["/config"] = contiguous_offset(ds);
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
    if (H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0)
      fail_with_stack("/layout cannot be read as (name, ndim, offset, numel, shape[4])");
    if (crc_of(rows.data(), rows.size()) != crc_attr(ds, "/layout"))
      fail("dataset /layout: checksum mismatch (the file is damaged)");
    offsets["/layout"] = contiguous_offset(ds);
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
      const std::int64_t off = contiguous_offset(ds);
      if (off >= 0) {  // its bytes must lie inside the file: the preads read them
        const std::uint64_t end = static_cast<std::uint64_t>(off) + static_cast<std::uint64_t>(len) * dtype_size(*type);
        std::error_code ec;
        const std::uint64_t file_bytes = std::filesystem::file_size(path, ec);
        if (!ec && end > file_bytes)
          fail(p + ": its data ends at byte " + std::to_string(end) + ", beyond the file's " +
               std::to_string(file_bytes) + " bytes (truncated)");
      }
      offsets[p] = off;
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

  // Rank 0, inside the open phase: opens and validates the file, then closes it.
  void open_and_validate() {
    const auto hdf5 = lock_hdf5();  // HDF5 is not thread-safe (io/h5_lock.hpp)
    try {
      if (H5Fis_hdf5(path.c_str()) <= 0) {
        const std::string stack = error_stack_text();
        if (const int err = read_errno(stack); err != 0)
          throw SystemIoError(path + ": cannot read the HDF5 signature: " + std::strerror(err), err);
        std::FILE* f = std::fopen(path.c_str(), "rb");
        if (!f) bad_input(path, "cannot open checkpoint: " + std::string(std::strerror(errno)));
        std::fclose(f);
        bad_input(path, "not an HDF5 file, or damaged or truncated (HDF5 cannot open it)");
      }
      H5PropList fapl = sec2_fapl();
      file = H5File(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
      if (!file.valid()) fail_with_stack("cannot open as HDF5 (damaged or truncated?)");
      read_meta();
      read_config();
      read_layout();
      read_vectors();
    } catch (...) {
      file = H5File();
      throw;
    }
    file = H5File();
  }

  // Rank 0's findings to every rank (after the open phase: no rank failed).
  void share() {
    Packer out;
    Unpacker in{out.bytes};
    if (rank == 0) {
      MetaCodec<true> codec{&out, nullptr};
      visit_meta(meta, codec);
      out.str(meta.config_text);
      out.i64(meta.meta_crc_present ? 1 : 0);
      out.i64(static_cast<std::int64_t>(layout.size()));
      for (const auto& t : layout) {
        out.str(t.name);
        out.i64(t.offset);
        out.i64(t.numel);
        out.i64(static_cast<std::int64_t>(t.shape.size()));
        for (const auto d : t.shape) out.i64(d);
      }
      out.i64(static_cast<std::int64_t>(vectors.size()));
      for (const auto& [name, type] : vectors) {
        out.str(name);
        out.i64(static_cast<std::int64_t>(type));
      }
      out.i64(static_cast<std::int64_t>(stored_crc.size()));
      for (const auto& [p, crc] : stored_crc) {
        out.str(p);
        out.i64(crc);
      }
      out.i64(static_cast<std::int64_t>(offsets.size()));
      for (const auto& [p, off] : offsets) {
        out.str(p);
        out.i64(off);
      }
    }
    if (size == 1) return;
    long long n = static_cast<long long>(out.bytes.size());
    MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, comm);
    out.bytes.resize(static_cast<std::size_t>(n));
    for (long long at = 0; at < n;) {  // in pieces below INT_MAX
      const int piece = static_cast<int>(std::min<long long>(n - at, 1 << 30));
      MPI_Bcast(out.bytes.data() + at, piece, MPI_CHAR, 0, comm);
      at += piece;
    }
    if (rank == 0) return;
    MetaCodec<false> codec{nullptr, &in};
    visit_meta(meta, codec);
    meta.config_text = in.str();
    meta.meta_crc_present = in.i64() != 0;
    layout.resize(static_cast<std::size_t>(in.i64()));
    for (auto& t : layout) {
      t.name = in.str();
      t.offset = in.i64();
      t.numel = in.i64();
      t.shape.resize(static_cast<std::size_t>(in.i64()));
      for (auto& d : t.shape) d = in.i64();
    }
    const std::int64_t nv = in.i64();
    for (std::int64_t i = 0; i < nv; ++i) {
      std::string name = in.str();
      vectors.emplace_back(std::move(name), static_cast<DType>(in.i64()));
    }
    const std::int64_t nc = in.i64();
    for (std::int64_t i = 0; i < nc; ++i) {
      std::string p = in.str();
      stored_crc[p] = static_cast<std::uint32_t>(in.i64());
    }
    const std::int64_t no = in.i64();
    for (std::int64_t i = 0; i < no; ++i) {
      std::string p = in.str();
      offsets[p] = in.i64();
    }
  }

  // Reads elements [lo, hi) of /state/name (inside the file) into dst; adds to
  // the CRC piece. No MPI: runs inside a phase (or under read_range's watch).
  // Throws SystemIoError for a failing system call, InputError for a file
  // that ends inside the data.
  void read_part(std::string_view name, std::int64_t lo, std::int64_t hi, unsigned char* dst, CrcPiece* crc) {
    if (hi <= lo) return;
    const std::string p = "/state/" + std::string(name);
    const DType type = type_of_vector(name);
    const std::size_t eb = dtype_size(type);
    const std::int64_t off = offsets.at(p);
    if (off >= 0) {
      if (fd < 0) {
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
          const int err = errno;
          throw SystemIoError(path + ": cannot open for reading the state data: " + std::strerror(err), err);
        }
      }
      const std::uint64_t first = static_cast<std::uint64_t>(off) + static_cast<std::uint64_t>(lo) * eb;
      const std::uint64_t bytes = static_cast<std::uint64_t>(hi - lo) * eb;
      for (std::uint64_t done = 0; done < bytes;) {
        const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(bytes - done, 1u << 30));
        const ssize_t got = ::pread(fd, dst + done, want, static_cast<off_t>(first + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
          const int err = errno;
          throw SystemIoError(path + ": " + p + ": read of bytes [" + std::to_string(first + done) + ", " +
                                  std::to_string(first + bytes) + ") failed: " + std::strerror(err),
                              err);
        }
        if (got == 0)
          fail(p + ": the file ends at byte " + std::to_string(first + done) + ", inside its data (truncated)");
        done += static_cast<std::uint64_t>(got);
      }
    } else {  // not contiguous (small chunks, as h5repack writes them): through HDF5 on this rank
      const auto hdf5 = lock_hdf5();
      if (!h5.valid()) {
        H5PropList fapl = sec2_fapl();
        h5 = H5File(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
        if (!h5.valid()) fail_with_stack("cannot open as HDF5 (damaged or truncated?)");
      }
      H5Dataset ds(H5Dopen2(h5, p.c_str(), H5P_DEFAULT));
      if (!ds.valid()) fail_with_stack(p + " cannot be opened");
      H5Datatype t = make_type(type);
      H5Dataspace fs(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
      select_range(fs, lo, hi);
      H5Dataspace ms = memory_space(hi - lo);
      if (H5Dread(ds, t, ms, fs, H5P_DEFAULT, dst) < 0) fail_with_stack(p + ": read failed");
    }
    if (crc) crc->add(dst, static_cast<std::uint64_t>(hi - lo) * eb);
  }
};

CheckpointReader::CheckpointReader(const std::string& path, MPI_Comm comm, IoDeadline* deadline)
    : m(std::make_unique<Impl>()) {
  quiet_errors();
  m->path = path;
  m->comm = comm;
  m->deadline = deadline;
  MPI_Comm_rank(comm, &m->rank);
  MPI_Comm_size(comm, &m->size);
  read_phase(comm, deadline, "open", path, true, [&] { m->open_and_validate(); });
  m->share();
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
  read_phase(m->comm, m->deadline, "read", m->path, false, [&] {
    // File elements [a, b) are read; they start at dst[0] whenever there are any
    // (a == lo when lo < len). A rank whose range starts at or beyond the file's
    // end (N > len) reads nothing, and its zeros start at dst[0], not at b - lo < 0.
    const std::int64_t a = std::min(lo, len), b = std::min(hi, len);
    CrcPiece& crc = m->read_pieces[std::string(name)];
    m->read_part(name, a, b, out, &crc);
    const std::int64_t zeros_from = std::max(lo, b);
    if (hi > zeros_from)
      std::memset(out + static_cast<std::size_t>(zeros_from - lo) * eb, 0,
                  static_cast<std::size_t>(hi - zeros_from) * eb);
    // The last rank also reads the file's tail beyond the new vector's end, in
    // bounded pieces, for the CRC alone.
    if (m->rank == m->size - 1 && std::max(hi, a) < len) {
      std::vector<unsigned char> buf(static_cast<std::size_t>(std::min(kChunk, len)) * eb);
      for (std::int64_t s = std::max(hi, a); s < len; s += kChunk)
        m->read_part(name, s, std::min(s + kChunk, len), buf.data(), &crc);
    }
  });
}

void CheckpointReader::read_range(std::string_view name, std::int64_t lo, std::int64_t hi, void* dst) {
  SHARDTRAIN_CHECK(0 <= lo && lo <= hi && hi <= m->meta.padded_size, "bad checkpoint read range");
  // This rank alone (no agreement): the deadline watches the read itself.
  IoDeadline::Phase watch(m->deadline, "read", m->path);
  m->read_part(name, lo, hi, static_cast<unsigned char*>(dst), nullptr);
  watch.part_done("");
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
  std::vector<CrcPiece> pieces(m->vectors.size());
  read_phase(m->comm, m->deadline, "read", m->path, false, [&] {
    std::vector<unsigned char> buf(static_cast<std::size_t>(std::min(kChunk, std::max<std::int64_t>(hi - lo, 1))) * 4);
    for (std::size_t v = 0; v < m->vectors.size(); ++v)
      for (std::int64_t s = lo; s < hi; s += kChunk)
        m->read_part(m->vectors[v].first, s, std::min(s + kChunk, hi), buf.data(), &pieces[v]);
  });
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
  const auto it = m->offsets.find(dataset);
  return it == m->offsets.end() ? -1 : it->second;
}

}  // namespace shardtrain
