// Reader for token data set files (share/doc/dataset-format.md).
// Validation order matters: every size that will drive an allocation (vocab
// entries, string lengths) is bounded before the allocation happens, and no
// arithmetic on file-supplied sizes can overflow.
#include "io/token_dataset.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

#include "core/error.hpp"
#include "io/h5_check.hpp"

namespace shardtrain {

std::string_view to_string(Split s) { return s == Split::Train ? "train" : "val"; }

namespace {

using namespace shardtrain::h5;

// Limits that separate a real data set from a corrupt or hostile one.
constexpr std::int64_t kMaxTokens = std::int64_t{1} << 48;       // per split
constexpr std::size_t kMaxAttrStringBytes = 4096;                // one string attribute
constexpr std::size_t kMaxVocabEntryBytes = 1024;                // fixed-length vocab strings
constexpr std::size_t kMaxVocabTotalBytes = std::size_t{256} << 20;  // all vocab text

[[noreturn]] void bad(const std::string& path, const std::string& msg) {
  (void)error_stack_text();  // drop whatever HDF5 recorded for a raw call we expected to fail
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

// A string-typed memory type matching `file_type`'s character set: variable-length
// if the file's is, otherwise fixed with room for a terminating NUL.
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

// Opens attribute `name` of the root group if it exists; checks it holds one value.
std::optional<H5Attribute> open_scalar_attr(hid_t file, const char* name, const std::string& path) {
  if (SHARDTRAIN_H5_CHECK(H5Aexists(file, name)) <= 0) return std::nullopt;
  H5Attribute attr(SHARDTRAIN_H5_CHECK(H5Aopen(file, name, H5P_DEFAULT)));
  H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Aget_space(attr)));
  const H5S_class_t sc = H5Sget_simple_extent_type(space);
  const hssize_t npoints = SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_npoints(space));
  if (sc == H5S_NULL || npoints != 1)
    bad(path, std::string("attribute '") + name + "' must hold a single value");
  return attr;
}

std::optional<std::string> read_string_attr(hid_t file, const char* name, const std::string& path) {
  auto attr = open_scalar_attr(file, name, path);
  if (!attr) return std::nullopt;
  H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Aget_type(*attr)));
  const H5T_class_t cls = H5Tget_class(ft);
  if (cls != H5T_STRING)
    bad(path, std::string("attribute '") + name + "' must be a string, is " + class_name(cls));
  const bool variable = SHARDTRAIN_H5_CHECK(H5Tis_variable_str(ft)) > 0;
  if (variable) {
    H5Datatype mt = string_mem_type(ft, true, 0);
    char* text = nullptr;
    SHARDTRAIN_H5_CHECK(H5Aread(*attr, mt, &text));
    std::string out = text ? std::string(text, strnlen(text, kMaxAttrStringBytes)) : std::string();
    if (text) H5free_memory(text);
    return out;
  }
  const std::size_t size = H5Tget_size(ft);
  if (size == 0 || size > kMaxAttrStringBytes)
    bad(path, std::string("attribute '") + name + "' has an implausible string size " +
                  std::to_string(size));
  H5Datatype mt = string_mem_type(ft, false, size);
  std::string buf(size + 1, '\0');
  SHARDTRAIN_H5_CHECK(H5Aread(*attr, mt, buf.data()));
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

std::optional<std::int64_t> read_int_attr(hid_t file, const char* name, const std::string& path) {
  auto attr = open_scalar_attr(file, name, path);
  if (!attr) return std::nullopt;
  H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Aget_type(*attr)));
  const H5T_class_t cls = H5Tget_class(ft);
  if (cls != H5T_INTEGER)
    bad(path, std::string("attribute '") + name + "' must be an integer, is " + class_name(cls));
  std::int64_t v = 0;  // HDF5 clips out-of-range values to the int64 range
  SHARDTRAIN_H5_CHECK(H5Aread(*attr, H5T_NATIVE_INT64, &v));
  return v;
}

std::optional<double> read_float_attr(hid_t file, const char* name, const std::string& path) {
  auto attr = open_scalar_attr(file, name, path);
  if (!attr) return std::nullopt;
  H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Aget_type(*attr)));
  const H5T_class_t cls = H5Tget_class(ft);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER)
    bad(path, std::string("attribute '") + name + "' must be a number, is " + class_name(cls));
  double v = 0;
  SHARDTRAIN_H5_CHECK(H5Aread(*attr, H5T_NATIVE_DOUBLE, &v));
  return v;
}

// Opens the dataset at absolute path `name` ("/train/tokens"), or fails with
// "missing dataset" naming it. Every path component is checked in turn because
// H5Lexists fails (rather than answering false) on a missing intermediate group.
H5Dataset open_dataset(hid_t file, const std::string& name, const std::string& path) {
  std::string prefix;
  std::size_t pos = 1;
  while (pos <= name.size()) {
    const std::size_t next = std::min(name.find('/', pos), name.size());
    prefix = name.substr(0, next);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0)
      bad(path, "missing dataset '" + name + "'");
    pos = next + 1;
  }
  // H5Oopen + H5Iget_type rather than H5Oget_info*, whose signature differs
  // between HDF5 1.10 and 1.12+.
  const hid_t obj = H5Oopen(file, name.c_str(), H5P_DEFAULT);
  if (obj < 0) bad(path, "cannot open '" + name + "': " + error_stack_text());
  const H5I_type_t type = H5Iget_type(obj);
  if (type != H5I_DATASET) {
    (void)H5Oclose(obj);
    bad(path, "'" + name + "' is not a dataset");
  }
  return H5Dataset(obj);  // an object id of a dataset is a dataset id
}

// Checks that `ds` is 1-D and returns its length (bounded by `max_len`).
std::int64_t one_d_length(hid_t ds, const std::string& name, std::int64_t max_len,
                          const std::string& path) {
  H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
  const H5S_class_t sc = H5Sget_simple_extent_type(space);
  const int rank = sc == H5S_SIMPLE ? SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_ndims(space)) : 0;
  if (sc != H5S_SIMPLE || rank != 1)
    bad(path, "dataset '" + name + "' must be 1-D, has rank " + std::to_string(rank));
  hsize_t dim = 0;
  SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_dims(space, &dim, nullptr));
  if (dim > static_cast<hsize_t>(max_len))
    bad(path, "dataset '" + name + "' has an implausible length " + std::to_string(dim) +
                  " (limit " + std::to_string(max_len) + ")");
  return static_cast<std::int64_t>(dim);
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

struct TokenDataset::Impl {
  std::string path;
  H5File file;  // declared first: closed after the datasets below
  std::array<H5Dataset, 2> tokens;
  std::array<std::int64_t, 2> n_tokens{};
  H5PropList independent_xfer;
  std::int64_t vocab_size = 0;
  std::string tokenizer;
  std::string source;
  double val_fraction = 0;
  std::vector<std::string> vocab;

  void open(MPI_Comm comm);
  void check_metadata();
  void open_tokens(Split split);
  void read_vocab();
};

namespace {
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
  (void)error_stack_text();
  if (is_h5 <= 0) return "not an HDF5 file";
  return {};
}
}  // namespace

void TokenDataset::Impl::open(MPI_Comm comm) {
  int mpi_ready = 0;
  MPI_Initialized(&mpi_ready);
  SHARDTRAIN_CHECK(mpi_ready, "TokenDataset needs MPI to be initialised");

  // H5Fopen below is collective: agree first that every rank can open the file,
  // so a rank that cannot does not leave the others waiting.
  const std::string problem = precheck_file(path);
  int ok = problem.empty() ? 1 : 0, all_ok = 0;
  SHARDTRAIN_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm) == MPI_SUCCESS,
                   "MPI_Allreduce failed");
  if (!ok) bad(path, problem);
  if (!all_ok) bad(path, "not readable on every rank (another rank could not open it)");

  H5PropList fapl(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  SHARDTRAIN_H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  if (id < 0) bad(path, "cannot open as HDF5: " + error_stack_text());
  file = H5File(id);

  independent_xfer = H5PropList(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  SHARDTRAIN_H5_CHECK(H5Pset_dxpl_mpio(independent_xfer, H5FD_MPIO_INDEPENDENT));
}

void TokenDataset::Impl::check_metadata() {
  const auto format = read_string_attr(file, "format", path);
  if (!format) bad(path, "not a shardtrain token data set (no 'format' attribute)");
  if (*format != kFormat)
    bad(path, "not a shardtrain token data set (format is '" + *format + "', expected '" +
                  std::string(kFormat) + "')");
  const auto version = read_int_attr(file, "format_version", path);
  if (!version) bad(path, "missing attribute 'format_version'");
  if (*version != kFormatVersion)
    bad(path, "unsupported format_version " + std::to_string(*version) + " (this build reads " +
                  std::to_string(kFormatVersion) + ")");

  const auto tok = read_string_attr(file, "tokenizer", path);
  if (!tok) bad(path, "missing attribute 'tokenizer'");
  if (*tok != "char" && *tok != "byte")
    bad(path, "unknown tokenizer '" + *tok + "' (expected 'char' or 'byte')");
  tokenizer = *tok;

  const auto vs = read_int_attr(file, "vocab_size", path);
  if (!vs) bad(path, "missing attribute 'vocab_size'");
  if (*vs < 1 || *vs > kMaxVocabSize)
    bad(path, "vocab_size " + std::to_string(*vs) + " out of range [1, " +
                  std::to_string(kMaxVocabSize) + "]");
  vocab_size = *vs;
  if (tokenizer == "byte" && vocab_size != 256)
    bad(path, "tokenizer 'byte' needs vocab_size 256, file says " + std::to_string(vocab_size));

  source = read_string_attr(file, "source", path).value_or("");
  val_fraction = read_float_attr(file, "val_fraction", path).value_or(0.0);
}

void TokenDataset::Impl::open_tokens(Split split) {
  std::string name("/");  // built with += : GCC 12 warns falsely on "/" + std::string (PR 105329)
  name += to_string(split);
  name += "/tokens";
  H5Dataset ds = open_dataset(file, name, path);
  H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Dget_type(ds)));
  const H5T_class_t cls = H5Tget_class(ft);
  if (cls != H5T_INTEGER)
    bad(path, "dataset '" + name + "' must hold integer token ids, holds " + class_name(cls));
  const auto i = static_cast<std::size_t>(split);
  n_tokens[i] = one_d_length(ds, name, kMaxTokens, path);
  tokens[i] = std::move(ds);
}

void TokenDataset::Impl::read_vocab() {
  const std::string name = "/vocab";
  H5Dataset ds = open_dataset(file, name, path);
  const std::int64_t n = one_d_length(ds, name, kMaxVocabSize, path);
  if (n != vocab_size)
    bad(path, "dataset '/vocab' has " + std::to_string(n) + " entries, vocab_size is " +
                  std::to_string(vocab_size));
  H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Dget_type(ds)));
  const H5T_class_t cls = H5Tget_class(ft);
  if (cls != H5T_STRING)
    bad(path, "dataset '/vocab' must hold strings, holds " + class_name(cls));
  H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
  const bool variable = SHARDTRAIN_H5_CHECK(H5Tis_variable_str(ft)) > 0;
  const auto count = static_cast<std::size_t>(n);
  vocab.reserve(count);
  if (variable) {
    // HDF5 allocates each string itself. A budgeted allocator bounds the total
    // before it is allocated (entries may all point at one huge heap object), and
    // is far cheaper than H5Dvlen_get_buf_size (2 s for 70k strings in 1.10).
    H5Datatype mt = string_mem_type(ft, true, 0);
    VlenBudget budget{kMaxVocabTotalBytes};
    H5PropList xfer(SHARDTRAIN_H5_CHECK(H5Pcopy(independent_xfer)));
    SHARDTRAIN_H5_CHECK(H5Pset_vlen_mem_manager(xfer, VlenBudget::alloc, &budget, VlenBudget::release, &budget));
    std::vector<char*> ptrs(count, nullptr);
    const herr_t rc = H5Dread(ds, mt, H5S_ALL, H5S_ALL, xfer, ptrs.data());
    if (rc >= 0)
      for (char* p : ptrs) vocab.emplace_back(p ? p : "");
    (void)H5Dvlen_reclaim(mt, space, xfer, ptrs.data());
    if (budget.exceeded)
      bad(path, "dataset '/vocab' holds more than " + std::to_string(kMaxVocabTotalBytes) +
                    " bytes of text");
    if (rc < 0) bad(path, "cannot read dataset '/vocab': " + error_stack_text());
  } else {
    const std::size_t size = H5Tget_size(ft);
    if (size == 0 || size > kMaxVocabEntryBytes || (size + 1) * count > kMaxVocabTotalBytes)
      bad(path, "dataset '/vocab' has an implausible string size " + std::to_string(size));
    H5Datatype mt = string_mem_type(ft, false, size);
    std::vector<char> buf((size + 1) * count, '\0');
    SHARDTRAIN_H5_CHECK(H5Dread(ds, mt, H5S_ALL, H5S_ALL, independent_xfer, buf.data()));
    for (std::size_t i = 0; i < count; ++i) {
      const char* p = buf.data() + i * (size + 1);
      vocab.emplace_back(p, strnlen(p, size));
    }
  }
}

TokenDataset::TokenDataset(const std::string& path, MPI_Comm comm) : m_impl(std::make_unique<Impl>()) {
  h5::quiet_errors();
  m_impl->path = path;
  m_impl->open(comm);
  m_impl->check_metadata();
  m_impl->open_tokens(Split::Train);
  m_impl->open_tokens(Split::Val);
  m_impl->read_vocab();
}

TokenDataset::~TokenDataset() = default;
TokenDataset::TokenDataset(TokenDataset&&) noexcept = default;
TokenDataset& TokenDataset::operator=(TokenDataset&&) noexcept = default;

const std::string& TokenDataset::path() const { return m_impl->path; }
std::int64_t TokenDataset::vocab_size() const { return m_impl->vocab_size; }
const std::string& TokenDataset::tokenizer() const { return m_impl->tokenizer; }
const std::string& TokenDataset::source() const { return m_impl->source; }
double TokenDataset::val_fraction() const { return m_impl->val_fraction; }
std::int64_t TokenDataset::size(Split split) const {
  return m_impl->n_tokens[static_cast<std::size_t>(split)];
}
const std::vector<std::string>& TokenDataset::vocab() const { return m_impl->vocab; }

void TokenDataset::read_windows(Split split, std::span<const std::int64_t> starts, std::int64_t len,
                                TokenIndex* out) const {
  const Impl& im = *m_impl;
  const auto si = static_cast<std::size_t>(split);
  const std::int64_t n = im.n_tokens[si];
  const hid_t ds = im.tokens[si];
  SHARDTRAIN_CHECK(len >= 0 && len <= n, "window length " + std::to_string(len) +
                                             " does not fit a split of " + std::to_string(n) + " tokens");
  for (const std::int64_t s : starts)
    SHARDTRAIN_CHECK(s >= 0 && s <= n - len,
                     "window [" + std::to_string(s) + ", " + std::to_string(s) + "+" + std::to_string(len) +
                         ") outside " + std::string(to_string(split)) + " split of " + std::to_string(n) +
                         " tokens");
  const auto count = static_cast<std::int64_t>(starts.size());
  SHARDTRAIN_CHECK(len == 0 || count <= std::numeric_limits<std::int64_t>::max() / len,
                   "window count x length overflows");
  SHARDTRAIN_CHECK(count == 0 || len == 0 || out != nullptr, "null output buffer");

  // The union of the windows as sorted, disjoint intervals [lo, hi). HDF5 hands
  // the elements of a hyperslab union back in file order, so this is exactly the
  // order of the read buffer; `offset[k]` is where interval k starts in it.
  std::vector<std::int64_t> sorted(starts.begin(), starts.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::vector<std::int64_t> lo, hi, offset;
  std::int64_t total = 0;
  if (len > 0) {
    for (const std::int64_t s : sorted) {
      if (!hi.empty() && s <= hi.back()) {
        const std::int64_t grow = s + len - hi.back();
        if (grow > 0) hi.back() += grow, total += grow;
      } else {
        lo.push_back(s), hi.push_back(s + len), offset.push_back(total);
        total += len;
      }
    }
  }

  H5Dataspace file_space(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
  const hsize_t mem_dim = static_cast<hsize_t>(std::max<std::int64_t>(total, 1));
  H5Dataspace mem_space(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &mem_dim, nullptr)));
  std::vector<TokenIndex> buf(static_cast<std::size_t>(mem_dim));
  if (lo.empty()) {
    // Nothing to read on this rank: still issue the (empty) read, so the call
    // stays valid if the transfer is ever switched to collective.
    SHARDTRAIN_H5_CHECK(H5Sselect_none(file_space));
    SHARDTRAIN_H5_CHECK(H5Sselect_none(mem_space));
  } else {
    for (std::size_t k = 0; k < lo.size(); ++k) {
      const hsize_t start = static_cast<hsize_t>(lo[k]);
      const hsize_t block = static_cast<hsize_t>(hi[k] - lo[k]);
      const hsize_t one = 1;
      SHARDTRAIN_H5_CHECK(H5Sselect_hyperslab(file_space, k == 0 ? H5S_SELECT_SET : H5S_SELECT_OR,
                                              &start, nullptr, &one, &block));
    }
  }
  static_assert(sizeof(TokenIndex) == 4, "memory type below is int32");
  SHARDTRAIN_H5_CHECK(H5Dread(ds, H5T_NATIVE_INT32, mem_space, file_space, im.independent_xfer, buf.data()));

  for (std::size_t k = 0; k < lo.size(); ++k) {
    for (std::int64_t j = 0; j < hi[k] - lo[k]; ++j) {
      const TokenIndex t = buf[static_cast<std::size_t>(offset[k] + j)];
      if (t < 0 || t >= im.vocab_size)
        throw InputError(im.path + ": /" + std::string(to_string(split)) + "/tokens[" +
                         std::to_string(lo[k] + j) + "]: token id " + std::to_string(t) +
                         " out of range [0, " + std::to_string(im.vocab_size) + ")");
    }
  }

  // Scatter back into the caller's order.
  for (std::int64_t i = 0; i < count && len > 0; ++i) {
    const std::int64_t s = starts[static_cast<std::size_t>(i)];
    const auto k = static_cast<std::size_t>(std::upper_bound(lo.begin(), lo.end(), s) - lo.begin()) - 1;
    std::memcpy(out + i * len, buf.data() + offset[k] + (s - lo[k]),
                static_cast<std::size_t>(len) * sizeof(TokenIndex));
  }
}

}  // namespace shardtrain
