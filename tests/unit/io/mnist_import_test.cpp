// Unit tests of the MNIST importer on small synthetic idx files written here
// (MNIST itself is never checked in): a valid import read back value by value,
// the same files gzipped, and damaged files (wrong magic, truncated, padded,
// mismatched counts, label 10, bad image size, a missing file), each an
// InputError naming the offending file, with no output left behind.
// Runs under the shared MPI main (SampleDataset opens files through MPI-IO).
#include "io/mnist_import.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/sample_dataset.hpp"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

// The test's scratch directory, removed at exit.
struct ScratchDir {
  fs::path dir = fs::temp_directory_path() / ("shardtrain_mnist_test_" + std::to_string(::getpid()));
  ScratchDir() { fs::create_directories(dir); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
} g_scratch;

const fs::path& root() { return g_scratch.dir; }

constexpr std::uint32_t kH = 5, kW = 3;  // not square: catches a swapped H/W

std::uint8_t pixel(int split, std::uint32_t i, std::uint32_t e) {
  return static_cast<std::uint8_t>((i * 37 + e * 11 + static_cast<std::uint32_t>(split) * 5) % 256);
}
std::uint8_t label_of(int split, std::uint32_t i) { return static_cast<std::uint8_t>((i * 7 + split) % 10); }

void be32(std::string& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xFF));
}

std::string images_idx(int split, std::uint32_t n, std::uint32_t h = kH, std::uint32_t w = kW,
                       std::uint32_t magic = 0x803) {
  std::string b;
  be32(b, magic), be32(b, n), be32(b, h), be32(b, w);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t e = 0; e < h * w; ++e) b.push_back(static_cast<char>(pixel(split, i, e)));
  return b;
}

std::string labels_idx(int split, std::uint32_t n, int bad_at = -1) {
  std::string b;
  be32(b, 0x801), be32(b, n);
  for (std::uint32_t i = 0; i < n; ++i)
    b.push_back(static_cast<char>(static_cast<int>(i) == bad_at ? 10 : label_of(split, i)));
  return b;
}

void put(const fs::path& p, const std::string& bytes, bool gz = false) {
  if (gz) {
    gzFile f = gzopen((p.string() + ".gz").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    gzclose(f);
    return;
  }
  std::ofstream(p, std::ios::binary) << bytes;
}

constexpr std::uint32_t kTrain = 37, kTest = 11;

// A directory with the four files (optionally gzipped); `edit` may overwrite any.
fs::path make_dir(const std::string& name, bool gz = false, const std::function<void(const fs::path&)>& edit = {}) {
  const fs::path d = root() / name;
  fs::create_directories(d);
  put(d / "train-images-idx3-ubyte", images_idx(0, kTrain), gz);
  put(d / "train-labels-idx1-ubyte", labels_idx(0, kTrain), gz);
  put(d / "t10k-images-idx3-ubyte", images_idx(1, kTest), gz);
  put(d / "t10k-labels-idx1-ubyte", labels_idx(1, kTest), gz);
  if (edit) edit(d);
  return d;
}

void check_import(const fs::path& dir) {
  const std::string out = (dir / "out.h5").string();
  const MnistImportSummary s = import_mnist(dir.string(), out);
  EXPECT_EQ(s.train, kTrain);
  EXPECT_EQ(s.val, kTest);
  EXPECT_EQ(s.height, kH);
  EXPECT_EQ(s.width, kW);
  SampleDataset ds(out, MPI_COMM_SELF);
  EXPECT_EQ(ds.kind(), SampleKind::Image);
  EXPECT_EQ(ds.sample_shape(), (std::vector<std::int64_t>{1, kH, kW}));
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}));
  EXPECT_EQ(ds.split_rule(), "MNIST's own train (37) and t10k (11) files");
  ASSERT_EQ(ds.size(SampleSplit::Train), kTrain);
  ASSERT_EQ(ds.size(SampleSplit::Val), kTest);
  for (int split = 0; split < 2; ++split) {
    const std::uint32_t n = split == 0 ? kTrain : kTest;
    std::vector<std::int64_t> rows;
    for (std::uint32_t i = 0; i < n; ++i) rows.push_back(n - 1 - i);  // reversed
    std::vector<float> in(rows.size() * kH * kW);
    std::vector<std::int32_t> labels(rows.size());
    ds.read(split == 0 ? SampleSplit::Train : SampleSplit::Val, rows, in.data(), nullptr, labels.data(), nullptr);
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const auto i = static_cast<std::uint32_t>(rows[k]);
      EXPECT_EQ(labels[k], label_of(split, i)) << "split " << split << " sample " << i;
      for (std::uint32_t e = 0; e < kH * kW; ++e)
        ASSERT_FLOAT_EQ(in[k * kH * kW + e], pixel(split, i, e) / 255.0f) << "split " << split << " sample " << i;
    }
  }
}

TEST(MnistImport, ValidFiles) { check_import(make_dir("valid")); }
TEST(MnistImport, GzippedFiles) { check_import(make_dir("gz", true)); }

// The import of `dir` must fail with an InputError starting with "DIR/FILE: "
// and containing `needle`, and leave no output.
void expect_fails(const fs::path& dir, const std::string& file, const std::string& needle) {
  const std::string out = (dir / "out.h5").string();
  try {
    import_mnist(dir.string(), out);
    ADD_FAILURE() << "no InputError for " << dir;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind((dir / file).string() + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".partial"));
}

TEST(MnistImport, WrongMagic) {
  expect_fails(make_dir("magic", false,
                        [](const fs::path& d) {
                          put(d / "t10k-images-idx3-ubyte", images_idx(1, kTest, kH, kW, 0x00000801));
                        }),
               "t10k-images-idx3-ubyte", "not an idx image (idx3, ubyte) file (magic 0x00000801, expected 0x00000803)");
  expect_fails(make_dir("magic_labels", false,
                        [](const fs::path& d) { put(d / "train-labels-idx1-ubyte", images_idx(0, kTrain)); }),
               "train-labels-idx1-ubyte", "magic 0x00000803, expected 0x00000801");
}

TEST(MnistImport, TruncatedAndPadded) {
  expect_fails(make_dir("trunc", false,
                        [](const fs::path& d) {
                          std::string b = images_idx(0, kTrain);
                          b.resize(b.size() - 1);
                          put(d / "train-images-idx3-ubyte", b);
                        }),
               "train-images-idx3-ubyte", "truncated: 570 bytes, the header (37 images of 5x3) implies 571");
  expect_fails(make_dir("pad", false,
                        [](const fs::path& d) { put(d / "t10k-labels-idx1-ubyte", labels_idx(1, kTest) + "xy"); }),
               "t10k-labels-idx1-ubyte", "2 trailing bytes after the 19 bytes the header (11 labels) implies");
  expect_fails(make_dir("trunc_gz", true,
                        [](const fs::path& d) {
                          std::string b = images_idx(1, kTest);
                          b.resize(b.size() - 20);
                          put(d / "t10k-images-idx3-ubyte", b, true);
                        }),
               "t10k-images-idx3-ubyte.gz", "truncated: ends in image 9 of 11");
  expect_fails(make_dir("pad_gz", true,
                        [](const fs::path& d) { put(d / "train-labels-idx1-ubyte", labels_idx(0, kTrain) + "z", true); }),
               "train-labels-idx1-ubyte.gz", "trailing bytes after the data the header (37 labels) implies");
  expect_fails(make_dir("header", false, [](const fs::path& d) { put(d / "train-images-idx3-ubyte", std::string(9, '\0')); }),
               "train-images-idx3-ubyte", "magic 0x00000000");
}

TEST(MnistImport, MismatchedCounts) {
  expect_fails(make_dir("counts", false,
                        [](const fs::path& d) { put(d / "train-labels-idx1-ubyte", labels_idx(0, kTrain - 1)); }),
               "train-labels-idx1-ubyte", "holds 36 labels, but");
}

TEST(MnistImport, LabelTen) {
  expect_fails(make_dir("label10", false,
                        [](const fs::path& d) { put(d / "t10k-labels-idx1-ubyte", labels_idx(1, kTest, 4)); }),
               "t10k-labels-idx1-ubyte", "sample 4: label 10 out of range [0, 9]");
}

TEST(MnistImport, BadImageSize) {
  expect_fails(make_dir("h0", false, [](const fs::path& d) { put(d / "train-images-idx3-ubyte", images_idx(0, 2, 0, 3)); }),
               "train-images-idx3-ubyte", "image size 0x3 out of range (1 to 4096 per side)");
  expect_fails(make_dir("h5000", false,
                        [](const fs::path& d) { put(d / "train-images-idx3-ubyte", images_idx(0, 0, 5000, 3)); }),
               "train-images-idx3-ubyte", "image size 5000x3 out of range");
  expect_fails(make_dir("hw", false, [](const fs::path& d) { put(d / "t10k-images-idx3-ubyte", images_idx(1, kTest, kW, kH)); }),
               "t10k-images-idx3-ubyte", "images of 3x5, but");
}

TEST(MnistImport, MissingFile) {
  expect_fails(make_dir("missing", false, [](const fs::path& d) { fs::remove(d / "t10k-labels-idx1-ubyte"); }),
               "t10k-labels-idx1-ubyte", "no such file (nor t10k-labels-idx1-ubyte.gz)");
  EXPECT_THROW(import_mnist((root() / "no_dir").string(), (root() / "x.h5").string()), InputError);
}

}  // namespace
}  // namespace shardtrain
