// Reader for labelled-sample data set files (share/doc/dataset-format.md).
// Validation order matters: every size that will drive an allocation (the
// sample_shape attribute, /classes, chunk sizes HDF5 will buffer) is bounded
// before the allocation happens, and no arithmetic on file-supplied sizes can
// overflow (rows <= 2^32, sample elements <= 2^24).
// The attribute, dataset and string helpers it shares with io/token_dataset.cpp
// live in io/h5_read.hpp. Both ways of serving rows (read from the file, or from
// the copy hold_in_memory made) share the value checks' messages and the pixel
// table, so they report and return the same things.
#include "io/sample_dataset.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "core/error.hpp"
#include "io/checkpoint_phase.hpp"
#include "io/h5_check.hpp"
#include "io/h5_lock.hpp"
#include "io/h5_read.hpp"

namespace shardtrain {

namespace {

using namespace shardtrain::h5;

constexpr std::size_t kMaxClassesTotalBytes = std::size_t{64} << 20;
// HDF5 allocates a whole chunk to read any element of it (and inflates it if
// filtered), so a chunk the file declares sizes HDF5's own buffers.
constexpr std::uint64_t kMaxChunkBytes = std::uint64_t{64} << 20;

// The dataset's dimensions; its rank must be `rank`.
std::vector<std::int64_t> dims_of(hid_t ds, const std::string& name, int rank, const std::string& path) {
  H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
  const H5S_class_t sc = H5Sget_simple_extent_type(space);
  const int r = sc == H5S_SIMPLE ? SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_ndims(space)) : 0;
  if (sc != H5S_SIMPLE || r != rank)
    bad_input(path, "dataset '" + name + "' must have rank " + std::to_string(rank) + ", has rank " +
                        std::to_string(r));
  std::array<hsize_t, H5S_MAX_RANK> d{};
  SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_dims(space, d.data(), nullptr));
  std::vector<std::int64_t> out;
  for (int i = 0; i < rank; ++i) {
    if (d[static_cast<std::size_t>(i)] > static_cast<hsize_t>(kMaxSamples))
      bad_input(path, "dataset '" + name + "' has an implausible dimension " +
                          std::to_string(d[static_cast<std::size_t>(i)]) + " (limit " + std::to_string(kMaxSamples) +
                          ")");
    out.push_back(static_cast<std::int64_t>(d[static_cast<std::size_t>(i)]));
  }
  return out;
}

// Integer type check; returns the file type's size in bytes.
std::size_t require_integer(hid_t ds, const std::string& name, const std::string& what, const std::string& path) {
  H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Dget_type(ds)));
  const H5T_class_t cls = H5Tget_class(ft);
  if (cls != H5T_INTEGER)
    bad_input(path, "dataset '" + name + "' must hold integer " + what + ", holds " + class_name(cls));
  return H5Tget_size(ft);
}

// Refuses storage that would make HDF5 allocate from the file's claims (chunks
// above kMaxChunkBytes) or read other files (virtual or external storage).
void check_storage(hid_t ds, const std::string& name, std::size_t elem_bytes, const std::string& path) {
  H5PropList dcpl(SHARDTRAIN_H5_CHECK(H5Dget_create_plist(ds)));
  const std::string problem = storage_problem(dcpl, elem_bytes, kMaxChunkBytes);
  if (!problem.empty()) bad_input(path, "dataset '" + name + "' " + problem);
}

// Selects the rows of `runs` ([lo, hi) intervals, sorted, disjoint) of a dataset
// whose rows have `row_shape`; an empty run list selects nothing.
void select_rows(hid_t space, const std::vector<std::pair<std::int64_t, std::int64_t>>& runs,
                 const std::vector<std::int64_t>& row_shape) {
  if (runs.empty()) {
    SHARDTRAIN_H5_CHECK(H5Sselect_none(space));
    return;
  }
  const std::size_t rank = 1 + row_shape.size();
  std::vector<hsize_t> start(rank, 0), count(rank, 1), block(rank);
  for (std::size_t d = 1; d < rank; ++d) block[d] = static_cast<hsize_t>(row_shape[d - 1]);
  for (std::size_t k = 0; k < runs.size(); ++k) {
    start[0] = static_cast<hsize_t>(runs[k].first);
    block[0] = static_cast<hsize_t>(runs[k].second - runs[k].first);
    SHARDTRAIN_H5_CHECK(H5Sselect_hyperslab(space, k == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr,
                                            count.data(), block.data()));
  }
}

// pixel / 255.0f exactly (correctly rounded; 255 -> 1.0f), by table.
const std::array<float, 256>& unit_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v) t[static_cast<std::size_t>(v)] = static_cast<float>(v) / 255.0f;
    return t;
  }();
  return table;
}

// The InputErrors of a bad value, as "PATH: /train/labels[ROW]: label 12 out of range [0, 10)".
[[noreturn]] void bad_label(const std::string& path, SampleSplit split, std::int64_t row, std::int64_t value,
                            std::int64_t classes) {
  throw InputError(path + ": /" + to_string(split) + "/labels[" + std::to_string(row) + "]: label " +
                   std::to_string(value) + " out of range [0, " + std::to_string(classes) + ")");
}
[[noreturn]] void bad_length(const std::string& path, SampleSplit split, std::int64_t row, std::int64_t value,
                             std::int64_t elems) {
  throw InputError(path + ": /" + to_string(split) + "/lengths[" + std::to_string(row) + "]: length " +
                   std::to_string(value) + " out of range [1, " + std::to_string(elems) + "]");
}
[[noreturn]] void bad_token(const std::string& path, SampleSplit split, std::int64_t row, std::int64_t pos,
                            std::int64_t value, std::int64_t vocab) {
  throw InputError(path + ": /" + to_string(split) + "/inputs[" + std::to_string(row) + "][" + std::to_string(pos) +
                   "]: token id " + std::to_string(value) + " out of range [0, " + std::to_string(vocab) + ")");
}

}  // namespace

struct SampleDataset::Impl {
  std::string path;
  H5File file;  // declared first: closed after the datasets below
  struct SplitData {
    H5Dataset inputs, labels, lengths;
    std::int64_t rows = 0;
  };
  std::array<SplitData, 2> splits;
  H5PropList read_xfer;
  SampleKind kind = SampleKind::Image;
  std::vector<std::int64_t> sample_shape;
  std::int64_t sample_elems = 0;
  // hold_in_memory(): both splits' rows, as read() hands them out before conversion.
  struct HeldSplit {
    TrackedBuffer<std::uint8_t> pixels;  // images: (rows, sample_elems) as stored
    TrackedBuffer<TokenIndex> tokens;    // tokens: (rows, sample_elems)
    TrackedBuffer<std::int32_t> labels, lengths;
  };
  std::array<HeldSplit, 2> held;
  bool in_memory = false;
  std::int64_t num_classes = 0;
  std::vector<std::string> class_names;
  std::int64_t vocab_size = 0, pad_id = -1, cls_id = -1, sep_id = -1;
  std::string tokenizer, source, split_rule;

  void open();
  void check_metadata();
  void open_split(SampleSplit split);
  void read_classes();
  void hold_split(SampleSplit split, MemoryTracker& tracker, MemCategory category);
};

void SampleDataset::Impl::open() {
  file = open_for_read(path);
  read_xfer = read_transfer();
}

void SampleDataset::Impl::check_metadata() {
  check_format(file, path, "sample data set", kSampleFormat, kSampleFormatVersion);
  const auto k = read_string_attr(file, "kind", path);
  if (!k) bad_input(path, "missing attribute 'kind'");
  if (*k != "image" && *k != "tokens") bad_input(path, "unknown kind '" + *k + "' (expected 'image' or 'tokens')");
  kind = *k == "image" ? SampleKind::Image : SampleKind::Tokens;
  num_classes = require_int(file, "num_classes", path, 2, kMaxSampleClasses);

  // sample_shape: a short 1-D integer array, bounded before it is read.
  hssize_t points = 0;
  auto shape_attr = open_array_attr(file, "sample_shape", path, points);
  if (!shape_attr) bad_input(path, "missing attribute 'sample_shape'");
  const hssize_t want = kind == SampleKind::Image ? 3 : 1;
  if (points != want)
    bad_input(path, "sample_shape must have " + std::to_string(want) + " entries for kind '" + *k + "', has " +
                        std::to_string(points));
  {
    H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Aget_type(*shape_attr)));
    if (H5Tget_class(ft) != H5T_INTEGER)
      bad_input(path, "attribute 'sample_shape' must hold integers, holds " + class_name(H5Tget_class(ft)));
  }
  sample_shape.assign(static_cast<std::size_t>(want), 0);
  SHARDTRAIN_H5_CHECK(H5Aread(*shape_attr, H5T_NATIVE_INT64, sample_shape.data()));
  sample_elems = 1;
  for (const std::int64_t d : sample_shape) {
    if (d < 1 || d > (kind == SampleKind::Image ? kMaxSampleDim : kMaxSampleElems))
      bad_input(path, "sample_shape dimension " + std::to_string(d) + " out of range");
    sample_elems *= d;
    if (sample_elems > kMaxSampleElems)
      bad_input(path, "sample_shape describes more than " + std::to_string(kMaxSampleElems) + " elements per sample");
  }

  if (kind == SampleKind::Tokens) {
    const auto tok = read_string_attr(file, "tokenizer", path);
    if (!tok) bad_input(path, "missing attribute 'tokenizer'");
    tokenizer = *tok;
    vocab_size = require_int(file, "vocab_size", path, 1, kMaxSampleVocab);
    pad_id = require_int(file, "pad_id", path, 0, vocab_size - 1);
    cls_id = require_int(file, "cls_id", path, -1, vocab_size - 1);
    // Optional: files written before it was recorded have no [SEP] (none of
    // their tokenizers put one) or are WordPiece sets whose [SEP] is unknown here.
    if (read_int_attr(file, "sep_id", path)) sep_id = require_int(file, "sep_id", path, -1, vocab_size - 1);
  }
  source = read_string_attr(file, "source", path).value_or("");
  split_rule = read_string_attr(file, "split_rule", path).value_or("");
}

void SampleDataset::Impl::open_split(SampleSplit split) {
  SplitData& s = splits[static_cast<std::size_t>(split)];
  std::string group("/");  // built with += : GCC 12 warns falsely on "/" + std::string (PR 105329)
  group += to_string(split);
  const std::string in_name = group + "/inputs", label_name = group + "/labels", len_name = group + "/lengths";

  s.inputs = open_dataset(file, in_name, path);
  const bool image = kind == SampleKind::Image;
  {
    H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Dget_type(s.inputs)));
    const H5T_class_t cls = H5Tget_class(ft);
    if (image && (cls != H5T_INTEGER || H5Tget_size(ft) != 1 || H5Tget_sign(ft) != H5T_SGN_NONE))
      bad_input(path, "dataset '" + in_name + "' must hold uint8 pixels, holds " +
                          (cls == H5T_INTEGER
                               ? std::to_string(8 * H5Tget_size(ft)) + "-bit " +
                                     (H5Tget_sign(ft) == H5T_SGN_NONE ? "unsigned " : "signed ") + "integers"
                               : class_name(cls)));
  }
  const std::size_t in_bytes = image ? 1 : require_integer(s.inputs, in_name, "token ids", path);
  const auto dims = dims_of(s.inputs, in_name, 1 + static_cast<int>(sample_shape.size()), path);
  for (std::size_t d = 0; d < sample_shape.size(); ++d)
    if (dims[d + 1] != sample_shape[d]) {
      std::string got, want;
      for (std::size_t e = 1; e < dims.size(); ++e) (got += e > 1 ? "x" : "") += std::to_string(dims[e]);
      for (std::size_t e = 0; e < sample_shape.size(); ++e) (want += e > 0 ? "x" : "") += std::to_string(sample_shape[e]);
      bad_input(path, "dataset '" + in_name + "' holds samples of shape " + got + ", sample_shape is " + want);
    }
  s.rows = dims[0];
  if (s.rows > 0 && sample_elems > (std::int64_t{1} << 48) / s.rows)
    bad_input(path, "dataset '" + in_name + "' is implausibly large");
  check_storage(s.inputs, in_name, in_bytes, path);

  // A 1-D integer dataset holding one `what` (labels, lengths) per sample.
  auto open_per_sample = [&](const std::string& name, const char* what) {
    H5Dataset ds = open_dataset(file, name, path);
    const std::size_t bytes = require_integer(ds, name, what, path);
    const std::int64_t n = dims_of(ds, name, 1, path)[0];
    if (n != s.rows)
      bad_input(path, "dataset '" + name + "' has " + std::to_string(n) + " " + what + " for " +
                          std::to_string(s.rows) + " samples in '" + in_name + "'");
    check_storage(ds, name, bytes, path);
    return ds;
  };
  s.labels = open_per_sample(label_name, "labels");
  if (!image) s.lengths = open_per_sample(len_name, "lengths");
}

void SampleDataset::Impl::read_classes() {
  const std::string name = "/classes";
  H5Dataset ds = open_dataset(file, name, path);
  const std::int64_t n = dims_of(ds, name, 1, path)[0];
  if (n != num_classes)
    bad_input(path, "dataset '/classes' has " + std::to_string(n) + " entries, num_classes is " +
                        std::to_string(num_classes));
  H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Dget_type(ds)));
  const H5T_class_t cls = H5Tget_class(ft);
  if (cls != H5T_STRING) bad_input(path, "dataset '/classes' must hold strings, holds " + class_name(cls));
  check_storage(ds, name, H5Tget_size(ft), path);
  class_names = read_strings(ds, ft, name, static_cast<std::size_t>(n), read_xfer,
                             {static_cast<std::size_t>(kMaxClassNameBytes), kMaxClassesTotalBytes,
                              static_cast<std::size_t>(kMaxClassNameBytes)},
                             path);
}

SampleDataset::SampleDataset(const std::string& path, MPI_Comm comm, double io_timeout_s)
    : m_impl(std::make_unique<Impl>()) {
  h5::quiet_errors();
  m_impl->path = path;
  open_on_every_rank(path, comm, io_timeout_s, "SampleDataset", [&] {
    m_impl->open();
    m_impl->check_metadata();
    m_impl->open_split(SampleSplit::Train);
    m_impl->open_split(SampleSplit::Val);
    if (m_impl->splits[0].rows == 0) bad_input(path, "the train split is empty");
    m_impl->read_classes();
  });
}

SampleDataset::~SampleDataset() = default;
SampleDataset::SampleDataset(SampleDataset&&) noexcept = default;
SampleDataset& SampleDataset::operator=(SampleDataset&&) noexcept = default;

const std::string& SampleDataset::path() const { return m_impl->path; }
SampleKind SampleDataset::kind() const { return m_impl->kind; }
const std::vector<std::int64_t>& SampleDataset::sample_shape() const { return m_impl->sample_shape; }
std::int64_t SampleDataset::sample_elems() const { return m_impl->sample_elems; }
std::int64_t SampleDataset::num_classes() const { return m_impl->num_classes; }
const std::vector<std::string>& SampleDataset::class_names() const { return m_impl->class_names; }
std::int64_t SampleDataset::vocab_size() const { return m_impl->vocab_size; }
std::int64_t SampleDataset::pad_id() const { return m_impl->pad_id; }
std::int64_t SampleDataset::cls_id() const { return m_impl->cls_id; }
std::int64_t SampleDataset::sep_id() const { return m_impl->sep_id; }
const std::string& SampleDataset::tokenizer() const { return m_impl->tokenizer; }
const std::string& SampleDataset::source() const { return m_impl->source; }
const std::string& SampleDataset::split_rule() const { return m_impl->split_rule; }
std::int64_t SampleDataset::size(SampleSplit split) const {
  return m_impl->splits[static_cast<std::size_t>(split)].rows;
}

void SampleDataset::read(SampleSplit split, std::span<const std::int64_t> indices, float* inputs, TokenIndex* tokens,
                         std::int32_t* labels, std::int32_t* lengths) const {
  const Impl& im = *m_impl;
  const Impl::SplitData& s = im.splits[static_cast<std::size_t>(split)];
  const bool image = im.kind == SampleKind::Image;
  const std::string sname = to_string(split);
  for (const std::int64_t r : indices)
    SHARDTRAIN_CHECK(r >= 0 && r < s.rows, "row " + std::to_string(r) + " outside the " + sname + " split of " +
                                               std::to_string(s.rows) + " samples");
  SHARDTRAIN_CHECK(image ? tokens == nullptr && lengths == nullptr : inputs == nullptr,
                   image ? "an image data set fills `inputs`; `tokens` and `lengths` must be null"
                         : "a token data set fills `tokens` (and `lengths`); `inputs` must be null");
  SHARDTRAIN_CHECK(indices.empty() || (labels != nullptr && (image ? inputs != nullptr : tokens != nullptr)),
                   "null output buffer");
  const auto elem_count = static_cast<std::size_t>(im.sample_elems);
  const std::array<float, 256>& to_unit = unit_table();

  if (im.in_memory) {  // every value was checked when it was loaded
    const Impl::HeldSplit& h = im.held[static_cast<std::size_t>(split)];
    for (std::size_t i = 0; i < indices.size(); ++i) {
      const auto r = static_cast<std::size_t>(indices[i]);
      labels[i] = h.labels[r];
      if (image) {
        const std::uint8_t* src = h.pixels.data() + r * elem_count;
        float* dst = inputs + i * elem_count;
        for (std::size_t e = 0; e < elem_count; ++e) dst[e] = to_unit[src[e]];
      } else {
        std::memcpy(tokens + i * elem_count, h.tokens.data() + r * elem_count, elem_count * sizeof(TokenIndex));
        if (lengths) lengths[i] = h.lengths[r];
      }
    }
    return;
  }
  const auto hdf5 = lock_hdf5();  // a background checkpoint writer may be in HDF5 (io/h5_lock.hpp)

  // The union of the rows as sorted unique rows, merged into runs [lo, hi).
  // HDF5 hands the elements of a hyperslab union back in file order, so row
  // rows[p] sits at position p of the read buffers.
  std::vector<std::int64_t> rows(indices.begin(), indices.end());
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  for (const std::int64_t r : rows) {
    if (!runs.empty() && runs.back().second == r) ++runs.back().second;
    else runs.emplace_back(r, r + 1);
  }
  const auto n = static_cast<std::int64_t>(rows.size());
  const std::int64_t elems = im.sample_elems;

  // One read of `ds` (rows of `row_shape`) into `buf` (native type `mem_type`).
  auto read_rows = [&](hid_t ds, hid_t mem_type, const std::vector<std::int64_t>& row_shape, void* buf) {
    H5Dataspace file_space(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
    select_rows(file_space, runs, row_shape);
    const hsize_t mem_dim = static_cast<hsize_t>(std::max<std::int64_t>(
        1, n * std::max<std::int64_t>(1, row_shape.empty() ? 1 : elems)));
    H5Dataspace mem_space(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &mem_dim, nullptr)));
    if (runs.empty()) SHARDTRAIN_H5_CHECK(H5Sselect_none(mem_space));
    SHARDTRAIN_H5_CHECK(H5Dread(ds, mem_type, mem_space, file_space, im.read_xfer, buf));
  };
  auto position = [&](std::int64_t r) {
    return static_cast<std::size_t>(std::lower_bound(rows.begin(), rows.end(), r) - rows.begin());
  };

  // Labels first (small), every one checked.
  std::vector<std::int32_t> label_buf(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
  read_rows(s.labels, H5T_NATIVE_INT32, {}, label_buf.data());
  for (std::int64_t p = 0; p < n; ++p) {
    const std::int32_t v = label_buf[static_cast<std::size_t>(p)];
    if (v < 0 || v >= im.num_classes) bad_label(im.path, split, rows[static_cast<std::size_t>(p)], v, im.num_classes);
  }

  if (image) {
    std::vector<std::uint8_t> pix(static_cast<std::size_t>(std::max<std::int64_t>(n * elems, 1)));
    read_rows(s.inputs, H5T_NATIVE_UINT8, im.sample_shape, pix.data());
    for (std::size_t i = 0; i < indices.size(); ++i) {
      const std::size_t p = position(indices[i]);
      const std::uint8_t* src = pix.data() + p * static_cast<std::size_t>(elems);
      float* dst = inputs + i * static_cast<std::size_t>(elems);
      for (std::int64_t e = 0; e < elems; ++e) dst[e] = to_unit[src[e]];
      labels[i] = label_buf[p];
    }
    return;
  }

  static_assert(sizeof(TokenIndex) == 4, "memory type below is int32");
  std::vector<TokenIndex> ids(static_cast<std::size_t>(std::max<std::int64_t>(n * elems, 1)));
  read_rows(s.inputs, H5T_NATIVE_INT32, im.sample_shape, ids.data());
  for (std::int64_t p = 0; p < n; ++p)
    for (std::int64_t e = 0; e < elems; ++e) {
      const TokenIndex t = ids[static_cast<std::size_t>(p * elems + e)];
      if (t < 0 || t >= im.vocab_size) bad_token(im.path, split, rows[static_cast<std::size_t>(p)], e, t, im.vocab_size);
    }
  std::vector<std::int32_t> len_buf(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
  read_rows(s.lengths, H5T_NATIVE_INT32, {}, len_buf.data());
  for (std::int64_t p = 0; p < n; ++p) {
    const std::int32_t v = len_buf[static_cast<std::size_t>(p)];
    if (v < 1 || v > elems) bad_length(im.path, split, rows[static_cast<std::size_t>(p)], v, elems);
  }
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::size_t p = position(indices[i]);
    std::memcpy(tokens + i * static_cast<std::size_t>(elems), ids.data() + p * static_cast<std::size_t>(elems),
                static_cast<std::size_t>(elems) * sizeof(TokenIndex));
    labels[i] = label_buf[p];
    if (lengths) lengths[i] = len_buf[p];
  }
}

std::int64_t SampleDataset::in_memory_bytes() const {
  const Impl& im = *m_impl;
  const bool image = im.kind == SampleKind::Image;
  const std::int64_t per_row = im.sample_elems * (image ? 1 : static_cast<std::int64_t>(sizeof(TokenIndex))) +
                               static_cast<std::int64_t>(sizeof(std::int32_t)) * (image ? 1 : 2);
  return per_row * (im.splits[0].rows + im.splits[1].rows);
}

bool SampleDataset::in_memory() const { return m_impl->in_memory; }

void SampleDataset::hold_in_memory(MemoryTracker& tracker, MemCategory category) {
  if (m_impl->in_memory) return;
  const auto hdf5 = lock_hdf5();  // a background checkpoint writer may be in HDF5 (io/h5_lock.hpp)
  try {
    m_impl->hold_split(SampleSplit::Train, tracker, category);
    m_impl->hold_split(SampleSplit::Val, tracker, category);
  } catch (...) {
    m_impl->held = {};  // a bad value: nothing stays held
    throw;
  }
  m_impl->in_memory = true;
}

void SampleDataset::Impl::hold_split(SampleSplit split, MemoryTracker& tracker, MemCategory category) {
  const SplitData& s = splits[static_cast<std::size_t>(split)];
  HeldSplit& h = held[static_cast<std::size_t>(split)];
  const bool image = kind == SampleKind::Image;
  const auto rows = static_cast<std::size_t>(s.rows), elems = static_cast<std::size_t>(sample_elems);
  h.labels = TrackedBuffer<std::int32_t>(tracker, category, rows);
  if (image) {
    h.pixels = TrackedBuffer<std::uint8_t>(tracker, category, rows * elems);
  } else {
    h.tokens = TrackedBuffer<TokenIndex>(tracker, category, rows * elems);
    h.lengths = TrackedBuffer<std::int32_t>(tracker, category, rows);
  }
  if (rows == 0) return;
  // The whole dataset into the buffer, converted to the memory type (as read() does).
  auto read_all = [&](hid_t ds, hid_t mem_type, void* buf) {
    SHARDTRAIN_H5_CHECK(H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, read_xfer, buf));
  };
  read_all(s.labels, H5T_NATIVE_INT32, h.labels.data());
  for (std::size_t r = 0; r < rows; ++r)
    if (h.labels[r] < 0 || h.labels[r] >= num_classes)
      bad_label(path, split, static_cast<std::int64_t>(r), h.labels[r], num_classes);
  if (image) {
    read_all(s.inputs, H5T_NATIVE_UINT8, h.pixels.data());
    return;
  }
  static_assert(sizeof(TokenIndex) == 4, "memory type below is int32");
  read_all(s.inputs, H5T_NATIVE_INT32, h.tokens.data());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t e = 0; e < elems; ++e) {
      const TokenIndex t = h.tokens[r * elems + e];
      if (t < 0 || t >= vocab_size)
        bad_token(path, split, static_cast<std::int64_t>(r), static_cast<std::int64_t>(e), t, vocab_size);
    }
  read_all(s.lengths, H5T_NATIVE_INT32, h.lengths.data());
  for (std::size_t r = 0; r < rows; ++r)
    if (h.lengths[r] < 1 || h.lengths[r] > sample_elems)
      bad_length(path, split, static_cast<std::int64_t>(r), h.lengths[r], sample_elems);
}

}  // namespace shardtrain
