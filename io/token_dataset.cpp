// Reader for token data set files (share/doc/dataset-format.md).
// Validation order matters: every size that will drive an allocation (vocab
// entries, string lengths) is bounded before the allocation happens, and no
// arithmetic on file-supplied sizes can overflow.
#include "io/token_dataset.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

#include "core/error.hpp"
#include "io/checkpoint_phase.hpp"
#include "io/h5_check.hpp"
#include "io/h5_lock.hpp"
#include "io/h5_read.hpp"

namespace shardtrain {

std::string_view to_string(Split s) { return s == Split::Train ? "train" : "val"; }

namespace {

using namespace shardtrain::h5;

// Limits that separate a real data set from a corrupt or hostile one.
constexpr std::int64_t kMaxTokens = std::int64_t{1} << 48;       // per split
constexpr std::size_t kMaxVocabEntryBytes = 1024;                // fixed-length vocab strings
constexpr std::size_t kMaxVocabTotalBytes = std::size_t{256} << 20;  // all vocab text
// HDF5 reads a chunk through a buffer of the chunk's size when it cannot read
// the selection in place, so a chunk the file declares sizes HDF5's own
// buffers: bounded as the sample reader and the checkpoint reader bound it
// (the writer stores tokens contiguous; h5py's automatic chunks are <= 1 MiB).
constexpr std::uint64_t kMaxChunkBytes = std::uint64_t{64} << 20;

// Checks that `ds` is 1-D and returns its length (bounded by `max_len`).
std::int64_t one_d_length(hid_t ds, const std::string& name, std::int64_t max_len,
                          const std::string& path) {
  H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
  const H5S_class_t sc = H5Sget_simple_extent_type(space);
  const int rank = sc == H5S_SIMPLE ? SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_ndims(space)) : 0;
  if (sc != H5S_SIMPLE || rank != 1)
    bad_input(path, "dataset '" + name + "' must be 1-D, has rank " + std::to_string(rank));
  hsize_t dim = 0;
  SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_dims(space, &dim, nullptr));
  if (dim > static_cast<hsize_t>(max_len))
    bad_input(path, "dataset '" + name + "' has an implausible length " + std::to_string(dim) +
                        " (limit " + std::to_string(max_len) + ")");
  return static_cast<std::int64_t>(dim);
}

}  // namespace

struct TokenDataset::Impl {
  std::string path;
  H5File file;  // declared first: closed after the datasets below
  std::array<H5Dataset, 2> tokens;
  std::array<std::int64_t, 2> n_tokens{};
  H5PropList read_xfer;
  std::int64_t vocab_size = 0;
  TextTokenizer tokenizer = TextTokenizer::Char;
  std::string source;
  double val_fraction = 0;
  std::vector<std::string> vocab;

  void open();
  void check_metadata();
  void open_tokens(Split split);
  void read_vocab();
};

void TokenDataset::Impl::open() {
  file = open_for_read(path);
  read_xfer = read_transfer();
}

void TokenDataset::Impl::check_metadata() {
  check_format(file, path, "token data set", kFormat, kFormatVersion);

  const auto tok = read_string_attr(file, "tokenizer", path);
  if (!tok) bad_input(path, "missing attribute 'tokenizer'");
  const std::optional<TextTokenizer> named = enum_named<TextTokenizer>(*tok);
  if (!named) bad_input(path, "unknown tokenizer '" + *tok + "' (expected 'char', 'byte', 'gpt2', 'pretokenized' or 'wordpiece')");
  tokenizer = *named;

  vocab_size = require_int(file, "vocab_size", path, 1, kMaxVocabSize);
  if (tokenizer == TextTokenizer::Byte && vocab_size != 256)
    bad_input(path, "tokenizer 'byte' needs vocab_size 256, file says " + std::to_string(vocab_size));

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
    bad_input(path, "dataset '" + name + "' must hold integer token ids, holds " + class_name(cls));
  // Before any read: storage HDF5 would allocate from the file's claims (a huge
  // or filtered chunk), or that reads another file (external, virtual), is refused.
  H5PropList dcpl(SHARDTRAIN_H5_CHECK(H5Dget_create_plist(ds)));
  const std::string problem = storage_problem(dcpl, H5Tget_size(ft), kMaxChunkBytes);
  if (!problem.empty()) bad_input(path, "dataset '" + name + "' " + problem);
  const auto i = static_cast<std::size_t>(split);
  n_tokens[i] = one_d_length(ds, name, kMaxTokens, path);
  tokens[i] = std::move(ds);
}

void TokenDataset::Impl::read_vocab() {
  const std::string name = "/vocab";
  H5Dataset ds = open_dataset(file, name, path);
  const std::int64_t n = one_d_length(ds, name, kMaxVocabSize, path);
  // Pre-tokenized ids (trainer-data tokens) come without their strings: /vocab
  // may then be empty; vocab() is empty and vocab_size alone sizes the model.
  const bool stringless = tokenizer == TextTokenizer::Pretokenized && n == 0;
  if (n != vocab_size && !stringless)
    bad_input(path, "dataset '/vocab' has " + std::to_string(n) + " entries, vocab_size is " +
                        std::to_string(vocab_size) +
                        (tokenizer == TextTokenizer::Pretokenized ? " (tokenizer 'pretokenized' also allows 0)" : ""));
  H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Dget_type(ds)));
  const H5T_class_t cls = H5Tget_class(ft);
  if (cls != H5T_STRING)
    bad_input(path, "dataset '/vocab' must hold strings, holds " + class_name(cls));
  H5PropList dcpl(SHARDTRAIN_H5_CHECK(H5Dget_create_plist(ds)));
  const std::string problem = storage_problem(dcpl, H5Tget_size(ft), kMaxChunkBytes);
  if (!problem.empty()) bad_input(path, "dataset '/vocab' " + problem);
  if (stringless) return;
  vocab = read_strings(ds, ft, name, static_cast<std::size_t>(n), read_xfer,
                       {kMaxVocabEntryBytes, kMaxVocabTotalBytes, SIZE_MAX}, path);
}

TokenDataset::TokenDataset(const std::string& path, MPI_Comm comm, double io_timeout_s)
    : m_impl(std::make_unique<Impl>()) {
  h5::quiet_errors();
  m_impl->path = path;
  open_on_every_rank(path, comm, io_timeout_s, "TokenDataset", [&] {
    m_impl->open();
    m_impl->check_metadata();
    m_impl->open_tokens(Split::Train);
    m_impl->open_tokens(Split::Val);
    m_impl->read_vocab();
  });
}

TokenDataset::~TokenDataset() = default;
TokenDataset::TokenDataset(TokenDataset&&) noexcept = default;
TokenDataset& TokenDataset::operator=(TokenDataset&&) noexcept = default;

const std::string& TokenDataset::path() const { return m_impl->path; }
std::int64_t TokenDataset::vocab_size() const { return m_impl->vocab_size; }
TextTokenizer TokenDataset::tokenizer() const { return m_impl->tokenizer; }
const std::string& TokenDataset::source() const { return m_impl->source; }
double TokenDataset::val_fraction() const { return m_impl->val_fraction; }
std::int64_t TokenDataset::size(Split split) const {
  return m_impl->n_tokens[static_cast<std::size_t>(split)];
}
const std::vector<std::string>& TokenDataset::vocab() const { return m_impl->vocab; }

void TokenDataset::read_windows(Split split, std::span<const std::int64_t> starts, std::int64_t len,
                                TokenIndex* out) const {
  const auto hdf5 = lock_hdf5();  // a background checkpoint writer may be in HDF5 (io/h5_lock.hpp)
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
  SHARDTRAIN_H5_CHECK(H5Dread(ds, H5T_NATIVE_INT32, mem_space, file_space, im.read_xfer, buf.data()));

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
