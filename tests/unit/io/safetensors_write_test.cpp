// Unit tests of io/safetensors_write.*: a file written in row blocks reads
// back through io/weights_file.hpp with every tensor's name, shape, values and
// the metadata; a transposed entry holds the (cols, rows) matrix; the header
// is padded so the data starts at a multiple of 8; two entries of one name are
// refused before anything is created.
#include "io/safetensors_write.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/weights_file.hpp"

namespace shardtrain {
namespace {

class SafetensorsWriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = std::filesystem::temp_directory_path() / ("shardtrain_safetensors_" + std::to_string(::getpid()));
    std::filesystem::create_directories(m_dir);
    for (std::size_t i = 0; i < m_vec.size(); ++i) m_vec[i] = 1.0f + static_cast<float>(i);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }
  std::string path(const std::string& name) const { return (m_dir / name).string(); }
  ReadFloats reader() {
    return [this](std::int64_t lo, std::int64_t hi, float* out) {
      for (std::int64_t i = lo; i < hi; ++i) out[i - lo] = m_vec[static_cast<std::size_t>(i)];
    };
  }
  std::filesystem::path m_dir;
  std::vector<float> m_vec = std::vector<float>(32);
};

TEST_F(SafetensorsWriteTest, ReadsBackTensorsMetadataAndTransposes) {
  const CheckpointTensor a{"a.weight", {3, 4}, 0, 12}, b{"b.bias", {5}, 16, 5}, c{"c.weight", {3, 4}, 0, 12};
  const std::vector<SafetensorsEntry> entries{
      {"A", &a, {3, 4}, false}, {"B", &b, {5}, false}, {"C", &c, {4, 3}, true}};
  const std::string out = path("m.safetensors");
  // Blocks of one row (4 elements): the transposed tensor goes out as strided pieces.
  write_safetensors(out, entries, {{"format", "pt"}, {"step", "7"}}, reader(), 4);
  EXPECT_FALSE(std::filesystem::exists(out + ".partial"));
  const std::string head = safetensors_header(entries, {{"format", "pt"}, {"step", "7"}}, out);
  EXPECT_EQ(head.size() % 8, 0u);

  const WeightsFile f(out);
  EXPECT_EQ(f.metadata_or("format", ""), "pt");
  EXPECT_EQ(f.metadata_or("step", ""), "7");
  ASSERT_EQ(f.tensors().size(), 3u);
  const WeightsTensor* ta = f.find("A");
  const WeightsTensor* tb = f.find("B");
  const WeightsTensor* tc = f.find("C");
  ASSERT_TRUE(ta && tb && tc);
  EXPECT_EQ(ta->dtype, "F32");
  EXPECT_EQ(ta->shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(tc->shape, (std::vector<std::int64_t>{4, 3}));
  std::vector<float> va(12), vb(5), vc(12);
  f.read(*ta, 0, 12, va.data());
  f.read(*tb, 0, 5, vb.data());
  f.read(*tc, 0, 12, vc.data());
  EXPECT_EQ(va, std::vector<float>(m_vec.begin(), m_vec.begin() + 12));
  EXPECT_EQ(vb, std::vector<float>(m_vec.begin() + 16, m_vec.begin() + 21));
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 4; ++k) EXPECT_EQ(vc[k * 3 + r], m_vec[r * 4 + k]) << r << "," << k;
}

TEST_F(SafetensorsWriteTest, WholeTensorBlocksGiveTheSameFile) {
  const CheckpointTensor c{"c.weight", {3, 4}, 0, 12};
  const std::vector<SafetensorsEntry> entries{{"C", &c, {4, 3}, true}};
  write_safetensors(path("rows.safetensors"), entries, {}, reader(), 4);
  write_safetensors(path("whole.safetensors"), entries, {}, reader(), 1 << 20);
  std::vector<float> rows(12), whole(12);
  const WeightsFile fr(path("rows.safetensors")), fw(path("whole.safetensors"));
  fr.read(*fr.find("C"), 0, 12, rows.data());
  fw.read(*fw.find("C"), 0, 12, whole.data());
  EXPECT_EQ(rows, whole);
}

TEST_F(SafetensorsWriteTest, TwoTensorsOfOneNameAreRefused) {
  const CheckpointTensor a{"a", {2}, 0, 2};
  const std::string out = path("dup.safetensors");
  try {
    write_safetensors(out, {{"X", &a, {2}, false}, {"X", &a, {2}, false}}, {}, reader(), 4);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("two tensors named 'X'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out + ".partial"));
}

}  // namespace
}  // namespace shardtrain
