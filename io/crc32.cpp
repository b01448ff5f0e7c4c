// The CRC-32 of checkpoints and weights through ISA-L (io/crc32.hpp).
#include "io/crc32.hpp"

#include <isa-l/crc.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace shardtrain {

std::uint32_t crc32_ieee(std::uint32_t crc, const void* p, std::size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t done = 0; done < bytes;) {  // ISA-L takes uint64_t lengths; chunks keep progress bounded
    const std::size_t n = std::min<std::size_t>(bytes - done, std::size_t{1} << 30);
    crc = crc32_gzip_refl(crc, b + done, n);
    done += n;
  }
  return crc;
}

std::uint32_t crc32_join(std::span<const std::uint32_t> crcs, std::size_t piece, std::size_t bytes) {
  SHARDTRAIN_CHECK(piece > 0, "crc32_join: piece size must be positive");
  const std::size_t n = (bytes + piece - 1) / piece;
  SHARDTRAIN_CHECK(crcs.size() == n, "crc32_join: " + std::to_string(crcs.size()) + " piece CRCs for " +
                                         std::to_string(bytes) + " bytes in pieces of " + std::to_string(piece) +
                                         " (expected " + std::to_string(n) + ")");
  if (n == 0) return 0;
  uLong crc = crcs[0];
  const uLong whole = crc32_combine_gen(static_cast<z_off_t>(piece));
  for (std::size_t i = 1; i + 1 < n; ++i) crc = crc32_combine_op(crc, crcs[i], whole);
  if (n > 1) crc = crc32_combine(crc, crcs[n - 1], static_cast<z_off_t>(bytes - (n - 1) * piece));
  return static_cast<std::uint32_t>(crc);
}

}  // namespace shardtrain
