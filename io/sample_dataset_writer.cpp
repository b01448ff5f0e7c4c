// Streaming serial writer for labelled-sample data set files (see
// sample_dataset_writer.hpp; format: share/doc/dataset-format.md).
// Each split owns extendable chunked datasets (/S/inputs (N, *sample_shape),
// /S/labels (N), and /S/lengths (N) for tokens) and a buffer of at most one
// chunk of samples: when it is full the datasets are extended by that many rows
// and the rows written, so memory is bounded by one chunk per split whatever N.
// Every appended sample is validated before it is buffered (InputError naming
// the output file, the split and the sample index).
#include "io/sample_dataset_writer.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.hpp"
#include "io/h5_check.hpp"
#include "io/h5_write.hpp"

namespace shardtrain {

std::string to_string(SampleKind k) { return k == SampleKind::Image ? "image" : "tokens"; }
std::string to_string(SampleSplit s) { return s == SampleSplit::Train ? "train" : "val"; }

namespace {

using namespace shardtrain::h5;

constexpr std::int64_t kTargetChunkBytes = std::int64_t{1} << 20;
constexpr std::int64_t kMaxChunkRows = 4096;

void write_int_attr(hid_t obj, const char* name, std::int64_t v) {
  write_scalar_attr(obj, name, H5T_STD_I64LE, &v);  // HDF5 converts from native int64
}

// An extendable dataset of rows of `row_shape` (empty for a 1-D dataset), chunked
// by `chunk_rows` rows, stored as `file_type`.
H5Dataset create_rows(hid_t group, const char* name, hid_t file_type,
                      const std::vector<std::int64_t>& row_shape, std::int64_t chunk_rows) {
  const int rank = 1 + static_cast<int>(row_shape.size());
  std::vector<hsize_t> dims(rank, 0), maxdims(rank, H5S_UNLIMITED), chunk(rank, 0);
  chunk[0] = static_cast<hsize_t>(chunk_rows);
  for (int d = 1; d < rank; ++d)
    dims[d] = maxdims[d] = chunk[d] = static_cast<hsize_t>(row_shape[static_cast<std::size_t>(d - 1)]);
  H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Screate_simple(rank, dims.data(), maxdims.data())));
  H5PropList dcpl(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  SHARDTRAIN_H5_CHECK(H5Pset_chunk(dcpl, rank, chunk.data()));
  return H5Dataset(SHARDTRAIN_H5_CHECK(
      H5Dcreate2(group, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
}

// Appends `rows` rows from `data` (native type `mem_type`) at row `at` of `ds`.
void append_rows(hid_t ds, hid_t mem_type, const std::vector<std::int64_t>& row_shape,
                 std::int64_t at, std::int64_t rows, const void* data) {
  const int rank = 1 + static_cast<int>(row_shape.size());
  std::vector<hsize_t> dims(rank), start(rank, 0), count(rank);
  dims[0] = static_cast<hsize_t>(at + rows);
  start[0] = static_cast<hsize_t>(at);
  count[0] = static_cast<hsize_t>(rows);
  for (int d = 1; d < rank; ++d)
    dims[d] = count[d] = static_cast<hsize_t>(row_shape[static_cast<std::size_t>(d - 1)]);
  SHARDTRAIN_H5_CHECK(H5Dset_extent(ds, dims.data()));
  H5Dataspace file_space(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
  SHARDTRAIN_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
  H5Dataspace mem_space(SHARDTRAIN_H5_CHECK(H5Screate_simple(rank, count.data(), nullptr)));
  SHARDTRAIN_H5_CHECK(H5Dwrite(ds, mem_type, mem_space, file_space, H5P_DEFAULT, data));
}

}  // namespace

struct SampleDatasetWriter::Impl {
  struct SplitState {
    H5Dataset inputs, labels, lengths;
    std::vector<std::uint8_t> pixels;  // images: chunk_rows * sample_elems
    std::vector<TokenIndex> ids;       // tokens: chunk_rows * sample_elems
    std::vector<std::int32_t> label_buf, length_buf;
    std::int64_t buffered = 0;  // rows in the buffers
    std::int64_t written = 0;   // rows in the file
  };

  std::string path, tmp;
  SampleDatasetSpec spec;
  std::int64_t sample_elems = 0;
  std::int64_t chunk_rows = 0;
  bool committed = false;
  H5File file;  // declared before the datasets: closed after them
  std::array<SplitState, 2> splits;

  [[noreturn]] void bad(const std::string& msg) const { throw InputError(path + ": " + msg); }
  void validate_spec();
  void create();
  void flush(SplitState& s);
  SplitState& split_for(SampleSplit split, SampleKind kind);
  std::string where(SampleSplit split) const {
    return to_string(split) + " sample " + std::to_string(splits[static_cast<std::size_t>(split)].written +
                                                          splits[static_cast<std::size_t>(split)].buffered);
  }
  void close_all() {
    for (auto& s : splits) s.inputs = H5Dataset(), s.labels = H5Dataset(), s.lengths = H5Dataset();
    file = H5File();
  }
};

void SampleDatasetWriter::Impl::validate_spec() {
  const bool image = spec.kind == SampleKind::Image;
  const std::size_t want_rank = image ? 3 : 1;
  if (spec.sample_shape.size() != want_rank)
    bad("sample_shape must have " + std::to_string(want_rank) + " dimension(s) for kind '" +
        to_string(spec.kind) + "', has " + std::to_string(spec.sample_shape.size()));
  sample_elems = 1;
  for (const std::int64_t d : spec.sample_shape) {
    if (d < 1 || d > (image ? kMaxSampleDim : kMaxSampleElems))
      bad("sample_shape dimension " + std::to_string(d) + " out of range");
    sample_elems *= d;  // each factor <= 2^24 and the product is checked at every step
    if (sample_elems > kMaxSampleElems)
      bad("a sample of more than " + std::to_string(kMaxSampleElems) + " elements");
  }
  const auto nc = static_cast<std::int64_t>(spec.class_names.size());
  if (nc < 2 || nc > kMaxSampleClasses)
    bad("num_classes " + std::to_string(nc) + " out of range [2, " + std::to_string(kMaxSampleClasses) + "]");
  for (const auto& c : spec.class_names)
    if (c.find('\0') != std::string::npos || static_cast<std::int64_t>(c.size()) > kMaxClassNameBytes)
      bad("class name '" + c.substr(0, 40) + "' contains NUL or is longer than " +
          std::to_string(kMaxClassNameBytes) + " bytes");
  if (!image) {
    if (spec.tokenizer.empty()) bad("a token data set needs a tokenizer name");
    if (spec.vocab_size < 1 || spec.vocab_size > kMaxSampleVocab)
      bad("vocab_size " + std::to_string(spec.vocab_size) + " out of range [1, " +
          std::to_string(kMaxSampleVocab) + "]");
    if (spec.pad_id < 0 || spec.pad_id >= spec.vocab_size)
      bad("pad_id " + std::to_string(spec.pad_id) + " out of range [0, " + std::to_string(spec.vocab_size) + ")");
    if (spec.cls_id < -1 || spec.cls_id >= spec.vocab_size)
      bad("cls_id " + std::to_string(spec.cls_id) + " out of range [-1, " + std::to_string(spec.vocab_size) + ")");
    if (spec.sep_id < -1 || spec.sep_id >= spec.vocab_size)
      bad("sep_id " + std::to_string(spec.sep_id) + " out of range [-1, " + std::to_string(spec.vocab_size) + ")");
  }
  const std::int64_t elem_bytes = image ? 1 : (spec.vocab_size <= 65536 ? 2 : 4);
  chunk_rows = std::clamp<std::int64_t>(kTargetChunkBytes / (sample_elems * elem_bytes), 1, kMaxChunkRows);
}

void SampleDatasetWriter::Impl::create() {
  file = create_file(tmp, path);

  const bool image = spec.kind == SampleKind::Image;
  write_string_attr(file, "format", kSampleFormat);
  write_int_attr(file, "format_version", kSampleFormatVersion);
  write_string_attr(file, "kind", to_string(spec.kind));
  write_int_attr(file, "num_classes", static_cast<std::int64_t>(spec.class_names.size()));
  {
    const hsize_t n = spec.sample_shape.size();
    H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
    H5Attribute a(SHARDTRAIN_H5_CHECK(
        H5Acreate2(file, "sample_shape", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)));
    SHARDTRAIN_H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, spec.sample_shape.data()));
  }
  if (!image) {
    write_string_attr(file, "tokenizer", spec.tokenizer);
    write_int_attr(file, "vocab_size", spec.vocab_size);
    write_int_attr(file, "pad_id", spec.pad_id);
    write_int_attr(file, "cls_id", spec.cls_id);
    write_int_attr(file, "sep_id", spec.sep_id);
    if (!spec.vocab_sha256.empty()) {
      write_string_attr(file, "vocab_file", spec.vocab_file);
      write_string_attr(file, "vocab_sha256", spec.vocab_sha256);
      write_int_attr(file, "lowercase", spec.lowercase ? 1 : 0);
    }
  }
  write_string_attr(file, "source", spec.source);
  write_string_attr(file, "split_rule", spec.split_rule);

  const hid_t input_type = image ? H5T_STD_U8LE : (spec.vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_I32LE);
  for (const SampleSplit split : {SampleSplit::Train, SampleSplit::Val}) {
    SplitState& s = splits[static_cast<std::size_t>(split)];
    std::string gname("/");  // built with += : GCC 12 warns falsely on "/" + std::string (PR 105329)
    gname += to_string(split);
    H5Group g(SHARDTRAIN_H5_CHECK(H5Gcreate2(file, gname.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    s.inputs = create_rows(g, "inputs", input_type, spec.sample_shape, chunk_rows);
    s.labels = create_rows(g, "labels", H5T_STD_I32LE, {}, chunk_rows);
    if (!image) s.lengths = create_rows(g, "lengths", H5T_STD_I32LE, {}, chunk_rows);
    const auto buf = static_cast<std::size_t>(chunk_rows * sample_elems);
    if (image) s.pixels.resize(buf); else s.ids.resize(buf);
    s.label_buf.resize(static_cast<std::size_t>(chunk_rows));
    if (!image) s.length_buf.resize(static_cast<std::size_t>(chunk_rows));
  }

  {
    H5Datatype str = utf8_vlen_string();
    const hsize_t n = spec.class_names.size();
    H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
    H5Dataset ds(SHARDTRAIN_H5_CHECK(H5Dcreate2(file, "classes", str, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    std::vector<const char*> ptrs;
    ptrs.reserve(spec.class_names.size());
    for (const auto& c : spec.class_names) ptrs.push_back(c.c_str());
    SHARDTRAIN_H5_CHECK(H5Dwrite(ds, str, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()));
  }
}

void SampleDatasetWriter::Impl::flush(SplitState& s) {
  if (s.buffered == 0) return;
  const bool image = spec.kind == SampleKind::Image;
  if (image)
    append_rows(s.inputs, H5T_NATIVE_UINT8, spec.sample_shape, s.written, s.buffered, s.pixels.data());
  else
    append_rows(s.inputs, H5T_NATIVE_INT32, spec.sample_shape, s.written, s.buffered, s.ids.data());
  append_rows(s.labels, H5T_NATIVE_INT32, {}, s.written, s.buffered, s.label_buf.data());
  if (!image) append_rows(s.lengths, H5T_NATIVE_INT32, {}, s.written, s.buffered, s.length_buf.data());
  s.written += s.buffered;
  s.buffered = 0;
}

SampleDatasetWriter::Impl::SplitState& SampleDatasetWriter::Impl::split_for(SampleSplit split, SampleKind kind) {
  SHARDTRAIN_CHECK(!committed, "append after commit()");
  SHARDTRAIN_CHECK(file.valid(), "append to a writer whose commit() failed");
  SHARDTRAIN_CHECK(spec.kind == kind, "appending a sample of the wrong kind to a '" + to_string(spec.kind) +
                                          "' data set");
  SplitState& s = splits[static_cast<std::size_t>(split)];
  if (s.written + s.buffered >= kMaxSamples)
    bad("the " + to_string(split) + " split would exceed " + std::to_string(kMaxSamples) + " samples");
  return s;
}

SampleDatasetWriter::SampleDatasetWriter(const std::string& path, const SampleDatasetSpec& spec)
    : m_impl(std::make_unique<Impl>()) {
  h5::quiet_errors();
  m_impl->path = path;
  m_impl->tmp = path + ".partial";
  m_impl->spec = spec;
  m_impl->validate_spec();
  try {
    m_impl->create();
  } catch (...) {
    m_impl->close_all();
    std::error_code ignored;
    std::filesystem::remove(m_impl->tmp, ignored);
    throw;
  }
}

SampleDatasetWriter::~SampleDatasetWriter() {
  if (!m_impl || m_impl->committed) return;
  m_impl->close_all();
  std::error_code ignored;
  std::filesystem::remove(m_impl->tmp, ignored);
}

void SampleDatasetWriter::append_image(SampleSplit split, std::span<const std::uint8_t> pixels,
                                       std::int32_t label) {
  Impl& im = *m_impl;
  Impl::SplitState& s = im.split_for(split, SampleKind::Image);
  if (static_cast<std::int64_t>(pixels.size()) != im.sample_elems)
    im.bad(im.where(split) + ": " + std::to_string(pixels.size()) + " pixels, expected " +
           std::to_string(im.sample_elems));
  const auto nc = static_cast<std::int64_t>(im.spec.class_names.size());
  if (label < 0 || label >= nc)
    im.bad(im.where(split) + ": label " + std::to_string(label) + " out of range [0, " + std::to_string(nc) + ")");
  std::memcpy(s.pixels.data() + s.buffered * im.sample_elems, pixels.data(), pixels.size());
  s.label_buf[static_cast<std::size_t>(s.buffered)] = label;
  if (++s.buffered == im.chunk_rows) im.flush(s);
}

void SampleDatasetWriter::append_tokens(SampleSplit split, std::span<const TokenIndex> ids, std::int64_t length,
                                        std::int32_t label) {
  Impl& im = *m_impl;
  Impl::SplitState& s = im.split_for(split, SampleKind::Tokens);
  if (static_cast<std::int64_t>(ids.size()) != im.sample_elems)
    im.bad(im.where(split) + ": " + std::to_string(ids.size()) + " token ids, expected seq_len " +
           std::to_string(im.sample_elems));
  if (length < 1 || length > im.sample_elems)
    im.bad(im.where(split) + ": length " + std::to_string(length) + " out of range [1, " +
           std::to_string(im.sample_elems) + "]");
  const auto nc = static_cast<std::int64_t>(im.spec.class_names.size());
  if (label < 0 || label >= nc)
    im.bad(im.where(split) + ": label " + std::to_string(label) + " out of range [0, " + std::to_string(nc) + ")");
  for (std::size_t j = 0; j < ids.size(); ++j)
    if (ids[j] < 0 || ids[j] >= im.spec.vocab_size)
      im.bad(im.where(split) + ": token " + std::to_string(j) + " has id " + std::to_string(ids[j]) +
             " out of range [0, " + std::to_string(im.spec.vocab_size) + ")");
  std::copy(ids.begin(), ids.end(), s.ids.begin() + s.buffered * im.sample_elems);
  s.label_buf[static_cast<std::size_t>(s.buffered)] = label;
  s.length_buf[static_cast<std::size_t>(s.buffered)] = static_cast<std::int32_t>(length);
  if (++s.buffered == im.chunk_rows) im.flush(s);
}

void SampleDatasetWriter::commit() {
  Impl& im = *m_impl;
  SHARDTRAIN_CHECK(!im.committed, "commit() called twice");
  SHARDTRAIN_CHECK(im.file.valid(), "commit() after a failed commit()");
  for (const SampleSplit split : {SampleSplit::Train, SampleSplit::Val}) {
    const Impl::SplitState& s = im.splits[static_cast<std::size_t>(split)];
    if (s.written + s.buffered == 0) {
      im.close_all();
      im.bad("the " + to_string(split) + " split is empty");
    }
  }
  for (auto& s : im.splits) im.flush(s);
  for (auto& s : im.splits) {
    SHARDTRAIN_H5_CLOSE(s.inputs);
    SHARDTRAIN_H5_CLOSE(s.labels);
    SHARDTRAIN_H5_CLOSE(s.lengths);
  }
  SHARDTRAIN_H5_CLOSE(im.file);  // flushes: a failure here must not become PATH
  rename_durably(im.tmp, im.path);  // a failure leaves tmp to the destructor, as before
  im.committed = true;
}

std::int64_t SampleDatasetWriter::count(SampleSplit split) const {
  const Impl::SplitState& s = m_impl->splits[static_cast<std::size_t>(split)];
  return s.written + s.buffered;
}

std::int64_t SampleDatasetWriter::chunk_samples() const { return m_impl->chunk_rows; }

}  // namespace shardtrain
