// The safetensors export (safetensors_write.hpp). The JSON header is written
// by toml++'s JSON formatter.
#include "io/safetensors_write.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <toml++/toml.h>

#include "core/durable_file.hpp"
#include "core/error.hpp"

namespace shardtrain {

// The entry's elements: its rows of the tensor, or the whole tensor.
static std::int64_t entry_numel(const SafetensorsEntry& e) {
  const CheckpointTensor& t = *e.tensor;
  if (e.rows < 0) return t.numel;
  const std::int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  return rows == 0 ? 0 : e.rows * (t.numel / rows);
}

std::string safetensors_header(const std::vector<SafetensorsEntry>& entries,
                               const std::vector<std::pair<std::string, std::string>>& metadata,
                               const std::string& out) {
  toml::table header;
  toml::table meta;
  for (const auto& [k, v] : metadata) meta.insert_or_assign(k, v);
  header.insert_or_assign("__metadata__", std::move(meta));
  std::uint64_t size = 0;
  for (const auto& e : entries) {
    toml::array shape;
    for (const std::int64_t d : e.shape) shape.push_back(d);
    const std::uint64_t bytes = static_cast<std::uint64_t>(entry_numel(e)) * 4;
    toml::table t;
    t.insert("dtype", "F32");
    t.insert("shape", std::move(shape));
    t.insert("data_offsets", toml::array{static_cast<std::int64_t>(size), static_cast<std::int64_t>(size + bytes)});
    if (!header.insert(e.name, std::move(t)).second)
      throw InputError(out + ": two tensors named '" + e.name + "'");
    size += bytes;
  }
  std::ostringstream json;
  json << toml::json_formatter{header, toml::format_flags::none};
  std::string text = json.str();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xFF);
  return head + text;
}

void write_safetensors(const std::string& out, const std::vector<SafetensorsEntry>& entries,
                       const std::vector<std::pair<std::string, std::string>>& metadata, const ReadFloats& read,
                       std::int64_t chunk_elements) {
  const std::string head = safetensors_header(entries, metadata, out);
  std::vector<std::uint64_t> begin;  // each entry's first byte after the header
  std::uint64_t size = 0;
  for (const auto& e : entries) {
    begin.push_back(size);
    size += static_cast<std::uint64_t>(entry_numel(e)) * 4;
  }

  PartialFile partial(out);
  std::fclose(create_fresh_file(partial.tmp(), out));  // a clear message when OUT cannot be created
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } f{::open(partial.tmp().c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC)};
  if (f.fd < 0) throw InputError(out + ": cannot create: " + std::strerror(errno));
  auto put = [&](const void* data, std::uint64_t bytes, std::uint64_t at) {
    if (const int err = pwrite_all(f.fd, data, static_cast<std::size_t>(bytes), at))
      SHARDTRAIN_FAIL(out + ": write failed: " + std::strerror(err));
  };
  put(head.data(), head.size(), 0);
  const std::uint64_t base = head.size();
  std::vector<std::uint32_t> buf, tbuf;  // float32 bits, little-endian as read
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const SafetensorsEntry& e = entries[i];
    const CheckpointTensor& t = *e.tensor;
    if (t.numel == 0) continue;
    const std::uint64_t at = base + begin[i];
    const std::int64_t all_rows = t.shape.empty() ? 1 : t.shape[0];
    const std::int64_t cols = t.numel / all_rows;
    const std::int64_t rows = e.rows < 0 ? all_rows : e.rows;
    SHARDTRAIN_CHECK(e.rows < 0 || (!e.transpose && e.row0 >= 0 && e.row0 + e.rows <= all_rows),
                     out + ": bad row range of '" + e.name + "'");
    const std::int64_t block = std::max<std::int64_t>(1, chunk_elements / cols);
    buf.resize(static_cast<std::size_t>(std::min(rows, block) * cols));
    for (std::int64_t r = 0; r < rows; r += block) {
      const std::int64_t k = std::min(block, rows - r);
      const std::int64_t lo = t.offset + (e.row0 + r) * cols;
      read(lo, lo + k * cols, reinterpret_cast<float*>(buf.data()));
      if (!e.transpose) {
        put(buf.data(), static_cast<std::uint64_t>(k * cols) * 4, at + static_cast<std::uint64_t>(r * cols) * 4);
        continue;
      }
      // Rows [r, r + k) of the (rows, cols) tensor are columns [r, r + k) of the (cols, rows) output.
      tbuf.resize(static_cast<std::size_t>(k * cols));
      for (std::int64_t j = 0; j < cols; ++j)
        for (std::int64_t q = 0; q < k; ++q) tbuf[j * k + q] = buf[q * cols + j];
      if (k == rows) {
        put(tbuf.data(), static_cast<std::uint64_t>(k * cols) * 4, at);
      } else {
        for (std::int64_t j = 0; j < cols; ++j)
          put(tbuf.data() + j * k, static_cast<std::uint64_t>(k) * 4, at + static_cast<std::uint64_t>(j * rows + r) * 4);
      }
    }
  }
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) SHARDTRAIN_FAIL(out + ": write failed: " + std::strerror(errno));
  partial.commit();
}

}  // namespace shardtrain
