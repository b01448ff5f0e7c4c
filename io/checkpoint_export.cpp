// trainer-ckpt export's HDF5 writer (see checkpoint_export.hpp).
#include "io/checkpoint_export.hpp"

#include <hdf5.h>

#include <algorithm>

#include "core/error.hpp"
#include "io/h5_check.hpp"
#include "io/h5_write.hpp"

namespace shardtrain {

using namespace shardtrain::h5;

void export_tensors_h5(CheckpointReader& ckpt, const std::string& vector,
                       const std::vector<const CheckpointTensor*>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata, const std::string& path,
                       const std::string& shown, std::int64_t chunk_elements) {
  H5PropList fapl(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  set_format_bounds(fapl);  // the format every file io/ writes (io/h5_write.hpp)
  H5File file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
  if (!file.valid()) SHARDTRAIN_FAIL(shown + ": cannot create HDF5 file: " + error_stack_text());
  write_fixed_string_attr(file, "source_checkpoint", ckpt.path(), false);
  write_fixed_string_attr(file, "vector", vector, false);
  write_i64_attr(file, "step", ckpt.meta().step);
  for (const auto& [k, v] : metadata) {
    const bool integer = !v.empty() && v.size() < 19 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (integer) write_i64_attr(file, k.c_str(), std::stoll(v));
    else write_fixed_string_attr(file, k.c_str(), v, false);
  }
  H5PropList lcpl(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
  SHARDTRAIN_H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));  // names with '/' make groups
  std::vector<float> buf;
  for (const CheckpointTensor* t : tensors) {
    std::vector<hsize_t> dims(t->shape.begin(), t->shape.end());
    H5Dataspace fs(dims.empty() ? SHARDTRAIN_H5_CHECK(H5Screate(H5S_SCALAR))
                                : SHARDTRAIN_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()),
                                                                       dims.data(), nullptr)));
    H5Dataset ds(H5Dcreate2(file, t->name.c_str(), H5T_IEEE_F32LE, fs, lcpl, H5P_DEFAULT, H5P_DEFAULT));
    if (!ds.valid())
      throw InputError(shown + ": cannot create dataset '" + t->name +
                       "' (a parameter name HDF5 cannot use as a path?): " + error_stack_text());
    if (t->numel == 0) continue;
    const std::int64_t rows = dims.empty() ? 1 : t->shape[0];
    const std::int64_t row_elems = t->numel / rows;
    const std::int64_t block = std::max<std::int64_t>(1, chunk_elements / row_elems);
    buf.resize(static_cast<std::size_t>(std::min(rows, block) * row_elems));
    for (std::int64_t r = 0; r < rows; r += block) {
      const std::int64_t k = std::min(block, rows - r);
      const std::int64_t lo = t->offset + r * row_elems;
      ckpt.read_range(vector, lo, lo + k * row_elems, buf.data());
      const hsize_t mdim = static_cast<hsize_t>(k * row_elems);
      H5Dataspace ms(SHARDTRAIN_H5_CHECK(H5Screate_simple(1, &mdim, nullptr)));
      if (!dims.empty()) {
        std::vector<hsize_t> start(dims.size(), 0), count(dims);
        start[0] = static_cast<hsize_t>(r);
        count[0] = static_cast<hsize_t>(k);
        SHARDTRAIN_H5_CHECK(
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
      }
      // Memory holds little-endian float32 bytes as read, whatever the host order.
      SHARDTRAIN_H5_CHECK(H5Dwrite(ds, H5T_IEEE_F32LE, ms, fs, H5P_DEFAULT, buf.data()));
    }
  }
  SHARDTRAIN_H5_CLOSE(file);
}

}  // namespace shardtrain
