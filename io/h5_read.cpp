// The read-side checks shared by io/'s data set readers (see h5_read.hpp).
// Validation order matters: every size that will drive an allocation is bounded
// before the allocation happens, and no arithmetic on file-supplied sizes can overflow.
#include "io/h5_read.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>

#include "core/error.hpp"
#include "io/checkpoint_phase.hpp"

namespace shardtrain::h5 {

namespace {

constexpr std::size_t kMaxAttrStringBytes = 4096;  // one string attribute

// Returns "" if `path` looks like a readable HDF5 file on this rank, else the reason.
std::string precheck_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) return "no such file";
  if (std::filesystem::is_directory(st)) return "is a directory, not a data set file";
  {
    std::ifstream f(path, std::ios::binary);
    if (!f) return std::string("cannot open for reading: ") + std::strerror(errno);
  }
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  const std::string stack = error_stack_text();
  if (const int err = read_errno(stack); err != 0)  // failing storage, not a foreign file
    throw SystemIoError(path + ": cannot read the HDF5 signature: " + std::strerror(err), err);
  if (is_h5 <= 0) return "not an HDF5 file";
  return {};
}

// Opens root attribute `name` if it exists; checks it holds exactly one value
// (`scalar`) or is a 1-D array, and returns it with its point count.
std::optional<H5Attribute> open_attr(hid_t file, const char* name, const std::string& path, bool scalar,
                                     hssize_t* points) {
  if (SHARDTRAIN_H5_CHECK(H5Aexists(file, name)) <= 0) return std::nullopt;
  H5Attribute attr(SHARDTRAIN_H5_CHECK(H5Aopen(file, name, H5P_DEFAULT)));
  H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Aget_space(attr)));
  const H5S_class_t sc = H5Sget_simple_extent_type(space);
  const hssize_t npoints = SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_npoints(space));
  if (scalar && (sc == H5S_NULL || npoints != 1))
    bad_input(path, std::string("attribute '") + name + "' must hold a single value");
  if (!scalar) {
    const int rank = sc == H5S_SIMPLE ? SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_ndims(space)) : -1;
    if (rank != 1) bad_input(path, std::string("attribute '") + name + "' must be a 1-D array");
  }
  if (points) *points = npoints;
  return attr;
}

// Scalar root attribute `name` (if it exists) with its file type, whose class must
// be one of `classes` ("attribute 'NAME' must be WHAT, is CLASS").
struct TypedAttr {
  H5Attribute attr;
  H5Datatype type;
};
std::optional<TypedAttr> open_typed_attr(hid_t file, const char* name, const std::string& path,
                                         std::initializer_list<H5T_class_t> classes, const char* what) {
  auto attr = open_attr(file, name, path, true, nullptr);
  if (!attr) return std::nullopt;
  H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Aget_type(*attr)));
  const H5T_class_t cls = H5Tget_class(ft);
  if (std::find(classes.begin(), classes.end(), cls) == classes.end())
    bad_input(path, std::string("attribute '") + name + "' must be " + what + ", is " + class_name(cls));
  return TypedAttr{std::move(*attr), std::move(ft)};
}

// Allocator for HDF5's variable-length reads that refuses to go past a budget.
struct VlenBudget {
  std::size_t limit;
  std::size_t used = 0;
  bool exceeded = false;
  static void* alloc(std::size_t size, void* info) {
    auto* b = static_cast<VlenBudget*>(info);
    if (size > b->limit - b->used) {
      b->exceeded = true;
      return nullptr;
    }
    b->used += size;
    return std::malloc(size);
  }
  static void release(void* p, void* /*info*/) { std::free(p); }
};

}  // namespace

int read_errno(const std::string& stack) {
  // HDF5's POSIX drivers: "file read failed: ..., errno = 5, error message = '...'":
  // the last "errno = N" between a "read failed" and the ';' after it.
  constexpr std::string_view from = "read failed", key = "errno = ";
  for (std::size_t k = stack.find(from); k != std::string::npos; k = stack.find(from, k + 1)) {
    const std::size_t stop = std::min(stack.find(';', k), stack.size());
    for (std::size_t e = stack.rfind(key, stop); e != std::string::npos && e >= k + from.size();
         e = stack.rfind(key, e - 1)) {
      const std::size_t d = e + key.size();
      if (d < stop && stack[d] >= '0' && stack[d] <= '9') return std::atoi(stack.c_str() + d);
    }
  }
  return 0;
}

[[noreturn]] void bad_input(const std::string& path, const std::string& msg) {
  // Drops whatever HDF5 recorded for a raw call we expected to fail; a read
  // that failed in the system (EIO) is the storage's fault, not the file's.
  const std::string stack = error_stack_text();
  if (const int err = read_errno(stack); err != 0)
    throw SystemIoError(path + ": " + msg + ": a read failed: " + std::strerror(err), err);
  throw InputError(path + ": " + msg);
}

std::string class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length sequence";
    case H5T_ARRAY: return "array";
    default: return "unknown";
  }
}

H5Datatype string_mem_type(hid_t file_type, bool variable, std::size_t fixed_size) {
  H5Datatype mt(SHARDTRAIN_H5_CHECK(H5Tcopy(H5T_C_S1)));
  if (variable) {
    SHARDTRAIN_H5_CHECK(H5Tset_size(mt, H5T_VARIABLE));
  } else {
    SHARDTRAIN_H5_CHECK(H5Tset_size(mt, fixed_size + 1));
    SHARDTRAIN_H5_CHECK(H5Tset_strpad(mt, H5T_STR_NULLTERM));
  }
  SHARDTRAIN_H5_CHECK(H5Tset_cset(mt, SHARDTRAIN_H5_CHECK(H5Tget_cset(file_type))));
  return mt;
}

H5PropList sec2_read_fapl() {
  H5PropList fapl(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  SHARDTRAIN_H5_CHECK(H5Pset_fapl_sec2(fapl));
#if H5_VERSION_GE(1, 10, 7)
  // No flock: nothing here writes through HDF5 while it is read, and a
  // parallel file system mounted without flock support (Lustre's default)
  // would make every open fail; the MPI-IO driver used before took no lock.
  SHARDTRAIN_H5_CHECK(H5Pset_file_locking(fapl, false, true));
#endif
  return fapl;
}

H5File open_for_read(const std::string& path) {
  const std::string problem = precheck_file(path);
  if (!problem.empty()) bad_input(path, problem);
  H5PropList fapl = sec2_read_fapl();
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  if (id < 0) {
    const std::string stack = error_stack_text();
    if (const int err = read_errno(stack); err != 0)
      throw SystemIoError(path + ": cannot open as HDF5: a read failed: " + std::strerror(err), err);
    bad_input(path, "cannot open as HDF5: " + stack);
  }
  return H5File(id);
}

H5PropList read_transfer() { return H5PropList(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_DATASET_XFER))); }

void open_on_every_rank(const std::string& path, MPI_Comm comm, double io_timeout_s, const char* what,
                        const std::function<void()>& open) {
  int mpi_ready = 0, rank = 0;
  MPI_Initialized(&mpi_ready);
  SHARDTRAIN_CHECK(mpi_ready, std::string(what) + " needs MPI to be initialised");
  MPI_Comm_rank(comm, &rank);
  IoDeadline deadline(io_timeout_s, rank, "data set I/O");
  read_phase(comm, &deadline, "open", path, false, open);
}

std::optional<H5Attribute> open_array_attr(hid_t file, const char* name, const std::string& path,
                                           hssize_t& points) {
  return open_attr(file, name, path, false, &points);
}

std::optional<std::string> read_string_attr(hid_t file, const char* name, const std::string& path) {
  auto typed = open_typed_attr(file, name, path, {H5T_STRING}, "a string");
  if (!typed) return std::nullopt;
  const H5Attribute& attr = typed->attr;
  const H5Datatype& ft = typed->type;
  if (SHARDTRAIN_H5_CHECK(H5Tis_variable_str(ft)) > 0) {
    H5Datatype mt = string_mem_type(ft, true, 0);
    char* text = nullptr;
    SHARDTRAIN_H5_CHECK(H5Aread(attr, mt, &text));
    std::string out = text ? std::string(text, strnlen(text, kMaxAttrStringBytes)) : std::string();
    if (text) H5free_memory(text);
    return out;
  }
  const std::size_t size = H5Tget_size(ft);
  if (size == 0 || size > kMaxAttrStringBytes)
    bad_input(path,
              std::string("attribute '") + name + "' has an implausible string size " + std::to_string(size));
  H5Datatype mt = string_mem_type(ft, false, size);
  std::string buf(size + 1, '\0');
  SHARDTRAIN_H5_CHECK(H5Aread(attr, mt, buf.data()));
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

std::optional<std::int64_t> read_int_attr(hid_t file, const char* name, const std::string& path) {
  const auto typed = open_typed_attr(file, name, path, {H5T_INTEGER}, "an integer");
  if (!typed) return std::nullopt;
  std::int64_t v = 0;  // HDF5 clips out-of-range values to the int64 range
  SHARDTRAIN_H5_CHECK(H5Aread(typed->attr, H5T_NATIVE_INT64, &v));
  return v;
}

std::optional<double> read_float_attr(hid_t file, const char* name, const std::string& path) {
  const auto typed = open_typed_attr(file, name, path, {H5T_FLOAT, H5T_INTEGER}, "a number");
  if (!typed) return std::nullopt;
  double v = 0;
  SHARDTRAIN_H5_CHECK(H5Aread(typed->attr, H5T_NATIVE_DOUBLE, &v));
  return v;
}

namespace {

// Opens attribute `name` of `obj` and checks it is a scalar of `cls`.
H5Attribute open_scalar_attr(const std::string& path, hid_t obj, const std::string& where, const char* name,
                             H5T_class_t cls, const char* what, const char* missing_hint) {
  const htri_t exists = H5Aexists(obj, name);
  if (exists <= 0) bad_input(path, where + " has no attribute '" + name + "'" + missing_hint);
  H5Attribute a(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a.valid()) bad_input(path, where + " attribute '" + name + "' cannot be opened");
  H5Dataspace s(H5Aget_space(a));
  H5Datatype t(H5Aget_type(a));
  if (!s.valid() || !t.valid() || H5Sget_simple_extent_type(s) != H5S_SCALAR || H5Tget_class(t) != cls)
    bad_input(path, where + " attribute '" + name + "' must be a scalar " + what);
  return a;
}

}  // namespace

std::int64_t read_i64_attr(const std::string& path, hid_t obj, const std::string& where, const char* name,
                           std::int64_t lo, std::int64_t hi, const char* missing_hint) {
  H5Attribute a = open_scalar_attr(path, obj, where, name, H5T_INTEGER, "integer", missing_hint);
  std::int64_t v = 0;
  if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0) bad_input(path, where + " attribute '" + name + "' cannot be read");
  if (v < lo || v > hi)
    bad_input(path, where + " attribute '" + name + "' = " + std::to_string(v) + " is outside [" +
                        std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

double read_f64_attr(const std::string& path, hid_t obj, const std::string& where, const char* name,
                     const char* missing_hint) {
  H5Attribute a = open_scalar_attr(path, obj, where, name, H5T_FLOAT, "float", missing_hint);
  double v = 0;
  if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0) bad_input(path, where + " attribute '" + name + "' cannot be read");
  return v;
}

std::string read_fixed_string_attr(const std::string& path, hid_t obj, const std::string& where,
                                   const char* name, const char* missing_hint) {
  H5Attribute a = open_scalar_attr(path, obj, where, name, H5T_STRING, "string", missing_hint);
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

void check_format(hid_t file, const std::string& path, const std::string& what, std::string_view format,
                  std::int64_t version) {
  const auto found = read_string_attr(file, "format", path);
  if (!found) bad_input(path, "not a shardtrain " + what + " (no 'format' attribute)");
  if (*found != format)
    bad_input(path, "not a shardtrain " + what + " (format is '" + *found + "', expected '" + std::string(format) +
                        "')");
  const auto found_version = read_int_attr(file, "format_version", path);
  if (!found_version) bad_input(path, "missing attribute 'format_version'");
  if (*found_version != version)
    bad_input(path, "unsupported format_version " + std::to_string(*found_version) + " (this build reads " +
                        std::to_string(version) + ")");
}

std::int64_t require_int(hid_t file, const char* name, const std::string& path, std::int64_t lo,
                         std::int64_t hi) {
  const auto v = read_int_attr(file, name, path);
  if (!v) bad_input(path, std::string("missing attribute '") + name + "'");
  if (*v < lo || *v > hi)
    bad_input(path, std::string(name) + " " + std::to_string(*v) + " out of range [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "]");
  return *v;
}

H5Dataset open_dataset(hid_t file, const std::string& name, const std::string& path) {
  std::size_t pos = 1;
  while (pos <= name.size()) {
    const std::size_t next = std::min(name.find('/', pos), name.size());
    if (H5Lexists(file, name.substr(0, next).c_str(), H5P_DEFAULT) <= 0)
      bad_input(path, "missing dataset '" + name + "'");
    pos = next + 1;
  }
  // H5Oopen + H5Iget_type rather than H5Oget_info*, whose signature differs
  // between HDF5 1.10 and 1.12+.
  const hid_t obj = H5Oopen(file, name.c_str(), H5P_DEFAULT);
  if (obj < 0) bad_input(path, "cannot open '" + name + "': " + error_stack_text());
  if (H5Iget_type(obj) != H5I_DATASET) {
    (void)H5Oclose(obj);
    bad_input(path, "'" + name + "' is not a dataset");
  }
  return H5Dataset(obj);  // an object id of a dataset is a dataset id
}

std::string storage_problem(hid_t dcpl, std::size_t elem_bytes, std::uint64_t max_chunk_bytes) {
  const H5D_layout_t storage = H5Pget_layout(dcpl);
  if (storage == H5D_CHUNKED) {
    hsize_t chunk[H5S_MAX_RANK] = {};
    const int nd = H5Pget_chunk(dcpl, H5S_MAX_RANK, chunk);
    std::uint64_t bytes = std::max<std::uint64_t>(elem_bytes, 1);
    for (int d = 0; d < nd; ++d)
      bytes = chunk[d] > max_chunk_bytes / bytes ? max_chunk_bytes + 1 : bytes * chunk[d];
    if (nd < 1 || bytes > max_chunk_bytes)
      return "is stored in chunks of more than " + std::to_string(max_chunk_bytes) + " bytes";
  } else if (storage != H5D_CONTIGUOUS && storage != H5D_COMPACT) {
    return "must be stored contiguous, compact or chunked (virtual storage is refused)";
  }
  if (H5Pget_external_count(dcpl) != 0) return "keeps its data in external files";
  // shardtrain's writers (io/*_writer.cpp, io/h5_write.cpp, io/checkpoint_write.cpp)
  // use no filter: a filter makes HDF5 inflate a whole chunk to read any part
  // of it (and some run code from plugins), so none is read.
  const int filters = H5Pget_nfilters(dcpl);
  if (filters < 0) return "has storage properties HDF5 cannot read";
  if (filters > 0) {
    std::string names;
    for (int i = 0; i < filters; ++i) {
      unsigned flags = 0, config = 0;
      std::size_t n_values = 0;
      char name[64] = {};
      const H5Z_filter_t id =
          H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &n_values, nullptr, sizeof name, name, &config);
      names += (i ? ", " : "") + std::string(name[0] ? name : "unnamed") + " (id " + std::to_string(id) + ")";
    }
    return "is stored with HDF5 filter(s) " + names +
           "; shardtrain reads unfiltered data only (rewrite it with `h5repack -f NONE IN OUT`)";
  }
  return {};
}

std::vector<std::string> read_strings(hid_t ds, hid_t file_type, const std::string& name, std::size_t count,
                                      hid_t xfer, const StringLimits& limits, const std::string& path) {
  H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
  std::vector<std::string> out;
  out.reserve(count);
  if (SHARDTRAIN_H5_CHECK(H5Tis_variable_str(file_type)) > 0) {
    H5Datatype mt = string_mem_type(file_type, true, 0);
    VlenBudget budget{limits.total_bytes};
    H5PropList budget_xfer(SHARDTRAIN_H5_CHECK(H5Pcopy(xfer)));
    SHARDTRAIN_H5_CHECK(
        H5Pset_vlen_mem_manager(budget_xfer, VlenBudget::alloc, &budget, VlenBudget::release, &budget));
    std::vector<char*> ptrs(count, nullptr);
    const herr_t rc = H5Dread(ds, mt, H5S_ALL, H5S_ALL, budget_xfer, ptrs.data());
    if (rc >= 0)
      for (char* p : ptrs) out.emplace_back(p ? std::string(p, strnlen(p, limits.variable_entry_bytes)) : "");
    (void)H5Dvlen_reclaim(mt, space, budget_xfer, ptrs.data());
    if (budget.exceeded)
      bad_input(path, "dataset '" + name + "' holds more than " + std::to_string(limits.total_bytes) +
                          " bytes of text");
    if (rc < 0) bad_input(path, "cannot read dataset '" + name + "': " + error_stack_text());
  } else {
    const std::size_t size = H5Tget_size(file_type);
    if (size == 0 || size > limits.entry_bytes || (size + 1) * count > limits.total_bytes)
      bad_input(path, "dataset '" + name + "' has an implausible string size " + std::to_string(size));
    H5Datatype mt = string_mem_type(file_type, false, size);
    std::vector<char> buf((size + 1) * count, '\0');
    SHARDTRAIN_H5_CHECK(H5Dread(ds, mt, H5S_ALL, H5S_ALL, xfer, buf.data()));
    for (std::size_t i = 0; i < count; ++i) {
      const char* p = buf.data() + i * (size + 1);
      out.emplace_back(p, strnlen(p, size));
    }
  }
  return out;
}

}  // namespace shardtrain::h5
