// The write-side helpers shared by io/'s writers (see h5_write.hpp).
#include "io/h5_write.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/durable_file.hpp"
#include "core/error.hpp"

namespace shardtrain::h5 {

void set_format_bounds(hid_t fapl) {
  SHARDTRAIN_H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V110));
}

H5File create_file(const std::string& tmp, const std::string& final_path) {
  if (std::FILE* probe = std::fopen(tmp.c_str(), "wb")) {
    std::fclose(probe);
  } else {
    throw InputError(final_path + ": cannot create '" + tmp + "': " + std::strerror(errno));
  }
  H5PropList fapl(SHARDTRAIN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  set_format_bounds(fapl);
  const hid_t id = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (id < 0) throw InputError(final_path + ": cannot create '" + tmp + "': " + error_stack_text());
  return H5File(id);
}

void rename_durably(const std::string& tmp, const std::string& final_path) {
  fsync_file(tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, final_path, ec);
  if (ec) throw InputError(final_path + ": cannot rename '" + tmp + "' into place: " + ec.message());
  const std::string dir = std::filesystem::path(final_path).parent_path().string();
  fsync_directory(dir.empty() ? "." : dir);
}

H5Datatype utf8_vlen_string() {
  H5Datatype t(SHARDTRAIN_H5_CHECK(H5Tcopy(H5T_C_S1)));
  SHARDTRAIN_H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
  SHARDTRAIN_H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  return t;
}

void write_scalar_attr(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* value) {
  H5Dataspace scalar(SHARDTRAIN_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Attribute a(SHARDTRAIN_H5_CHECK(H5Acreate2(obj, name, file_type, scalar, H5P_DEFAULT, H5P_DEFAULT)));
  SHARDTRAIN_H5_CHECK(H5Awrite(a, mem_type, value));
}

void write_i64_attr(hid_t obj, const char* name, std::int64_t value) {
  write_scalar_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void write_u32_attr(hid_t obj, const char* name, std::uint32_t value) {
  write_scalar_attr(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &value);
}

void write_f64_attr(hid_t obj, const char* name, double value) {
  write_scalar_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void write_fixed_string_attr(hid_t obj, const char* name, const std::string& value, bool terminated) {
  const std::size_t size = terminated ? value.size() + 1 : std::max<std::size_t>(value.size(), 1);
  H5Datatype t(SHARDTRAIN_H5_CHECK(H5Tcopy(H5T_C_S1)));
  SHARDTRAIN_H5_CHECK(H5Tset_size(t, size));
  SHARDTRAIN_H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  std::string padded = value;
  padded.resize(size, '\0');
  write_scalar_attr(obj, name, t, t, padded.data());
}

void write_string_attr(hid_t obj, const char* name, const std::string& value) {
  H5Datatype t = utf8_vlen_string();
  const char* p = value.c_str();
  write_scalar_attr(obj, name, t, &p);
}

}  // namespace shardtrain::h5
