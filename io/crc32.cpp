// The CRC-32 of checkpoints and weights through ISA-L (io/crc32.hpp).
#include "io/crc32.hpp"

#include <isa-l/crc.h>

#include <algorithm>
#include <cstdint>

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

}  // namespace shardtrain
