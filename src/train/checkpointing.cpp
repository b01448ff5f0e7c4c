// Checkpoint directory, schedule and atomic commit (see checkpointing.hpp).
#include "train/checkpointing.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "core/durable_file.hpp"
#include "core/error.hpp"
#include "dist/mpi/agreement.hpp"

namespace shardtrain {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPrefix = "step_";
constexpr std::string_view kSuffix = ".h5";
constexpr std::string_view kPartial = ".partial";

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + '\n';
  return s;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\n') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// The step of "step_NNNNNNNN.h5" (8 or more digits), or -1 for any other name.
std::int64_t step_of(std::string_view name) {
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return -1;
  const std::string_view digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() < 8 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  std::int64_t step = -1;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return ec == std::errc() && ptr == digits.data() + digits.size() ? step : -1;
}

void rename_or_fail(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    throw SystemIoError(fmt::format("cannot rename {} to {}: {}", from, to, std::strerror(err)), err);
  }
}

// Removes leftovers of interrupted writes: step_*.h5.partial and their pause markers.
void remove_partials(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kPrefix) || name.find(std::string(kSuffix) + std::string(kPartial)) == std::string::npos)
      continue;
    std::error_code rm;
    fs::remove(entry.path(), rm);
  }
}

}  // namespace

std::string checkpoint_file_name(std::int64_t step) { return fmt::format("step_{:08}.h5", step); }

std::vector<CheckpointFile> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointFile> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::int64_t step = step_of(name);
    std::error_code st;
    if (step >= 0 && entry.is_regular_file(st)) out.push_back({step, entry.path().string()});
  }
  std::sort(out.begin(), out.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return a.step != b.step ? a.step > b.step : a.path > b.path;
  });
  return out;
}

CheckpointManager::CheckpointManager(const CheckpointConfig& config, std::string source_name,
                                     const MpiCommunicator& comm)
    : m_config(config),
      m_source(std::move(source_name)),
      m_deadline(std::make_unique<IoDeadline>(config.io_timeout_s, comm.rank())),
      m_comm(comm.comm()),
      m_rank(comm.rank()) {
  m_enabled = config.every_steps > 0 || config.every_minutes > 0;
  restart_clock();
}

bool CheckpointManager::minutes_elapsed() const {
  if (!m_enabled || m_config.every_minutes <= 0) return false;
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_last_time).count() / 60.0;
  return minutes >= m_config.every_minutes;
}

bool CheckpointManager::due(std::int64_t done, bool job_end, bool time_due) const {
  if (!m_enabled) return false;
  return job_end || time_due || (m_config.every_steps > 0 && done % m_config.every_steps == 0);
}

void CheckpointManager::ensure_dir() const {
  std::error_code ec;
  fs::create_directories(m_config.dir, ec);
  if (ec || !fs::is_directory(m_config.dir, ec))
    throw InputError(fmt::format("{}: checkpoint.dir: cannot create directory '{}': {}", m_source, m_config.dir,
                                 ec ? ec.message() : "not a directory"));
}

void CheckpointManager::prepare() const {
  if (m_enabled) on_root(m_comm, [this] { ensure_dir(); });
}

std::vector<std::string> CheckpointManager::resume_candidates() const {
  std::string list;
  on_root(m_comm, [&] {
    std::vector<std::string> paths;
    const std::string& resume = m_config.resume;
    auto from_dir = [&paths](const std::string& dir) {
      for (const auto& f : list_checkpoints(dir)) paths.push_back(f.path);
    };
    if (resume == "never") {
      const auto existing = list_checkpoints(m_config.dir);
      if (m_enabled && !existing.empty())
        throw InputError(fmt::format(
            "{}: checkpoint.resume = \"never\", but checkpoint.dir '{}' already holds {} checkpoint(s) of a "
            "run (newest: {}); writing there would mix two runs: set checkpoint.resume = \"auto\" to continue "
            "it, or choose another checkpoint.dir",
            m_source, m_config.dir, existing.size(), fs::path(existing.front().path).filename().string()));
    } else if (resume == "auto") {
      from_dir(m_config.dir);
    } else {
      std::error_code ec;
      if (fs::is_directory(resume, ec)) {
        from_dir(resume);
        if (paths.empty())
          throw InputError(fmt::format("{}: checkpoint.resume: directory '{}' holds no complete checkpoint "
                                       "(step_NNNNNNNN.h5)",
                                       m_source, resume));
      } else {
        paths.push_back(resume);
      }
    }
    list = join(paths);
  });
  return split_lines(broadcast_string(m_comm, list));
}

std::string CheckpointManager::commit(std::int64_t step, const WriteFn& write) {
  Committed c;
  try {
    c = commit_on(m_comm, step, write);
  } catch (const CheckpointIoError&) {
    restart_clock();  // every_minutes: the next try is a whole period away
    throw;
  }
  record(c);
  restart_clock();
  return c.path;
}

CheckpointManager::Committed CheckpointManager::commit_on(MPI_Comm comm, std::int64_t step,
                                                          const WriteFn& write) const {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = m_config.dir;
  const std::string final_path = (fs::path(dir) / checkpoint_file_name(step)).string();
  const std::string partial = final_path + std::string(kPartial);
  const std::string latest = (fs::path(dir) / "latest").string();
  IoDeadline* const deadline = m_deadline.get();

  std::function<void()> pause;
  if (step == m_pause_step) {
    pause = [rank = m_rank, partial] {
      const std::string marker = fmt::format("{}.paused.{}", partial, rank);
      write_file_durably(marker, fmt::format("{}\n", static_cast<long long>(::getpid())));
      std::fprintf(stderr, "checkpoint test hook: rank %d (pid %lld) paused writing %s\n", rank,
                   static_cast<long long>(::getpid()), partial.c_str());
      std::fflush(stderr);
      // Up to 10 minutes, or until the test creates "<partial>.resume".
      const std::string resume = partial + ".resume";
      for (int i = 0; i < 6000 && !fs::exists(resume); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    };
  }
  Committed c;
  bool renamed = false, latest_named = false;  // rank 0's progress through the commit phase
  try {
    checkpoint_phase(comm, deadline, "prepare", dir, true, [&] {
      ensure_dir();  // also when checkpointing is off and a stop signal asks for one
      remove_partials(dir);  // a crashed write's leftovers
    });
    c.stats = write(partial, pause, deadline);
    checkpoint_phase(comm, deadline, "commit", final_path, true, [&] {
      rename_or_fail(partial, final_path);
      renamed = true;
      fsync_directory(dir);
      write_file_durably(latest + ".tmp", checkpoint_file_name(step) + "\n");
      rename_or_fail(latest + ".tmp", latest);
      latest_named = true;
      fsync_directory(dir);
    });
  } catch (const CheckpointIoError&) {
    // Abandoned on every rank: nothing of this attempt stays that `latest`
    // does not name. (Unless `latest` was renamed and only the directory's
    // fsync failed: the file is complete, and `latest` names it.)
    try {
      checkpoint_phase(comm, deadline, "abandon", partial, true, [&] {
        std::error_code ec;
        fs::remove(partial, ec);
        fs::remove(latest + ".tmp", ec);
        if (renamed && !latest_named) fs::remove(final_path, ec);
      });
    } catch (const CheckpointIoError&) {
      // The next commit's prepare phase removes what is left; the first error is the one to report.
    }
    throw;
  }
  // Only now that the new checkpoint is complete and `latest` names it.
  checkpoint_phase(comm, deadline, "prune", dir, true, [&] {  // failures to remove are ignored
    const auto files = list_checkpoints(dir);
    for (std::size_t i = static_cast<std::size_t>(m_config.keep_last); i < files.size(); ++i) {
      if (files[i].step == step) continue;
      std::error_code ec;
      fs::remove(files[i].path, ec);
    }
  });
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.path = final_path;
  return c;
}

}  // namespace shardtrain
