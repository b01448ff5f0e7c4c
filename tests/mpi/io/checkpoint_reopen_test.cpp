// MPI test: a checkpoint freshly written by write_checkpoint (io/checkpoint.hpp)
// at any rank count, reopened with the plain HDF5 C API as any HDF5 program
// would (serial driver, read-only, on every rank), and checked against what was
// written, independently of io/'s reader:
//  - the file format pinned by h5::set_format_bounds: superblock version 2 and
//    every object a version-2 header (they carry checksums);
//  - every root attribute by name, type and value, and none besides; meta_crc32
//    equal to the CRC-32 of the "name=value\n" text this test builds itself;
//  - every dataset's crc32 attribute equal to zlib's crc32 over H5Dread of the
//    whole dataset as stored (no conversion), and those bytes equal to what the
//    ranks staged;
//  - every /params view a virtual dataset of the tensor's shape reading the
//    tensor's elements of /state/master.
// Invariants: the shards are floor cuts of an odd length (uneven at 2 and 3
// ranks), so the CRC pieces the writer combines differ in length; element
// values are pseudo-random bit patterns (NaN payloads included), so a shifted
// piece or a swapped vector shows. Failures are per rank (no collective inside
// a check); the file is removed after a barrier.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "io/checkpoint.hpp"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kN = 70001;  // odd, not a multiple of 3
struct Vec {
  const char* name;
  DType type;
};
const Vec kVectors[] = {{"master", DType::F32},
                        {"exp_avg", DType::F32},
                        {"exp_avg_sq", DType::F32},
                        {"params_fp16", DType::F16},
                        {"params_bf16", DType::BF16}};

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The stored little-endian bytes of element g of vector v.
void element_bytes(std::size_t v, std::int64_t g, std::size_t size, unsigned char* out) {
  const std::uint64_t bits = splitmix(static_cast<std::uint64_t>(g) * 8 + v);
  for (std::size_t b = 0; b < size; ++b) out[b] = static_cast<unsigned char>(bits >> (8 * b));
}

// The whole vector v as stored.
std::vector<unsigned char> whole_vector(std::size_t v) {
  const std::size_t es = dtype_size(kVectors[v].type);
  std::vector<unsigned char> out(static_cast<std::size_t>(kN) * es);
  for (std::int64_t g = 0; g < kN; ++g) element_bytes(v, g, es, out.data() + static_cast<std::size_t>(g) * es);
  return out;
}

std::vector<CheckpointTensor> make_layout() {
  return {{"embed.weight", {100, 500}, 0, 50000},
          {"ln.bias", {17}, 50000, 17},
          {"scale", {}, 50024, 1},
          {"proj.weight", {3, 5, 7, 11}, 50032, 1155}};
}

CheckpointMeta make_meta(int world) {
  CheckpointMeta m;
  m.step = 1234;
  m.samples_seen = 987654;
  m.tokens_seen = 987654 * 64;
  m.optimizer_updates = 1200;
  m.sampler_seed = 0xFEDCBA9876543210ull;  // above INT64_MAX: stored as its 64-bit pattern
  m.world_size = world;
  m.zero_stage = 2;
  m.precision = "bf16";
  m.alignment = 8;
  m.padded_size = kN;
  m.loss_scale = 32768.5;
  m.scaler_good_steps = 17;
  m.scaler_hysteresis_left = 2;
  m.scaler_consecutive_skips = 1;
  m.data_path = "data/reopen.h5";
  m.data_train_tokens = 123456789;
  m.data_vocab_size = 50257;
  m.seq_len = 64;
  m.config_text = "[model]\nd_model = 12\n# reopen test, \xc3\xa9t\xc3\xa9\n";
  m.created_utc = "2026-11-29T06:00:00Z";
  m.version = "reopen-test";
  m.parent = "step_00001000.h5";
  return m;
}

// A root attribute as this test expects it: kind 'i' a 64-bit LE integer, 'f'
// a LE double, 's' a fixed-length string of value.size() + 1 bytes; `text` is
// its value in the meta_crc32 text (doubles by their bit pattern).
struct RootAttr {
  std::string name;
  char kind;
  std::int64_t i = 0;
  double f = 0;
  std::string s;
  std::string text() const {
    if (kind == 's') return s;
    if (kind == 'i') return std::to_string(i);
    std::int64_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    return std::to_string(bits);
  }
};

std::vector<RootAttr> expected_root(const CheckpointMeta& m) {
  auto i = [](const char* n, std::int64_t v) { return RootAttr{n, 'i', v, 0, {}}; };
  auto s = [](const char* n, const std::string& v) { return RootAttr{n, 's', 0, 0, v}; };
  return {s("format", "shardtrain-checkpoint"),
          i("schema_version", 1),
          i("step", m.step),
          i("samples_seen", m.samples_seen),
          i("tokens_seen", m.tokens_seen),
          i("optimizer_updates", m.optimizer_updates),
          i("sampler_seed", static_cast<std::int64_t>(m.sampler_seed)),
          i("world_size", m.world_size),
          i("zero_stage", m.zero_stage),
          s("precision", m.precision),
          i("alignment", m.alignment),
          i("padded_size", m.padded_size),
          RootAttr{"loss_scale", 'f', 0, m.loss_scale, {}},
          i("scaler_good_steps", m.scaler_good_steps),
          i("scaler_hysteresis_left", m.scaler_hysteresis_left),
          i("scaler_consecutive_skips", m.scaler_consecutive_skips),
          s("data_path", m.data_path),
          i("data_train_tokens", m.data_train_tokens),
          i("data_vocab_size", m.data_vocab_size),
          i("seq_len", m.seq_len),
          s("created_utc", m.created_utc),
          s("shardtrain_version", m.version),
          s("parent", m.parent)};
}

herr_t collect_name(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

std::vector<std::string> attribute_names(hid_t obj) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  EXPECT_GE(H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &names), 0);
  return names;
}

// The value of obj's `crc32` attribute, which must be a scalar unsigned 32-bit LE integer.
std::uint32_t crc32_attr(hid_t obj, const std::string& what) {
  const hid_t a = H5Aopen(obj, "crc32", H5P_DEFAULT);
  if (a < 0) {
    ADD_FAILURE() << what << ": no crc32 attribute";
    return 0;
  }
  const hid_t t = H5Aget_type(a);
  EXPECT_GT(H5Tequal(t, H5T_STD_U32LE), 0) << what << ": crc32 is not an unsigned 32-bit LE integer";
  std::uint32_t v = 0;
  EXPECT_GE(H5Aread(a, H5T_NATIVE_UINT32, &v), 0) << what;
  H5Tclose(t);
  H5Aclose(a);
  return v;
}

// Reads dataset `name` whole, in its file type (the bytes as stored).
std::vector<unsigned char> read_raw(hid_t file, const std::string& name) {
  const hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  if (ds < 0) {
    ADD_FAILURE() << name << ": cannot open";
    return {};
  }
  const hid_t t = H5Dget_type(ds), sp = H5Dget_space(ds);
  const hssize_t n = H5Sget_simple_extent_npoints(sp);
  std::vector<unsigned char> out(static_cast<std::size_t>(n) * H5Tget_size(t));
  EXPECT_GE(H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), 0) << name;
  EXPECT_EQ(attribute_names(ds), std::vector<std::string>{"crc32"}) << name << ": attributes";
  H5Sclose(sp);
  H5Tclose(t);
  H5Dclose(ds);
  return out;
}

std::uint32_t zlib_crc(const std::vector<unsigned char>& b) {
  return static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), b.data(), static_cast<uInt>(b.size())));
}

unsigned header_version(hid_t file, const std::string& name) {
  H5O_info_t info{};
  if (H5Oget_info_by_name2(file, name.c_str(), &info, H5O_INFO_HDR, H5P_DEFAULT) < 0) {
    ADD_FAILURE() << name << ": H5Oget_info_by_name2 failed";
    return 0;
  }
  return info.hdr.version;
}

TEST(CheckpointReopen, Hdf5ReadsEveryAttributeCrcAndView) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // One path for every rank: rank 0's temp dir and pid.
  long pid = rank == 0 ? static_cast<long>(::getpid()) : 0;
  MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  const std::string path =
      (fs::temp_directory_path() / ("shardtrain_ckpt_reopen_" + std::to_string(pid) + ".h5")).string();

  // Write: floor cuts of [0, kN), each rank staging its elements [lo, hi).
  const std::int64_t lo = kN * rank / world, hi = kN * (rank + 1) / world;
  std::vector<std::vector<unsigned char>> staged;
  std::vector<CheckpointVectorOut> outs;
  for (std::size_t v = 0; v < std::size(kVectors); ++v) {
    const std::size_t es = dtype_size(kVectors[v].type);
    staged.emplace_back(static_cast<std::size_t>(hi - lo) * es);
    for (std::int64_t g = lo; g < hi; ++g)
      element_bytes(v, g, es, staged.back().data() + static_cast<std::size_t>(g - lo) * es);
  }
  for (std::size_t v = 0; v < std::size(kVectors); ++v)
    outs.push_back({kVectors[v].name, kVectors[v].type, staged[v].data()});
  const CheckpointMeta meta = make_meta(world);
  const std::vector<CheckpointTensor> layout = make_layout();
  write_checkpoint(path, MPI_COMM_WORLD, meta, layout, outs, lo, hi);
  MPI_Barrier(MPI_COMM_WORLD);

  // Reopen with HDF5 alone on every rank.
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_file_locking(fapl, false, true);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  ASSERT_GE(file, 0) << path << ": HDF5 cannot open it";

  // The format: superblock 2, version-2 object headers everywhere.
  H5F_info2_t finfo{};
  ASSERT_GE(H5Fget_info2(file, &finfo), 0);
  EXPECT_EQ(finfo.super.version, 2u) << "superblock version (format bounds 1.8 .. 1.10)";
  std::vector<std::string> objects = {"/", "/config", "/layout", "/state", "/params"};
  for (const Vec& v : kVectors) objects.push_back(std::string("/state/") + v.name);
  for (const auto& t : layout) objects.push_back("/params/" + t.name);
  for (const auto& o : objects) EXPECT_EQ(header_version(file, o), 2u) << o << ": object header version";

  // Every root attribute, and none besides; meta_crc32 over this test's own text.
  const std::vector<RootAttr> want = expected_root(meta);
  std::vector<std::string> want_names;
  for (const auto& a : want) want_names.push_back(a.name);
  want_names.push_back("meta_crc32");
  std::sort(want_names.begin(), want_names.end());
  EXPECT_EQ(attribute_names(file), want_names);  // H5_INDEX_NAME: sorted
  std::string text;
  for (const RootAttr& e : want) {
    text += e.name + "=" + e.text() + "\n";
    const hid_t a = H5Aopen(file, e.name.c_str(), H5P_DEFAULT);
    if (a < 0) {
      ADD_FAILURE() << "root attribute " << e.name << " missing";
      continue;
    }
    const hid_t t = H5Aget_type(a);
    if (e.kind == 'i') {
      EXPECT_GT(H5Tequal(t, H5T_STD_I64LE), 0) << e.name << ": not a 64-bit LE integer";
      std::int64_t v = 0;
      EXPECT_GE(H5Aread(a, H5T_NATIVE_INT64, &v), 0);
      EXPECT_EQ(v, e.i) << e.name;
    } else if (e.kind == 'f') {
      EXPECT_GT(H5Tequal(t, H5T_IEEE_F64LE), 0) << e.name << ": not a LE double";
      double v = 0;
      EXPECT_GE(H5Aread(a, H5T_NATIVE_DOUBLE, &v), 0);
      EXPECT_EQ(std::memcmp(&v, &e.f, sizeof v), 0) << e.name << " = " << v;
    } else {
      EXPECT_EQ(H5Tget_class(t), H5T_STRING) << e.name;
      EXPECT_LE(H5Tis_variable_str(t), 0) << e.name << ": variable-length";
      EXPECT_EQ(H5Tget_size(t), e.s.size() + 1) << e.name << ": size";
      std::string v(H5Tget_size(t), '\1');
      EXPECT_GE(H5Aread(a, t, v.data()), 0);
      EXPECT_EQ(v, e.s + std::string(1, '\0')) << e.name;
    }
    H5Tclose(t);
    H5Aclose(a);
  }
  {
    const hid_t a = H5Aopen(file, "meta_crc32", H5P_DEFAULT);
    ASSERT_GE(a, 0);
    const hid_t t = H5Aget_type(a);
    EXPECT_GT(H5Tequal(t, H5T_STD_U32LE), 0) << "meta_crc32: not an unsigned 32-bit LE integer";
    std::uint32_t v = 0;
    EXPECT_GE(H5Aread(a, H5T_NATIVE_UINT32, &v), 0);
    EXPECT_EQ(v, zlib_crc(std::vector<unsigned char>(text.begin(), text.end()))) << "meta_crc32";
    H5Tclose(t);
    H5Aclose(a);
  }

  // /config and /layout: crc32 over their stored bytes.
  {
    const std::vector<unsigned char> raw = read_raw(file, "/config");
    const hid_t ds = H5Dopen2(file, "/config", H5P_DEFAULT);
    EXPECT_EQ(crc32_attr(ds, "/config"), zlib_crc(raw));
    H5Dclose(ds);
    EXPECT_EQ(std::string(raw.begin(), raw.end()), meta.config_text);
  }
  {
    const std::vector<unsigned char> raw = read_raw(file, "/layout");
    const hid_t ds = H5Dopen2(file, "/layout", H5P_DEFAULT);
    EXPECT_EQ(crc32_attr(ds, "/layout"), zlib_crc(raw));
    H5Dclose(ds);
    ASSERT_EQ(raw.size() % layout.size(), 0u);
  }

  // /state/<v>: the bytes as stored are the ranks' staged bytes, and crc32 is their CRC-32.
  std::vector<unsigned char> master;
  for (std::size_t v = 0; v < std::size(kVectors); ++v) {
    const std::string name = std::string("/state/") + kVectors[v].name;
    const std::vector<unsigned char> raw = read_raw(file, name);
    const std::vector<unsigned char> want_bytes = whole_vector(v);
    EXPECT_TRUE(raw == want_bytes) << name << ": the stored bytes differ from the ranks' shards";
    const hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
    EXPECT_EQ(crc32_attr(ds, name), zlib_crc(raw)) << name << ": crc32 attribute != CRC-32 of its bytes";
    H5Dclose(ds);
    if (v == 0) master = raw;
  }

  // /params/<t>: virtual views of /state/master in the tensor's shape.
  for (const auto& t : layout) {
    const std::string name = "/params/" + t.name;
    const hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
    if (ds < 0) {
      ADD_FAILURE() << name << ": cannot open";
      continue;
    }
    const hid_t dcpl = H5Dget_create_plist(ds);
    EXPECT_EQ(H5Pget_layout(dcpl), H5D_VIRTUAL) << name;
    H5Pclose(dcpl);
    const hid_t sp = H5Dget_space(ds);
    const int nd = H5Sget_simple_extent_ndims(sp);
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(nd, 0)));
    H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
    EXPECT_EQ(std::vector<std::int64_t>(dims.begin(), dims.end()), t.shape) << name << ": shape";
    std::vector<unsigned char> got(static_cast<std::size_t>(t.numel) * 4);
    EXPECT_GE(H5Dread(ds, H5T_IEEE_F32LE, H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()), 0) << name;
    EXPECT_EQ(std::memcmp(got.data(), master.data() + static_cast<std::size_t>(t.offset) * 4, got.size()), 0)
        << name << ": not the tensor's elements of /state/master";
    H5Sclose(sp);
    H5Dclose(ds);
  }
  EXPECT_GE(H5Fclose(file), 0);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove(path);
}

}  // namespace
}  // namespace shardtrain
