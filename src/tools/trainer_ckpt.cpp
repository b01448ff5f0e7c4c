// trainer-ckpt: looks inside shardtrain checkpoint files (format:
// share/doc/checkpoint-format.md). Subcommands:
//   info CKPT [--config]   what the file holds: run state, layout table, sizes
//   verify CKPT            every dataset's CRC-32; ranks of an mpirun split the reading
//   export CKPT OUT        parameters of one state vector to plain HDF5, .npy or
//                          safetensors (our names, or Hugging Face GPT-2's)
//   sample CKPT            text from a GPT checkpoint or its export (ckpt_sample.cpp, gpt_sample.*)
// This file parses the command line, calls io/checkpoint.hpp and formats the
// result; it knows nothing of the format beyond that API, except how to write
// the .npy and safetensors exports (and, for --names gpt2, the model type and n_head
// from the stored config text); the HDF5 export is written by io/checkpoint_export.hpp
// (io/ is the only code that calls HDF5). Exit codes: 0 success, 2 bad input or usage (missing,
// foreign or damaged file, unknown name, bad arguments), 1 any other failure.
// Every error is one line "error: ..." on stderr, printed once.
// MPI: works as a singleton. `info` and `export` run on rank 0 alone (other
// ranks wait and return its exit code); `verify` is collective over
// MPI_COMM_WORLD, and an InputError or a CheckpointIoError from the reader is
// one every rank reaches with the same message (the reader's contract), so
// rank 0 prints it. verify and export read under --io-timeout (the reader's
// I/O deadline: a read that never returns ends the tool with exit 1).
// Invariants: OUT is written to OUT.partial and renamed into place only when
// complete, so OUT is never a half-written file; memory use of `export` is
// bounded by one tensor row block (kChunkElements; twice that for a transposed
// GPT-2 weight), not by the model size.
// Length (~840 lines): one tool's subcommands (sample's body is in ckpt_sample.cpp) and its three export writers (HDF5
// through io/checkpoint_export.hpp, .npy, safetensors); each is short, and they share the command line and error handling above.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <toml++/toml.h>
#include <vector>

#include "core/durable_file.hpp"
#include "core/error.hpp"
#include "core/model_type.hpp"
#include "core/state_vectors.hpp"
#include "core/text.hpp"
#include "core/mpi_world.hpp"
#include "io/checkpoint.hpp"
#include "io/checkpoint_export.hpp"
#include "io/checkpoint_phase.hpp"
#include "io/token_dataset.hpp"
#include "tools/gpt_sample.hpp"
#include "version.hpp"

namespace {

using namespace shardtrain;
using Clock = std::chrono::steady_clock;

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;
constexpr std::int64_t kChunkElements = std::int64_t{1} << 20;  // export reads at most this many at once



// Prints "error: MESSAGE" as one line (embedded newlines become "; ").
void print_error(std::string_view prefix, std::string message) {
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  std::string line;
  for (char c : message) {
    if (c == '\n')
      line += "; ";
    else
      line += c;
  }
  std::fprintf(stderr, "error: %.*s%s\n", static_cast<int>(prefix.size()), prefix.data(), line.c_str());
  std::fflush(stderr);
}

// Runs fn on this rank alone and maps what it throws to an exit code, printing it.
int guarded(const std::function<int()>& fn) {
  try {
    return fn();
  } catch (const InputError& e) {
    print_error("", e.what());
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    print_error("", "out of memory");
    return kExitFailure;
  } catch (const std::exception& e) {
    print_error("", e.what());
    return kExitFailure;
  }
}

// Runs fn on rank 0 only; every rank returns its exit code.
int on_root(const std::function<int()>& fn) {
  int code = world_rank() == 0 ? guarded(fn) : kExitOk;
  std::fflush(stdout);
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return code;
}

// ------------------------------------------------------------------ formatting

std::string shape_text(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) return "()";
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string human_bytes(std::uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

std::int64_t parameter_count(const std::vector<CheckpointTensor>& layout) {
  std::int64_t n = 0;
  for (const auto& t : layout) n += t.numel;
  return n;
}

// ------------------------------------------------------------------------ info

int cmd_info(const std::string& path, bool config_only) {
  CheckpointReader ckpt(path, MPI_COMM_SELF);
  const CheckpointMeta& m = ckpt.meta();
  if (config_only) {
    std::fputs(m.config_text.c_str(), stdout);
    if (!m.config_text.empty() && m.config_text.back() != '\n') std::fputc('\n', stdout);
    return kExitOk;
  }
  const auto& layout = ckpt.layout();
  auto row = [](std::string_view key, const std::string& value) { fmt::print("  {:<20}{}\n", key, value); };
  fmt::print("{}\n", path);
  row("format", fmt::format("{}, schema version {}", kCheckpointFormat, kCheckpointSchema));
  row("written by", fmt::format("shardtrain {}, {}", m.version, m.created_utc));
  row("step", std::to_string(m.step));
  row("parent", m.parent.empty() ? std::string("none (a run from scratch, or written before lineages were recorded)")
                                 : m.parent);
  row("root attributes", m.meta_crc_present ? fmt::format("crc32 {} (checked)", checkpoint_meta_crc(m))
                                            : std::string("no CRC (written before shardtrain recorded one)"));
  row("optimizer updates", std::to_string(m.optimizer_updates));
  row("samples seen", std::to_string(m.samples_seen));
  row("tokens seen", std::to_string(m.tokens_seen));
  row("sampler seed", std::to_string(m.sampler_seed));
  row("written with", fmt::format("world_size {}, zero_stage {}, precision {}", m.world_size, m.zero_stage,
                                  m.precision));
  row("loss scaler", fmt::format("scale {:g}, good steps {}, hysteresis left {}, consecutive skips {}",
                                 m.loss_scale, m.scaler_good_steps, m.scaler_hysteresis_left,
                                 m.scaler_consecutive_skips));
  row("data", fmt::format("{} (train tokens {}, vocab {}, seq_len {})", m.data_path, m.data_train_tokens,
                          m.data_vocab_size, m.seq_len));

  std::size_t name_w = 4, shape_w = 5;
  for (const auto& t : layout) {
    name_w = std::max(name_w, t.name.size());
    shape_w = std::max(shape_w, shape_text(t.shape).size());
  }
  const std::size_t num_w = std::max<std::size_t>(6, std::to_string(m.padded_size).size());
  fmt::print("\nlayout: {} tensors, offsets aligned to {} elements\n", layout.size(), m.alignment);
  fmt::print("  {:<{}}  {:<{}}  {:>{}}  {:>{}}\n", "name", name_w, "shape", shape_w, "offset", num_w, "numel",
             num_w);
  for (const auto& t : layout)
    fmt::print("  {:<{}}  {:<{}}  {:>{}}  {:>{}}\n", t.name, name_w, shape_text(t.shape), shape_w, t.offset,
               num_w, t.numel, num_w);

  const std::int64_t params = parameter_count(layout);
  fmt::print("\nsizes\n");
  row("parameters", fmt::format("{} (sum of numel)", params));
  row("padded size", fmt::format("{} elements per state vector ({} padding)", m.padded_size,
                                 m.padded_size - params));
  std::uint64_t state_bytes = 0;
  for (const auto& [name, type] : ckpt.vectors()) {
    const std::string ds = "/state/" + name;
    const std::uint64_t bytes = static_cast<std::uint64_t>(m.padded_size) * dtype_size(type);
    state_bytes += bytes;
    const std::int64_t off = ckpt.data_offset(ds);
    row(ds, fmt::format("{:<9} {} bytes ({}), file offset {}", numpy_name(type), bytes, human_bytes(bytes),
                        off >= 0 ? std::to_string(off) : std::string("-")));
  }
  std::error_code ec;
  const auto file_bytes = std::filesystem::file_size(path, ec);
  row("file", ec ? std::string("size unknown: ") + ec.message()
                 : fmt::format("{} bytes ({}; state vectors {})", file_bytes, human_bytes(file_bytes),
                               human_bytes(state_bytes)));
  return kExitOk;
}

// ---------------------------------------------------------------------- verify

// verify_all() throws on damage without returning its per-dataset lines; rebuild
// them from the vectors and the datasets the message names.
std::vector<std::string> lines_after_damage(const CheckpointReader& ckpt, const std::string& message) {
  std::vector<std::string> lines{"/config  ok", "/layout  ok"};  // checked when the file was opened
  for (const auto& v : ckpt.vectors()) {
    const std::string ds = "/state/" + v.first;
    const bool bad = message.find("dataset " + ds + ":") != std::string::npos;
    lines.push_back(ds + (bad ? "  CHECKSUM MISMATCH" : "  ok"));
  }
  return lines;
}

void cmd_verify(const std::string& path, double io_timeout_s) {
  const bool root = world_rank() == 0;
  const auto t0 = Clock::now();
  IoDeadline deadline(io_timeout_s, world_rank());  // the reader's phases (io/checkpoint_phase.hpp)
  CheckpointReader ckpt(path, MPI_COMM_WORLD, &deadline);
  std::vector<std::string> lines;
  std::string damage;
  try {
    lines = ckpt.verify_all();
  } catch (const InputError& e) {
    damage = e.what();
    lines = lines_after_damage(ckpt, damage);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (root) {
    // Checked when the file was opened (a mismatch is refused there).
    fmt::print("{}\n", ckpt.meta().meta_crc_present
                            ? fmt::format("root attributes: crc32 {}, ok", checkpoint_meta_crc(ckpt.meta()))
                            : std::string("root attributes: no CRC (written before shardtrain recorded one)"));
    for (const auto& l : lines) fmt::print("{}\n", l);
    std::uint64_t bytes = 0;
    for (const auto& [name, type] : ckpt.vectors())
      bytes += static_cast<std::uint64_t>(ckpt.meta().padded_size) * dtype_size(type);
    if (damage.empty())
      fmt::print("{}: ok, {} datasets, {} of state checked in {:.2f} s on {} rank{}\n", path, lines.size(),
                 human_bytes(bytes), secs, world_size(), world_size() > 1 ? "s" : "");
    std::fflush(stdout);
  }
  if (!damage.empty()) throw InputError(damage);
}

// ---------------------------------------------------------------------- export

// "no parameter 'X'; close names: a, b" (up to 6, nearest first, then layout order).
std::string unknown_parameter(const std::string& path, const std::string& name,
                              const std::vector<CheckpointTensor>& layout) {
  const std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
  std::vector<std::pair<std::size_t, std::size_t>> scored;  // (distance, layout index)
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const std::string& cand = layout[i].name;
    std::size_t d = edit_distance(name, cand, limit);
    if (d > limit && !name.empty() && cand.find(name) != std::string::npos) d = limit;  // "c_attn.weight"
    if (d <= limit) scored.emplace_back(d, i);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::string msg = path + ": no parameter '" + name + "' in the checkpoint";
  if (scored.empty())
    return msg + " (it has " + std::to_string(layout.size()) + " parameters; `trainer-ckpt info " + path +
           "` lists them)";
  msg += "; close names: ";
  for (std::size_t k = 0; k < scored.size() && k < 6; ++k) msg += (k ? ", " : "") + layout[scored[k].second].name;
  if (scored.size() > 6) msg += ", ...";
  return msg;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// OUT.partial, renamed to OUT by commit(); removed if never committed.
class PartialFile {
 public:
  explicit PartialFile(std::string out) : m_out(std::move(out)), m_tmp(m_out + ".partial") {}
  ~PartialFile() {
    if (!m_committed) std::remove(m_tmp.c_str());
  }
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;
  const std::string& tmp() const { return m_tmp; }

  // Flushes the finished file to disk and renames it into place.
  void commit() {
    fsync_file(m_tmp);
    if (std::rename(m_tmp.c_str(), m_out.c_str()) != 0)
      SHARDTRAIN_FAIL(m_out + ": cannot rename " + m_tmp + " into place: " + std::strerror(errno));
    m_committed = true;
    const std::string dir = std::filesystem::path(m_out).parent_path().string();
    fsync_directory(dir.empty() ? "." : dir);  // the rename itself survives a crash
  }

 private:
  std::string m_out, m_tmp;
  bool m_committed = false;
};

// Creates path (OUT.partial) afresh for writing, or throws InputError naming
// why not. Whatever is at path is removed first, not opened: a symbolic link
// planted there (or left by anything) is never followed, and the open is
// exclusive and refuses links (O_EXCL | O_NOFOLLOW), so the export writes only
// a new file of its own.
std::FILE* create_output(const std::string& path, const std::string& shown) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw InputError(shown + ": cannot remove the leftover '" + path + "': " + std::strerror(errno));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) throw InputError(shown + ": cannot create: " + std::strerror(errno));
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    const int err = errno;
    ::close(fd);
    throw InputError(shown + ": cannot create: " + std::strerror(err));
  }
  return f;
}

// The .npy v1.0 header for a little-endian float32 array of `shape`: magic,
// version, header length, then the dict padded with spaces to a 64-byte multiple.
std::string npy_header(const std::vector<std::int64_t>& shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  const std::size_t fixed = 6 + 2 + 2;  // magic, version, header length
  const std::size_t total = (fixed + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - fixed - dict.size() - 1, ' ');
  dict += '\n';
  SHARDTRAIN_CHECK(dict.size() <= 0xFFFF, "npy header too long for format version 1.0");
  std::string h("\x93NUMPY\x01\x00", 8);
  h += static_cast<char>(dict.size() & 0xFF);
  h += static_cast<char>(dict.size() >> 8);
  return h + dict;
}

// Streams one tensor of `vector` into a .npy file (elements are little-endian
// in memory: the reader converts to the file's LE type, so the bytes go out as read).
void write_npy(CheckpointReader& ckpt, const std::string& vector, const CheckpointTensor& t, const std::string& out) {
  PartialFile partial(out);
  std::FILE* f = create_output(partial.tmp(), out);
  bool ok = true;
  try {
    const std::string header = npy_header(t.shape);
    ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
    std::vector<float> buf(static_cast<std::size_t>(std::min(t.numel, kChunkElements)));
    for (std::int64_t done = 0; ok && done < t.numel;) {
      const std::int64_t n = std::min(kChunkElements, t.numel - done);
      ckpt.read_range(vector, t.offset + done, t.offset + done + n, buf.data());
      ok = std::fwrite(buf.data(), sizeof(float), static_cast<std::size_t>(n), f) == static_cast<std::size_t>(n);
      done += n;
    }
  } catch (...) {
    std::fclose(f);
    throw;
  }
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) SHARDTRAIN_FAIL(out + ": write failed: " + std::strerror(ok ? errno : err));
  partial.commit();
}

// Writes one float32 dataset per tensor, named by the tensor, in its shape
// (io/checkpoint_export.hpp), into OUT.partial, then renames it to OUT.
void write_h5(CheckpointReader& ckpt, const std::string& vector, const std::vector<const CheckpointTensor*>& tensors,
              const std::vector<std::pair<std::string, std::string>>& metadata, const std::string& out) {
  PartialFile partial(out);
  std::fclose(create_output(partial.tmp(), out));  // a clear message when OUT cannot be created
  export_tensors_h5(ckpt, vector, tensors, metadata, partial.tmp(), out, kChunkElements);
  partial.commit();
}

// ----------------------------------------------------------------- safetensors

// One tensor of a safetensors export: its name and shape in the file, the
// checkpoint tensor it holds, and whether it is that tensor transposed (an
// (out, in) Linear weight stored as Hugging Face's Conv1D, (in, out)).
struct SafetensorsEntry {
  std::string name;
  const CheckpointTensor* tensor = nullptr;
  std::vector<std::int64_t> shape;
  bool transpose = false;
};

using Metadata = std::vector<std::pair<std::string, std::string>>;

// The stored config's [model] table (empty if it has none); InputError if the
// text does not parse.
toml::table stored_model_config(const CheckpointReader& ckpt) {
  toml::table root;
  try {
    root = toml::parse(ckpt.meta().config_text, std::string_view("/config"));
  } catch (const toml::parse_error& e) {
    throw InputError(ckpt.path() + ": the stored config text (/config) does not parse as TOML: " +
                     std::string(e.description()));
  }
  const toml::table* model = root["model"].as_table();
  return model ? *model : toml::table{};
}

// What a reader of an export needs besides the tensors (model.init_from's
// checks, `trainer-ckpt sample EXPORT`): the model type and sizes from the
// stored config, the vocabulary size and data set of the checkpoint, and that
// data set's tokenizer when the file is still there to ask.
Metadata model_metadata(const CheckpointReader& ckpt) {
  const toml::table model = stored_model_config(ckpt);
  const std::string type = model["type"].value_or(std::string("(none)"));
  const std::optional<ModelType> known = enum_named<ModelType>(type);
  const bool transformer = known && is_transformer(*known);
  Metadata m{{"model_type", type}};
  if (transformer) {
    for (const char* k : {"n_layer", "n_head", "d_model", "seq_len"})
      if (const auto v = model[k].value<std::int64_t>()) m.emplace_back(k, std::to_string(*v));
    m.emplace_back("layernorm_eps", fmt::format("{}", model["layernorm_eps"].value_or(1e-5)));
  }
  const CheckpointMeta& meta = ckpt.meta();
  if (meta.data_vocab_size > 0) m.emplace_back("vocab_size", std::to_string(meta.data_vocab_size));
  if (meta.seq_len > 0 && !transformer) m.emplace_back("seq_len", std::to_string(meta.seq_len));
  m.emplace_back("data_path", meta.data_path);
  if (meta.data_vocab_size > 0 && std::filesystem::is_regular_file(meta.data_path)) {
    try {
      TokenDataset data(meta.data_path, MPI_COMM_SELF);
      if (data.vocab_size() == meta.data_vocab_size) m.emplace_back("tokenizer", name_of(data.tokenizer()));
    } catch (const std::exception&) {  // not a token data set (a classifier's), or gone: not recorded
    }
  }
  return m;
}

// Every parameter under Hugging Face GPT-2 names (GPT2LMHeadModel's state dict),
// in layout order, and the model's shape for the metadata. The checkpoint must
// be a GPT (stored model.type "gpt") whose layout is exactly gpt_layout's (names
// and shapes); anything else is an InputError naming the file. Our (out, in)
// Linear weights become Conv1D's (in, out); [q | k | v] along c_attn's output
// dimension, heads contiguous, is the layout both models use. lm_head.weight is
// not written: it is tied to transformer.wte.weight (as in HF's own files).
std::vector<SafetensorsEntry> gpt2_entries(const CheckpointReader& ckpt, Metadata& metadata) {
  const std::string& path = ckpt.path();
  const toml::table model = stored_model_config(ckpt);
  const std::string type = model["type"].value_or(std::string("(none)"));
  if (enum_named<ModelType>(type) != ModelType::Gpt)
    throw InputError(path + ": --names gpt2 needs a GPT checkpoint; this one's model.type is \"" + type + "\"");
  const std::int64_t n_head = model["n_head"].value_or(std::int64_t{0});
  const auto& layout = ckpt.layout();
  auto find = [&](const std::string& n) -> const CheckpointTensor* {
    const auto it = std::find_if(layout.begin(), layout.end(), [&](const auto& t) { return t.name == n; });
    return it == layout.end() ? nullptr : &*it;
  };
  const CheckpointTensor* wte = find("wte.weight");
  const CheckpointTensor* wpe = find("wpe.weight");
  if (!wte || !wpe || wte->shape.size() != 2 || wpe->shape.size() != 2)
    throw InputError(path + ": --names gpt2: the layout has no 2-D wte.weight and wpe.weight");
  const std::int64_t V = wte->shape[0], C = wte->shape[1], T = wpe->shape[0];
  std::int64_t L = 0;
  while (find("h." + std::to_string(L) + ".ln_1.weight")) ++L;
  if (n_head < 1 || C % n_head != 0)
    throw InputError(path + ": --names gpt2: the stored config's model.n_head (" + std::to_string(n_head) +
                     ") does not divide the embedding width " + std::to_string(C));

  // Our name -> (HF name, our shape, transposed).
  struct Want {
    std::string hf;
    std::vector<std::int64_t> shape;
    bool transpose;
  };
  std::vector<std::pair<std::string, Want>> want{{"wte.weight", {"transformer.wte.weight", {V, C}, false}},
                                                 {"wpe.weight", {"transformer.wpe.weight", {T, C}, false}}};
  for (std::int64_t l = 0; l < L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const std::vector<std::pair<std::string, std::vector<std::int64_t>>> block{
        {"ln_1.weight", {C}},          {"ln_1.bias", {C}},          {"attn.c_attn.weight", {3 * C, C}},
        {"attn.c_attn.bias", {3 * C}}, {"attn.c_proj.weight", {C, C}}, {"attn.c_proj.bias", {C}},
        {"ln_2.weight", {C}},          {"ln_2.bias", {C}},          {"mlp.c_fc.weight", {4 * C, C}},
        {"mlp.c_fc.bias", {4 * C}},    {"mlp.c_proj.weight", {C, 4 * C}}, {"mlp.c_proj.bias", {C}}};
    for (const auto& [n, shape] : block)
      want.push_back({h + n, {"transformer." + h + n, shape, shape.size() == 2}});
  }
  want.push_back({"ln_f.weight", {"transformer.ln_f.weight", {C}, false}});
  want.push_back({"ln_f.bias", {"transformer.ln_f.bias", {C}, false}});

  std::vector<SafetensorsEntry> entries;
  for (const auto& t : layout) {
    const auto it = std::find_if(want.begin(), want.end(), [&](const auto& w) { return w.first == t.name; });
    if (it == want.end())
      throw InputError(path + ": --names gpt2: parameter '" + t.name + "' has no GPT-2 name (not a plain GPT layout)");
    const Want& w = it->second;
    if (t.shape != w.shape)
      throw InputError(path + ": --names gpt2: " + t.name + " has shape " + shape_text(t.shape) + ", GPT-2 needs " +
                       shape_text(w.shape));
    std::vector<std::int64_t> shape = w.transpose ? std::vector<std::int64_t>{t.shape[1], t.shape[0]} : t.shape;
    entries.push_back({w.hf, &t, std::move(shape), w.transpose});
  }
  if (entries.size() != want.size())
    for (const auto& [ours, w] : want)
      if (!find(ours)) throw InputError(path + ": --names gpt2: the layout has no " + ours + " (for " + w.hf + ")");

  const double eps = model["layernorm_eps"].value_or(1e-5);
  metadata.insert(metadata.end(), {{"architecture", "GPT2LMHeadModel"},
                                   {"vocab_size", std::to_string(V)},
                                   {"n_positions", std::to_string(T)},
                                   {"n_ctx", std::to_string(T)},
                                   {"n_embd", std::to_string(C)},
                                   {"n_layer", std::to_string(L)},
                                   {"n_head", std::to_string(n_head)},
                                   {"layer_norm_epsilon", fmt::format("{}", eps)},
                                   {"activation_function", "gelu_new"},
                                   {"tied_weights", "lm_head.weight=transformer.wte.weight"}});
  return entries;
}

// Writes `entries` of `vector` as a safetensors file: the little-endian uint64
// header length N, N bytes of JSON header (toml++'s JSON writer: every tensor's
// dtype, shape and data_offsets, and "__metadata__"; padded with spaces so the
// data starts at a multiple of 8), then the tensors' float32 bytes back to back
// in entry order. Streams: the header needs only names and shapes, then each
// tensor is copied in blocks of whole rows of at most kChunkElements (a
// transposed block goes out as one strided piece per output row).
void write_safetensors(CheckpointReader& ckpt, const std::string& vector, const std::vector<SafetensorsEntry>& entries,
                       const Metadata& metadata, const std::string& out) {
  toml::table header;
  toml::table meta;
  for (const auto& [k, v] : metadata) meta.insert_or_assign(k, v);
  header.insert_or_assign("__metadata__", std::move(meta));
  std::vector<std::uint64_t> begin;
  std::uint64_t size = 0;
  for (const auto& e : entries) {
    toml::array shape;
    for (const std::int64_t d : e.shape) shape.push_back(d);
    const std::uint64_t bytes = static_cast<std::uint64_t>(e.tensor->numel) * 4;
    toml::table t;
    t.insert("dtype", "F32");
    t.insert("shape", std::move(shape));
    t.insert("data_offsets", toml::array{static_cast<std::int64_t>(size), static_cast<std::int64_t>(size + bytes)});
    if (!header.insert(e.name, std::move(t)).second)
      throw InputError(out + ": two tensors named '" + e.name + "'");
    begin.push_back(size);
    size += bytes;
  }
  std::ostringstream json;
  json << toml::json_formatter{header, toml::format_flags::none};
  std::string text = json.str();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xFF);
  head += text;

  PartialFile partial(out);
  std::fclose(create_output(partial.tmp(), out));  // a clear message when OUT cannot be created
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
    const std::int64_t rows = t.shape.empty() ? 1 : t.shape[0];
    const std::int64_t cols = t.numel / rows;
    const std::int64_t block = std::max<std::int64_t>(1, kChunkElements / cols);
    buf.resize(static_cast<std::size_t>(std::min(rows, block) * cols));
    for (std::int64_t r = 0; r < rows; r += block) {
      const std::int64_t k = std::min(block, rows - r);
      const std::int64_t lo = t.offset + r * cols;
      ckpt.read_range(vector, lo, lo + k * cols, buf.data());
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

// Hugging Face's config.json for a --names gpt2 export named model.safetensors,
// written to `path` (OUT's folder, so that GPT2LMHeadModel.from_pretrained(folder)
// finds both): GPT2Config's keys from the export's metadata, no dropout
// (ours has none), the tanh GELU ("gelu_new"), the LM head tied to wte, and
// GPT-2's <|endoftext|> id only for a gpt2-tokenized data set (null otherwise).
// Written as path.partial and renamed into place, like OUT.
void write_hf_config(const Metadata& metadata, const std::string& path) {
  auto get = [&](const std::string& k) -> std::string {
    for (const auto& [key, v] : metadata)
      if (key == k) return v;
    return "";
  };
  const std::string tokenizer = get("tokenizer");
  const std::string eot = enum_named<TextTokenizer>(tokenizer) == TextTokenizer::Gpt2 ? "50256" : "null";
  std::string text = "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n";
  for (const char* k : {"vocab_size", "n_positions", "n_ctx", "n_embd", "n_layer", "n_head", "layer_norm_epsilon"})
    text += fmt::format("  \"{}\": {},\n", k, get(k));
  text += "  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
          "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
          "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n"
          "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n"
          "  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n  \"torch_dtype\": \"float32\",\n";
  text += fmt::format("  \"bos_token_id\": {},\n  \"eos_token_id\": {},\n", eot, eot);
  text += fmt::format("  \"shardtrain_tokenizer\": \"{}\",\n  \"shardtrain_step\": {}\n}}\n",
                      tokenizer.empty() ? "unknown" : tokenizer, get("step"));
  PartialFile partial(path);
  std::FILE* f = create_output(partial.tmp(), path);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) SHARDTRAIN_FAIL(path + ": write failed: " + std::strerror(errno));
  partial.commit();
}

// The export format: --format, or else from OUT's extension.
std::string export_format(const std::string& out, const std::string& format) {
  if (!format.empty()) return format;
  if (ends_with(out, ".npy")) return "npy";
  if (ends_with(out, ".h5") || ends_with(out, ".hdf5")) return "hdf5";
  if (ends_with(out, ".safetensors")) return "safetensors";
  throw InputError(out + ": output must end in .h5 or .hdf5 (HDF5, one dataset per parameter), .npy "
                         "(NumPy, one parameter) or .safetensors, or give --format hdf5|npy|safetensors");
}

int cmd_export(const std::string& path, const std::string& out, std::vector<std::string> names,
               const std::string& vector, const std::string& format_option, const std::string& name_style,
               double io_timeout_s) {
  const std::string format = export_format(out, format_option);
  const bool npy = format == "npy";
  if (name_style == "gpt2" && format != "safetensors")
    throw InputError("--names gpt2: only with --format safetensors (this export is " + format + ")");
  if (name_style == "gpt2" && !names.empty())
    throw InputError("--names gpt2 writes the whole model; it does not take --param");
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && std::filesystem::equivalent(out, path, ec))
    throw InputError(out + ": is the checkpoint itself; choose another output file");

  const auto t0 = Clock::now();
  IoDeadline deadline(io_timeout_s, world_rank());
  CheckpointReader ckpt(path, MPI_COMM_SELF, &deadline);
  const auto& layout = ckpt.layout();
  std::vector<const CheckpointTensor*> tensors;
  if (names.empty()) {
    for (const auto& t : layout) tensors.push_back(&t);
  } else {
    std::vector<std::string> seen;
    for (const auto& n : names) {
      if (std::find(seen.begin(), seen.end(), n) != seen.end()) continue;  // asked twice: export once
      seen.push_back(n);
      const auto it = std::find_if(layout.begin(), layout.end(), [&](const auto& t) { return t.name == n; });
      if (it == layout.end()) throw InputError(unknown_parameter(path, n, layout));
      tensors.push_back(&*it);
    }
  }
  if (npy && tensors.size() != 1)
    throw InputError(out + ": a .npy file holds one array; give exactly one --param (the checkpoint has " +
                     std::to_string(layout.size()) + " parameters, " + std::to_string(tensors.size()) +
                     " selected)");

  std::int64_t values = 0;
  for (const auto* t : tensors) values += t->numel;
  if (npy) {
    write_npy(ckpt, vector, *tensors[0], out);
  } else if (format == "hdf5") {
    write_h5(ckpt, vector, tensors, model_metadata(ckpt), out);
  } else {
    Metadata metadata{{"format", "pt"},  // what Hugging Face's loaders expect of a PyTorch state dict
                      {"producer", std::string("shardtrain trainer-ckpt ") + kVersion},
                      {"source_checkpoint", ckpt.path()},
                      {"step", std::to_string(ckpt.meta().step)},
                      {"vector", vector},
                      {"names", name_style == "gpt2" ? "gpt2" : "shardtrain"}};
    std::vector<SafetensorsEntry> entries;
    if (name_style == "gpt2") {
      entries = gpt2_entries(ckpt, metadata);
    } else {
      for (const auto* t : tensors) entries.push_back({t->name, t, t->shape, false});
    }
    for (auto& kv : model_metadata(ckpt))  // gpt2_entries' own keys (vocab_size, n_head, ...) are the same values
      if (std::none_of(metadata.begin(), metadata.end(), [&](const auto& x) { return x.first == kv.first; }))
        metadata.push_back(std::move(kv));
    write_safetensors(ckpt, vector, entries, metadata, out);
    if (name_style == "gpt2" && std::filesystem::path(out).filename() == "model.safetensors") {
      const std::string config = (std::filesystem::path(out).parent_path() / "config.json").string();
      write_hf_config(metadata, config);
      fmt::print("{}: Hugging Face GPT2Config beside {} (GPT2LMHeadModel.from_pretrained reads the folder)\n",
                 config, out);
    } else if (name_style == "gpt2") {
      fmt::print("note: an OUT named model.safetensors also gets config.json beside it, for Hugging Face's "
                 "GPT2LMHeadModel.from_pretrained(folder)\n");
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  fmt::print("{}: {} parameter{} of {} at step {} ({} float32 values, {}), {:.2f} s\n", out, tensors.size(),
             tensors.size() == 1 ? "" : "s", vector, ckpt.meta().step, values,
             human_bytes(static_cast<std::uint64_t>(values) * 4), secs);
  return kExitOk;
}

// ------------------------------------------------------------------ command line

int run(int argc, char** argv) {
  const bool root = world_rank() == 0;
  CLI::App app{
      "Inspect, verify and export shardtrain checkpoint files (HDF5; format: "
      "share/doc/checkpoint-format.md), and generate text from a GPT checkpoint (sample).",
      "trainer-ckpt"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("trainer-ckpt (shardtrain ") + kVersion + ")");
  app.footer(
      "Runs as a single process or under mpirun: info, export and sample then run on rank 0 alone, verify "
      "splits the reading over the ranks.\nExit codes: 0 success, 2 bad input or usage (missing, "
      "foreign or damaged file, unknown name), 1 other failure.");

  std::string ckpt_path, out_path, vector(saved_name(StateVector::Master)), format, name_style = "ours";
  std::vector<std::string> fp32_vectors;  // what export reads values from: master and the moments
  for (const SavedVector& v : kSavedVectors)
    if (v.type == DType::F32) fp32_vectors.emplace_back(v.name);
  bool config_only = false;
  std::vector<std::string> params;
  double io_timeout_s = 600.0;  // checkpoint.io_timeout_s's default
  const char* io_timeout_help =
      "Seconds a rank's read of CKPT may take before the tool gives up (exit 1, naming the rank, the phase "
      "and the file): storage that stops answering; 0: no limit";

  CLI::App* info = app.add_subcommand("info", "Print what a checkpoint holds: run state, layout table, sizes");
  info->add_option("CKPT", ckpt_path, "Checkpoint file (.h5)")->required();
  info->add_flag("--config", config_only, "Print only the resolved config text (TOML) stored in the file");
  info->footer(
      "Prints the step, data cursor (samples and tokens seen), optimizer updates, sampler seed, the "
      "world size, ZeRO stage and precision that wrote the file, the loss scaler state, the data set, "
      "when and by which version it was written; the layout table (name, shape, element offset, "
      "numel); and sizes: parameters, padded size, each state vector's type, bytes and file offset, "
      "and the file size. Opening the file validates its structure and the /config and /layout "
      "checksums; the state vectors are not read (use verify).");

  CLI::App* verify = app.add_subcommand("verify", "Check the CRC-32 of every dataset in a checkpoint");
  verify->add_option("CKPT", ckpt_path, "Checkpoint file (.h5)")->required();
  verify->add_option("--io-timeout", io_timeout_s, io_timeout_help)->check(CLI::NonNegativeNumber)->capture_default_str();
  verify->footer(
      "Reads every state vector whole and compares its CRC-32 with the one stored in the file, and "
      "checks /config and /layout. Prints one line per dataset (ok or CHECKSUM MISMATCH).\nUnder "
      "`mpirun -n N` each rank reads 1/N of every vector.\nExit codes: 0 all datasets intact, 2 the "
      "file is missing, damaged, truncated or not a shardtrain checkpoint, 1 other failure (e.g. an "
      "I/O error).");

  CLI::App* exp =
      app.add_subcommand("export", "Write parameters of one state vector to plain HDF5, .npy or safetensors");
  exp->add_option("CKPT", ckpt_path, "Checkpoint file (.h5)")->required();
  exp->add_option("--io-timeout", io_timeout_s, io_timeout_help)->check(CLI::NonNegativeNumber)->capture_default_str();
  exp->add_option("OUT", out_path,
                  "Output: .h5/.hdf5 (one float32 dataset per parameter, named by it, in its shape), "
                  ".npy (exactly one parameter) or .safetensors (F32 tensors; see --names)")
      ->required();
  exp->add_option("--param", params,
                  "Parameter to export, by its layout name, e.g. h.0.attn.c_attn.weight (repeatable; "
                  "default: all parameters)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)  // one name per --param, repeatable
      ->type_name("NAME");
  exp->add_option("--vector", vector, "State vector to read the values from")
      ->check(CLI::IsMember(fp32_vectors))
      ->capture_default_str();
  exp->add_option("--format", format,
                  "Output format (default: from OUT's extension: .h5/.hdf5, .npy, .safetensors)")
      ->check(CLI::IsMember({"hdf5", "npy", "safetensors"}));
  exp->add_option("--names", name_style,
                  "Tensor names in a safetensors file: ours (the layout's, e.g. h.0.attn.c_attn.weight) or "
                  "gpt2 (Hugging Face GPT2LMHeadModel's; GPT checkpoints only)")
      ->check(CLI::IsMember({"ours", "gpt2"}))
      ->capture_default_str();
  exp->footer(
      "master holds the fp32 weights, exp_avg and exp_avg_sq AdamW's first and second moments; "
      "padding between tensors is not exported. An unknown --param is an error that lists close "
      "names. OUT is written to OUT.partial and renamed into place when complete; an existing OUT "
      "is replaced. export does not check the CRCs (run verify for that). The .h5 file also has "
      "root attributes source_checkpoint, vector and step, and the model keys below.\nsafetensors: a JSON "
      "header, then the tensors' little-endian float32 bytes in layout order, written one tensor block at a "
      "time; __metadata__ holds format (pt), producer, source_checkpoint, step, vector and names, and the "
      "model keys: model_type, for a transformer n_layer, n_head, d_model, seq_len and layernorm_eps, then "
      "vocab_size, data_path and the data set's tokenizer (when that file is still there), which "
      "model.init_from and `trainer-ckpt sample` read. With "
      "--names gpt2 (the whole model, no --param): transformer.wte.weight, transformer.wpe.weight, "
      "transformer.h.N.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.{weight,bias}, "
      "transformer.ln_f.{weight,bias}; the four Linear weights transposed to Conv1D's (in, out); "
      "lm_head.weight is left out, being tied to transformer.wte.weight (tied_weights in the "
      "metadata, as Hugging Face's own GPT-2 files do); the metadata adds vocab_size, n_positions, "
      "n_ctx, n_embd, n_layer, n_head, layer_norm_epsilon and activation_function. With --names gpt2 "
      "and OUT named model.safetensors, config.json is written beside it (replacing one there): "
      "GPT2Config's keys for that model (no dropout, gelu_new, tied LM head), so that transformers' "
      "GPT2LMHeadModel.from_pretrained(folder) loads the folder. A checkpoint of another model type is "
      "refused.");

  SampleCommand sample_cmd;
  CLI::App* sample = app.add_subcommand("sample", "Generate text from a GPT checkpoint or its export");
  sample->add_option("CKPT", sample_cmd.checkpoint,
                     "Checkpoint file (.h5) of a GPT, or its export (trainer-ckpt export: .safetensors under our "
                     "or GPT-2's names, or .h5)")
      ->required();
  sample->add_option("--prompt", sample_cmd.prompt,
                     "Text to continue (default: none; a gpt2 model then starts from <|endoftext|>)");
  sample->add_option("--tokens", sample_cmd.options.tokens, "Tokens to generate")->capture_default_str();
  sample->add_option("--temperature", sample_cmd.options.temperature,
                     "Softmax temperature; 0 is greedy decoding (the most likely token)")
      ->capture_default_str();
  sample->add_option("--top-k", sample_cmd.options.top_k, "Draw from the K most likely tokens only (0: all)")
      ->capture_default_str();
  sample->add_option("--seed", sample_cmd.options.seed, "Seed of the draws: the same seed gives the same text")
      ->capture_default_str();
  sample->add_option("--data", sample_cmd.data,
                     "Data set whose tokenizer and vocabulary to use (default: the data.path stored in CKPT, or an "
                     "export's data_path)");
  sample->add_option("--bpe", sample_cmd.bpe_dir,
                     "gpt2 data sets: folder of GPT-2's encoder.json and vocab.bpe, to encode the prompt");
  sample->add_flag("--ids", sample_cmd.print_ids,
                   "Print the token ids (lines 'prompt_ids: ...' and 'ids: ...') and the continuation's "
                   "log-probability under the model ('logprob: ...', at temperature 1) instead of the text");
  sample->add_flag("!--no-cache", sample_cmd.options.use_cache,
                   "Re-run the whole context for every token instead of keeping a key/value cache "
                   "(same tokens, slower; for comparison)");
  sample->footer(
      "Runs the GPT of CKPT (its fp32 master weights, in double precision; from an export, its tensors, with "
      "n_head, layernorm_eps and the data set from its metadata) on this one process, one token at "
      "a time with a key/value cache, and prints the prompt and its continuation decoded with the data "
      "set's tokenizer (char, byte or gpt2; a pretokenized data set is refused), then on stderr the speed. "
      "The model sees at most seq_len tokens: past that, the context restarts at the last seq_len/2 tokens. "
      "Draws come from (--seed, token index) alone, so the same checkpoint, prompt and options give the "
      "same text, with or without the cache.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version
      std::ostringstream sink;
      if (root)
        app.exit(e);
      else
        app.exit(e, sink, sink);
      return kExitOk;
    }
    if (root) print_error("", std::string(e.what()) + " (run with --help for usage)");
    return kExitBadInput;
  }

  if (info->parsed()) return on_root([&] { return cmd_info(ckpt_path, config_only); });
  if (exp->parsed()) return on_root([&] { return cmd_export(ckpt_path, out_path, params, vector, format, name_style, io_timeout_s); });
  if (sample->parsed()) return on_root([&] {
      run_sample_command(sample_cmd);
      return kExitOk;
    });

  // verify: collective over every rank.
  try {
    cmd_verify(ckpt_path, io_timeout_s);
    return kExitOk;
  } catch (const InputError& e) {  // the reader's input errors are agreed by every rank
    if (root) print_error("", e.what());
    return kExitBadInput;
  } catch (const CheckpointIoError& e) {  // so are its failed reads (naming the failing rank)
    if (root) print_error("", e.what());
    return kExitFailure;
  } catch (const std::exception& e) {
    if (world_size() == 1) {
      print_error("", dynamic_cast<const std::bad_alloc*>(&e) ? "out of memory" : e.what());
      return kExitFailure;
    }
    // Possibly this rank alone: say so and end the job rather than leave others in a collective.
    print_error("rank " + std::to_string(world_rank()) + ": ", e.what());
    MPI_Abort(MPI_COMM_WORLD, kExitFailure);
    return kExitFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  return guarded([&] { return run(argc, argv); });
}
