// The .npy export (npy_write.hpp).
#include "io/npy_write.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/durable_file.hpp"
#include "core/error.hpp"
#include "core/text.hpp"

namespace shardtrain {

std::string npy_header(const std::vector<std::int64_t>& shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  const std::size_t fixed = 6 + 2 + 2;  // magic, version, header length
  const std::size_t total = (fixed + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - fixed - dict.size() - 1, ' ');
  dict += '\n';
  SHARDTRAIN_CHECK(dict.size() <= 0xFFFF, "npy header too long for format version 1.0");
  std::string h("\x93NUMPY\x01\x00", 8);
  h += static_cast<char>(dict.size() & 0xFF);
  h += static_cast<char>(dict.size() >> 8);
  return h + dict;
}

// Elements are little-endian in memory (the reader converts to the file's LE
// type), so the bytes go out as read.
void write_npy(const std::string& out, const std::vector<std::int64_t>& shape, std::int64_t offset,
               std::int64_t numel, const ReadFloats& read, std::int64_t chunk_elements) {
  PartialFile partial(out);
  std::FILE* f = create_fresh_file(partial.tmp(), out);
  bool ok = true;
  try {
    const std::string header = npy_header(shape);
    ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
    std::vector<float> buf(static_cast<std::size_t>(std::min(numel, chunk_elements)));
    for (std::int64_t done = 0; ok && done < numel;) {
      const std::int64_t n = std::min(chunk_elements, numel - done);
      read(offset + done, offset + done + n, buf.data());
      ok = std::fwrite(buf.data(), sizeof(float), static_cast<std::size_t>(n), f) == static_cast<std::size_t>(n);
      done += n;
    }
  } catch (...) {
    std::fclose(f);
    throw;
  }
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) SHARDTRAIN_FAIL(out + ": write failed: " + std::strerror(ok ? errno : err));
  partial.commit();
}

}  // namespace shardtrain
