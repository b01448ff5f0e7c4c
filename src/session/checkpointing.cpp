// Checkpoint directory, schedule and atomic commit (see checkpointing.hpp).
#include "session/checkpointing.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/durable_file.hpp"
#include "core/error.hpp"
#include "parallel/mpi/agreement.hpp"

namespace shardtrain {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPrefix = "step_";
constexpr std::string_view kSuffix = ".h5";
constexpr std::string_view kPartial = ".partial";

// Each item as a line ending in '\n' (what split_lines reads back).
std::string as_lines(const std::vector<std::string>& v) {
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

// Removes leftovers of interrupted writes: step_*.h5.partial and their pause
// markers; with `only` (a checkpoint file name), only that step's.
void remove_partials(const std::string& dir, const std::string& only = {}) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kPrefix) || name.find(std::string(kSuffix) + std::string(kPartial)) == std::string::npos)
      continue;
    if (!only.empty() && !name.starts_with(only + std::string(kPartial))) continue;
    std::error_code rm;
    fs::remove(entry.path(), rm);
  }
}

constexpr const char* kLineageFile = "lineage";

// The `lineage` file of dir: checkpoint name -> parent ("" for none); empty
// when there is none (a directory written before lineages were recorded).
std::map<std::string, std::string> read_lineage(const std::string& dir) {
  std::map<std::string, std::string> parents;
  std::ifstream in(fs::path(dir) / kLineageFile);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t tab = line.find('\t');
    if (tab == std::string::npos || step_of(line.substr(0, tab)) < 0) continue;  // not a line this code wrote
    parents[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return parents;
}

// Rewrites dir/lineage durably (tmp, fsync, rename) with the entries whose
// checkpoint file still exists.
void write_lineage(const std::string& dir, const std::map<std::string, std::string>& parents) {
  std::string text;
  for (const auto& [name, parent] : parents) {
    std::error_code ec;
    if (fs::exists(fs::path(dir) / name, ec)) text += name + "\t" + parent + "\n";
  }
  const std::string path = (fs::path(dir) / kLineageFile).string();
  write_file_durably(path + ".tmp", text);
  rename_or_fail(path + ".tmp", path);
}

// The chain from `name` through `parents`, newest first. A name the map does
// not know (a file written before lineages were recorded) is followed by the
// complete checkpoints the map does not know either, with lower steps, newest
// first: such a directory held one lineage.
std::vector<std::string> chain_of(const std::string& dir, const std::string& name,
                                  const std::map<std::string, std::string>& parents) {
  std::vector<std::string> chain;
  std::set<std::string> seen;
  std::string cur = name;
  while (!cur.empty() && seen.insert(cur).second) {
    chain.push_back(cur);
    const auto it = parents.find(cur);
    if (it != parents.end()) {
      cur = it->second;
      continue;
    }
    const std::int64_t step = step_of(cur);
    if (step >= 0)
      for (const auto& f : list_checkpoints(dir)) {
        const std::string n = fs::path(f.path).filename().string();
        if (f.step < step && parents.count(n) == 0 && seen.insert(n).second) chain.push_back(n);
      }
    break;
  }
  return chain;
}

// `latest`'s file name, or "" when there is none (or it names no checkpoint file).
std::string read_latest(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "latest");
  std::string name;
  if (!in || !std::getline(in, name) || step_of(name) < 0) return {};
  return name;
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

std::vector<std::string> lineage_of(const std::string& dir, const std::string& name) {
  return chain_of(dir, name, read_lineage(dir));
}

AutoResume auto_resume_candidates(const std::string& dir) {
  AutoResume out;
  const auto files = list_checkpoints(dir);
  if (files.empty()) return out;
  const std::string latest = read_latest(dir);
  if (latest.empty()) {
    for (const auto& f : files) out.paths.push_back(f.path);
    out.why = fmt::format("'{}' has no `latest`: trying its {} complete checkpoint(s) newest first", dir, files.size());
    return out;
  }
  const std::vector<std::string> chain = lineage_of(dir, latest);
  std::set<std::string> in_chain(chain.begin(), chain.end());
  std::vector<std::string> missing;
  for (const std::string& name : chain) {
    std::error_code ec;
    const fs::path p = fs::path(dir) / name;
    if (fs::is_regular_file(p, ec)) out.paths.push_back(p.string());
    else missing.push_back(name);
  }
  out.why = fmt::format("`latest` names {}", latest);
  if (!missing.empty() && missing.front() == latest) out.why += " (missing: falling back along its lineage)";
  if (out.paths.size() > 1)
    out.why += fmt::format("; falling back only to its lineage's older checkpoints ({})",
                           fs::path(out.paths[1]).filename().string() +
                               (out.paths.size() > 2 ? fmt::format(" and {} more", out.paths.size() - 2) : ""));
  std::vector<std::string> others;
  for (const auto& f : files) {
    const std::string name = fs::path(f.path).filename().string();
    if (in_chain.count(name) == 0) others.push_back(name);
  }
  if (!others.empty())
    out.why += fmt::format("; not of this lineage, never loaded automatically: {}{}", others.front(),
                           others.size() > 1 ? fmt::format(" and {} more", others.size() - 1) : "");
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
  if (!m_enabled) return;
  on_root(m_comm, [this] {
    ensure_dir();
    // Writable: a file can be created there (what the first checkpoint does), asked now
    // rather than failing in HDF5 at the first checkpoint.
    const std::string probe = (fs::path(m_config.dir) / fmt::format(".shardtrain-write-test-{}", ::getpid())).string();
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
      throw InputError(fmt::format("{}: checkpoint.dir: cannot write to '{}': {}", m_source, m_config.dir,
                                   std::strerror(errno)));
    ::close(fd);
    ::unlink(probe.c_str());
    remove_partials(m_config.dir);  // left by dead jobs: this job holds the directory's lock
  });
}

std::vector<std::string> CheckpointManager::resume_candidates() {
  std::string list;
  m_resume_reason.clear();
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
      AutoResume a = auto_resume_candidates(m_config.dir);
      paths = std::move(a.paths);
      m_resume_reason = std::move(a.why);
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
    list = as_lines(paths);
  });
  return split_lines(broadcast_string(m_comm, list));
}

void CheckpointManager::resumed_from(const std::string& path) {
  std::string chain;
  on_root(m_comm, [&] {
    std::error_code ec;
    const fs::path p(path);
    const bool here = fs::equivalent(p.parent_path().empty() ? fs::path(".") : p.parent_path(), m_config.dir, ec);
    std::vector<std::string> names{path};
    if (here && !ec) names = lineage_of(m_config.dir, p.filename().string());
    for (const auto& n : names) chain += n + '\n';
  });
  m_lineage = split_lines(broadcast_string(m_comm, chain));
}

void CheckpointManager::record(const Committed& c) {
  m_last_stats = c.stats;
  m_last_commit_s = c.seconds;
  m_lineage.insert(m_lineage.begin(), fs::path(c.path).filename().string());
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
  const std::string name = checkpoint_file_name(step);
  std::map<std::string, std::string> parents;  // rank 0's lineage file, with this commit
  try {
    checkpoint_phase(comm, deadline, "prepare", dir, true, [&] {
      ensure_dir();  // also when checkpointing is off and a stop signal asks for one
      remove_partials(dir, name);  // this job's own earlier attempt only
    });
    c.stats = write(partial, pause, deadline);
    checkpoint_phase(comm, deadline, "commit", final_path, true, [&] {
      rename_or_fail(partial, final_path);
      renamed = true;
      fsync_directory(dir);
      parents = read_lineage(dir);
      parents[name] = m_lineage.empty() || m_lineage.front() == name ? std::string() : m_lineage.front();
      write_lineage(dir, parents);
      write_file_durably(latest + ".tmp", name + "\n");
      rename_or_fail(latest + ".tmp", latest);
      latest_named = true;
      fsync_directory(dir);
    });
  } catch (const CheckpointIoError&) {
    // Abandoned on every rank: nothing of this attempt stays that `latest`
    // does not name. (Unless `latest` was renamed and only the directory's
    // fsync failed: the file is complete, and `latest` names it.) A lineage
    // entry for an abandoned file is harmless: no `latest` leads to it.
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
  // Only now that the new checkpoint is complete and `latest` names it: the
  // lineage's checkpoints beyond keep_last (never another branch's files).
  checkpoint_phase(comm, deadline, "prune", dir, true, [&] {  // failures to remove are ignored
    const std::vector<std::string> chain = chain_of(dir, name, parents);
    for (std::size_t i = static_cast<std::size_t>(m_config.keep_last); i < chain.size(); ++i) {
      if (chain[i] == name || chain[i].find('/') != std::string::npos) continue;
      std::error_code ec;
      fs::remove(fs::path(dir) / chain[i], ec);
    }
  });
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.path = final_path;
  return c;
}

}  // namespace shardtrain
