// shardtrain/io/crc32.hpp
// Owns the CRC-32 (IEEE 802.3, reflected: zlib's crc32, gzip's and PNG's) of
// checkpoint datasets and of the weights column of metrics.csv, computed with
// Intel ISA-L's carry-less-multiply kernel (crc32_gzip_refl, about 10x zlib's
// 1.2 table-driven rate here), so that a checkpoint's CRC pass costs a small
// fraction of its write. The values are zlib's, bit for bit (tested against
// zlib in tests/unit/io/crc32_test.cpp), so files written before stay valid.
// crc32_join makes one CRC of the pieces' CRCs a device backend computes where
// the bytes are (Backend::crc32_pieces).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace shardtrain {

// The CRC-32 of `bytes` bytes at `p`, continuing `crc` (the CRC of the bytes
// before; 0 to start): crc32(crc, p, bytes) of zlib.
std::uint32_t crc32_ieee(std::uint32_t crc, const void* p, std::size_t bytes);

// The CRC-32 of `bytes` bytes from the CRCs of their consecutive `piece`-byte
// pieces (the last one shorter when piece does not divide bytes), as
// Backend::crc32_pieces returns them: crcs.size() must be ceil(bytes / piece).
// zlib's crc32_combine, one shift operator for all the whole pieces.
std::uint32_t crc32_join(std::span<const std::uint32_t> crcs, std::size_t piece, std::size_t bytes);

}  // namespace shardtrain
