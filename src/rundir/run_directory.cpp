// RunDirectory: creates the run directory, writes the config copies, appends metrics.
#include "rundir/run_directory.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "config/parse.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"

namespace shardtrain {

namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) SHARDTRAIN_FAIL("cannot write " + p.string());
}

}  // namespace

RunDirectory::RunDirectory(const RunConfig& config, std::int64_t resume_step) : m_path(config.train.run_dir) {
  std::error_code ec;
  fs::create_directories(m_path, ec);
  if (ec || !fs::is_directory(m_path))
    throw InputError(config.source_name + ": train.run_dir: cannot create directory '" + m_path +
                     "': " + ec.message());
  write_text(fs::path(m_path) / "config.toml", to_toml(config));
  write_text(fs::path(m_path) / "input.toml", config.source_text);

  const fs::path metrics = metrics_path();
  static constexpr const char* kHeader =
      "step,loss,val_loss,lr,grad_norm,tokens_per_s,elapsed_s,comm_bytes,loss_scale,skipped,weights_crc,"
      "samples_per_s,val_accuracy,step_ms,step_end_unix,fault,skipped_samples\n";
  std::string earlier;  // a resumed run's rows up to its checkpoint, from the previous metrics.csv
  if (fs::exists(metrics)) {
    int n = 1;
    while (fs::exists(metrics.string() + "." + std::to_string(n))) ++n;
    const std::string kept = metrics.string() + "." + std::to_string(n);
    fs::rename(metrics, kept);
    if (resume_step > 0) {
      std::ifstream in(kept);
      std::string line;
      bool header = true;
      while (std::getline(in, line)) {
        if (header) {  // only a file of this format continues
          if (line + "\n" != kHeader) break;
          header = false;
          continue;
        }
        long long step = 0;
        if (std::sscanf(line.c_str(), "%lld,", &step) == 1 && step >= 1 && step <= resume_step) earlier += line + "\n";
      }
    }
  }
  m_metrics = std::fopen(metrics.c_str(), "w");
  if (!m_metrics) SHARDTRAIN_FAIL("cannot open " + metrics.string() + " for writing");
  std::fputs(kHeader, m_metrics);
  std::fputs(earlier.c_str(), m_metrics);
  std::fflush(m_metrics);
}

RunDirectory::~RunDirectory() {
  if (m_metrics) std::fclose(m_metrics);
}

void RunDirectory::append(const MetricsRow& r) {
  // Losses with 17 significant digits: two runs compare bitwise through this file.
  const std::string val = r.val_loss ? fmt::format("{:.17g}", *r.val_loss) : std::string();
  const std::string acc = r.val_accuracy ? fmt::format("{:.17g}", *r.val_accuracy) : std::string();
  const std::string tok = r.tokens_per_s > 0 ? fmt::format("{:.1f}", r.tokens_per_s) : std::string();
  fmt::print(m_metrics, "{},{:.17g},{},{:.9g},{:.9g},{},{:.6f},{},{:.9g},{},{:08x},{:.1f},{},{:.3f},{:.6f},{},{}\n", r.step, r.loss, val,
             r.lr, r.grad_norm, tok, r.elapsed_s, r.comm_bytes, r.loss_scale, r.skipped ? 1 : 0, r.weights_crc,
             r.samples_per_s, acc, r.step_ms, r.step_end_unix, r.fault, r.skipped_samples);
  std::fflush(m_metrics);
}

void RunDirectory::write_file(const std::string& name, const std::string& text) {
  write_text(fs::path(m_path) / name, text);
}

void RunDirectory::write_memory(const std::vector<std::int64_t>& peaks, const std::vector<std::int64_t>& plan,
                                const std::vector<std::int64_t>& activations_measured) {
  std::string text = "rank";
  for (int c = 0; c < MemoryTracker::kCategories; ++c)
    text += fmt::format(",{}", to_string(static_cast<MemCategory>(c)));
  text += ",activations_measured,total\n";
  const std::size_t width = plan.size();  // categories + total
  SHARDTRAIN_CHECK(width == MemoryTracker::kCategories + 1 && peaks.size() % width == 0 &&
                       activations_measured.size() == peaks.size() / width + 1,
                   "memory.csv: rows of different lengths");
  auto row = [&text](const std::string& who, const std::int64_t* p, std::size_t n, std::int64_t measured) {
    text += who;
    for (std::size_t i = 0; i + 1 < n; ++i) text += fmt::format(",{}", p[i]);
    text += fmt::format(",{},{}\n", measured, p[n - 1]);
  };
  const std::size_t ranks = peaks.size() / width;
  for (std::size_t r = 0; r < ranks; ++r)
    row(std::to_string(r), &peaks[r * width], width, activations_measured[r]);
  row("plan", plan.data(), width, activations_measured[ranks]);
  write_text(fs::path(m_path) / "memory.csv", text);
}

}  // namespace shardtrain
