// Reading safetensors and HDF5 weight files (weights_file.hpp): the header
// parsers and the pread of a tensor's element range.
#include "io/weights_file.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <limits>
#include <optional>

#include "core/error.hpp"
#include "core/text.hpp"
#include "io/h5_check.hpp"
#include "io/h5_lock.hpp"
#include "io/h5_read.hpp"
#include "io/text_tokenizer.hpp"  // encode_utf8

namespace shardtrain {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The few JSON values a safetensors header holds: objects, arrays, strings,
// numbers (integers), true/false/null. Depth is bounded (a header nests 3 deep).
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  std::string text;                                   // String; Number's literal
  std::vector<Json> items;                            // Array
  std::vector<std::pair<std::string, Json>> members;  // Object, in file order
};

class JsonParser {
 public:
  JsonParser(std::string_view s, const std::string& path) : m_s(s), m_path(path) {}
  Json parse_document() {
    Json v = value(0);
    skip_ws();
    if (m_i != m_s.size()) fail("trailing bytes after the JSON header");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(m_path + ": not a safetensors file: " + what + " (header byte " + std::to_string(m_i) + ")");
  }
  void skip_ws() {
    while (m_i < m_s.size() && (m_s[m_i] == ' ' || m_s[m_i] == '\n' || m_s[m_i] == '\r' || m_s[m_i] == '\t')) ++m_i;
  }
  char peek() {
    skip_ws();
    if (m_i >= m_s.size()) fail("the JSON header ends early");
    return m_s[m_i];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "' in the JSON header");
    ++m_i;
  }
  std::uint32_t hex4() {
    if (m_i + 4 > m_s.size()) fail("a \\u escape ends early");
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = m_s[m_i++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<std::uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<std::uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<std::uint32_t>(c - 'A' + 10);
      else fail("a bad \\u escape");
    }
    return v;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (m_i >= m_s.size()) fail("a string ends early");
      const char c = m_s[m_i++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (m_i >= m_s.size()) fail("a string ends early");
      const char e = m_s[m_i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (m_i + 2 > m_s.size() || m_s[m_i] != '\\' || m_s[m_i + 1] != 'u')
              fail("a high surrogate escape without its low half");
            m_i += 2;
            const std::uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("a high surrogate escape without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("a lone low surrogate escape");
          }
          out += encode_utf8(static_cast<char32_t>(cp));
          break;
        }
        default: fail("a bad escape in a string");
      }
    }
  }
  Json value(int depth) {
    if (depth > 16) fail("the JSON header nests too deep");
    Json v;
    const char c = peek();
    if (c == '{') {
      v.kind = Json::Object;
      ++m_i;
      if (peek() == '}') {
        ++m_i;
        return v;
      }
      while (true) {
        std::string key = string();
        expect(':');
        v.members.emplace_back(std::move(key), value(depth + 1));
        if (peek() == ',') {
          ++m_i;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Array;
      ++m_i;
      if (peek() == ']') {
        ++m_i;
        return v;
      }
      while (true) {
        v.items.push_back(value(depth + 1));
        if (peek() == ',') {
          ++m_i;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::String;
      v.text = string();
      return v;
    }
    for (const char* word : {"true", "false", "null"}) {
      const std::size_t n = std::strlen(word);
      if (m_s.substr(m_i, n) == word) {
        m_i += n;
        v.kind = word[0] == 'n' ? Json::Null : Json::Bool;
        v.text = word;
        return v;
      }
    }
    const std::size_t start = m_i;
    while (m_i < m_s.size() && (std::isdigit(static_cast<unsigned char>(m_s[m_i])) || m_s[m_i] == '-' ||
                                m_s[m_i] == '+' || m_s[m_i] == '.' || m_s[m_i] == 'e' || m_s[m_i] == 'E'))
      ++m_i;
    if (m_i == start) fail("an unexpected character in the JSON header");
    v.kind = Json::Number;
    v.text = std::string(m_s.substr(start, m_i - start));
    return v;
  }

  std::string_view m_s;
  const std::string& m_path;
  std::size_t m_i = 0;
};

// A non-negative integer JSON number no larger than `max`, or InputError.
std::int64_t json_count(const Json& v, const std::string& path, const std::string& what, std::int64_t max) {
  if (v.kind != Json::Number || v.text.empty() || v.text.size() > 19 ||
      !std::all_of(v.text.begin(), v.text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw InputError(path + ": " + what + " must be a non-negative integer");
  const std::int64_t n = std::stoll(v.text);
  if (n > max) throw InputError(path + ": " + what + " " + v.text + " is too large");
  return n;
}

std::size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

// numel of `shape`, InputError on a negative or overflowing product.
std::int64_t shape_numel(const std::vector<std::int64_t>& shape, const std::string& path, const std::string& name) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    if (d < 0 || (d > 0 && n > std::numeric_limits<std::int64_t>::max() / 8 / d))
      throw InputError(path + ": tensor '" + name + "': shape " + shape_text(shape) + " is too large");
    n *= d;
  }
  return n;
}

}  // namespace

WeightsFile::WeightsFile(const std::string& path) : m_path(path) {
  m_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (m_fd < 0) throw InputError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(m_fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(m_fd);
    throw InputError(path + ": not a regular file");
  }
  m_file_bytes = static_cast<std::uint64_t>(st.st_size);
  try {
    unsigned char sig[8] = {};
    const bool hdf5_sig = ::pread(m_fd, sig, 8, 0) == 8 && std::memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0;
    if (ends_with(path, ".safetensors")) {
      m_format = "safetensors";
      index_safetensors();
    } else if (ends_with(path, ".h5") || ends_with(path, ".hdf5") || hdf5_sig) {
      m_format = "hdf5";
      index_hdf5();
    } else {
      throw InputError(path + ": a weights file must end in .safetensors, .h5 or .hdf5 (as `trainer-ckpt export` "
                              "writes them)");
    }
  } catch (...) {
    ::close(m_fd);
    throw;
  }
}

bool WeightsFile::is_checkpoint(const std::string& path) {
  using namespace h5;
  const auto lock = lock_hdf5();
  quiet_errors();
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    (void)error_stack_text();
    return false;
  }
  H5File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) {
    (void)error_stack_text();
    return false;
  }
  try {
    const auto format = read_string_attr(file, "format", path);
    return format && *format == "shardtrain-checkpoint";
  } catch (const InputError&) {
    return false;
  }
}

WeightsFile::~WeightsFile() {
  if (m_fd >= 0) ::close(m_fd);
}

const WeightsTensor* WeightsFile::find(std::string_view name) const {
  const auto it = std::find_if(m_tensors.begin(), m_tensors.end(), [&](const auto& t) { return t.name == name; });
  return it == m_tensors.end() ? nullptr : &*it;
}

std::string WeightsFile::metadata_or(const std::string& key, const std::string& fallback) const {
  const auto it = m_metadata.find(key);
  return it == m_metadata.end() ? fallback : it->second;
}

void WeightsFile::index_safetensors() {
  unsigned char len_bytes[8];
  if (m_file_bytes < 8 || ::pread(m_fd, len_bytes, 8, 0) != 8)
    throw InputError(m_path + ": not a safetensors file: shorter than its 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeaderBytes || n > m_file_bytes - 8)
    throw InputError(m_path + ": not a safetensors file: header length " + std::to_string(n) + " exceeds " +
                     (n > kMaxHeaderBytes ? "the 100 MiB limit" : "the file (" + std::to_string(m_file_bytes) +
                                                                      " bytes)"));
  std::string text(static_cast<std::size_t>(n), '\0');
  if (n > 0 && ::pread(m_fd, text.data(), n, 8) != static_cast<ssize_t>(n))
    throw InputError(m_path + ": cannot read the safetensors header: " + std::strerror(errno));
  const Json root = JsonParser(text, m_path).parse_document();
  if (root.kind != Json::Object) throw InputError(m_path + ": not a safetensors file: the header is not a JSON object");
  const std::uint64_t data_start = 8 + n, data_bytes = m_file_bytes - data_start;
  for (const auto& [name, v] : root.members) {
    if (name == "__metadata__") {
      if (v.kind != Json::Object) throw InputError(m_path + ": __metadata__ must be a JSON object");
      for (const auto& [k, mv] : v.members) m_metadata[k] = mv.text;  // strings; numbers as written
      continue;
    }
    if (v.kind != Json::Object) throw InputError(m_path + ": tensor '" + name + "' is not a JSON object");
    const Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto& [k, mv] : v.members) {
      if (k == "dtype") dtype = &mv;
      else if (k == "shape") shape = &mv;
      else if (k == "data_offsets") offsets = &mv;
    }
    if (!dtype || dtype->kind != Json::String || !shape || shape->kind != Json::Array || !offsets ||
        offsets->kind != Json::Array || offsets->items.size() != 2)
      throw InputError(m_path + ": tensor '" + name + "' needs dtype (a string), shape (an array) and "
                       "data_offsets (two integers)");
    WeightsTensor t;
    t.name = name;
    t.dtype = dtype->text;
    for (const Json& d : shape->items) t.shape.push_back(json_count(d, m_path, "a dimension of '" + name + "'",
                                                                    std::numeric_limits<std::int32_t>::max()));
    t.numel = shape_numel(t.shape, m_path, name);
    const std::int64_t max = static_cast<std::int64_t>(std::min<std::uint64_t>(data_bytes, INT64_MAX));
    const std::int64_t begin = json_count(offsets->items[0], m_path, "data_offsets of '" + name + "'", max);
    const std::int64_t end = json_count(offsets->items[1], m_path, "data_offsets of '" + name + "'", max);
    const std::size_t eb = dtype_bytes(t.dtype);
    if (eb == 0) throw InputError(m_path + ": tensor '" + name + "': unknown dtype '" + t.dtype + "'");
    if (end < begin || static_cast<std::uint64_t>(end - begin) != static_cast<std::uint64_t>(t.numel) * eb)
      throw InputError(m_path + ": tensor '" + name + "': data_offsets [" + std::to_string(begin) + ", " +
                       std::to_string(end) + ") do not hold " + shape_text(t.shape) + " of " + t.dtype +
                       " (" + std::to_string(static_cast<std::uint64_t>(t.numel) * eb) + " bytes)");
    t.file_offset = data_start + static_cast<std::uint64_t>(begin);
    m_tensors.push_back(std::move(t));
  }
  std::stable_sort(m_tensors.begin(), m_tensors.end(),
                   [](const auto& a, const auto& b) { return a.file_offset < b.file_offset; });
}

void WeightsFile::index_hdf5() {
  using namespace h5;
  const auto lock = lock_hdf5();
  quiet_errors();
  H5File file(H5Fopen(m_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) bad_input(m_path, "cannot open as HDF5: " + error_stack_text());
  // Root attributes: strings and integers become metadata.
  {
    H5O_info_t info{};
    SHARDTRAIN_H5_CHECK(H5Oget_info(file, &info));
    for (hsize_t i = 0; i < info.num_attrs && i < 256; ++i) {
      char name[256] = {};
      if (H5Aget_name_by_idx(file, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT) < 0) continue;
      if (auto s = [&]() -> std::optional<std::string> {
            try {
              return read_string_attr(file, name, m_path);
            } catch (const InputError&) {
              return std::nullopt;
            }
          }())
        m_metadata[name] = *s;
      else if (auto v = [&]() -> std::optional<std::int64_t> {
                 try {
                   return read_int_attr(file, name, m_path);
                 } catch (const InputError&) {
                   return std::nullopt;
                 }
               }())
        m_metadata[name] = std::to_string(*v);
    }
    (void)error_stack_text();
  }
  if (metadata_or("format", "") == "shardtrain-checkpoint")
    bad_input(m_path, "is a shardtrain checkpoint, not an export of its weights: export them first "
                      "(trainer-ckpt export CKPT OUT.safetensors), or resume from it (checkpoint.resume)");
  // Visits every dataset below `group` (names joined with '/'), depth-bounded.
  std::function<void(hid_t, const std::string&, int)> visit = [&](hid_t group, const std::string& prefix, int depth) {
    if (depth > 8) bad_input(m_path, "groups nest deeper than 8 below '" + prefix + "'");
    std::vector<std::string> names;
    H5G_info_t ginfo{};
    SHARDTRAIN_H5_CHECK(H5Gget_info(group, &ginfo));
    if (ginfo.nlinks > 100000) bad_input(m_path, "more than 100000 objects in a group");
    for (hsize_t i = 0; i < ginfo.nlinks; ++i) {
      const ssize_t len = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      if (len < 0 || len > 4096) bad_input(m_path, "a link name cannot be read: " + error_stack_text());
      std::string n(static_cast<std::size_t>(len) + 1, '\0');
      SHARDTRAIN_H5_CHECK(H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, n.data(), n.size(), H5P_DEFAULT));
      n.resize(static_cast<std::size_t>(len));
      names.push_back(std::move(n));
    }
    for (const std::string& n : names) {
      const std::string full = prefix.empty() ? n : prefix + "/" + n;
      const hid_t obj = H5Oopen(group, n.c_str(), H5P_DEFAULT);
      if (obj < 0) bad_input(m_path, "cannot open '" + full + "' (a dangling or external link?)");
      const H5I_type_t type = H5Iget_type(obj);
      if (type == H5I_GROUP) {
        H5Group g(obj);
        visit(g, full, depth + 1);
        continue;
      }
      if (type != H5I_DATASET) {
        H5Oclose(obj);
        continue;
      }
      H5Dataset ds(obj);
      H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Dget_type(ds)));
      WeightsTensor t;
      t.name = full;
      const H5T_class_t cls = H5Tget_class(ft);
      const std::size_t size = H5Tget_size(ft);
      if (cls == H5T_FLOAT && size == 4 && H5Tequal(ft, H5T_IEEE_F32LE) > 0) t.dtype = "F32";
      else if (cls == H5T_FLOAT) t.dtype = size == 8 ? "F64" : size == 2 ? "F16" : "F?";
      else t.dtype = class_name(cls);
      H5Dataspace fs(SHARDTRAIN_H5_CHECK(H5Dget_space(ds)));
      const int nd = SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_ndims(fs));
      if (nd > 8) bad_input(m_path, "dataset '" + full + "' has " + std::to_string(nd) + " dimensions");
      hsize_t dims[8] = {};
      SHARDTRAIN_H5_CHECK(H5Sget_simple_extent_dims(fs, dims, nullptr));
      for (int d = 0; d < nd; ++d) {
        if (dims[d] > static_cast<hsize_t>(std::numeric_limits<std::int32_t>::max()))
          bad_input(m_path, "dataset '" + full + "' is too large");
        t.shape.push_back(static_cast<std::int64_t>(dims[d]));
      }
      t.numel = shape_numel(t.shape, m_path, full);
      if (t.dtype == "F32" && t.numel > 0) {
        H5PropList dcpl(SHARDTRAIN_H5_CHECK(H5Dget_create_plist(ds)));
        if (H5Pget_layout(dcpl) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl) != 0 || H5Pget_external_count(dcpl) != 0)
          bad_input(m_path, "dataset '" + full + "' is not stored contiguously in the file (chunked, compressed or "
                            "external); write it contiguous, as `trainer-ckpt export --format hdf5` and h5py's "
                            "default do");
        const haddr_t off = H5Dget_offset(ds);
        if (off == HADDR_UNDEF)
          bad_input(m_path, "dataset '" + full + "' has no data in the file (never written)");
        if (off > m_file_bytes || static_cast<std::uint64_t>(t.numel) * 4 > m_file_bytes - off)
          bad_input(m_path, "dataset '" + full + "' extends past the end of the file (truncated?)");
        t.file_offset = off;
      }
      m_tensors.push_back(std::move(t));
    }
  };
  visit(file, "", 0);
  (void)error_stack_text();
}

void WeightsFile::read(const WeightsTensor& t, std::int64_t lo, std::int64_t hi, float* dst) const {
  if (t.dtype != "F32")
    throw InputError(m_path + ": tensor '" + t.name + "' is " + t.dtype + "; only float32 (F32) tensors are read");
  if (lo < 0 || hi < lo || hi > t.numel)
    SHARDTRAIN_FAIL(m_path + ": read of elements [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    ") outside tensor '" + t.name + "' (" + std::to_string(t.numel) + ")");
  auto* out = reinterpret_cast<char*>(dst);
  std::uint64_t at = t.file_offset + static_cast<std::uint64_t>(lo) * 4;
  std::uint64_t left = static_cast<std::uint64_t>(hi - lo) * 4;
  while (left > 0) {
    const ssize_t got = ::pread(m_fd, out, static_cast<std::size_t>(std::min<std::uint64_t>(left, 1u << 30)),
                                static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) SHARDTRAIN_FAIL(m_path + ": read failed: " + std::strerror(errno));
    if (got == 0) throw InputError(m_path + ": tensor '" + t.name + "' is cut short (the file is truncated)");
    out += got;
    at += static_cast<std::uint64_t>(got);
    left -= static_cast<std::uint64_t>(got);
  }
}

std::map<std::string, std::string> read_json_scalars(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot be read (" + std::strerror(errno) + ")");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const Json doc = JsonParser(s, path).parse_document();
  if (doc.kind != Json::Object) throw InputError(path + ": not a JSON object");
  std::map<std::string, std::string> out;
  for (const auto& [key, v] : doc.members)
    if (v.kind == Json::String || v.kind == Json::Number || v.kind == Json::Bool) out[key] = v.text;
  return out;
}

}  // namespace shardtrain
