// The run directory's lock file (see run_lock.hpp).
#include "rundir/run_lock.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "core/durable_file.hpp"
#include "core/error.hpp"
#include "parallel/mpi/agreement.hpp"

namespace shardtrain {

namespace fs = std::filesystem;

namespace {

// Field `field` (4: the parent PID, 22: the start time in clock ticks since
// boot) of /proc/PID/stat, or 0.
long long stat_field(long long pid, int field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!in || !std::getline(in, text)) return 0;
  const std::size_t close = text.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 1));
  std::string f;
  for (int i = 3; i <= field && fields >> f; ++i)
    if (i == field) return std::strtoll(f.c_str(), nullptr, 10);
  return 0;
}
long long process_start(long long pid) { return stat_field(pid, 22); }

// Field 3 of /proc/PID/stat: the state ('Z': a zombie, exited but not reaped), or 0.
char stat_state(long long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!in || !std::getline(in, text)) return 0;
  const std::size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() ? text[close + 2] : 0;
}

// Whether process `pid` started at `start` (0: unknown) still exists.
bool process_alive(long long pid, long long start) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  const long long now = process_start(pid);
  return !(start > 0 && now > 0 && now != start);
}

// A holder on this host whose launcher (its parent when it took the lock:
// mpirun, orted, slurmstepd) is gone is a job being torn down (mpirun killed
// after a rank died, say): its ranks end within seconds. Waits up to 60 s for
// it to end; true when it did.
bool wait_for_orphan(const LockHolder& holder, const LockHolder& me) {
  if (holder.host != me.host || holder.ppid <= 0 || process_alive(holder.ppid, holder.ppid_start)) return false;
  for (int i = 0; i < 600; ++i) {
    if (lock_holder_gone(holder, me)) return true;
    ::usleep(100000);
  }
  return false;
}

std::string read_text(const std::string& path, bool* found) {
  std::ifstream in(path);
  *found = static_cast<bool>(in);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Rank 0: takes the lock file `lock`, or throws InputError. Returns a note when
// it was taken over from a job that is gone.
std::string take(const std::string& lock, const std::string& key, const std::string& dir, const LockHolder& me,
                 const std::string& source) {
  const std::string mine = fmt::format("{}.{}.{}", lock, me.host, me.pid);
  {  // a directory this job cannot write is the user's to fix: one line, exit 2
    const int fd = ::open(mine.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw InputError(fmt::format("{}: {}: cannot write to '{}': {}", source, key, dir, std::strerror(errno)));
    ::close(fd);
  }
  write_file_durably(mine, me.to_text());
  struct Remove {
    std::string path;
    ~Remove() { ::unlink(path.c_str()); }
  } remove_mine{mine};
  std::string note;
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (::link(mine.c_str(), lock.c_str()) == 0) {
      fsync_directory(dir);
      return note;
    }
    if (errno != EEXIST)
      throw InputError(fmt::format("{}: {}: cannot create the lock file '{}': {}", source, key, lock,
                                   std::strerror(errno)));
    bool found = false;
    const std::string text = read_text(lock, &found);
    if (!found) continue;  // released meanwhile: try again
    const std::optional<LockHolder> holder = LockHolder::parse(text);
    if (!holder)
      throw InputError(fmt::format(
          "{}: {} '{}' is locked by '{}', which does not name a job (host, PID): if no job uses this "
          "directory, remove that file",
          source, key, dir, lock));
    std::optional<std::string> gone = lock_holder_gone(*holder, me);
    if (!gone && wait_for_orphan(*holder, me)) gone = lock_holder_gone(*holder, me);
    if (!gone)
      throw InputError(fmt::format(
          "{}: {} '{}' is in use by another job ({}; lock file {}): two jobs in one directory would overwrite "
          "each other's checkpoints and metrics. Wait for that job to end, or give this one another {}; if "
          "that job is dead (its node is down), remove the lock file",
          source, key, dir, holder->describe(), lock, key));
    // Of two successors, only one renames the stale file away; the other finds it gone and tries again.
    const std::string stale = fmt::format("{}.stale.{}.{}", lock, me.host, me.pid);
    if (std::rename(lock.c_str(), stale.c_str()) != 0) continue;
    ::unlink(stale.c_str());
    note = fmt::format("note: {} '{}': took over the lock of a job that is gone ({}): {}", key, dir,
                       holder->describe(), *gone);
  }
  throw InputError(fmt::format("{}: {} '{}': cannot take the lock file '{}' (other jobs keep taking it)", source,
                               key, dir, lock));
}

}  // namespace

std::string LockHolder::to_text() const {
  return fmt::format("host={}\npid={}\npid_start={}\nppid={}\nppid_start={}\nslurm_job_id={}\nslurm_restart_count={}\n"
                     "started={}\n",
                     host, pid, pid_start, ppid, ppid_start, slurm_job_id, slurm_restart_count, started);
}

std::optional<LockHolder> LockHolder::parse(const std::string& text) {
  LockHolder h;
  bool has_host = false, has_pid = false;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    char* end = nullptr;
    if (key == "host") {
      h.host = value;
      has_host = !value.empty();
    } else if (key == "pid") {
      h.pid = std::strtoll(value.c_str(), &end, 10);
      has_pid = end != value.c_str() && *end == '\0' && h.pid > 0;
    } else if (key == "pid_start") {
      h.pid_start = std::strtoll(value.c_str(), nullptr, 10);
    } else if (key == "ppid") {
      h.ppid = std::strtoll(value.c_str(), nullptr, 10);
    } else if (key == "ppid_start") {
      h.ppid_start = std::strtoll(value.c_str(), nullptr, 10);
    } else if (key == "slurm_job_id") {
      h.slurm_job_id = value;
    } else if (key == "slurm_restart_count") {
      h.slurm_restart_count = std::strtoll(value.c_str(), nullptr, 10);
    } else if (key == "started") {
      h.started = value;
    }
  }
  if (!has_host || !has_pid) return std::nullopt;
  return h;
}

LockHolder LockHolder::self() {
  LockHolder h;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) h.host = name;
  if (h.host.empty()) h.host = "unknown-host";
  h.pid = static_cast<long long>(::getpid());
  h.pid_start = process_start(h.pid);
  h.ppid = static_cast<long long>(::getppid());
  h.ppid_start = process_start(h.ppid);
  if (const char* id = std::getenv("SLURM_JOB_ID")) h.slurm_job_id = id;
  if (const char* n = std::getenv("SLURM_RESTART_COUNT")) h.slurm_restart_count = std::strtoll(n, nullptr, 10);
  h.started = utc_now();
  return h;
}

std::string LockHolder::describe() const {
  return fmt::format("host {}, PID {}{}, started {}", host, pid,
                     slurm_job_id.empty() ? std::string()
                                          : fmt::format(", Slurm job {} (restart {})", slurm_job_id,
                                                        slurm_restart_count),
                     started.empty() ? std::string("?") : started);
}

std::optional<std::string> lock_holder_gone(const LockHolder& holder, const LockHolder& me) {
  if (!holder.slurm_job_id.empty() && holder.slurm_job_id == me.slurm_job_id &&
      holder.slurm_restart_count < me.slurm_restart_count)
    return fmt::format("Slurm requeued job {} (restart {} -> {}), so its earlier run has ended", me.slurm_job_id,
                       holder.slurm_restart_count, me.slurm_restart_count);
  if (holder.host != me.host) return std::nullopt;  // another node's process cannot be asked
  if (holder.pid == me.pid) return std::nullopt;    // never our own (two locks of one job: a bug)
  if (::kill(static_cast<pid_t>(holder.pid), 0) != 0 && errno == ESRCH)
    return fmt::format("its process (PID {} on this host) no longer exists", holder.pid);
  const long long start = process_start(holder.pid);
  if (holder.pid_start > 0 && start > 0 && start != holder.pid_start)
    return fmt::format("PID {} on this host now belongs to another process", holder.pid);
  if (stat_state(holder.pid) == 'Z')
    return fmt::format("its process (PID {} on this host) has exited", holder.pid);
  return std::nullopt;
}

RunLock::RunLock(const std::vector<std::pair<std::string, std::string>>& dirs, const std::string& source_name,
                 MPI_Comm comm) {
  on_root(comm, [&] {
    m_self = LockHolder::self();
    try {
      for (const auto& [key, dir] : dirs) {
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec || !fs::is_directory(dir, ec))
          throw InputError(fmt::format("{}: {}: cannot create directory '{}': {}", source_name, key, dir,
                                       ec ? ec.message() : "not a directory"));
        const std::string lock = (fs::path(dir) / kFileName).string();
        const std::string note = take(lock, key, dir, m_self, source_name);
        m_files.push_back(lock);
        if (!note.empty()) {
          std::printf("%s\n", note.c_str());
          std::fflush(stdout);
        }
      }
    } catch (...) {
      for (const auto& f : m_files) ::unlink(f.c_str());  // the ones taken before the refusal
      m_files.clear();
      throw;
    }
  });
}

RunLock::~RunLock() {
  for (const auto& lock : m_files) {
    bool found = false;
    const std::optional<LockHolder> holder = LockHolder::parse(read_text(lock, &found));
    if (holder && holder->host == m_self.host && holder->pid == m_self.pid) ::unlink(lock.c_str());
  }
}

}  // namespace shardtrain
