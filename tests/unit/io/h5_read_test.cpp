// io/h5_read.hpp: read_errno, the errno of a failed read in HDF5's error stack text.
#include "io/h5_read.hpp"

#include <gtest/gtest.h>

namespace shardtrain::h5 {
namespace {

TEST(H5Read, ReadErrnoFromTheStack) {
  EXPECT_EQ(read_errno("  #003: H5FDsec2.c line 702 in H5FD__sec2_read(): file read failed: time = Sun Nov 29, "
                       "filename = 'a.h5', file descriptor = 7, errno = 5, error message = 'Input/output error'"),
            5);
  EXPECT_EQ(read_errno("x read failed: errno = 110, error message = 'timed out'; errno = 5"), 110);
  // The errno must follow "read failed" before the next ';'.
  EXPECT_EQ(read_errno("errno = 5; read failed: no number here; errno = 7"), 0);
  EXPECT_EQ(read_errno("write failed: errno = 28"), 0);
  EXPECT_EQ(read_errno("read failed: errno = x; read failed: errno = 12"), 12);
  EXPECT_EQ(read_errno(""), 0);
}

}  // namespace
}  // namespace shardtrain::h5
