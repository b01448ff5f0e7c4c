// Unit tests of io/weights_file.*: safetensors headers (tensors, metadata,
// escapes, element ranges read by pread) and their refusals (a header longer
// than the file, offsets that do not hold the shape, an unknown dtype, bad
// JSON, a non-F32 read); HDF5 files (contiguous datasets by path, root
// attributes as metadata, a chunked dataset refused, a checkpoint recognised).
#include "io/weights_file.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace shardtrain {
namespace {

class WeightsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = std::filesystem::temp_directory_path() / ("shardtrain_weights_" + std::to_string(::getpid()));
    std::filesystem::create_directories(m_dir);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }
  std::string path(const std::string& name) const { return (m_dir / name).string(); }

  // A safetensors file: the 8-byte length, `header`, then `data`.
  std::string safetensors(const std::string& name, const std::string& header, const std::vector<float>& data) {
    const std::string p = path(name);
    std::ofstream f(p, std::ios::binary);
    const std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xFF));
    f << header;
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
    return p;
  }
  // What `fn` throws as InputError (the test fails if it throws nothing).
  template <class F>
  std::string refusal(F fn) {
    try {
      fn();
    } catch (const InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no InputError";
    return {};
  }

  std::filesystem::path m_dir;
};

TEST_F(WeightsFileTest, SafetensorsTensorsMetadataAndRanges) {
  std::vector<float> data(10);
  for (int i = 0; i < 10; ++i) data[i] = static_cast<float>(i) + 0.5f;
  const std::string p = safetensors(
      "a.safetensors",
      R"({"__metadata__": {"n_head": "4", "note": "a \"quoted\" \u00e9"}, "b": {"dtype": "F32", "shape": [2, 3],)"
      R"( "data_offsets": [16, 40]}, "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
      data);
  const WeightsFile f(p);
  EXPECT_EQ(f.format(), "safetensors");
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "a");  // file order: by offset
  const WeightsTensor* b = f.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(b->numel, 6);
  EXPECT_EQ(f.metadata_or("n_head", ""), "4");
  EXPECT_EQ(f.metadata_or("note", ""), "a \"quoted\" \xC3\xA9");
  EXPECT_EQ(f.metadata_or("absent", "x"), "x");
  std::vector<float> got(3);
  f.read(*b, 2, 5, got.data());  // elements 2..4 of b = file elements 6..8
  EXPECT_EQ(got, (std::vector<float>{6.5f, 7.5f, 8.5f}));
  EXPECT_EQ(f.find("c"), nullptr);
}

TEST_F(WeightsFileTest, SafetensorsRefusals) {
  const std::vector<float> four(4, 1.0f);
  const std::string shape = R"({"a": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}})";
  EXPECT_NE(refusal([&] { WeightsFile(safetensors("shape.safetensors", shape, four)); })
                .find("tensor 'a': data_offsets [0, 16) do not hold (5,) of F32 (20 bytes)"),
            std::string::npos);
  const std::string past = R"({"a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})";
  EXPECT_NE(refusal([&] { WeightsFile(safetensors("past.safetensors", past, four)); }).find("too large"),
            std::string::npos);
  const std::string dtype = R"({"a": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}})";
  EXPECT_NE(refusal([&] { WeightsFile(safetensors("dtype.safetensors", dtype, four)); }).find("unknown dtype 'Q4'"),
            std::string::npos);
  EXPECT_NE(refusal([&] { WeightsFile(safetensors("json.safetensors", R"({"a": {"dtype": )", four)); })
                .find("not a safetensors file"),
            std::string::npos);
  // A header length past the end of the file.
  const std::string p = path("long.safetensors");
  {
    std::ofstream f(p, std::ios::binary);
    const char len[8] = {'\x00', '\x10', 0, 0, 0, 0, 0, 0};
    f.write(len, 8);
    f << "{}";
  }
  EXPECT_NE(refusal([&] { WeightsFile{p}; }).find("header length 4096 exceeds the file"), std::string::npos);
  // An F16 tensor is listed, and refused when read.
  const std::string half = R"({"h": {"dtype": "F16", "shape": [8], "data_offsets": [0, 16]}})";
  const WeightsFile f(safetensors("half.safetensors", half, four));
  std::vector<float> out(8);
  EXPECT_NE(refusal([&] { f.read(*f.find("h"), 0, 8, out.data()); }).find("is F16; only float32"), std::string::npos);
  EXPECT_NE(refusal([&] { WeightsFile{path("none.safetensors")}; }).find("cannot open"), std::string::npos);
  // \u escapes: a surrogate pair is one character (U+1F600); a lone half is refused.
  const std::string pair = R"({"__metadata__": {"e": "\ud83d\ude00"}, "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})";
  EXPECT_EQ(WeightsFile(safetensors("pair.safetensors", pair, four)).metadata_or("e", ""), "\xF0\x9F\x98\x80");
  for (const char* lone : {R"("\ud83d")", R"("\ud83dx")", R"("\ude00")", R"("\ud83d\u0041")"}) {
    const std::string header = std::string(R"({"__metadata__": {"e": )") + lone +
                               R"(}, "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})";
    EXPECT_NE(refusal([&] { WeightsFile(safetensors("lone.safetensors", header, four)); }).find("surrogate"),
              std::string::npos)
        << lone;
  }
}

// An HDF5 file with /w (2, 3) float32 contiguous, /g/v (4,) float32, and
// optionally a chunked /c and a root attribute format = `format`.
std::string write_h5(const std::string& p, bool chunked, const std::string& format) {
  const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const float w[6] = {1, 2, 3, 4, 5, 6}, v[4] = {7, 8, 9, 10};
  hsize_t d2[2] = {2, 3}, d1[1] = {4};
  hid_t s = H5Screate_simple(2, d2, nullptr);
  hid_t ds = H5Dcreate2(f, "w", H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w);
  H5Dclose(ds);
  H5Sclose(s);
  const hid_t g = H5Gcreate2(f, "g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  s = H5Screate_simple(1, d1, nullptr);
  ds = H5Dcreate2(g, "v", H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
  H5Dclose(ds);
  if (chunked) {
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t chunk[1] = {2};
    H5Pset_chunk(dcpl, 1, chunk);
    ds = H5Dcreate2(f, "c", H5T_IEEE_F32LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(ds);
    H5Pclose(dcpl);
  }
  H5Sclose(s);
  H5Gclose(g);
  const hid_t t = H5Tcopy(H5T_C_S1);
  const std::string text = format.empty() ? "x" : format;
  H5Tset_size(t, text.size());
  const hid_t as = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(f, format.empty() ? "producer" : "format", t, as, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, text.data());
  H5Aclose(a);
  H5Sclose(as);
  H5Tclose(t);
  H5Fclose(f);
  return p;
}

TEST_F(WeightsFileTest, Hdf5DatasetsByPathAndAttributes) {
  const WeightsFile f(write_h5(path("w.h5"), false, ""));
  EXPECT_EQ(f.format(), "hdf5");
  ASSERT_EQ(f.tensors().size(), 2u);
  const WeightsTensor* v = f.find("g/v");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->dtype, "F32");
  std::vector<float> got(2);
  f.read(*v, 1, 3, got.data());
  EXPECT_EQ(got, (std::vector<float>{8, 9}));
  const WeightsTensor* w = f.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<std::int64_t>{2, 3}));
  f.read(*w, 4, 6, got.data());
  EXPECT_EQ(got, (std::vector<float>{5, 6}));
  EXPECT_EQ(f.metadata_or("producer", ""), "x");
  EXPECT_FALSE(WeightsFile::is_checkpoint(path("w.h5")));
}

TEST_F(WeightsFileTest, Hdf5RefusesChunkedAndCheckpoints) {
  EXPECT_NE(refusal([&] { WeightsFile{write_h5(path("c.h5"), true, "")}; })
                .find("dataset 'c' is not stored contiguously"),
            std::string::npos);
  const std::string ck = write_h5(path("ck.h5"), false, "shardtrain-checkpoint");
  EXPECT_TRUE(WeightsFile::is_checkpoint(ck));
  EXPECT_NE(refusal([&] { WeightsFile{ck}; }).find("is a shardtrain checkpoint, not an export"), std::string::npos);
  EXPECT_NE(refusal([&] { WeightsFile{path("x.bin")}; }).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace shardtrain
