// shardtrain/io/h5_write.hpp
// Owns the write-side pieces io/'s serial data set writers (token_dataset_writer.cpp,
// sample_dataset_writer.cpp), the checkpoint writer and the tensor export
// share: the file format they are held to (set_format_bounds), creating the
// temporary file a writer renames into place, renaming it durably, and writing
// scalar attributes (every attribute io/ writes).
// Invariants: every H5* return is checked (SHARDTRAIN_H5_CHECK); a file that
// cannot be created is the user's problem and throws InputError naming the final
// path; string attributes the data set writers make are variable-length UTF-8.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>

#include "io/h5_check.hpp"

namespace shardtrain::h5 {

// The HDF5 file format every file io/ writes is held to, set on a file access
// property list: H5Pset_libver_bounds(low = H5F_LIBVER_V18, high = H5F_LIBVER_V110).
// The low bound gives version-2 object headers and superblock (their metadata
// carries checksums) whatever the library's default; HDF5 2.0 made 1.8 the
// default lowest format, so the files do not change with the library. The
// high bound is what virtual datasets (the checkpoint's /params views) need and
// what every HDF5 from 1.10 on reads (h5py, h5dump); nothing newer is written.
void set_format_bounds(hid_t fapl);

// Creates (truncating) the HDF5 file `tmp` that will become `final_path`, or
// throws InputError "<final_path>: cannot create '<tmp>': <reason>". A stdio
// probe comes first: its errno is a clearer reason than HDF5's error stack.
H5File create_file(const std::string& tmp, const std::string& final_path);

// Moves the finished (closed) file `tmp` to `final_path` so that a crash at any
// moment leaves either the old final_path or the whole new file: fsyncs tmp,
// renames it, fsyncs the directory. Throws InputError "<final_path>: cannot
// rename ..." when the rename fails, Error when an fsync does.
void rename_durably(const std::string& tmp, const std::string& final_path);

// A variable-length UTF-8 string type.
H5Datatype utf8_vlen_string();

// Writes the scalar attribute `name` of `obj`, stored as `file_type`, from
// `value` of `mem_type` (HDF5 converts).
void write_scalar_attr(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* value);
inline void write_scalar_attr(hid_t obj, const char* name, hid_t type, const void* value) {
  write_scalar_attr(obj, name, type, type, value);
}

// Writes `value` as the scalar variable-length UTF-8 string attribute `name` of `obj`.
void write_string_attr(hid_t obj, const char* name, const std::string& value);

// Scalar attributes of fixed types: a 64-bit or 32-bit little-endian integer,
// a little-endian double.
void write_i64_attr(hid_t obj, const char* name, std::int64_t value);
void write_u32_attr(hid_t obj, const char* name, std::uint32_t value);
void write_f64_attr(hid_t obj, const char* name, double value);

// Writes `value` as a scalar fixed-length UTF-8 string attribute. With
// `terminated` the type has room for the terminating NUL (value.size() + 1
// bytes: a C reader sizing its buffer from the file type gets a terminated
// string; the checkpoint's attributes); without, it is value.size() bytes (at
// least 1), NUL-terminated only by padding (trainer-ckpt's exports).
void write_fixed_string_attr(hid_t obj, const char* name, const std::string& value, bool terminated);

}  // namespace shardtrain::h5
