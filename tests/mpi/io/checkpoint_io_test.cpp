// This file is long because each hostile file is built with HDF5's C API beside the test that rejects it.
// MPI tests of the checkpoint file layer (io/checkpoint.hpp) at any rank count.
// Owns: the round trip of every field and element, elastic reads (another
// tiling, another length, a sub-communicator: a restart at another rank count),
// detection of damaged and truncated files on EVERY rank, and the rejection of
// hostile files (built with the raw HDF5 C API) as InputError without sizing
// anything from the file's claims.
// Invariants the tests keep: every rank takes part in every collective whatever
// its own checks say (failures are collected and agreed on with all_ranks), so a
// failing check can never leave a rank waiting. Files are written by rank 0 only
// when the raw (serial) HDF5 API is used, and opened by the others after a barrier.
// Element values are pseudo-random BIT PATTERNS (NaN payloads, infinities,
// subnormals included), so any conversion, shift or off-by-one shows.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cmath>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/h5_check.hpp"
#include "core/half.hpp"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using h5::H5Attribute;
using h5::H5Dataset;
using h5::H5Dataspace;
using h5::H5Datatype;
using h5::H5File;
using h5::H5PropList;

constexpr std::int64_t kN = 70001;  // odd, not a multiple of 3: no rank count 2, 3, 4 divides it
constexpr std::int64_t kChunk = std::int64_t{1} << 20;  // the reader's bounded piece (io/checkpoint_format.hpp)
const char* const kNames[] = {"master", "exp_avg", "exp_avg_sq", "params_fp16", "params_bf16"};

int rank_of(MPI_Comm c) { int r = 0; MPI_Comm_rank(c, &r); return r; }
int size_of(MPI_Comm c) { int n = 0; MPI_Comm_size(c, &n); return n; }

// True on every rank of `c` iff `ok` is true on every rank of it.
bool all_ranks(bool ok, MPI_Comm c = MPI_COMM_WORLD) {
  int v = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, c);
  return all == 1;
}

// ------------------------------------------------------------------ tilings

// Elements [lo, hi) of rank r in a tiling of [0, n) in rank order. Variants:
// 0 equal weights (floor cuts: uneven when world does not divide n),
// 1 weights (r+1)^2, 2 odd ranks empty (the last rank too when world is even),
// 3 the last rank holds everything, every other rank is empty.
std::pair<std::int64_t, std::int64_t> tile(std::int64_t n, int r, int world, int variant) {
  auto weight = [&](int k) -> std::int64_t {
    switch (variant) {
      case 0: return 1;
      case 1: return std::int64_t{k + 1} * (k + 1);
      case 2: return k % 2 == 1 ? 0 : world - k;
      default: return k == world - 1 ? 1 : 0;
    }
  };
  std::int64_t before = 0, total = 0;
  for (int k = 0; k < world; ++k) {
    if (k < r) before += weight(k);
    total += weight(k);
  }
  return {n * before / total, n * (before + weight(r)) / total};
}

// -------------------------------------------------------------- the values

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Bit pattern of element i of vector v (index into kNames) of the file with `seed`.
// fp32 vectors: every 4th element a plain number, the rest arbitrary bits.
std::uint32_t value_bits(int v, std::int64_t i, std::uint64_t seed) {
  const std::uint64_t h = mix(seed * 0x100000001B3ull + static_cast<std::uint64_t>(v) * 0x1000003ull +
                              static_cast<std::uint64_t>(i));
  if (v < 3) {
    if (i % 4 == 0) return std::bit_cast<std::uint32_t>(static_cast<float>(i) * 0.125f - 3.0f * static_cast<float>(v));
    return static_cast<std::uint32_t>(h);
  }
  return static_cast<std::uint16_t>(h >> 16);
}

DType type_of_vec(int v) { return v < 3 ? DType::F32 : v == 3 ? DType::F16 : DType::BF16; }

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
std::uint32_t bits_of(f16 x) { return x.bits; }
std::uint32_t bits_of(bf16 x) { return x.bits; }

// One rank's slice [lo, hi) of every state vector, in the in-memory types.
struct Slices {
  std::vector<float> f32[3];
  std::vector<f16> h;
  std::vector<bf16> b;
};

Slices make_slices(std::int64_t lo, std::int64_t hi, std::uint64_t seed) {
  Slices s;
  for (std::int64_t i = lo; i < hi; ++i) {
    for (int v = 0; v < 3; ++v) s.f32[v].push_back(std::bit_cast<float>(value_bits(v, i, seed)));
    s.h.push_back(f16::from_bits(static_cast<std::uint16_t>(value_bits(3, i, seed))));
    s.b.push_back(bf16::from_bits(static_cast<std::uint16_t>(value_bits(4, i, seed))));
  }
  return s;
}

std::vector<CheckpointVectorOut> outs(const Slices& s, bool with16) {
  std::vector<CheckpointVectorOut> o;
  for (int v = 0; v < 3; ++v) o.push_back({kNames[v], DType::F32, s.f32[v].data()});
  if (with16) {
    o.push_back({"params_fp16", DType::F16, s.h.data()});
    o.push_back({"params_bf16", DType::BF16, s.b.data()});
  }
  return o;
}

// Compares got[k] (element lo + k) with the file's values; elements at or beyond
// file_len must be +0. Returns "" or a description of the first mismatch.
template <class T>
std::string compare(const std::vector<T>& got, int v, std::int64_t lo, std::int64_t file_len, std::uint64_t seed) {
  std::int64_t bad = 0;
  std::string first;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const std::int64_t i = lo + static_cast<std::int64_t>(k);
    const std::uint32_t want = i < file_len ? value_bits(v, i, seed) : 0u;
    if (bits_of(got[k]) != want) {
      if (bad++ == 0)
        first = std::string(kNames[v]) + "[" + std::to_string(i) + "] = bits " + std::to_string(bits_of(got[k])) +
                ", expected " + std::to_string(want);
    }
  }
  return bad == 0 ? "" : first + " (" + std::to_string(bad) + " elements differ)";
}

// Collective read of [lo, hi) of vector v (sentinel-filled first); returns "" or the mismatch.
std::string read_and_compare(CheckpointReader& r, int v, std::int64_t lo, std::int64_t hi, std::int64_t file_len,
                             std::uint64_t seed) {
  const auto n = static_cast<std::size_t>(hi - lo);
  if (v < 3) {
    std::vector<float> got(n, std::bit_cast<float>(0xA5A5A5A5u));
    r.read_vector(kNames[v], lo, hi, got.data());
    return compare(got, v, lo, file_len, seed);
  }
  if (v == 3) {
    std::vector<f16> got(n, f16::from_bits(0xA5A5));
    r.read_vector(kNames[v], lo, hi, got.data());
    return compare(got, v, lo, file_len, seed);
  }
  std::vector<bf16> got(n, bf16::from_bits(0xA5A5));
  r.read_vector(kNames[v], lo, hi, got.data());
  return compare(got, v, lo, file_len, seed);
}

// ------------------------------------------------------------ meta, layout

CheckpointMeta make_meta(std::int64_t n, std::uint64_t seed) {
  CheckpointMeta m;
  m.step = 123456789012 + static_cast<std::int64_t>(seed);
  m.samples_seen = 987654321098;
  m.tokens_seen = m.samples_seen * 1024;
  m.optimizer_updates = m.step - 17;
  m.sampler_seed = 0xDEADBEEFCAFEF00Dull;  // above 2^63: must survive the int64 attribute
  m.world_size = size_of(MPI_COMM_WORLD);
  m.zero_stage = 2;
  m.precision = "bf16";
  m.alignment = 64;
  m.padded_size = n;
  m.loss_scale = 1.2345678901234567e-3;  // every bit of the double must survive
  m.scaler_good_steps = 1999;
  m.scaler_hysteresis_left = 2;
  m.scaler_consecutive_skips = 3;
  m.data_path = "/data/t\xc3\xafny \xe2\x88\x91 set.h5";  // UTF-8
  m.data_train_tokens = std::int64_t{1} << 40;
  m.data_vocab_size = 50257;
  m.seq_len = 1024;
  for (int line = 0; line < 120; ++line)
    m.config_text += "[section_" + std::to_string(line) + "]\nkey = \"v\xc3\xa4lue\t" + std::to_string(line * 7) +
                     "\"  # comment\n";
  m.created_utc = "2026-11-21T12:34:56Z";
  m.version = "0.1.0-test+" + std::to_string(seed);
  m.parent = "step_" + std::to_string(seed) + ".h5";
  return m;
}

// Several tensors of 0 to 4 dims with alignment gaps; ends below kN.
std::vector<CheckpointTensor> make_layout() {
  std::vector<CheckpointTensor> l = {
      {"wte.weight", {97, 64}, 0, 6208},
      {"h.0.ln_1.scale", {}, 6208, 1},
      {"h.0.attn.c_attn.weight", {192, 64}, 6272, 12288},
      {"h.0.conv.weight", {3, 4, 5, 6}, 18560, 360},
      {"h.0.bias3", {2, 3, 4}, 18944, 24},
      {"ln_f.bias", {64}, 19008, 64},
      {"lm_head.weight", {97, 500}, 19072, 48500},
      {"tail.x", {1, 1, 1, 1}, 67584, 1},
  };
  return l;
}

void expect_meta_eq(const CheckpointMeta& a, const CheckpointMeta& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.samples_seen, b.samples_seen);
  EXPECT_EQ(a.tokens_seen, b.tokens_seen);
  EXPECT_EQ(a.optimizer_updates, b.optimizer_updates);
  EXPECT_EQ(a.sampler_seed, b.sampler_seed);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.zero_stage, b.zero_stage);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.alignment, b.alignment);
  EXPECT_EQ(a.padded_size, b.padded_size);
  EXPECT_EQ(std::bit_cast<std::uint64_t>(a.loss_scale), std::bit_cast<std::uint64_t>(b.loss_scale));
  EXPECT_EQ(a.scaler_good_steps, b.scaler_good_steps);
  EXPECT_EQ(a.scaler_hysteresis_left, b.scaler_hysteresis_left);
  EXPECT_EQ(a.scaler_consecutive_skips, b.scaler_consecutive_skips);
  EXPECT_EQ(a.data_path, b.data_path);
  EXPECT_EQ(a.data_train_tokens, b.data_train_tokens);
  EXPECT_EQ(a.data_vocab_size, b.data_vocab_size);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.config_text, b.config_text);
  EXPECT_EQ(a.created_utc, b.created_utc);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.parent, b.parent);
}

void expect_layout_eq(const std::vector<CheckpointTensor>& a, const std::vector<CheckpointTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << "row " << i;
    EXPECT_EQ(a[i].shape, b[i].shape) << "row " << i;
    EXPECT_EQ(a[i].offset, b[i].offset) << "row " << i;
    EXPECT_EQ(a[i].numel, b[i].numel) << "row " << i;
  }
}

// All ranks write a file of n elements with tiling `variant`; collective.
CheckpointWriteStats write_file(const std::string& path, std::int64_t n, int variant, std::uint64_t seed,
                                bool with16, const std::vector<CheckpointTensor>& layout,
                                const std::function<void()>& pause = {}) {
  const auto [lo, hi] = tile(n, rank_of(MPI_COMM_WORLD), size_of(MPI_COMM_WORLD), variant);
  const Slices s = make_slices(lo, hi, seed);
  return write_checkpoint(path, MPI_COMM_WORLD, make_meta(n, seed), layout, outs(s, with16), lo, hi, pause);
}

// ------------------------------------------------------- expected failures

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Runs f; returns what() of the InputError it throws. Anything else (no throw,
// Error, another exception) is a test failure, reported with `what`.
std::string input_error_of(const std::function<void()>& f, const std::string& what) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": expected InputError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << what << ": expected InputError, nothing was thrown";
  return {};
}

// The message after its "PATH: " prefix (so words in the file name cannot satisfy a check).
std::string after_path(const std::string& msg, const std::string& path) {
  return starts_with(msg, path + ": ") ? msg.substr(path.size() + 2) : std::string();
}

// Checks on this rank that msg names `path` first and then contains every one of `parts`.
bool message_ok(const std::string& msg, const std::string& path, const std::vector<std::string>& parts,
                const std::string& what) {
  const std::string text = after_path(msg, path);
  bool ok = starts_with(msg, path + ": ");
  for (const auto& p : parts) ok = ok && text.find(p) != std::string::npos;
  if (!ok) ADD_FAILURE() << what << ": message does not start with the path or lacks one of the expected parts:\n  "
                         << msg;
  return ok;
}

// ----------------------------------------------------- raw file utilities

std::int64_t file_size(const std::string& p) { return static_cast<std::int64_t>(fs::file_size(p)); }

void flip_byte(const std::string& p, std::int64_t at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << p;
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(at);
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << p << " at " << at;
}

void truncate_copy(const std::string& from, const std::string& to, std::int64_t bytes) {
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  fs::resize_file(to, static_cast<std::uintmax_t>(bytes));
}

std::int64_t max_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;  // kilobytes on Linux
}

// ------------------------------------------------------------------ fixture

class CheckpointIo : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string dir;
    if (rank_of(MPI_COMM_WORLD) == 0) {
      s_dir = fs::temp_directory_path() / ("shardtrain_ckpt_io_" + std::to_string(::getpid()));
      fs::create_directories(s_dir);
      dir = s_dir.string();
    }
    int len = static_cast<int>(dir.size());
    MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
    dir.resize(static_cast<std::size_t>(len));
    MPI_Bcast(dir.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
    s_dir = dir;
    s_good = (s_dir / "good.h5").string();
    // The reference file: written with the uneven (r+1)^2 tiling, all five vectors.
    write_file(s_good, kN, 1, kSeed, true, make_layout());
  }
  static void TearDownTestSuite() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_of(MPI_COMM_WORLD) == 0) fs::remove_all(s_dir);
  }
  static std::string file(const std::string& name) { return (s_dir / name).string(); }

  static constexpr std::uint64_t kSeed = 7;
  static inline fs::path s_dir;
  static inline std::string s_good;
};

// =========================================================== hostile files
//
// Each case starts from a small valid file (copied), which rank 0 then edits
// with the raw HDF5 C API; every rank then opens it and must get an InputError
// that starts with the path and names the problem. Declared first so the peak
// RSS they are measured against is not inflated by the larger tests.

constexpr std::int64_t kBaseN = 1000;

std::vector<CheckpointTensor> base_layout() {
  return {{"a", {10, 20}, 0, 200}, {"b", {}, 208, 1}, {"c", {2, 3, 4, 5}, 216, 120}, {"d", {7}, 400, 7}};
}

// A /layout row in the writer's packed form: name (padded to 8 bytes), ndim,
// offset, numel, shape[4], all int64 little-endian.
struct Row {
  std::string name;
  std::int64_t ndim = 0, offset = 0, numel = 0;
  std::array<std::int64_t, 4> shape{};
};

std::vector<Row> rows_of(const std::vector<CheckpointTensor>& l) {
  std::vector<Row> rows;
  for (const auto& t : l) {
    Row r{t.name, static_cast<std::int64_t>(t.shape.size()), t.offset, t.numel, {}};
    for (std::size_t d = 0; d < t.shape.size(); ++d) r.shape[d] = t.shape[d];
    rows.push_back(r);
  }
  return rows;
}

// A negative result of a raw HDF5 call while building a file fails the test.
template <class T>
T raw(T v, const char* what) {
  if (v < 0) ADD_FAILURE() << "HDF5 call failed while building a test file: " << what;
  return v;
}
#define RAW(call) raw((call), #call)

H5Dataspace scalar_space() { return H5Dataspace(RAW(H5Screate(H5S_SCALAR))); }
H5Dataspace simple_space(std::vector<hsize_t> dims) {
  return H5Dataspace(RAW(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

void del_attr(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) > 0) RAW(H5Adelete(obj, name));
}
void put_attr(hid_t obj, const char* name, hid_t file_type, hid_t space, hid_t mem_type, const void* v) {
  del_attr(obj, name);
  H5Attribute a(RAW(H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT)));
  RAW(H5Awrite(a, mem_type, v));
}
void attr_i64(hid_t obj, const char* name, std::int64_t v) {
  put_attr(obj, name, H5T_STD_I64LE, scalar_space(), H5T_NATIVE_INT64, &v);
}
void attr_u64(hid_t obj, const char* name, std::uint64_t v) {
  put_attr(obj, name, H5T_STD_U64LE, scalar_space(), H5T_NATIVE_UINT64, &v);
}
void attr_f64(hid_t obj, const char* name, double v) {
  put_attr(obj, name, H5T_IEEE_F64LE, scalar_space(), H5T_NATIVE_DOUBLE, &v);
}
// A fixed-length string attribute of `size` bytes (0: the text's length).
void attr_str(hid_t obj, const char* name, const std::string& s, std::size_t size = 0,
              H5T_cset_t cset = H5T_CSET_UTF8) {
  if (size == 0) size = std::max<std::size_t>(s.size(), 1);
  H5Datatype t(RAW(H5Tcopy(H5T_C_S1)));
  RAW(H5Tset_size(t, size));
  RAW(H5Tset_cset(t, cset));
  std::string padded = s;
  padded.resize(size, '\0');
  put_attr(obj, name, t, scalar_space(), t, padded.data());
}
void attr_vlen_str(hid_t obj, const char* name, const std::string& s) {
  H5Datatype t(RAW(H5Tcopy(H5T_C_S1)));
  RAW(H5Tset_size(t, H5T_VARIABLE));
  const char* p = s.c_str();
  put_attr(obj, name, t, scalar_space(), t, &p);
}

// Replaces (or creates) dataset `path` with the given type and shape; writes
// `data` when given, else leaves it unallocated (chunked when `chunk` > 0, so a
// huge declared size costs nothing in the file). crc32 attribute when crc >= 0.
void put_dataset(hid_t file, const char* path, hid_t type, const H5Dataspace& space, const void* data,
                 std::int64_t crc, hsize_t chunk = 0) {
  if (H5Lexists(file, path, H5P_DEFAULT) > 0) RAW(H5Ldelete(file, path, H5P_DEFAULT));
  H5PropList dcpl(RAW(H5Pcreate(H5P_DATASET_CREATE)));
  if (chunk > 0) {
    const int nd = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> c(static_cast<std::size_t>(nd), 1);
    c.back() = chunk;
    RAW(H5Pset_chunk(dcpl, nd, c.data()));
  }
  H5Dataset ds(RAW(H5Dcreate2(file, path, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  if (data) RAW(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
  if (crc >= 0) attr_i64(ds, "crc32", crc);
}

std::uint32_t crc_of(const void* p, std::size_t n) {
  return static_cast<std::uint32_t>(crc32(0, static_cast<const Bytef*>(p), static_cast<uInt>(n)));
}

// Writes /layout in the writer's format from `rows`, with a correct crc32 (or a
// wrong one). `declared_rows` > 0: a chunked, unallocated table claiming that
// many rows instead. `name_bytes` 0: the shortest multiple of 8 that fits.
void put_layout(hid_t file, const std::vector<Row>& rows, std::size_t name_bytes = 0, bool good_crc = true,
                hsize_t declared_rows = 0) {
  if (name_bytes == 0) {
    std::size_t longest = 1;
    for (const auto& r : rows) longest = std::max(longest, r.name.size() + 1);
    name_bytes = (longest + 7) / 8 * 8;
  }
  const std::size_t row_bytes = name_bytes + 7 * 8;
  H5Datatype name(RAW(H5Tcopy(H5T_C_S1)));
  RAW(H5Tset_size(name, name_bytes));
  RAW(H5Tset_cset(name, H5T_CSET_UTF8));
  const hsize_t four = 4;
  H5Datatype shape(RAW(H5Tarray_create2(H5T_STD_I64LE, 1, &four)));
  H5Datatype t(RAW(H5Tcreate(H5T_COMPOUND, row_bytes)));
  RAW(H5Tinsert(t, "name", 0, name));
  RAW(H5Tinsert(t, "ndim", name_bytes, H5T_STD_I64LE));
  RAW(H5Tinsert(t, "offset", name_bytes + 8, H5T_STD_I64LE));
  RAW(H5Tinsert(t, "numel", name_bytes + 16, H5T_STD_I64LE));
  RAW(H5Tinsert(t, "shape", name_bytes + 24, shape));
  std::vector<unsigned char> buf(rows.size() * row_bytes, 0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    unsigned char* p = buf.data() + i * row_bytes;
    std::memcpy(p, rows[i].name.data(), std::min(rows[i].name.size(), name_bytes));
    const std::int64_t nums[7] = {rows[i].ndim,     rows[i].offset,   rows[i].numel,   rows[i].shape[0],
                                  rows[i].shape[1], rows[i].shape[2], rows[i].shape[3]};
    std::memcpy(p + name_bytes, nums, sizeof nums);
  }
  const std::int64_t crc = crc_of(buf.data(), buf.size()) ^ (good_crc ? 0u : 1u);
  if (declared_rows > 0)
    put_dataset(file, "/layout", t, simple_space({declared_rows}), nullptr, crc, 1024);
  else
    put_dataset(file, "/layout", t, simple_space({rows.size()}), rows.empty() ? nullptr : buf.data(), crc);
}

// Replaces /state/<name> by a 1-D dataset of `type` and kBaseN elements of some data.
void put_state(hid_t file, const char* name, hid_t type, std::vector<hsize_t> dims = {kBaseN}) {
  hsize_t n = 1;
  for (hsize_t d : dims) n *= d;
  std::vector<double> data(static_cast<std::size_t>(n), 0.5);
  const std::string path = std::string("/state/") + name;
  if (H5Lexists(file, path.c_str(), H5P_DEFAULT) > 0) RAW(H5Ldelete(file, path.c_str(), H5P_DEFAULT));
  H5Dataset ds(RAW(H5Dcreate2(file, path.c_str(), type, simple_space(dims), H5P_DEFAULT, H5P_DEFAULT,
                              H5P_DEFAULT)));
  RAW(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
  attr_i64(ds, "crc32", 0);
}

H5Datatype float_type(int which) {  // 0 f16, 1 bf16 (as the writer builds them)
  H5Datatype t(RAW(H5Tcopy(H5T_IEEE_F32LE)));
  RAW(H5Tset_fields(t, 15, which == 0 ? 10 : 7, which == 0 ? 5 : 8, 0, which == 0 ? 10 : 7));
  RAW(H5Tset_size(t, 2));
  RAW(H5Tset_ebias(t, which == 0 ? 15 : 127));
  return t;
}

// zlib stream (what HDF5's deflate filter stores) of `prefix` followed by zeros up
// to `total` bytes, produced in small pieces: a chunk that inflates to hundreds
// of MiB costs a few hundred KiB here, in the file and in the builder's memory.
std::vector<unsigned char> deflated(const std::vector<unsigned char>& prefix, std::uint64_t total) {
  z_stream z{};
  EXPECT_EQ(deflateInit(&z, 1), Z_OK);  // fast: zeros compress ~1000:1 at any level
  std::vector<unsigned char> out, zeros(std::size_t{1} << 20, 0), buf(std::size_t{1} << 16);
  std::uint64_t fed = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (z.avail_in == 0 && fed < total) {
      const bool first = fed == 0 && !prefix.empty();
      const std::uint64_t n = first ? prefix.size() : std::min<std::uint64_t>(zeros.size(), total - fed);
      z.next_in = const_cast<Bytef*>(first ? prefix.data() : zeros.data());
      z.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    z.next_out = buf.data();
    z.avail_out = static_cast<uInt>(buf.size());
    rc = deflate(&z, fed == total ? Z_FINISH : Z_NO_FLUSH);
    out.insert(out.end(), buf.data(), buf.data() + (buf.size() - z.avail_out));
  }
  deflateEnd(&z);
  return out;
}

// Replaces dataset `path` by a 1-D chunked, deflated dataset of `type` with
// `dims` elements (extendible, so one chunk may be far larger than the data)
// whose single chunk of `chunk` elements is written pre-compressed.
void put_one_big_chunk(hid_t file, const char* path, hid_t type, hsize_t dims, hsize_t chunk,
                       const std::vector<unsigned char>& prefix, std::int64_t crc) {
  if (H5Lexists(file, path, H5P_DEFAULT) > 0) RAW(H5Ldelete(file, path, H5P_DEFAULT));
  const hsize_t maxdims = H5S_UNLIMITED;
  H5Dataspace space(RAW(H5Screate_simple(1, &dims, &maxdims)));
  H5PropList dcpl(RAW(H5Pcreate(H5P_DATASET_CREATE)));
  RAW(H5Pset_chunk(dcpl, 1, &chunk));
  RAW(H5Pset_deflate(dcpl, 9));
  H5Dataset ds(RAW(H5Dcreate2(file, path, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  const std::vector<unsigned char> z = deflated(prefix, static_cast<std::uint64_t>(chunk) * H5Tget_size(type));
  const hsize_t origin = 0;
  RAW(H5Dwrite_chunk(ds, H5P_DEFAULT, 0, &origin, z.size(), z.data()));
  if (crc >= 0) attr_i64(ds, "crc32", crc);
}

struct HostileCase {
  std::string name;
  std::function<void(hid_t file)> edit;  // run by rank 0 on a copy of the base file
  std::vector<std::string> expect;       // parts the message must contain (after "PATH: ")
};

std::vector<HostileCase> hostile_cases() {
  const std::vector<Row> good = rows_of(base_layout());
  auto with_row = [good](std::size_t i, const std::function<void(Row&)>& f) {
    std::vector<Row> rows = good;
    f(rows[i]);
    return rows;
  };
  std::vector<HostileCase> c;
  // --- root attributes
  c.push_back({"format other", [](hid_t f) { attr_str(f, "format", "pytorch-checkpoint"); },
               {"not a shardtrain checkpoint", "pytorch-checkpoint"}});
  c.push_back({"format missing", [](hid_t f) { del_attr(f, "format"); }, {"no attribute 'format'"}});
  c.push_back({"format integer", [](hid_t f) { attr_i64(f, "format", 1); }, {"'format' must be a scalar string"}});
  c.push_back({"format variable-length", [](hid_t f) { attr_vlen_str(f, "format", "shardtrain-checkpoint"); },
               {"'format' must be a fixed-length string"}});
  c.push_back({"format 1-D array", [](hid_t f) {
                 H5Datatype t(RAW(H5Tcopy(H5T_C_S1)));
                 RAW(H5Tset_size(t, 21));
                 const char two[43] = "shardtrain-checkpointshardtrain-checkpoint";
                 put_attr(f, "format", t, simple_space({2}), t, two);
               },
               {"'format' must be a scalar string"}});
  c.push_back({"format huge fixed-length string",
               [](hid_t f) { attr_str(f, "format", "shardtrain-checkpoint", 60000); },
               {"'format' must be a fixed-length string of at most 4096 bytes"}});
  c.push_back({"created_utc huge fixed-length string",
               [](hid_t f) { attr_str(f, "created_utc", std::string(60000, 'x')); },
               {"'created_utc' must be a fixed-length string of at most 4096 bytes"}});
  c.push_back({"precision variable-length", [](hid_t f) { attr_vlen_str(f, "precision", "fp32"); },
               {"'precision' must be a fixed-length string"}});
  c.push_back({"precision unknown", [](hid_t f) { attr_str(f, "precision", "fp8"); }, {"'precision' is 'fp8'"}});
  c.push_back({"schema_version other", [](hid_t f) { attr_i64(f, "schema_version", 2); },
               {"schema version 2"}});
  c.push_back({"schema_version float", [](hid_t f) { attr_f64(f, "schema_version", 1.0); },
               {"'schema_version' must be a scalar integer"}});
  c.push_back({"schema_version string", [](hid_t f) { attr_str(f, "schema_version", "1"); },
               {"'schema_version' must be a scalar integer"}});
  c.push_back({"step negative", [](hid_t f) { attr_i64(f, "step", -5); }, {"'step' = -5 is outside"}});
  c.push_back({"step float", [](hid_t f) { attr_f64(f, "step", 10.0); }, {"'step' must be a scalar integer"}});
  c.push_back({"step 1-D", [](hid_t f) {
                 const std::int64_t v[2] = {1, 2};
                 put_attr(f, "step", H5T_STD_I64LE, simple_space({2}), H5T_NATIVE_INT64, v);
               },
               {"'step' must be a scalar integer"}});
  c.push_back({"step uint64 max", [](hid_t f) { attr_u64(f, "step", ~std::uint64_t{0}); }, {"'step'"}});
  c.push_back({"step missing", [](hid_t f) { del_attr(f, "step"); }, {"no attribute 'step'"}});
  c.push_back({"optimizer_updates beyond step", [](hid_t f) { attr_i64(f, "optimizer_updates", 5); attr_i64(f, "step", 4); },
               {"'optimizer_updates' = 5 is outside"}});
  c.push_back({"world_size zero", [](hid_t f) { attr_i64(f, "world_size", 0); }, {"'world_size' = 0 is outside"}});
  c.push_back({"zero_stage 4", [](hid_t f) { attr_i64(f, "zero_stage", 4); }, {"'zero_stage' = 4 is outside"}});
  c.push_back({"alignment negative", [](hid_t f) { attr_i64(f, "alignment", -64); }, {"'alignment' = -64"}});
  c.push_back({"data_vocab_size negative", [](hid_t f) { attr_i64(f, "data_vocab_size", -1); }, {"'data_vocab_size'"}});
  c.push_back({"seq_len huge", [](hid_t f) { attr_i64(f, "seq_len", std::int64_t{1} << 50); }, {"'seq_len'"}});
  c.push_back({"samples_seen negative", [](hid_t f) { attr_i64(f, "samples_seen", -1); }, {"'samples_seen' = -1"}});
  c.push_back({"padded_size 2^60", [](hid_t f) { attr_i64(f, "padded_size", std::int64_t{1} << 60); },
               {"'padded_size' = 1152921504606846976 is outside"}});
  c.push_back({"padded_size zero", [](hid_t f) { attr_i64(f, "padded_size", 0); }, {"'padded_size' = 0 is outside"}});
  c.push_back({"loss_scale NaN", [](hid_t f) { attr_f64(f, "loss_scale", std::nan("")); }, {"'loss_scale'"}});
  c.push_back({"loss_scale negative", [](hid_t f) { attr_f64(f, "loss_scale", -2.0); }, {"'loss_scale'"}});
  c.push_back({"loss_scale infinite", [](hid_t f) { attr_f64(f, "loss_scale", HUGE_VAL); }, {"'loss_scale'"}});
  c.push_back({"loss_scale integer", [](hid_t f) { attr_i64(f, "loss_scale", 65536); },
               {"'loss_scale' must be a scalar float"}});
  // --- /config
  c.push_back({"config missing", [](hid_t f) { RAW(H5Ldelete(f, "/config", H5P_DEFAULT)); },
               {"missing dataset /config"}});
  c.push_back({"config too large", [](hid_t f) {
                 H5Datatype t(RAW(H5Tcopy(H5T_C_S1)));
                 RAW(H5Tset_size(t, std::size_t{2} << 20));  // declared 2 MiB, never written
                 put_dataset(f, "/config", t, scalar_space(), nullptr, 0);
               },
               {"/config is 2097152 bytes"}});
  c.push_back({"config integer", [](hid_t f) {
                 const std::int32_t v = 3;
                 put_dataset(f, "/config", H5T_STD_I32LE, scalar_space(), &v, 0);
               },
               {"/config must be a scalar fixed-length string"}});
  c.push_back({"config variable-length", [](hid_t f) {
                 H5Datatype t(RAW(H5Tcopy(H5T_C_S1)));
                 RAW(H5Tset_size(t, H5T_VARIABLE));
                 const char* p = "a = 1";
                 put_dataset(f, "/config", t, scalar_space(), &p, 0);
               },
               {"/config must be a scalar fixed-length string"}});
  c.push_back({"config 1-D", [](hid_t f) {
                 H5Datatype t(RAW(H5Tcopy(H5T_C_S1)));
                 RAW(H5Tset_size(t, 4));
                 put_dataset(f, "/config", t, simple_space({2}), "a=1\0b=2", 0);
               },
               {"/config must be a scalar fixed-length string"}});
  c.push_back({"config checksum", [](hid_t f) {
                 H5Dataset ds(RAW(H5Dopen2(f, "/config", H5P_DEFAULT)));
                 attr_i64(ds, "crc32", 12345);
               },
               {"dataset /config: checksum mismatch"}});
  c.push_back({"config crc32 string", [](hid_t f) {
                 H5Dataset ds(RAW(H5Dopen2(f, "/config", H5P_DEFAULT)));
                 attr_str(ds, "crc32", "12345");
               },
               {"/config attribute 'crc32' must be a scalar integer"}});
  c.push_back({"config crc32 above 32 bits", [](hid_t f) {
                 H5Dataset ds(RAW(H5Dopen2(f, "/config", H5P_DEFAULT)));
                 attr_i64(ds, "crc32", std::int64_t{1} << 33);
               },
               {"/config attribute 'crc32' = 8589934592 is outside"}});
  // --- /layout
  c.push_back({"layout missing", [](hid_t f) { RAW(H5Ldelete(f, "/layout", H5P_DEFAULT)); },
               {"missing dataset /layout"}});
  c.push_back({"layout is a group", [](hid_t f) {
                 RAW(H5Ldelete(f, "/layout", H5P_DEFAULT));
                 h5::H5Group g(RAW(H5Gcreate2(f, "/layout", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
               },
               {"/layout is not a dataset"}});
  c.push_back({"layout 2^40 rows", [good](hid_t f) { put_layout(f, good, 0, true, hsize_t{1} << 40); },
               {"/layout has 1099511627776 rows"}});
  c.push_back({"layout 0 rows", [](hid_t f) { put_layout(f, {}); }, {"/layout has 0 rows"}});
  c.push_back({"layout not compound", [](hid_t f) {
                 const std::int64_t v[3] = {1, 2, 3};
                 put_dataset(f, "/layout", H5T_STD_I64LE, simple_space({3}), v, 0);
               },
               {"/layout must be a 1-D compound dataset"}});
  c.push_back({"layout 2-D", [good](hid_t f) {
                 put_layout(f, good);
                 H5Dataset old(RAW(H5Dopen2(f, "/layout", H5P_DEFAULT)));
                 H5Datatype t(RAW(H5Dget_type(old)));
                 put_dataset(f, "/layout2", t, simple_space({2, 2}), nullptr, 0, 1);
                 RAW(H5Ldelete(f, "/layout", H5P_DEFAULT));
                 RAW(H5Lmove(f, "/layout2", f, "/layout", H5P_DEFAULT, H5P_DEFAULT));
               },
               {"/layout must be a 1-D compound dataset"}});
  c.push_back({"layout numel not product", [with_row](hid_t f) { put_layout(f, with_row(0, [](Row& r) { r.numel = 199; })); },
               {"row 0 ('a')", "numel 199 is not the product of its shape"}});
  c.push_back({"layout overlapping", [with_row](hid_t f) { put_layout(f, with_row(2, [](Row& r) { r.offset = 205; })); },
               {"row 2 ('c')", "overlaps"}});
  c.push_back({"layout negative offset", [with_row](hid_t f) { put_layout(f, with_row(0, [](Row& r) { r.offset = -8; })); },
               {"row 0 ('a')", "offset -8"}});
  c.push_back({"layout offset 2^62", [with_row](hid_t f) {
                 put_layout(f, with_row(3, [](Row& r) { r.offset = std::int64_t{1} << 62; }));
               },
               {"row 3 ('d')", "out of range"}});
  c.push_back({"layout beyond padded_size", [with_row](hid_t f) { put_layout(f, with_row(3, [](Row& r) { r.offset = 995; })); },
               {"/layout ends at element 1002, beyond padded_size 1000"}});
  c.push_back({"layout empty name", [with_row](hid_t f) { put_layout(f, with_row(1, [](Row& r) { r.name = ""; })); },
               {"row 1", "empty or repeated tensor name"}});
  c.push_back({"layout repeated name", [with_row](hid_t f) { put_layout(f, with_row(2, [](Row& r) { r.name = "a"; })); },
               {"row 2 ('a')", "empty or repeated tensor name"}});
  c.push_back({"layout ndim 5", [with_row](hid_t f) { put_layout(f, with_row(1, [](Row& r) { r.ndim = 5; })); },
               {"row 1 ('b')", "ndim must be 0 to 4"}});
  c.push_back({"layout ndim negative", [with_row](hid_t f) { put_layout(f, with_row(1, [](Row& r) { r.ndim = -1; })); },
               {"row 1 ('b')", "ndim must be 0 to 4"}});
  c.push_back({"layout negative dim", [with_row](hid_t f) {
                 put_layout(f, with_row(3, [](Row& r) { r.shape[0] = -7; r.numel = -7; }));
               },
               {"row 3 ('d')", "shape dimension out of range"}});
  c.push_back({"layout shape product overflows", [with_row](hid_t f) {
                 put_layout(f, with_row(0, [](Row& r) {
                   r.ndim = 4;
                   r.shape = {std::int64_t{1} << 40, std::int64_t{1} << 40, 1 << 20, 1 << 20};
                   r.numel = 0;  // the wrapped product of 2^120
                 }));
               },
               {"row 0 ('a')", "shape dimension out of range"}});
  c.push_back({"layout name member too long", [good](hid_t f) { put_layout(f, good, 512); },
               {"/layout member 'name' must be a fixed-length string of at most 256 bytes"}});
  c.push_back({"layout name member variable-length", [](hid_t f) {
                 H5Datatype s(RAW(H5Tcopy(H5T_C_S1)));
                 RAW(H5Tset_size(s, H5T_VARIABLE));
                 H5Datatype t(RAW(H5Tcreate(H5T_COMPOUND, sizeof(char*) + 8)));
                 RAW(H5Tinsert(t, "name", 0, s));
                 RAW(H5Tinsert(t, "ndim", sizeof(char*), H5T_NATIVE_INT64));
                 struct { const char* name; std::int64_t ndim; } row{"a", 0};
                 put_dataset(f, "/layout", t, simple_space({1}), &row, 0);
               },
               {"/layout member 'name' must be a fixed-length string"}});
  c.push_back({"layout without name member", [](hid_t f) {
                 H5Datatype t(RAW(H5Tcreate(H5T_COMPOUND, 16)));
                 RAW(H5Tinsert(t, "offset", 0, H5T_STD_I64LE));
                 RAW(H5Tinsert(t, "numel", 8, H5T_STD_I64LE));
                 const std::int64_t v[2] = {0, 1};
                 put_dataset(f, "/layout", t, simple_space({1}), v, 0);
               },
               {"/layout has no member 'name'"}});
  c.push_back({"layout offset member is a string", [](hid_t f) {
                 H5Datatype s(RAW(H5Tcopy(H5T_C_S1)));
                 RAW(H5Tset_size(s, 8));
                 H5Datatype t(RAW(H5Tcreate(H5T_COMPOUND, 64)));  // the writer's row size, other members
                 RAW(H5Tinsert(t, "name", 0, s));
                 RAW(H5Tinsert(t, "offset", 8, s));
                 char v[64] = "a";
                 std::memcpy(v + 8, "xyz", 4);
                 put_dataset(f, "/layout", t, simple_space({1}), v, 0);
               },
               {"/layout cannot be read as"}});
  c.push_back({"layout checksum", [good](hid_t f) { put_layout(f, good, 0, false); },
               {"dataset /layout: checksum mismatch"}});
  c.push_back({"layout crc32 missing", [](hid_t f) {
                 H5Dataset ds(RAW(H5Dopen2(f, "/layout", H5P_DEFAULT)));
                 del_attr(ds, "crc32");
               },
               {"/layout has no attribute 'crc32'"}});
  // --- /state
  c.push_back({"state group missing", [](hid_t f) { RAW(H5Ldelete(f, "/state", H5P_DEFAULT)); },
               {"missing group /state"}});
  c.push_back({"master missing", [](hid_t f) { RAW(H5Ldelete(f, "/state/master", H5P_DEFAULT)); },
               {"missing dataset /state/master"}});
  c.push_back({"exp_avg_sq missing", [](hid_t f) { RAW(H5Ldelete(f, "/state/exp_avg_sq", H5P_DEFAULT)); },
               {"missing dataset /state/exp_avg_sq"}});
  c.push_back({"master is a group", [](hid_t f) {
                 RAW(H5Ldelete(f, "/state/master", H5P_DEFAULT));
                 h5::H5Group g(RAW(H5Gcreate2(f, "/state/master", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
               },
               {"/state/master is not a dataset"}});
  c.push_back({"exp_avg int32", [](hid_t f) { put_state(f, "exp_avg", H5T_STD_I32LE); },
               {"/state/exp_avg must hold little-endian float32, float16 or bfloat16"}});
  c.push_back({"exp_avg float64", [](hid_t f) { put_state(f, "exp_avg", H5T_IEEE_F64LE); },
               {"/state/exp_avg must hold little-endian float32, float16 or bfloat16"}});
  c.push_back({"master big-endian float32", [](hid_t f) { put_state(f, "master", H5T_IEEE_F32BE); },
               {"/state/master must hold little-endian float32, float16 or bfloat16"}});
  c.push_back({"master float16", [](hid_t f) { put_state(f, "master", float_type(0)); },
               {"/state/master has element type float16, which does not fit its name"}});
  c.push_back({"params_fp16 holds bfloat16", [](hid_t f) { put_state(f, "params_fp16", float_type(1)); },
               {"/state/params_fp16 has element type bfloat16, which does not fit its name"}});
  c.push_back({"params_bf16 holds float32", [](hid_t f) { put_state(f, "params_bf16", H5T_IEEE_F32LE); },
               {"/state/params_bf16 has element type float32, which does not fit its name"}});
  c.push_back({"exp_avg 2-D", [](hid_t f) { put_state(f, "exp_avg", H5T_IEEE_F32LE, {kBaseN / 10, 10}); },
               {"/state/exp_avg must be 1-D"}});
  c.push_back({"exp_avg scalar", [](hid_t f) { put_state(f, "exp_avg", H5T_IEEE_F32LE, {}); },
               {"/state/exp_avg must be 1-D"}});
  c.push_back({"exp_avg shorter", [](hid_t f) { put_state(f, "exp_avg", H5T_IEEE_F32LE, {kBaseN - 1}); },
               {"/state/exp_avg has 999 elements; padded_size says 1000"}});
  c.push_back({"exp_avg_sq 2^40 elements", [](hid_t f) {
                 put_dataset(f, "/state/exp_avg_sq", H5T_IEEE_F32LE, simple_space({hsize_t{1} << 40}), nullptr, 0,
                             1 << 16);
               },
               {"/state/exp_avg_sq has 1099511627776 elements; padded_size says 1000"}});
  c.push_back({"master crc32 missing", [](hid_t f) {
                 H5Dataset ds(RAW(H5Dopen2(f, "/state/master", H5P_DEFAULT)));
                 del_attr(ds, "crc32");
               },
               {"/state/master has no attribute 'crc32'"}});
  // Small files whose storage makes HDF5 itself allocate hundreds of MiB.
  c.push_back({"layout row type of 256 MiB, deflated", [good](hid_t f) {
                 // Writer-format members (one valid row) plus a 256 MiB member nobody reads.
                 H5Datatype name(RAW(H5Tcopy(H5T_C_S1)));
                 RAW(H5Tset_size(name, 8));
                 RAW(H5Tset_cset(name, H5T_CSET_UTF8));  // as the writer's (HDF5 does not convert ASCII<->UTF-8)
                 const hsize_t four = 4, junk_bytes = hsize_t{1} << 28;
                 H5Datatype shape(RAW(H5Tarray_create2(H5T_STD_I64LE, 1, &four)));
                 H5Datatype junk(RAW(H5Tarray_create2(H5T_STD_U8LE, 1, &junk_bytes)));
                 H5Datatype t(RAW(H5Tcreate(H5T_COMPOUND, 64 + junk_bytes)));
                 RAW(H5Tinsert(t, "name", 0, name));
                 RAW(H5Tinsert(t, "ndim", 8, H5T_STD_I64LE));
                 RAW(H5Tinsert(t, "offset", 16, H5T_STD_I64LE));
                 RAW(H5Tinsert(t, "numel", 24, H5T_STD_I64LE));
                 RAW(H5Tinsert(t, "shape", 32, shape));
                 RAW(H5Tinsert(t, "junk", 64, junk));
                 std::vector<unsigned char> row(64, 0);
                 const std::int64_t nums[7] = {2, 0, 200, 10, 20, 0, 0};
                 row[0] = 'a';
                 std::memcpy(row.data() + 8, nums, sizeof nums);
                 put_one_big_chunk(f, "/layout", t, 1, 1, row, 0);
               },
               {"/layout rows are 268435520 bytes, expected 64"}});
  c.push_back({"layout in one 256 MiB deflated chunk", [](hid_t f) {
                 // The writer's row type (64 bytes) in a chunk of 2^22 rows, 4 of them real.
                 const std::vector<Row> rows = rows_of(base_layout());
                 put_layout(f, rows);
                 H5Dataset old(RAW(H5Dopen2(f, "/layout", H5P_DEFAULT)));
                 H5Datatype t(RAW(H5Dget_type(old)));
                 std::vector<unsigned char> packed(rows.size() * 64, 0);
                 RAW(H5Dread(old, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, packed.data()));
                 put_one_big_chunk(f, "/layout", t, rows.size(), hsize_t{1} << 22, packed,
                                   crc_of(packed.data(), packed.size()));
               },
               {"/layout is stored in chunks of more than 67108864 bytes"}});
  c.push_back({"exp_avg in one 256 MiB deflated chunk", [](hid_t f) {
                 // Every byte of the 1000 elements is zero and the crc32 says so: only the
                 // chunk (2^26 elements, inflated whole to read any element) is hostile.
                 const std::vector<unsigned char> zeros(4 * kBaseN, 0);
                 put_one_big_chunk(f, "/state/exp_avg", H5T_IEEE_F32LE, kBaseN, hsize_t{1} << 26, {},
                                   crc_of(zeros.data(), zeros.size()));
               },
               {"/state/exp_avg is stored in chunks of more than 67108864 bytes"}});
  c.push_back({"exp_avg chunked and deflated (as h5repack writes it)", [](hid_t f) {
                 std::vector<float> data(kBaseN, 0.0f);
                 H5PropList dcpl(RAW(H5Pcreate(H5P_DATASET_CREATE)));
                 const hsize_t chunk = 256;
                 RAW(H5Pset_chunk(dcpl, 1, &chunk));
                 RAW(H5Pset_deflate(dcpl, 6));
                 RAW(H5Ldelete(f, "/state/exp_avg", H5P_DEFAULT));
                 H5Dataset ds(RAW(H5Dcreate2(f, "/state/exp_avg", H5T_IEEE_F32LE, simple_space({kBaseN}),
                                             H5P_DEFAULT, dcpl, H5P_DEFAULT)));
                 RAW(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
                 attr_i64(ds, "crc32", crc_of(data.data(), data.size() * 4));
               },
               {"/state/exp_avg is stored with HDF5 filter(s) deflate (id 1)", "h5repack -f NONE"}});
  // The root attributes are under meta_crc32: a value changed in range is found.
  c.push_back({"samples_seen changed", [](hid_t f) { attr_i64(f, "samples_seen", 77); },
               {"root attributes: checksum mismatch (stored meta_crc32 "}});
  c.push_back({"parent changed", [](hid_t f) { attr_str(f, "parent", "step_00000001.h5"); },
               {"root attributes: checksum mismatch"}});
  // Data kept elsewhere: a virtual view (which could map to anything) and external raw files.
  c.push_back({"exp_avg virtual", [](hid_t f) {
                 H5Dataspace space = simple_space({kBaseN});
                 H5PropList dcpl(RAW(H5Pcreate(H5P_DATASET_CREATE)));
                 RAW(H5Pset_virtual(dcpl, space, ".", "/state/master", space));
                 RAW(H5Ldelete(f, "/state/exp_avg", H5P_DEFAULT));
                 H5Dataset ds(RAW(H5Dcreate2(f, "/state/exp_avg", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl,
                                             H5P_DEFAULT)));
                 attr_i64(ds, "crc32", 0);
               },
               {"/state/exp_avg must be stored contiguous, compact or chunked"}});
  c.push_back({"exp_avg in an external file", [](hid_t f) {
                 H5PropList dcpl(RAW(H5Pcreate(H5P_DATASET_CREATE)));
                 RAW(H5Pset_external(dcpl, "/etc/hostname", 0, 4 * kBaseN));
                 RAW(H5Ldelete(f, "/state/exp_avg", H5P_DEFAULT));
                 H5Dataset ds(RAW(H5Dcreate2(f, "/state/exp_avg", H5T_IEEE_F32LE, simple_space({kBaseN}),
                                             H5P_DEFAULT, dcpl, H5P_DEFAULT)));
                 attr_i64(ds, "crc32", 0);
               },
               {"/state/exp_avg keeps its data in external files"}});
  c.push_back({"config in an external file", [](hid_t f) {
                 H5Datatype t(RAW(H5Tcopy(H5T_C_S1)));
                 RAW(H5Tset_size(t, 100));
                 H5PropList dcpl(RAW(H5Pcreate(H5P_DATASET_CREATE)));
                 RAW(H5Pset_external(dcpl, "/etc/hostname", 0, 100));
                 RAW(H5Ldelete(f, "/config", H5P_DEFAULT));
                 H5Dataset ds(RAW(H5Dcreate2(f, "/config", t, scalar_space(), H5P_DEFAULT, dcpl, H5P_DEFAULT)));
                 attr_i64(ds, "crc32", 0);
               },
               {"/config keeps its data in external files"}});
  c.push_back({"master crc32 negative", [](hid_t f) {
                 H5Dataset ds(RAW(H5Dopen2(f, "/state/master", H5P_DEFAULT)));
                 attr_i64(ds, "crc32", -1);
               },
               {"/state/master attribute 'crc32' = -1 is outside"}});
  return c;
}

TEST_F(CheckpointIo, HostileFilesAreInputErrorsWithoutHugeAllocations) {
  const int rank = rank_of(MPI_COMM_WORLD);
  const std::string base = file("hostile_base.h5");
  write_file(base, kBaseN, 0, 11, true, base_layout());
  {  // the base file itself must be accepted, or every case below proves nothing
    CheckpointReader r(base, MPI_COMM_WORLD);
    EXPECT_EQ(r.meta().padded_size, kBaseN);
    EXPECT_EQ(r.vectors().size(), 5u);
  }
  const std::int64_t rss_before = max_rss_kb();
  const auto cases = hostile_cases();
  bool all_ok = true;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& hc = cases[i];
    const std::string path = file("hostile_" + std::to_string(i) + ".h5");
    if (rank == 0) {
      fs::copy_file(base, path, fs::copy_options::overwrite_existing);
      H5PropList fapl(RAW(H5Pcreate(H5P_FILE_ACCESS)));
      RAW(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG));
      H5File f(RAW(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl)));
      hc.edit(f);
      SHARDTRAIN_H5_CLOSE(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const std::string msg =
        input_error_of([&] { CheckpointReader r(path, MPI_COMM_WORLD); }, "case '" + hc.name + "'");
    const bool ok = !msg.empty() && message_ok(msg, path, hc.expect, "case '" + hc.name + "'");
    if (!all_ranks(ok)) all_ok = false;
    if (ok && rank == 0 && std::getenv("SHARDTRAIN_TEST_VERBOSE")) std::printf("%-40s %s\n", hc.name.c_str(), msg.c_str());
  }
  EXPECT_TRUE(all_ok) << "some hostile case was not an InputError on every rank with the expected message";
  // Not a file at all, an empty file, a missing file.
  const std::string text = file("not_hdf5.h5"), empty = file("empty.h5"), missing = file("missing.h5");
  if (rank == 0) {
    std::ofstream(text) << "this is not an HDF5 file\n";
    std::ofstream(empty).close();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (const auto& [p, part] : std::vector<std::pair<std::string, std::string>>{
           {text, "not an HDF5 file"}, {empty, "not an HDF5 file"}, {missing, "No such file"}}) {
    const std::string msg = input_error_of([&] { CheckpointReader r(p, MPI_COMM_WORLD); }, p);
    EXPECT_TRUE(all_ranks(!msg.empty() && message_ok(msg, p, {part}, p))) << p;
  }
  const std::int64_t growth_kb = max_rss_kb() - rss_before;
  EXPECT_LT(growth_kb, 100 * 1024) << "peak RSS grew by " << growth_kb << " KiB while rejecting hostile files";
  EXPECT_TRUE(all_ranks(growth_kb < 100 * 1024));
}

// Variations another HDF5 writer (h5py, h5repack) may produce that are still a
// valid checkpoint: the reader must accept them, or the hostile cases above
// would pass by rejecting everything.
TEST_F(CheckpointIo, ForeignButValidVariationsAreAccepted) {
  const int rank = rank_of(MPI_COMM_WORLD);
  const std::string base = file("variation_base.h5");
  write_file(base, kBaseN, 0, 12, true, base_layout());
  struct Variation {
    std::string name;
    std::function<void(hid_t)> edit;
    std::function<void(const CheckpointReader&)> check;  // what the reader must then report
  };
  const std::vector<Variation> variations = {
      {"ASCII strings", [](hid_t f) {
         attr_str(f, "format", "shardtrain-checkpoint", 0, H5T_CSET_ASCII);
         attr_str(f, "precision", "fp16", 0, H5T_CSET_ASCII);
       },
       [](const CheckpointReader& r) { EXPECT_EQ(r.meta().precision, "fp16"); }},
      {"padded fixed-length strings", [](hid_t f) { attr_str(f, "data_path", "/d.h5", 64); },
       [](const CheckpointReader& r) { EXPECT_EQ(r.meta().data_path, "/d.h5"); }},
      {"int32 and uint64 integers", [](hid_t f) {
         const std::int32_t v = 3;
         put_attr(f, "zero_stage", H5T_STD_I32LE, scalar_space(), H5T_NATIVE_INT32, &v);
         attr_u64(f, "seq_len", 4096);
       },
       [](const CheckpointReader& r) {
         EXPECT_EQ(r.meta().zero_stage, 3);
         EXPECT_EQ(r.meta().seq_len, 4096);
       }},
      {"float32 loss scale", [](hid_t f) {
         const float v = 512.0f;
         put_attr(f, "loss_scale", H5T_IEEE_F32LE, scalar_space(), H5T_NATIVE_FLOAT, &v);
       },
       [](const CheckpointReader& r) { EXPECT_EQ(r.meta().loss_scale, 512.0); }},
      {"exp_avg chunked (small chunks, unfiltered)", [](hid_t f) {
         std::vector<float> data;
         for (std::int64_t i = 0; i < kBaseN; ++i) data.push_back(std::bit_cast<float>(value_bits(1, i, 12)));
         H5PropList dcpl(RAW(H5Pcreate(H5P_DATASET_CREATE)));
         const hsize_t chunk = 256;
         RAW(H5Pset_chunk(dcpl, 1, &chunk));
         RAW(H5Ldelete(f, "/state/exp_avg", H5P_DEFAULT));
         H5Dataset ds(RAW(H5Dcreate2(f, "/state/exp_avg", H5T_IEEE_F32LE, simple_space({kBaseN}), H5P_DEFAULT,
                                     dcpl, H5P_DEFAULT)));
         RAW(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
         attr_i64(ds, "crc32", crc_of(data.data(), data.size() * 4));
       },
       [](const CheckpointReader& r) { EXPECT_TRUE(r.has_vector("exp_avg")); }},
      {"root attributes without their CRC (a file written before meta_crc32)", [](hid_t f) {
         RAW(H5Adelete(f, "meta_crc32"));
       },
       [](const CheckpointReader& r) {
         EXPECT_FALSE(r.meta().meta_crc_present);
       }},
      {"layout rewritten with a wider name member", [](hid_t f) { put_layout(f, rows_of(base_layout()), 64); },
       [](const CheckpointReader& r) { expect_layout_eq(r.layout(), base_layout()); }},
  };
  bool all_ok = true;
  for (std::size_t i = 0; i < variations.size(); ++i) {
    const std::string path = file("variation_" + std::to_string(i) + ".h5");
    if (rank == 0) {
      fs::copy_file(base, path, fs::copy_options::overwrite_existing);
      H5PropList fapl(RAW(H5Pcreate(H5P_FILE_ACCESS)));
      RAW(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG));
      H5File f(RAW(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl)));
      variations[i].edit(f);
      // An edit may change values (another precision, say): the root CRC is
      // then recomputed from the values as read, so each variation is read
      // with its CRC checked (unless it deleted the CRC itself).
      const bool with_crc = H5Aexists(f, "meta_crc32") > 0;
      if (with_crc) RAW(H5Adelete(f, "meta_crc32"));
      SHARDTRAIN_H5_CLOSE(f);
      if (with_crc) {
        std::uint32_t crc = 0;
        try {
          CheckpointReader r(path, MPI_COMM_SELF);
          crc = checkpoint_meta_crc(r.meta());
        } catch (const std::exception&) {  // reported by the collective read below
        }
        H5File g(RAW(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl)));
        attr_i64(g, "meta_crc32", crc);
        SHARDTRAIN_H5_CLOSE(g);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    bool ok = true;
    try {
      CheckpointReader r(path, MPI_COMM_WORLD);
      variations[i].check(r);
      // The state is untouched: every element and CRC still checks.
      const auto [lo, hi] = tile(kBaseN, rank, size_of(MPI_COMM_WORLD), 0);
      for (int v = 0; v < 5; ++v) EXPECT_EQ(read_and_compare(r, v, lo, hi, kBaseN, 12), "");
      r.finish_reads();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "variation '" << variations[i].name << "' was rejected: " << e.what();
      ok = false;
    }
    if (!all_ranks(ok)) all_ok = false;
  }
  EXPECT_TRUE(all_ok);
}

// =============================================================== round trip

TEST_F(CheckpointIo, RoundTripEveryFieldAndElement) {
  const int rank = rank_of(MPI_COMM_WORLD), world = size_of(MPI_COMM_WORLD);
  {
    CheckpointReader r(s_good, MPI_COMM_WORLD);
    EXPECT_EQ(r.path(), s_good);
    expect_meta_eq(r.meta(), make_meta(kN, kSeed));
    expect_layout_eq(r.layout(), make_layout());
    ASSERT_EQ(r.vectors().size(), 5u);
    for (int v = 0; v < 5; ++v) {
      EXPECT_EQ(r.vectors()[static_cast<std::size_t>(v)].first, kNames[v]);
      EXPECT_EQ(r.vectors()[static_cast<std::size_t>(v)].second, type_of_vec(v));
      EXPECT_TRUE(r.has_vector(kNames[v]));
    }
    EXPECT_FALSE(r.has_vector("grads"));
    // Read back with the tiling that wrote it, every vector, every element.
    const auto [lo, hi] = tile(kN, rank, world, 1);
    bool ok = true;
    for (int v = 0; v < 5; ++v) {
      const std::string d = read_and_compare(r, v, lo, hi, kN, kSeed);
      EXPECT_EQ(d, "") << "rank " << rank;
      ok = ok && d.empty();
    }
    EXPECT_NO_THROW(r.finish_reads());
    std::vector<std::string> lines;
    EXPECT_NO_THROW(lines = r.verify_all());
    ASSERT_EQ(lines.size(), 7u);
    for (const auto& l : lines) EXPECT_NE(l.find("  ok"), std::string::npos) << l;
    EXPECT_TRUE(starts_with(lines[2], "/state/master  ok")) << lines[2];
    EXPECT_TRUE(all_ranks(ok));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // /params/<name>: virtual datasets onto /state/master, in each tensor's shape
  // (read serially by rank 0 with plain HDF5, as h5py would).
  bool ok = true;
  if (rank == 0) {
    H5File f(RAW(H5Fopen(s_good.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
    for (const auto& t : make_layout()) {
      const std::string p = "/params/" + t.name;
      H5Dataset ds(RAW(H5Dopen2(f, p.c_str(), H5P_DEFAULT)));
      H5Dataspace s(RAW(H5Dget_space(ds)));
      std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(H5Sget_simple_extent_ndims(s), 0)));
      if (!dims.empty()) RAW(H5Sget_simple_extent_dims(s, dims.data(), nullptr));
      EXPECT_EQ(std::vector<std::int64_t>(dims.begin(), dims.end()), t.shape) << p;
      std::vector<std::uint32_t> got(static_cast<std::size_t>(t.numel));
      RAW(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()));
      for (std::int64_t k = 0; k < t.numel; ++k)
        if (got[static_cast<std::size_t>(k)] != value_bits(0, t.offset + k, kSeed)) {
          ADD_FAILURE() << p << "[" << k << "] differs from /state/master[" << t.offset + k << "]";
          ok = false;
          break;
        }
    }
  }
  EXPECT_TRUE(all_ranks(ok));
}

// ============================================================ elastic reads

TEST_F(CheckpointIo, ElasticReadOtherTilingAndLength) {
  const int rank = rank_of(MPI_COMM_WORLD), world = size_of(MPI_COMM_WORLD);
  CheckpointReader r(s_good, MPI_COMM_WORLD);  // one reader, many read + finish rounds
  struct Read { std::int64_t n; int variant; };
  const Read reads[] = {{kN, 0},           {kN, 2},      {kN, 3},           {kN + 1234, 0}, {kN + 1234, 3},
                        {2 * kN + 5, 2},   {kN - 1, 3},  {777, 1},          {777, 2},       {1, 0},
                        {kN + 1, 1},       {64, 3}};
  for (const auto& rd : reads) {
    const auto [lo, hi] = tile(rd.n, rank, world, rd.variant);
    bool ok = true;
    for (int v = 0; v < 5; ++v) {
      const std::string d = read_and_compare(r, v, lo, hi, kN, kSeed);
      EXPECT_EQ(d, "") << "N " << rd.n << " variant " << rd.variant << " rank " << rank;
      ok = ok && d.empty();
    }
    std::string err;
    try {
      r.finish_reads();  // the file's tail beyond N enters the CRC: must pass
    } catch (const std::exception& e) {
      err = e.what();
    }
    EXPECT_EQ(err, "") << "N " << rd.n << " variant " << rd.variant;
    ASSERT_TRUE(all_ranks(ok && err.empty())) << "N " << rd.n << " variant " << rd.variant;
  }
  // Reading only some vectors checks only those.
  const auto [lo, hi] = tile(kN, rank, world, 0);
  EXPECT_EQ(read_and_compare(r, 4, lo, hi, kN, kSeed), "");
  EXPECT_NO_THROW(r.finish_reads());
  EXPECT_NO_THROW(r.finish_reads());  // nothing read since: nothing to check
}

TEST_F(CheckpointIo, ElasticReadOnSubCommunicators) {
  const int rank = rank_of(MPI_COMM_WORLD), world = size_of(MPI_COMM_WORLD);
  // Split into {0 .. world-2} and {world-1} (at 1 rank: one group of one), each
  // group reads the file at once with its own tiling and length.
  const int color = world > 1 && rank == world - 1 ? 1 : 0;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, color, rank, &sub);
  bool ok = true;
  {
    CheckpointReader r(s_good, sub);
    const int srank = rank_of(sub), ssize = size_of(sub);
    for (const std::int64_t n : {kN, kN + 99 + color, std::int64_t{5000} + color}) {
      const auto [lo, hi] = tile(n, srank, ssize, color == 0 ? 1 : 0);
      for (int v = 0; v < 5; ++v) {
        const std::string d = read_and_compare(r, v, lo, hi, kN, kSeed);
        EXPECT_EQ(d, "") << "sub-communicator " << color << " N " << n;
        ok = ok && d.empty();
      }
      EXPECT_NO_THROW(r.finish_reads());
    }
    std::vector<std::string> lines;
    EXPECT_NO_THROW(lines = r.verify_all());
    EXPECT_EQ(lines.size(), 7u);
  }
  MPI_Comm_free(&sub);
  EXPECT_TRUE(all_ranks(ok));
  // Rank 0 alone (MPI_COMM_SELF) while the others wait: the whole vector.
  ok = true;
  if (rank == 0) {
    CheckpointReader r(s_good, MPI_COMM_SELF);
    expect_meta_eq(r.meta(), make_meta(kN, kSeed));
    for (int v = 0; v < 5; ++v) {
      const std::string d = read_and_compare(r, v, 0, kN, kN, kSeed);
      EXPECT_EQ(d, "");
      ok = ok && d.empty();
    }
    EXPECT_NO_THROW(r.finish_reads());
    EXPECT_NO_THROW(r.verify_all());
  }
  EXPECT_TRUE(all_ranks(ok));
}

TEST_F(CheckpointIo, ReadRangeIsIndependentPerRank) {
  const int rank = rank_of(MPI_COMM_WORLD);
  CheckpointReader r(s_good, MPI_COMM_WORLD);
  bool ok = true;
  // Each rank makes a different number of independent reads of different ranges.
  for (int k = 0; k <= rank; ++k) {
    const std::int64_t lo = (rank * 7919 + k * 104729) % (kN - 300), hi = lo + 1 + k * 97;
    std::vector<float> got(static_cast<std::size_t>(hi - lo));
    r.read_range("master", lo, hi, got.data());
    const std::string d = compare(got, 0, lo, kN, kSeed);
    EXPECT_EQ(d, "");
    std::vector<bf16> got16(static_cast<std::size_t>(hi - lo));
    r.read_range("params_bf16", lo, hi, got16.data());
    const std::string d16 = compare(got16, 4, lo, kN, kSeed);
    EXPECT_EQ(d16, "");
    ok = ok && d.empty() && d16.empty();
  }
  std::vector<f16> whole(static_cast<std::size_t>(kN));  // whole vector, last element included
  r.read_range("params_fp16", 0, kN, whole.data());
  EXPECT_EQ(compare(whole, 3, 0, kN, kSeed), "");
  EXPECT_TRUE(all_ranks(ok));
  // read_range does not enter the CRC bookkeeping: finish_reads has nothing to check.
  EXPECT_NO_THROW(r.finish_reads());
}

// =============================================================== corruption

TEST_F(CheckpointIo, FlippedByteInStateVectorFailsChecksumOnEveryRank) {
  const int rank = rank_of(MPI_COMM_WORLD), world = size_of(MPI_COMM_WORLD);
  const std::string bad = file("bad_exp_avg.h5");
  const std::int64_t k = 50003;  // element whose byte is flipped (beyond a small N, in the tail)
  std::int64_t off = -1;
  {
    CheckpointReader good(s_good, MPI_COMM_WORLD);
    off = good.data_offset("/state/exp_avg");
    EXPECT_EQ(good.data_offset("/state/nothing"), -1);
  }
  ASSERT_TRUE(all_ranks(off > 0)) << "data_offset(/state/exp_avg) = " << off;
  if (rank == 0) {
    fs::copy_file(s_good, bad, fs::copy_options::overwrite_existing);
    flip_byte(bad, off + 4 * k + 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  // The structure is intact: opening succeeds, the damage shows in the CRC.
  CheckpointReader r(bad, MPI_COMM_WORLD);
  for (const std::int64_t n : {kN, std::int64_t{100}, kN + 500}) {
    for (int variant : {0, 3}) {
      const auto [lo, hi] = tile(n, rank, world, variant);
      for (int v = 0; v < 5; ++v) {
        const auto n_el = static_cast<std::size_t>(hi - lo);
        std::vector<unsigned char> buf(n_el * dtype_size(type_of_vec(v)));
        r.read_vector(kNames[v], lo, hi, buf.data());
      }
      const std::string what = "N " + std::to_string(n) + " variant " + std::to_string(variant);
      const std::string msg = input_error_of([&] { r.finish_reads(); }, "finish_reads " + what);
      bool ok = !msg.empty() &&
                message_ok(msg, bad, {"dataset /state/exp_avg:", "checksum mismatch"}, "finish_reads " + what);
      if (ok && (msg.find("/state/master") != std::string::npos || msg.find("exp_avg_sq") != std::string::npos ||
                 msg.find("params_") != std::string::npos)) {
        ADD_FAILURE() << "only /state/exp_avg is damaged, but the message names others: " << msg;
        ok = false;
      }
      EXPECT_TRUE(all_ranks(ok)) << what;
    }
  }
  // Reading the undamaged vectors only: no error.
  {
    const auto [lo, hi] = tile(kN, rank, world, 1);
    EXPECT_EQ(read_and_compare(r, 0, lo, hi, kN, kSeed), "");
    EXPECT_EQ(read_and_compare(r, 2, lo, hi, kN, kSeed), "");
    EXPECT_NO_THROW(r.finish_reads());
  }
  const std::string msg = input_error_of([&] { (void)r.verify_all(); }, "verify_all");
  bool ok = !msg.empty() && message_ok(msg, bad, {"/state/exp_avg: checksum mismatch"}, "verify_all");
  if (ok && msg.find("exp_avg_sq") != std::string::npos) {
    ADD_FAILURE() << "verify_all names an undamaged vector: " << msg;
    ok = false;
  }
  EXPECT_TRUE(all_ranks(ok));
}

TEST_F(CheckpointIo, DamagedConfigOrLayoutFailsAtOpenOnEveryRank) {
  const int rank = rank_of(MPI_COMM_WORLD);
  std::int64_t off_config = -1, off_layout = -1;
  {
    CheckpointReader good(s_good, MPI_COMM_WORLD);
    off_config = good.data_offset("/config");
    off_layout = good.data_offset("/layout");
  }
  ASSERT_TRUE(all_ranks(off_config > 0 && off_layout > 0));
  const std::string bad_config = file("bad_config.h5"), bad_layout = file("bad_layout.h5");
  if (rank == 0) {
    fs::copy_file(s_good, bad_config, fs::copy_options::overwrite_existing);
    flip_byte(bad_config, off_config + 10);  // inside the text
    fs::copy_file(s_good, bad_layout, fs::copy_options::overwrite_existing);
    flip_byte(bad_layout, off_layout + 1);  // second byte of the first row's name
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (const auto& [p, part] : std::vector<std::pair<std::string, std::string>>{
           {bad_config, "dataset /config: checksum mismatch"}, {bad_layout, "dataset /layout: checksum mismatch"}}) {
    const std::string msg = input_error_of([&] { CheckpointReader r(p, MPI_COMM_WORLD); }, p);
    EXPECT_TRUE(all_ranks(!msg.empty() && message_ok(msg, p, {part}, p))) << p;
  }
}

TEST_F(CheckpointIo, TruncatedFileFailsAtOpenOnEveryRank) {
  const int rank = rank_of(MPI_COMM_WORLD);
  const std::int64_t size = file_size(s_good);
  for (const std::int64_t cut : {size / 2, size - 1, std::int64_t{512}, std::int64_t{7}}) {
    const std::string p = file("cut_" + std::to_string(cut) + ".h5");
    if (rank == 0) truncate_copy(s_good, p, cut);
    MPI_Barrier(MPI_COMM_WORLD);
    const std::string msg = input_error_of([&] { CheckpointReader r(p, MPI_COMM_WORLD); }, p);
    // Either HDF5 refuses the file ("truncated file: eof = ...") or it is not HDF5 at all any more.
    const std::string text = after_path(msg, p);
    const bool clear = text.find("truncated") != std::string::npos || text.find("not an HDF5 file") != std::string::npos;
    if (!msg.empty() && !clear) ADD_FAILURE() << "unclear message for a file cut at " << cut << ": " << msg;
    EXPECT_TRUE(all_ranks(!msg.empty() && clear && message_ok(msg, p, {}, p))) << "cut at " << cut;
  }
}

// ====================================================== edge cases of write

TEST_F(CheckpointIo, RanksWithEmptyShardsAndTinyVectors) {
  const int rank = rank_of(MPI_COMM_WORLD), world = size_of(MPI_COMM_WORLD);
  const std::vector<CheckpointTensor> one = {{"s", {}, 0, 1}};
  const std::vector<CheckpointTensor> two = {{"v", {2}, 0, 2}};
  // A tensor with a zero dimension (numel 0) sits between the other two.
  const std::vector<CheckpointTensor> with_empty = {{"s", {}, 0, 1}, {"none", {0, 5}, 1, 0}, {"t", {1}, 1, 1}};
  struct Case { std::int64_t n; int variant; bool with16; std::vector<CheckpointTensor> layout; };
  const Case cases[] = {{1, 0, true, one}, {2, 0, false, two}, {2, 3, true, two},
                        {static_cast<std::int64_t>(world) - 1 > 0 ? world - 1 : 1, 2, true, one},
                        {3, 1, true, with_empty}};
  int idx = 0;
  for (const auto& c : cases) {
    const std::string p = file("tiny_" + std::to_string(idx++) + ".h5");
    const std::uint64_t seed = 100 + static_cast<std::uint64_t>(idx);
    CheckpointMeta meta = make_meta(c.n, seed);
    if (idx == 2) meta.config_text.clear();  // an empty config text round-trips too
    const auto [lo, hi] = tile(c.n, rank, world, c.variant);
    const Slices s = make_slices(lo, hi, seed);
    write_checkpoint(p, MPI_COMM_WORLD, meta, c.layout, outs(s, c.with16), lo, hi);
    CheckpointReader r(p, MPI_COMM_WORLD);
    expect_meta_eq(r.meta(), meta);
    expect_layout_eq(r.layout(), c.layout);
    EXPECT_EQ(r.vectors().size(), c.with16 ? 5u : 3u);
    EXPECT_EQ(r.has_vector("params_fp16"), c.with16);
    bool ok = true;
    for (const std::int64_t n : {c.n, c.n + 3}) {
      const auto [a, b] = tile(n, rank, world, 0);
      for (int v = 0; v < (c.with16 ? 5 : 3); ++v) {
        const std::string d = read_and_compare(r, v, a, b, c.n, seed);
        EXPECT_EQ(d, "") << p << " N " << n;
        ok = ok && d.empty();
      }
      EXPECT_NO_THROW(r.finish_reads()) << p;
    }
    EXPECT_NO_THROW(r.verify_all()) << p;
    if (!c.with16) {  // a vector the file does not hold
      std::vector<f16> buf(static_cast<std::size_t>(hi - lo));
      const std::string msg = input_error_of([&] { r.read_vector("params_fp16", lo, hi, buf.data()); }, p);
      ok = ok && !msg.empty() && message_ok(msg, p, {"params_fp16"}, p);
    }
    EXPECT_TRUE(all_ranks(ok)) << p;
  }
}

TEST_F(CheckpointIo, LargeVectorTailIsReadInBoundedPieces) {
  const int rank = rank_of(MPI_COMM_WORLD), world = size_of(MPI_COMM_WORLD);
  const std::int64_t n = 2 * kChunk + 300001;  // the tail beyond a small N takes 3 bounded reads
  const std::string p = file("large.h5"), bad = file("large_bad.h5");
  const std::vector<CheckpointTensor> layout = {{"w", {n - 5}, 0, n - 5}};
  {
    const auto [lo, hi] = tile(n, rank, world, 1);
    Slices s = make_slices(lo, hi, 21);
    write_checkpoint(p, MPI_COMM_WORLD, make_meta(n, 21), layout, outs(s, false), lo, hi);
  }
  std::int64_t off = -1;
  bool ok = true;
  {
    CheckpointReader r(p, MPI_COMM_WORLD);
    off = r.data_offset("/state/master");
    for (const std::int64_t small : {std::int64_t{1000}, n - 1, n + kChunk + 1}) {
      const auto [lo, hi] = tile(small, rank, world, 0);
      for (int v = 0; v < 3; ++v) {
        const std::string d = read_and_compare(r, v, lo, hi, n, 21);
        EXPECT_EQ(d, "") << "N " << small;
        ok = ok && d.empty();
      }
      EXPECT_NO_THROW(r.finish_reads()) << "N " << small;
    }
    EXPECT_NO_THROW(r.verify_all());
  }
  EXPECT_TRUE(all_ranks(ok));
  // A byte flipped in the last bounded piece of the tail is still found.
  if (rank == 0) {
    fs::copy_file(p, bad, fs::copy_options::overwrite_existing);
    flip_byte(bad, off + 4 * (n - 2));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CheckpointReader r(bad, MPI_COMM_WORLD);
  const auto [lo, hi] = tile(1000, rank, world, 0);
  std::vector<float> buf(static_cast<std::size_t>(hi - lo));
  r.read_vector("master", lo, hi, buf.data());
  const std::string msg = input_error_of([&] { r.finish_reads(); }, "large tail");
  EXPECT_TRUE(all_ranks(!msg.empty() && message_ok(msg, bad, {"dataset /state/master:", "checksum mismatch"}, "large tail")));
  if (rank == 0) {
    fs::remove(p);
    fs::remove(bad);
  }
}

TEST_F(CheckpointIo, OverwriteStatsAndPauseHook) {
  const int world = size_of(MPI_COMM_WORLD);
  const std::string p = file("overwrite.h5");
  int pauses = 0;
  write_file(p, kN, 0, 31, true, make_layout(), [&] { ++pauses; });
  EXPECT_EQ(pauses, 1);
  // The same path again: a smaller file without the 16-bit copies replaces it whole.
  const std::int64_t n2 = 333;
  const std::vector<CheckpointTensor> layout2 = {{"only", {3, 111}, 0, 333}};
  const CheckpointWriteStats st = write_file(p, n2, 2, 32, false, layout2);
  EXPECT_EQ(st.bytes, static_cast<std::uint64_t>(n2) * 12u);
  EXPECT_GE(st.write_s, 0.0);
  EXPECT_GE(st.sync_s, 0.0);
  CheckpointReader r(p, MPI_COMM_WORLD);
  expect_meta_eq(r.meta(), make_meta(n2, 32));
  expect_layout_eq(r.layout(), layout2);
  EXPECT_EQ(r.vectors().size(), 3u);
  bool ok = true;
  const auto [lo, hi] = tile(n2, rank_of(MPI_COMM_WORLD), world, 1);
  for (int v = 0; v < 3; ++v) ok = ok && read_and_compare(r, v, lo, hi, n2, 32).empty();
  EXPECT_NO_THROW(r.finish_reads());
  EXPECT_TRUE(all_ranks(ok));
  const CheckpointWriteStats st3 = write_file(file("stats.h5"), kN, 0, 33, true, make_layout());
  EXPECT_EQ(st3.bytes, static_cast<std::uint64_t>(kN) * 16u);
}

TEST_F(CheckpointIo, WriterRejectsAShardOutsideTheVector) {
  // Every rank passes the same bad range: Error (a program bug, not bad input) on every rank.
  const Slices s = make_slices(0, 11, 1);
  bool ok = false;
  try {
    write_checkpoint(file("never.h5"), MPI_COMM_WORLD, make_meta(10, 1), {{"x", {10}, 0, 10}}, outs(s, false), 0, 11);
  } catch (const InputError&) {
  } catch (const Error& e) {
    ok = std::string(e.what()).find("checkpoint shard out of range") != std::string::npos;
  }
  EXPECT_TRUE(all_ranks(ok));
}

TEST_F(CheckpointIo, ConfigTextAtTheLimitRoundTripsAndBeyondItIsAnError) {
  const int rank = rank_of(MPI_COMM_WORLD), world = size_of(MPI_COMM_WORLD);
  const std::int64_t n = 50;
  const std::vector<CheckpointTensor> layout = {{"x", {5, 10}, 0, 50}};
  const auto [lo, hi] = tile(n, rank, world, 0);
  const Slices s = make_slices(lo, hi, 41);
  CheckpointMeta meta = make_meta(n, 41);
  meta.config_text.assign(std::size_t{1} << 20, 'c');  // exactly the format's limit
  for (std::size_t i = 0; i < meta.config_text.size(); i += 77) meta.config_text[i] = '\n';
  const std::string p = file("config_limit.h5");
  write_checkpoint(p, MPI_COMM_WORLD, meta, layout, outs(s, false), lo, hi);
  {
    CheckpointReader r(p, MPI_COMM_WORLD);
    EXPECT_TRUE(r.meta().config_text == meta.config_text);
  }
  // One byte more: the writer refuses (a program error: Error, on every rank, no hang).
  meta.config_text += 'x';
  bool ok = false;
  try {
    write_checkpoint(file("config_over.h5"), MPI_COMM_WORLD, meta, layout, outs(s, false), lo, hi);
  } catch (const InputError&) {
  } catch (const Error& e) {
    ok = std::string(e.what()).find("config text too long") != std::string::npos;
  }
  EXPECT_TRUE(all_ranks(ok));
}

}  // namespace
}  // namespace shardtrain
