// The MNIST importer (see mnist_import.hpp): idx files -> labelled-sample data set.
// All four headers (and, for uncompressed files, the file sizes) are checked
// before the output is created; the samples are then streamed one at a time into
// SampleDatasetWriter, checking each label, and the sizes of gzipped files are
// checked as the stream ends.
#include "io/mnist_import.hpp"

#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.hpp"
#include "io/sample_dataset_writer.hpp"

namespace shardtrain {

namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t kImageMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr std::uint32_t kLabelMagic = 0x00000801;  // unsigned byte, 1 dimension
constexpr std::int64_t kMaxSide = 4096;
constexpr int kNumClasses = 10;

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// One idx file, read sequentially through zlib (which passes uncompressed files
// through unchanged).
class IdxFile {
 public:
  IdxFile(std::string path, bool gzipped) : m_path(std::move(path)), m_gzipped(gzipped) {
    std::error_code ec;
    if (!m_gzipped) m_size = static_cast<std::int64_t>(fs::file_size(m_path, ec));
    if (ec) throw InputError(m_path + ": cannot read its size: " + ec.message());
    m_gz = gzopen(m_path.c_str(), "rb");
    if (!m_gz) throw InputError(m_path + ": cannot open for reading: " + std::strerror(errno));
    gzbuffer(m_gz, 1 << 17);
  }
  ~IdxFile() {
    if (m_gz) gzclose(m_gz);
  }
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  const std::string& path() const { return m_path; }

  // Reads the header: magic, then one big-endian uint32 per dimension.
  std::vector<std::int64_t> read_header(std::uint32_t magic, int ndims, const char* what) {
    std::array<unsigned char, 4> m{};
    if (!read(m.data(), 4)) throw InputError(m_path + ": too short for an idx header");
    const std::uint32_t got = be32(m.data());
    if (got != magic)
      throw InputError(m_path + ": not an idx " + what + " file (magic " + hex32(got) + ", expected " + hex32(magic) +
                       ")");
    std::vector<std::int64_t> dims;
    for (int d = 0; d < ndims; ++d) {
      if (!read(m.data(), 4)) throw InputError(m_path + ": truncated idx header");
      dims.push_back(be32(m.data()));
    }
    m_header_bytes = 4 + 4 * static_cast<std::int64_t>(ndims);
    return dims;
  }

  // For an uncompressed file: the size must be exactly the header-implied size.
  void check_size(std::int64_t payload, const std::string& what) const {
    if (m_gzipped) return;  // checked as the stream ends (check_end)
    const std::int64_t want = m_header_bytes + payload;
    if (m_size < want)
      throw InputError(m_path + ": truncated: " + std::to_string(m_size) + " bytes, the header (" + what +
                       ") implies " + std::to_string(want));
    if (m_size > want)
      throw InputError(m_path + ": " + std::to_string(m_size - want) + " trailing bytes after the " +
                       std::to_string(want) + " bytes the header (" + what + ") implies");
  }

  bool read(void* buf, std::size_t n) {
    const int got = gzread(m_gz, buf, static_cast<unsigned>(n));
    if (got < 0) {
      int errnum = 0;
      throw InputError(m_path + ": read error: " + gzerror(m_gz, &errnum));
    }
    return static_cast<std::size_t>(got) == n;
  }

  // After the last sample: no bytes may follow.
  void check_end(const std::string& what) {
    unsigned char extra = 0;
    if (gzread(m_gz, &extra, 1) != 0)
      throw InputError(m_path + ": trailing bytes after the data the header (" + what + ") implies");
  }

 private:
  static std::uint32_t be32(const unsigned char* p) {
    return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
  }
  std::string m_path;
  bool m_gzipped = false;
  std::int64_t m_size = 0;
  std::int64_t m_header_bytes = 0;
  gzFile m_gz = nullptr;
};

// DIR/NAME, or DIR/NAME.gz if only that exists.
std::unique_ptr<IdxFile> open_idx(const std::string& dir, const std::string& name) {
  const fs::path plain = fs::path(dir) / name;
  const fs::path gz = fs::path(dir) / (name + ".gz");
  std::error_code ec;
  if (fs::is_regular_file(plain, ec)) return std::make_unique<IdxFile>(plain.string(), false);
  if (fs::is_regular_file(gz, ec)) return std::make_unique<IdxFile>(gz.string(), true);
  throw InputError(plain.string() + ": no such file (nor " + name + ".gz)");
}

struct IdxPair {
  std::unique_ptr<IdxFile> images, labels;
  std::int64_t count = 0, height = 0, width = 0;
  std::string shape_text;  // "60000 images of 28x28"
};

IdxPair open_pair(const std::string& dir, const std::string& prefix) {
  IdxPair p;
  p.images = open_idx(dir, prefix + "-images-idx3-ubyte");
  p.labels = open_idx(dir, prefix + "-labels-idx1-ubyte");
  const auto idims = p.images->read_header(kImageMagic, 3, "image (idx3, ubyte)");
  p.count = idims[0], p.height = idims[1], p.width = idims[2];
  if (p.height < 1 || p.height > kMaxSide || p.width < 1 || p.width > kMaxSide)
    throw InputError(p.images->path() + ": image size " + std::to_string(p.height) + "x" + std::to_string(p.width) +
                     " out of range (1 to " + std::to_string(kMaxSide) + " per side)");
  if (p.count < 1) throw InputError(p.images->path() + ": holds no images");
  p.shape_text = std::to_string(p.count) + " images of " + std::to_string(p.height) + "x" + std::to_string(p.width);
  p.images->check_size(p.count * p.height * p.width, p.shape_text);  // <= 2^32 * 2^24: no overflow
  const std::int64_t n_labels = p.labels->read_header(kLabelMagic, 1, "label (idx1, ubyte)")[0];
  p.labels->check_size(n_labels, std::to_string(n_labels) + " labels");
  if (n_labels != p.count)
    throw InputError(p.labels->path() + ": holds " + std::to_string(n_labels) + " labels, but " +
                     p.images->path() + " holds " + std::to_string(p.count) + " images");
  return p;
}

void stream_pair(IdxPair& p, SampleSplit split, SampleDatasetWriter& writer) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(p.height * p.width));
  for (std::int64_t i = 0; i < p.count; ++i) {
    std::uint8_t label = 0;
    if (!p.labels->read(&label, 1))
      throw InputError(p.labels->path() + ": truncated: ends at label " + std::to_string(i) + " of " +
                       std::to_string(p.count));
    if (label >= kNumClasses)
      throw InputError(p.labels->path() + ": sample " + std::to_string(i) + ": label " + std::to_string(label) +
                       " out of range [0, 9]");
    if (!p.images->read(pixels.data(), pixels.size()))
      throw InputError(p.images->path() + ": truncated: ends in image " + std::to_string(i) + " of " +
                       std::to_string(p.count));
    writer.append_image(split, pixels, label);
  }
  p.images->check_end(p.shape_text);
  p.labels->check_end(std::to_string(p.count) + " labels");
}

}  // namespace

MnistImportSummary import_mnist(const std::string& dir, const std::string& output) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError(dir + ": no such directory");
  IdxPair train = open_pair(dir, "train");
  IdxPair test = open_pair(dir, "t10k");
  if (test.height != train.height || test.width != train.width)
    throw InputError(test.images->path() + ": images of " + std::to_string(test.height) + "x" +
                     std::to_string(test.width) + ", but " + train.images->path() + " has " +
                     std::to_string(train.height) + "x" + std::to_string(train.width));

  SampleDatasetSpec spec;
  spec.kind = SampleKind::Image;
  spec.sample_shape = {1, train.height, train.width};
  for (int c = 0; c < kNumClasses; ++c) spec.class_names.push_back(std::to_string(c));
  spec.source = "MNIST idx files (" + fs::path(train.images->path()).filename().string() + ", ...)";
  spec.split_rule = "MNIST's own train (" + std::to_string(train.count) + ") and t10k (" +
                    std::to_string(test.count) + ") files";
  SampleDatasetWriter writer(output, spec);
  stream_pair(train, SampleSplit::Train, writer);
  stream_pair(test, SampleSplit::Val, writer);
  writer.commit();
  return {train.count, test.count, train.height, train.width};
}

}  // namespace shardtrain
