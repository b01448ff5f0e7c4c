// shardtrain/core/durable_file.hpp
// Owns the POSIX steps that make a file's bytes and a directory entry survive a
// crash: fsync of a file, of a directory (after a rename or unlink in it), a
// small text file written and fsynced, and a positioned write of every byte. Checkpoint commits and the tools'
// atomic outputs are built from these (write temp, fsync, rename, fsync dir).
// Every failure throws shardtrain::Error naming the path and errno's text.
#pragma once

#include <cstddef>
#include <cstdint>
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

}  // namespace shardtrain
