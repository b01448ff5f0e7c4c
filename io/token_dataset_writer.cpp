// Serial writer for token data set files (see token_dataset_writer.hpp).
// Tokens are stored as uint16 when the vocabulary fits (halves file size and read
// bandwidth), else int32; both are contiguous 1-D datasets so a window is one
// contiguous range of the file.
#include "io/token_dataset_writer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "core/error.hpp"
#include "io/h5_check.hpp"
#include "io/h5_write.hpp"
#include "io/token_dataset.hpp"

namespace shardtrain {

namespace {
std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

std::int64_t val_token_count(std::int64_t n_tokens, double val_fraction) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0))
    throw InputError("val_fraction must be in (0, 1), got " + format_number(val_fraction));
  if (n_tokens < 2)
    throw InputError("need at least 2 tokens (one for train, one for val), got " +
                     std::to_string(n_tokens));
  const auto v = static_cast<std::int64_t>(std::llround(static_cast<double>(n_tokens) * val_fraction));
  return std::clamp<std::int64_t>(v, 1, n_tokens - 1);
}

namespace {

using namespace shardtrain::h5;

std::int64_t spec_vocab_size(const TokenDatasetSpec& spec) {
  if (spec.vocab.empty()) return spec.vocab_size;
  SHARDTRAIN_CHECK(spec.vocab_size == 0 || spec.vocab_size == static_cast<std::int64_t>(spec.vocab.size()),
                   "vocab_size " + std::to_string(spec.vocab_size) + " disagrees with " +
                       std::to_string(spec.vocab.size()) + " vocab strings");
  return static_cast<std::int64_t>(spec.vocab.size());
}

H5Dataset create_tokens(hid_t file, const char* group, std::int64_t n, hid_t file_type) {
  H5Group g(SHARDTRAIN_H5_CHECK(H5Gcreate2(file, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  const hsize_t dim = static_cast<hsize_t>(n);
  H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &dim, nullptr)));
  return H5Dataset(SHARDTRAIN_H5_CHECK(
      H5Dcreate2(g, "tokens", file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
}

// Writes tokens[0, n) at [offset, offset + n) of the 1-D dataset `ds`.
void write_range(hid_t ds, std::int64_t offset, std::span<const TokenIndex> tokens) {
  if (tokens.empty()) return;
  H5Dataspace file_space(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
  const hsize_t start = static_cast<hsize_t>(offset), count = tokens.size();
  SHARDTRAIN_H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
  H5Dataspace mem_space(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &count, nullptr)));
  // HDF5 converts int32 -> uint16 on the way out (ids were checked to fit).
  static_assert(sizeof(TokenIndex) == 4, "memory type below is int32");
  SHARDTRAIN_H5_CHECK(H5Dwrite(ds, H5T_NATIVE_INT32, mem_space, file_space, H5P_DEFAULT, tokens.data()));
}

}  // namespace

struct TokenDatasetWriter::Impl {
  std::string path, tmp;
  std::int64_t vocab_size = 0, n_train = 0, n_val = 0, written = 0;
  bool committed = false;
  H5File file;  // declared first: closed after the datasets below
  H5Dataset train, val;
};

TokenDatasetWriter::TokenDatasetWriter(const std::string& path, const TokenDatasetSpec& spec,
                                       std::int64_t n_train, std::int64_t n_val)
    : m_impl(std::make_unique<Impl>()) {
  h5::quiet_errors();
  Impl& im = *m_impl;
  im.path = path;
  im.tmp = path + ".partial";
  im.vocab_size = spec_vocab_size(spec);
  im.n_train = n_train;
  im.n_val = n_val;
  SHARDTRAIN_CHECK(im.vocab_size >= 1 && im.vocab_size <= TokenDataset::kMaxVocabSize,
                   "vocab size " + std::to_string(im.vocab_size) + " out of range");
  SHARDTRAIN_CHECK(n_train >= 1 && n_val >= 1, "both splits need at least one token (train " +
                                                   std::to_string(n_train) + ", val " + std::to_string(n_val) + ")");
  try {
    im.file = create_file(im.tmp, path);
    write_string_attr(im.file, "format", std::string(TokenDataset::kFormat));
    const std::int64_t version = TokenDataset::kFormatVersion;
    write_scalar_attr(im.file, "format_version", H5T_NATIVE_INT64, &version);
    write_string_attr(im.file, "tokenizer", std::string(name_of(spec.tokenizer)));
    write_scalar_attr(im.file, "vocab_size", H5T_NATIVE_INT64, &im.vocab_size);
    write_string_attr(im.file, "source", spec.source);
    write_scalar_attr(im.file, "val_fraction", H5T_NATIVE_DOUBLE, &spec.val_fraction);
    if (!spec.vocab_sha256.empty()) {
      write_string_attr(im.file, "vocab_file", spec.vocab_file);
      write_string_attr(im.file, "vocab_sha256", spec.vocab_sha256);
      const std::int64_t lowercase = spec.lowercase ? 1 : 0;
      write_scalar_attr(im.file, "lowercase", H5T_NATIVE_INT64, &lowercase);
    }

    const hid_t token_type = im.vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_I32LE;
    im.train = create_tokens(im.file, "/train", n_train, token_type);
    im.val = create_tokens(im.file, "/val", n_val, token_type);

    H5Datatype str = utf8_vlen_string();
    const hsize_t n = spec.vocab.size();  // 0 for pre-tokenized data
    H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
    H5Dataset ds(SHARDTRAIN_H5_CHECK(
        H5Dcreate2(im.file, "vocab", str, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    if (n > 0) {
      std::vector<const char*> ptrs;
      ptrs.reserve(spec.vocab.size());
      for (const auto& v : spec.vocab) ptrs.push_back(v.c_str());
      SHARDTRAIN_H5_CHECK(H5Dwrite(ds, str, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()));
    }
  } catch (...) {
    im.train = H5Dataset();
    im.val = H5Dataset();
    im.file = H5File();
    std::error_code ignored;
    std::filesystem::remove(im.tmp, ignored);
    throw;
  }
}

TokenDatasetWriter::~TokenDatasetWriter() {
  if (!m_impl || m_impl->committed) return;
  m_impl->train = H5Dataset();
  m_impl->val = H5Dataset();
  m_impl->file = H5File();
  std::error_code ignored;
  std::filesystem::remove(m_impl->tmp, ignored);
}

std::int64_t TokenDatasetWriter::written() const { return m_impl->written; }
std::int64_t TokenDatasetWriter::vocab_size() const { return m_impl->vocab_size; }

void TokenDatasetWriter::append(std::span<const TokenIndex> tokens) {
  Impl& im = *m_impl;
  SHARDTRAIN_CHECK(!im.committed, "append after commit");
  const auto n = static_cast<std::int64_t>(tokens.size());
  SHARDTRAIN_CHECK(n <= im.n_train + im.n_val - im.written,
                   "appending " + std::to_string(n) + " tokens overflows the data set (" +
                       std::to_string(im.written) + " of " + std::to_string(im.n_train + im.n_val) + " written)");
  for (const TokenIndex t : tokens)
    SHARDTRAIN_CHECK(t >= 0 && t < im.vocab_size, "token id " + std::to_string(t) + " outside the vocab");
  const std::int64_t to_train = std::clamp<std::int64_t>(im.n_train - im.written, 0, n);
  write_range(im.train, im.written, tokens.first(static_cast<std::size_t>(to_train)));
  write_range(im.val, im.written + to_train - im.n_train, tokens.subspan(static_cast<std::size_t>(to_train)));
  im.written += n;
}

TokenSplitCounts TokenDatasetWriter::commit() {
  Impl& im = *m_impl;
  SHARDTRAIN_CHECK(!im.committed, "commit twice");
  SHARDTRAIN_CHECK(im.written == im.n_train + im.n_val,
                   "commit after " + std::to_string(im.written) + " of " + std::to_string(im.n_train + im.n_val) +
                       " tokens");
  SHARDTRAIN_H5_CLOSE(im.train);
  SHARDTRAIN_H5_CLOSE(im.val);
  SHARDTRAIN_H5_CLOSE(im.file);
  rename_durably(im.tmp, im.path);
  im.committed = true;
  return {im.n_train, im.n_val};
}

TokenSplitCounts write_token_dataset(const std::string& path, const TokenDatasetSpec& spec,
                                     std::span<const TokenIndex> tokens) {
  h5::quiet_errors();
  const auto n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t n_val = val_token_count(n, spec.val_fraction);
  const std::int64_t vocab_size = spec_vocab_size(spec);
  SHARDTRAIN_CHECK(vocab_size >= 1 && vocab_size <= TokenDataset::kMaxVocabSize,
                   "vocab size " + std::to_string(vocab_size) + " out of range");
  for (const TokenIndex t : tokens)
    SHARDTRAIN_CHECK(t >= 0 && t < vocab_size, "token id " + std::to_string(t) + " outside the vocab");

  TokenDatasetWriter writer(path, spec, n - n_val, n_val);
  writer.append(tokens);
  return writer.commit();
}

}  // namespace shardtrain
