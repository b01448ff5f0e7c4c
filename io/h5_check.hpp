// shardtrain/io/h5_check.hpp
// Owns the two habits every HDF5 call in io/ follows:
//  1. Every H5* return value is checked. SHARDTRAIN_H5_CHECK(call) evaluates the
//     call once and, if the result is negative (the HDF5 failure convention for
//     herr_t, hid_t, htri_t and hssize_t alike), throws shardtrain::Error with
//     "io/file.cpp:LINE: HDF5 call failed: <call text>: <HDF5 error stack>".
//     (Named SHARDTRAIN_H5_CHECK, not H5_CHECK: the H5_ prefix is HDF5's own.)
//  2. Every hid_t is owned by an RAII handle (H5File, H5Dataset, H5Dataspace,
//     H5Datatype, H5PropList, H5Attribute, H5Group) that closes it exactly once.
// Invariants: HDF5's automatic error printing is switched off by
// h5::quiet_errors() (called by every io/ entry point), so a failure is reported
// once, in the exception, never as a stack dump on stderr. Handles must be
// destroyed before MPI_Finalize, and objects before the file they live in
// (declare the file handle first).
// Where a failure means bad user input rather than a broken program, callers use
// the raw call and throw InputError themselves, with the file name.
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>

#include "core/error.hpp"

namespace shardtrain::h5 {

// Switches off HDF5's automatic error-stack printing for this process (idempotent).
void quiet_errors();

// The current HDF5 error stack as one line ("H5Fopen: unable to open file; ..."),
// empty when the stack is empty. Clears the stack.
std::string error_stack_text();

namespace detail {
[[noreturn]] void throw_h5_error(const char* file, int line, const char* call);
}  // namespace detail

template <class T>
inline T check(T result, const char* file, int line, const char* call) {
  if (result < 0) detail::throw_h5_error(file, line, call);
  return result;
}

// Owns one hid_t and closes it with Close (H5Fclose, H5Dclose, ...). Move-only.
// The destructor ignores a failing close (it must not throw); use close() where
// the close matters (a file being written: H5Fclose flushes it).
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : m_id(id) {}
  ~Handle() {
    if (m_id >= 0) (void)Close(m_id);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : m_id(std::exchange(o.m_id, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      if (m_id >= 0) (void)Close(m_id);
      m_id = std::exchange(o.m_id, H5I_INVALID_HID);
    }
    return *this;
  }

  hid_t get() const { return m_id; }
  operator hid_t() const { return m_id; }  // NOLINT: handles are passed straight to H5* calls
  bool valid() const { return m_id >= 0; }

  // Closes now and checks the result.
  void close(const char* file, int line) {
    if (m_id < 0) return;
    const hid_t id = std::exchange(m_id, H5I_INVALID_HID);
    check(Close(id), file, line, "close");
  }

 private:
  hid_t m_id = H5I_INVALID_HID;
};

using H5File = Handle<H5Fclose>;
using H5Dataset = Handle<H5Dclose>;
using H5Dataspace = Handle<H5Sclose>;
using H5Datatype = Handle<H5Tclose>;
using H5PropList = Handle<H5Pclose>;
using H5Attribute = Handle<H5Aclose>;
using H5Group = Handle<H5Gclose>;

}  // namespace shardtrain::h5

// Evaluates an H5* call once; throws shardtrain::Error on a negative result and
// otherwise yields the result (so it can wrap calls that return an id).
#define SHARDTRAIN_H5_CHECK(call) ::shardtrain::h5::check((call), __FILE__, __LINE__, #call)

// Closes a handle now, checking the close.
#define SHARDTRAIN_H5_CLOSE(handle) (handle).close(__FILE__, __LINE__)
