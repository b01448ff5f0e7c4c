// fsync of files and directories, and small durable writes (see durable_file.hpp).
#include "core/durable_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.hpp"

namespace shardtrain {

namespace {

void fsync_opened(const std::string& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) SHARDTRAIN_FAIL(path + ": cannot open " + what + " to fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) SHARDTRAIN_FAIL(path + ": fsync of " + what + " failed: " + std::strerror(err));
}

}  // namespace

void fsync_file(const std::string& path) { fsync_opened(path, O_RDONLY, "file"); }

void fsync_directory(const std::string& dir) { fsync_opened(dir, O_RDONLY | O_DIRECTORY, "directory"); }

void write_file_durably(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) SHARDTRAIN_FAIL(path + ": cannot create: " + std::strerror(errno));
  std::size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  ::close(fd);
  if (err != 0) SHARDTRAIN_FAIL(path + ": write or fsync failed: " + std::strerror(err));
}

int pwrite_all(int fd, const void* data, std::size_t bytes, std::uint64_t offset) {
  const auto* p = static_cast<const char*>(data);
  for (std::size_t done = 0; done < bytes;) {
    const ssize_t n = ::pwrite(fd, p + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

PartialFile::PartialFile(std::string out) : m_out(std::move(out)), m_tmp(m_out + ".partial") {}

PartialFile::~PartialFile() {
  if (!m_committed) std::remove(m_tmp.c_str());
}

void PartialFile::commit() {
  fsync_file(m_tmp);
  if (std::rename(m_tmp.c_str(), m_out.c_str()) != 0)
    SHARDTRAIN_FAIL(m_out + ": cannot rename " + m_tmp + " into place: " + std::strerror(errno));
  m_committed = true;
  const std::string dir = std::filesystem::path(m_out).parent_path().string();
  fsync_directory(dir.empty() ? "." : dir);  // the rename itself survives a crash
}

std::FILE* create_fresh_file(const std::string& path, const std::string& shown) {
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

}  // namespace shardtrain
