// Unit tests of io/npy_write.*: the .npy v1.0 header (magic, version, length,
// the dict padded to a 64-byte multiple, Python's tuple for the shape), the
// values streamed in blocks at the tensor's offset, and that a failed export
// leaves neither OUT nor OUT.partial.
#include "io/npy_write.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

class NpyWriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = std::filesystem::temp_directory_path() / ("shardtrain_npy_" + std::to_string(::getpid()));
    std::filesystem::create_directories(m_dir);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }
  std::string path(const std::string& name) const { return (m_dir / name).string(); }
  std::filesystem::path m_dir;
};

TEST(NpyHeader, MagicVersionLengthAndShape) {
  for (const auto& [shape, text] : std::vector<std::pair<std::vector<std::int64_t>, std::string>>{
           {{3, 4}, "(3, 4)"}, {{5}, "(5,)"}, {{}, "()"}, {{2, 3, 4, 5}, "(2, 3, 4, 5)"}}) {
    const std::string h = npy_header(shape);
    ASSERT_GE(h.size(), 10u);
    EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const std::size_t len = static_cast<unsigned char>(h[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(h[9])) << 8);
    EXPECT_EQ(h.size(), 10 + len);
    EXPECT_EQ(h.size() % 64, 0u) << text;
    EXPECT_EQ(h.back(), '\n');
    EXPECT_EQ(h.substr(10, std::strlen("{'descr': '<f4', 'fortran_order': False, 'shape': ")),
              "{'descr': '<f4', 'fortran_order': False, 'shape': ");
    EXPECT_NE(h.find("'shape': " + text + ", }"), std::string::npos) << h;
  }
}

TEST_F(NpyWriteTest, StreamsTheTensorsElementsInBlocks) {
  std::vector<float> vec(20);
  for (std::size_t i = 0; i < vec.size(); ++i) vec[i] = 0.5f * static_cast<float>(i);
  std::vector<std::pair<std::int64_t, std::int64_t>> reads;
  const ReadFloats read = [&](std::int64_t lo, std::int64_t hi, float* out) {
    reads.emplace_back(lo, hi);
    for (std::int64_t i = lo; i < hi; ++i) out[i - lo] = vec[static_cast<std::size_t>(i)];
  };
  const std::string out = path("t.npy");
  write_npy(out, {2, 3}, 7, 6, read, 4);  // elements [7, 13) in blocks of at most 4
  EXPECT_EQ(reads, (std::vector<std::pair<std::int64_t, std::int64_t>>{{7, 11}, {11, 13}}));
  const std::string bytes = read_all(out);
  const std::string header = npy_header({2, 3});
  ASSERT_EQ(bytes.size(), header.size() + 6 * 4);
  EXPECT_EQ(bytes.substr(0, header.size()), header);
  std::vector<float> got(6);
  std::memcpy(got.data(), bytes.data() + header.size(), 6 * 4);
  EXPECT_EQ(got, std::vector<float>(vec.begin() + 7, vec.begin() + 13));
  EXPECT_FALSE(std::filesystem::exists(out + ".partial"));
}

TEST_F(NpyWriteTest, AFailedReadLeavesNoFile) {
  const ReadFloats read = [](std::int64_t, std::int64_t, float*) { throw std::runtime_error("read failed"); };
  const std::string out = path("bad.npy");
  EXPECT_THROW(write_npy(out, {4}, 0, 4, read, 2), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out + ".partial"));
}

}  // namespace
}  // namespace shardtrain
