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

void write_tokens(hid_t file, const char* group, std::span<const TokenIndex> tokens, hid_t file_type) {
  H5Group g(SHARDTRAIN_H5_CHECK(H5Gcreate2(file, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  const hsize_t n = tokens.size();
  H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  H5Dataset ds(SHARDTRAIN_H5_CHECK(
      H5Dcreate2(g, "tokens", file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  // HDF5 converts int32 -> uint16 on the way out (ids were checked to fit).
  SHARDTRAIN_H5_CHECK(H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data()));
}

void write_file(const std::string& tmp, const std::string& final_path, const TokenDatasetSpec& spec,
                std::span<const TokenIndex> tokens, std::int64_t n_val) {
  H5File file = create_file(tmp, final_path);

  write_string_attr(file, "format", std::string(TokenDataset::kFormat));
  const std::int64_t version = TokenDataset::kFormatVersion;
  write_scalar_attr(file, "format_version", H5T_NATIVE_INT64, &version);
  write_string_attr(file, "tokenizer", spec.tokenizer);
  const auto vocab_size = static_cast<std::int64_t>(spec.vocab.size());
  write_scalar_attr(file, "vocab_size", H5T_NATIVE_INT64, &vocab_size);
  write_string_attr(file, "source", spec.source);
  write_scalar_attr(file, "val_fraction", H5T_NATIVE_DOUBLE, &spec.val_fraction);

  const hid_t token_type = vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_I32LE;
  const auto n_train = tokens.size() - static_cast<std::size_t>(n_val);
  write_tokens(file, "/train", tokens.first(n_train), token_type);
  write_tokens(file, "/val", tokens.subspan(n_train), token_type);

  {
    H5Datatype str = utf8_vlen_string();
    const hsize_t n = spec.vocab.size();
    H5Dataspace space(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
    H5Dataset ds(SHARDTRAIN_H5_CHECK(
        H5Dcreate2(file, "vocab", str, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    std::vector<const char*> ptrs;
    ptrs.reserve(spec.vocab.size());
    for (const auto& v : spec.vocab) ptrs.push_back(v.c_str());
    SHARDTRAIN_H5_CHECK(H5Dwrite(ds, str, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()));
  }
  SHARDTRAIN_H5_CLOSE(file);
}

}  // namespace

TokenSplitCounts write_token_dataset(const std::string& path, const TokenDatasetSpec& spec,
                                     std::span<const TokenIndex> tokens) {
  h5::quiet_errors();
  const auto n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t n_val = val_token_count(n, spec.val_fraction);
  const auto vocab_size = static_cast<std::int64_t>(spec.vocab.size());
  SHARDTRAIN_CHECK(vocab_size >= 1 && vocab_size <= TokenDataset::kMaxVocabSize,
                   "vocab size " + std::to_string(vocab_size) + " out of range");
  for (const TokenIndex t : tokens)
    SHARDTRAIN_CHECK(t >= 0 && t < vocab_size, "token id " + std::to_string(t) + " outside the vocab");

  const std::string tmp = path + ".partial";
  try {
    write_file(tmp, path, spec, tokens, n_val);
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw InputError(path + ": cannot rename '" + tmp + "' into place: " + ec.message());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  return {n - n_val, n_val};
}

}  // namespace shardtrain
