// shardtrain/core/durable_file.hpp
// Owns the POSIX steps that make a file's bytes and a directory entry survive a
// crash: fsync of a file, of a directory (after a rename or unlink in it), and
// a small text file written and fsynced. Checkpoint commits and the tools'
// atomic outputs are built from these (write temp, fsync, rename, fsync dir).
// Every failure throws shardtrain::Error naming the path and errno's text.
#pragma once

#include <string>

namespace shardtrain {

void fsync_file(const std::string& path);
void fsync_directory(const std::string& dir);
// Creates or truncates `path`, writes `text`, fsyncs and closes it.
void write_file_durably(const std::string& path, const std::string& text);

}  // namespace shardtrain
