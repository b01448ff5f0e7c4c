// shardtrain/tools/ckpt_commands.hpp
// trainer-ckpt's subcommands, as the command line (trainer_ckpt.cpp) calls
// them: each returns an exit code or throws InputError (exit 2, message naming
// the file) or another exception (exit 1); trainer_ckpt.cpp prints the error
// once and says which ranks run which subcommand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain {

// Export reads at most this many elements of a vector at once.
inline constexpr std::int64_t kExportChunkElements = std::int64_t{1} << 20;

// `info CKPT [--config]`: what the file holds (ckpt_info.cpp). One process.
int cmd_info(const std::string& path, bool config_only);
// `verify CKPT`: every dataset's CRC-32 (ckpt_info.cpp). Collective over
// MPI_COMM_WORLD; throws the reader's InputError on every rank for damage, and
// its CheckpointIoError for a read that failed or outlived `io_timeout_s`.
void cmd_verify(const std::string& path, double io_timeout_s);
// `export CKPT OUT`: parameters of one state vector as HDF5, .npy or
// safetensors, under our names or GPT-2's (ckpt_export.cpp). One process.
int cmd_export(const std::string& path, const std::string& out, std::vector<std::string> names,
               const std::string& vector, const std::string& format_option, const std::string& name_style,
               double io_timeout_s);

// "12.3 MiB" (binary units; bytes below 1 KiB as "N B").
std::string human_bytes(std::uint64_t b);

}  // namespace shardtrain
