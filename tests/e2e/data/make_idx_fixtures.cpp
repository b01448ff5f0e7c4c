// Writes small synthetic MNIST-layout idx file sets for the `trainer-data mnist`
// end-to-end tests (MNIST itself is never checked in):
//   OUTDIR/valid/       train 23 images of 4x6 (labels i % 10), t10k 7
//   OUTDIR/bad_magic/   t10k-images has magic 0x00000802
//   OUTDIR/truncated/   train-images is one byte short
//   OUTDIR/mismatched/  train-labels holds 22 labels for 23 images
//   OUTDIR/label10/     t10k-labels has a 10 at sample 3
//   OUTDIR/learnable/   train 400, t10k 100 images of 4x6 whose label (a hashed
//                       sequence of 0-9) is readable from them: pixel 2*label is
//                       255, the others are hashed noise below 64 (for tests
//                       that a classifier learns, i.e. images and labels stay paired)
// Usage: make_idx_fixtures OUTDIR
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

void be32(std::string& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<char>((v >> s) & 0xFF));
}

std::string images(std::uint32_t n, std::uint32_t magic = 0x803) {
  std::string b;
  be32(b, magic), be32(b, n), be32(b, 4), be32(b, 6);
  for (std::uint32_t i = 0; i < n * 24; ++i) b.push_back(static_cast<char>(i * 7 % 256));
  return b;
}

std::string labels(std::uint32_t n, int ten_at = -1) {
  std::string b;
  be32(b, 0x801), be32(b, n);
  for (std::uint32_t i = 0; i < n; ++i) b.push_back(static_cast<char>(static_cast<int>(i) == ten_at ? 10 : i % 10));
  return b;
}

bool write_set(const std::filesystem::path& dir, const std::string& train_images, const std::string& train_labels,
               const std::string& test_images, const std::string& test_labels) {
  std::filesystem::create_directories(dir);
  const std::pair<const char*, const std::string*> files[] = {{"train-images-idx3-ubyte", &train_images},
                                                              {"train-labels-idx1-ubyte", &train_labels},
                                                              {"t10k-images-idx3-ubyte", &test_images},
                                                              {"t10k-labels-idx1-ubyte", &test_labels}};
  for (const auto& [name, bytes] : files) {
    std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
    f << *bytes;
    if (!f) return false;
  }
  return true;
}

// Label of sample i of the learnable set (split salt s) and its image.
std::uint32_t mix(std::uint32_t x) {
  x ^= x >> 16, x *= 0x7feb352dU, x ^= x >> 15, x *= 0x846ca68bU, x ^= x >> 16;
  return x;
}
std::string learnable_labels(std::uint32_t n, std::uint32_t s) {
  std::string b;
  be32(b, 0x801), be32(b, n);
  for (std::uint32_t i = 0; i < n; ++i) b.push_back(static_cast<char>(mix(i * 2 + s) % 10));
  return b;
}
std::string learnable_images(std::uint32_t n, std::uint32_t s) {
  std::string b;
  be32(b, 0x803), be32(b, n), be32(b, 4), be32(b, 6);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t label = mix(i * 2 + s) % 10;
    for (std::uint32_t p = 0; p < 24; ++p)
      b.push_back(static_cast<char>(p == 2 * label ? 255 : mix(i * 31 + p + 1000 * s) % 64));
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_idx_fixtures OUTDIR\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  std::string short_images = images(23);
  short_images.pop_back();
  const bool ok = write_set(out / "valid", images(23), labels(23), images(7), labels(7)) &&
                  write_set(out / "bad_magic", images(23), labels(23), images(7, 0x802), labels(7)) &&
                  write_set(out / "truncated", short_images, labels(23), images(7), labels(7)) &&
                  write_set(out / "mismatched", images(23), labels(22), images(7), labels(7)) &&
                  write_set(out / "label10", images(23), labels(23), images(7), labels(7, 3)) &&
                  write_set(out / "learnable", learnable_images(400, 0), learnable_labels(400, 0),
                            learnable_images(100, 1), learnable_labels(100, 1));
  if (!ok) std::fprintf(stderr, "make_idx_fixtures: cannot write below %s\n", argv[1]);
  return ok ? 0 : 1;
}
