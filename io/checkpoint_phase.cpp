// Checkpoint phases: the status agreement and the I/O deadline (see checkpoint_phase.hpp).
#include "io/checkpoint_phase.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

namespace shardtrain {

namespace {

using Clock = std::chrono::steady_clock;

const char* errno_name(int err) {
  switch (err) {
    case EIO: return "EIO";
    case ENOSPC: return "ENOSPC";
    case EDQUOT: return "EDQUOT";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EROFS: return "EROFS";
    case EEXIST: return "EEXIST";
    case EINTR: return "EINTR";
    case EBADF: return "EBADF";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case EFBIG: return "EFBIG";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ESTALE: return "ESTALE";
    case ENOMEM: return "ENOMEM";
  }
  return nullptr;
}

// The errno a message carries when it comes from HDF5's error stack (its
// POSIX drivers print "errno = 5, error message = '...'"), else 0.
int errno_in_text(const std::string& text) {
  constexpr std::string_view key = "errno = ";
  for (std::size_t k = text.find(key); k != std::string::npos; k = text.find(key, k + 1)) {
    const std::size_t d = k + key.size();
    if (d < text.size() && text[d] >= '0' && text[d] <= '9') return std::atoi(text.c_str() + d);
  }
  return 0;
}

}  // namespace

std::string errno_text(int err) {
  if (err == 0) return "";
  const char* name = errno_name(err);
  return (name ? std::string(name) : "errno " + std::to_string(err)) + " (" + std::strerror(err) + ")";
}

CheckpointIoError::CheckpointIoError(int rank, std::string phase, std::string path, int err,
                                     const std::string& detail)
    : Error("rank " + std::to_string(rank) + ", phase '" + phase + "'" +
            (detail.find(path) == std::string::npos ? " (" + path + ")" : std::string()) + ": " + detail +
            (err != 0 ? " [" + errno_text(err) + "]" : std::string())),
      m_rank(rank),
      m_phase(std::move(phase)),
      m_path(std::move(path)),
      m_err(err),
      m_detail(detail) {}

// ------------------------------------------------------------------ deadline

IoDeadline::IoDeadline(double timeout_s, int rank, std::string what)
    : m_timeout_s(timeout_s), m_rank(rank), m_what(std::move(what)) {
  if (m_timeout_s > 0)
    m_poll.start(std::chrono::duration<double>(std::min(1.0, std::max(0.01, m_timeout_s / 20))), [this] { check(); });
}

void IoDeadline::check() {
  if (!m_active) return;
  // A rank whose part is done waits this much longer than one still in its own
  // I/O (or one that failed), so that rank's message comes first.
  const double grace = std::min(5.0, m_timeout_s / 2);
  const double waited = std::chrono::duration<double>(Clock::now() - m_since).count();
  const bool waiting_for_others = m_part_done && m_failure.empty();
  if (waited >= m_timeout_s + (waiting_for_others ? grace : 0.0)) fire(waited);
}

void IoDeadline::fire(double waited_s) {
  // m_poll.mutex() is held: the phase cannot change under us.
  if (!m_part_done)
    std::fprintf(stderr,
                 "error (rank %d): %s: phase '%s' of %s has not finished on this rank after %.1f s "
                 "(checkpoint.io_timeout_s = %g): the storage is not answering; ending the job\n",
                 m_rank, m_what.c_str(), m_phase.c_str(), m_path.c_str(), waited_s, m_timeout_s);
  else if (!m_failure.empty())
    std::fprintf(stderr,
                 "error (rank %d): %s: phase '%s' of %s failed on this rank: %s; the other ranks "
                 "have not reached the end of the phase after %.1f s (checkpoint.io_timeout_s = %g): their "
                 "storage is not answering; ending the job\n",
                 m_rank, m_what.c_str(), m_phase.c_str(), m_path.c_str(), m_failure.c_str(), waited_s, m_timeout_s);
  else
    std::fprintf(stderr,
                 "error (rank %d): %s: waited %.1f s in phase '%s' of %s for the other ranks "
                 "(checkpoint.io_timeout_s = %g): another rank's storage is not answering (see its message); "
                 "ending the job\n",
                 m_rank, m_what.c_str(), waited_s, m_phase.c_str(), m_path.c_str(), m_timeout_s);
  std::fflush(stderr);
  std::fflush(stdout);
  std::_Exit(1);
}

IoDeadline::Phase::Phase(IoDeadline* deadline, const char* phase, const std::string& path)
    : m_d(deadline && deadline->m_timeout_s > 0 ? deadline : nullptr) {
  if (!m_d) return;
  std::lock_guard<std::mutex> lock(m_d->m_poll.mutex());
  m_d->m_active = true;
  m_d->m_part_done = false;
  m_d->m_phase = phase;
  m_d->m_path = path;
  m_d->m_failure.clear();
  m_d->m_since = Clock::now();
}

IoDeadline::Phase::~Phase() {
  if (!m_d) return;
  std::lock_guard<std::mutex> lock(m_d->m_poll.mutex());
  m_d->m_active = false;
}

void IoDeadline::Phase::part_done(const std::string& failure) {
  if (!m_d) return;
  std::lock_guard<std::mutex> lock(m_d->m_poll.mutex());
  m_d->m_part_done = true;
  m_d->m_failure = failure;
}

void IoDeadline::Phase::restart() {
  if (!m_d) return;
  std::lock_guard<std::mutex> lock(m_d->m_poll.mutex());
  m_d->m_since = Clock::now();
}

// ----------------------------------------------------------------- agreement

namespace {

// The phase and its agreement; `keep_input`: an InputError stays one (read_phase).
void run_phase(MPI_Comm comm, IoDeadline* deadline, const char* phase, const std::string& path, bool root_only,
               bool keep_input, const std::function<void()>& fn) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  IoDeadline::Phase watch(deadline, phase, path);
  std::string message;
  int err = 0;
  bool failed = false, input = false;
  if (!root_only || rank == 0) {
    try {
      fn();
    } catch (const SystemIoError& e) {
      failed = true;
      message = e.what();
      err = e.error_number();
    } catch (const InputError& e) {
      failed = true;
      input = keep_input;
      message = e.what();
      if (!input) err = errno_in_text(message);
    } catch (const std::exception& e) {
      failed = true;
      message = e.what();
      err = errno_in_text(message);
    }
  }
  watch.part_done(message);
  // The status all-reduce: the lowest failing rank (size: none).
  int first = failed ? rank : size;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return;
  long long head[3] = {err, static_cast<long long>(message.size()), input ? 1 : 0};
  MPI_Bcast(head, 3, MPI_LONG_LONG, first, comm);
  message.resize(static_cast<std::size_t>(head[1]));
  if (head[1] > 0) MPI_Bcast(message.data(), static_cast<int>(head[1]), MPI_CHAR, first, comm);
  if (head[2] != 0) throw InputError(message);
  throw CheckpointIoError(first, phase, path, static_cast<int>(head[0]), message);
}

}  // namespace

void checkpoint_phase(MPI_Comm comm, IoDeadline* deadline, const char* phase, const std::string& path,
                      bool root_only, const std::function<void()>& fn) {
  run_phase(comm, deadline, phase, path, root_only, false, fn);
}

void read_phase(MPI_Comm comm, IoDeadline* deadline, const char* phase, const std::string& path,
                bool root_only, const std::function<void()>& fn) {
  run_phase(comm, deadline, phase, path, root_only, true, fn);
}

}  // namespace shardtrain
