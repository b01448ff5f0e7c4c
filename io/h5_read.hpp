// shardtrain/io/h5_read.hpp
// Owns the checks io/'s data set readers (token_dataset.cpp, sample_dataset.cpp)
// and the checkpoint reader make on a file someone else wrote: opening it on every rank, reading
// attributes, opening datasets by path, refusing storage HDF5 would allocate from
// the file's own claims, and reading 1-D string datasets under a byte budget.
// Invariants: every size that drives an allocation is bounded before the
// allocation; a problem with the file throws InputError "<path>: <what>" (via
// bad_input, which also drops HDF5's error stack), while a failing HDF5 call that
// should not fail throws shardtrain::Error through SHARDTRAIN_H5_CHECK.
// Messages are part of the interface (tests check them): keep them byte-identical.
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/h5_check.hpp"

namespace shardtrain::h5 {

// Throws InputError "<path>: <msg>" after dropping whatever HDF5 recorded for a
// raw call that was expected to fail; when that record says a read failed in
// the system (HDF5's POSIX drivers name its errno: EIO from failing storage),
// throws SystemIoError (io/checkpoint_phase.hpp) with that errno instead: the
// storage failed, the file may be fine.
[[noreturn]] void bad_input(const std::string& path, const std::string& msg);
// The errno of a failed read in an HDF5 error stack's text, or 0.
int read_errno(const std::string& stack);

// "integer", "float", "string", ... for messages.
std::string class_name(H5T_class_t c);

// A string-typed memory type matching `file_type`'s character set: variable-length
// if `variable`, otherwise fixed with room for `fixed_size` bytes and a terminating NUL.
H5Datatype string_mem_type(hid_t file_type, bool variable, std::size_t fixed_size);

// Opens `path` read-only with HDF5's POSIX (sec2) driver on this rank alone
// (no MPI): a missing, unreadable or non-HDF5 file is an InputError. The data
// set readers call it inside a read phase (io/checkpoint_phase.hpp) every rank
// runs, so every rank agrees on the outcome and a rank whose storage stops
// answering trips the I/O deadline instead of leaving the others in H5Fopen.
H5File open_for_read(const std::string& path);
// The file access properties of open_for_read: HDF5's POSIX (sec2) driver,
// no file locking (flock).
H5PropList sec2_read_fapl();

// The transfer property list of a data set's reads (the default one: the file
// is open with the POSIX driver, so no MPI-IO mode applies).
H5PropList read_transfer();

// Opens a data set file on every rank of `comm`: runs `open` (this rank opens
// and checks the file with open_for_read, no MPI) in one read phase under a
// "data set I/O" deadline of `io_timeout_s`, so every rank gets the same
// InputError for a bad file, the failing rank's CheckpointIoError for failing
// storage, and storage that stops answering ends the job naming the rank.
// `what` names the reader in the MPI check. Collective.
void open_on_every_rank(const std::string& path, MPI_Comm comm, double io_timeout_s, const char* what,
                        const std::function<void()>& open);

// Root attribute `name` of `file` if it exists, checked to be a 1-D array;
// `points` receives its length.
std::optional<H5Attribute> open_array_attr(hid_t file, const char* name, const std::string& path,
                                           hssize_t& points);

// Scalar root attributes; std::nullopt when absent, InputError when of the wrong
// class. Strings are bounded to 4096 bytes.
std::optional<std::string> read_string_attr(hid_t file, const char* name, const std::string& path);
std::optional<std::int64_t> read_int_attr(hid_t file, const char* name, const std::string& path);
std::optional<double> read_float_attr(hid_t file, const char* name, const std::string& path);  // float or integer

// A scalar attribute `name` of object `obj` (`where` in messages: "root group",
// "/config") that must exist: "WHERE has no attribute 'NAME'" + `missing_hint`,
// "WHERE attribute 'NAME' must be a scalar integer", "... is outside [LO, HI]",
// "... cannot be read". A string must be fixed-length, at most 4096 bytes,
// ASCII or UTF-8 (read up to its first NUL).
std::int64_t read_i64_attr(const std::string& path, hid_t obj, const std::string& where, const char* name,
                           std::int64_t lo, std::int64_t hi, const char* missing_hint);
double read_f64_attr(const std::string& path, hid_t obj, const std::string& where, const char* name,
                     const char* missing_hint);
std::string read_fixed_string_attr(const std::string& path, hid_t obj, const std::string& where,
                                   const char* name, const char* missing_hint);

// Checks the root attributes 'format' (== `format`) and 'format_version'
// (== `version`); `what` names the kind of file ("token data set") in messages.
void check_format(hid_t file, const std::string& path, const std::string& what, std::string_view format,
                  std::int64_t version);

// An integer root attribute that must exist and lie in [lo, hi]
// ("missing attribute 'NAME'", "NAME V out of range [LO, HI]").
std::int64_t require_int(hid_t file, const char* name, const std::string& path, std::int64_t lo,
                         std::int64_t hi);

// Opens the dataset at absolute path `name` ("/train/tokens"), or fails with
// "missing dataset" naming it. Every path component is checked in turn because
// H5Lexists fails (rather than answering false) on a missing intermediate group.
H5Dataset open_dataset(hid_t file, const std::string& name, const std::string& path);

// Why HDF5 should not read a dataset with creation properties `dcpl` and elements
// of `elem_bytes`, as a phrase to follow the dataset's name ("is stored in chunks
// of more than N bytes", ...), or "" if it may. Refused: chunks above
// `max_chunk_bytes` (HDF5 allocates, and inflates, a whole chunk to read any
// element of it), virtual storage, external files, and any filter (compression
// and the like: shardtrain's writers use none).
std::string storage_problem(hid_t dcpl, std::size_t elem_bytes, std::uint64_t max_chunk_bytes);

// Bounds for read_strings.
struct StringLimits {
  std::size_t entry_bytes;           // a fixed-length string type larger than this is refused
  std::size_t total_bytes;           // all the text, fixed or variable-length
  std::size_t variable_entry_bytes;  // a variable-length entry is cut to this (SIZE_MAX: not cut)
};

// Reads all `count` entries of the 1-D string dataset `ds` (file type `file_type`,
// named `name` in messages) with transfer properties `xfer`. HDF5 allocates each
// variable-length string itself, so a budgeted allocator bounds the total before
// it is allocated (entries may all point at one huge heap object); it is also far
// cheaper than H5Dvlen_get_buf_size (2 s for 70k strings in 1.10).
std::vector<std::string> read_strings(hid_t ds, hid_t file_type, const std::string& name, std::size_t count,
                                      hid_t xfer, const StringLimits& limits, const std::string& path);

}  // namespace shardtrain::h5
