// trainer-ckpt info and verify: what a checkpoint holds, and every dataset's
// CRC-32 (ckpt_commands.hpp). Only io/checkpoint.hpp's API is used.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/exit_codes.hpp"
#include "core/mpi_world.hpp"
#include "core/state_vectors.hpp"
#include "core/text.hpp"
#include "io/checkpoint.hpp"
#include "io/checkpoint_phase.hpp"
#include "tools/ckpt_commands.hpp"

namespace shardtrain {

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

namespace {

std::int64_t parameter_count(const std::vector<CheckpointTensor>& layout) {
  std::int64_t n = 0;
  for (const auto& t : layout) n += t.numel;
  return n;
}

}  // namespace

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

namespace {

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

}  // namespace

void cmd_verify(const std::string& path, double io_timeout_s) {
  const bool root = world_rank() == 0;
  const auto t0 = SteadyClock::now();
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
  const double secs = seconds_since(t0);
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

}  // namespace shardtrain
