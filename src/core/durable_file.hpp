// shardtrain/core/durable_file.hpp
// Owns the POSIX steps that make a file's bytes and a directory entry survive a
// crash: fsync of a file, of a directory (after a rename or unlink in it), a
// small text file written and fsynced, a positioned write of every byte, and
// an output written as OUT.partial and renamed into place (PartialFile).
// Checkpoint commits and the tools' atomic outputs are built from these (write
// temp, fsync, rename, fsync dir).
// Every failure throws shardtrain::Error naming the path and errno's text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace shardtrain {

void fsync_file(const std::string& path);
void fsync_directory(const std::string& dir);
// Creates or truncates `path`, writes `text`, fsyncs and closes it.
void write_file_durably(const std::string& path, const std::string& text);
// Writes all `bytes` at `data` to `fd` at byte `offset` (pwrite, resumed after
// short writes and EINTR). Returns 0, or the errno of the failure (EIO for a
// write that made no progress); the caller names the file in its message.
int pwrite_all(int fd, const void* data, std::size_t bytes, std::uint64_t offset);

// OUT.partial, renamed to OUT by commit() (after an fsync of the file; then
// the directory is fsynced, so the rename survives a crash); removed if never
// committed, so OUT is never a half-written file.
class PartialFile {
 public:
  explicit PartialFile(std::string out);
  ~PartialFile();
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;
  const std::string& tmp() const { return m_tmp; }
  // Flushes the finished file to disk and renames it into place.
  void commit();

 private:
  std::string m_out, m_tmp;
  bool m_committed = false;
};

// Creates `path` afresh for writing (binary), or throws InputError naming
// `shown` and why not. Whatever is at path is removed first, not opened: a
// symbolic link planted there (or left by anything) is never followed, and
// the open is exclusive and refuses links (O_EXCL | O_NOFOLLOW), so the
// caller writes only a new file of its own.
std::FILE* create_fresh_file(const std::string& path, const std::string& shown);

}  // namespace shardtrain
