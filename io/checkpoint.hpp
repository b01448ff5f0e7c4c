// shardtrain/io/checkpoint.hpp
// Owns the checkpoint FILE: one HDF5 file per checkpoint (share/doc/checkpoint-format.md),
// written in phases every rank agrees on (rank 0's HDF5 layout with every
// attribute final, every rank's pwrite of its hyperslab) and read in phases
// too (rank 0 validates the file with HDF5, every rank preads its hyperslab).
// What goes in it and when is the
// trainer's business (src/session/checkpointing.hpp); this file knows the format.
//  - Each state vector (fp32 master parameters, Adam moments, the 16-bit copy)
//    is ONE global 1-D dataset in the padded flat layout; each rank writes and
//    reads only its hyperslab [lo, hi).
//  - The root attributes (step, data cursor, counters, ...) carry one CRC-32 of
//    their values (`meta_crc32`), checked when the file is opened.
//  - Every dataset carries a CRC-32 (zlib) of its bytes as stored. The CRC of a
//    state vector is assembled from the ranks' pieces with crc32_combine, so it
//    does not depend on how many ranks wrote or read it.
//  - /params/<name> are virtual datasets onto /state/master: a parameter reads
//    by name, in its shape, with h5py or h5dump.
// Invariants: every size read from a file is bounded before anything is sized
// from it, and arithmetic on it cannot overflow; a damaged, truncated or
// foreign file is an InputError ("PATH: ..."), never a crash. Rank 0 runs the
// checks and every rank receives its verdict, so all ranks agree; CRC
// mismatches are found collectively (finish_reads) and agreed on too.
// Constructors, destructors and read/write calls are collective over `comm`.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.hpp"

namespace shardtrain {

// One tensor of the flat layout, as the file records it.
struct CheckpointTensor {
  std::string name;
  std::vector<std::int64_t> shape;  // 0 to 4 dimensions
  std::int64_t offset = 0;          // element offset into every state vector
  std::int64_t numel = 0;
};

// Everything in a checkpoint besides the state vectors.
struct CheckpointMeta {
  std::int64_t step = 0;               // optimizer steps completed (skipped ones included)
  std::int64_t samples_seen = 0;       // data cursor: global index of the next training sample
  std::int64_t tokens_seen = 0;        // samples_seen * seq_len
  std::int64_t optimizer_updates = 0;  // AdamW steps applied (its bias-correction count)
  std::uint64_t sampler_seed = 0;      // seed of the global sample order (train.seed)
  std::int64_t world_size = 0;         // ranks that wrote the file
  std::int64_t zero_stage = 0;
  std::string precision;               // "fp32" | "fp16" | "bf16"
  std::int64_t alignment = 0;          // layout alignment (elements)
  std::int64_t padded_size = 0;        // length of every state vector
  // Loss scaler (optim/loss_scaler.hpp LossScalerState).
  double loss_scale = 1.0;
  std::int64_t scaler_good_steps = 0;
  std::int64_t scaler_hysteresis_left = 0;
  std::int64_t scaler_consecutive_skips = 0;
  // The data the sample order runs over.
  std::string data_path;
  std::int64_t data_train_tokens = 0;
  std::int64_t data_vocab_size = 0;
  std::int64_t seq_len = 0;
  std::string config_text;             // resolved config (config/parse.hpp to_toml)
  std::string created_utc;             // informational
  std::string version;                 // shardtrain version that wrote it
  // The lineage (session/checkpointing.hpp): the file name of the checkpoint
  // this one's training continued from ("" for a run started from scratch,
  // and in files written before lineages were recorded).
  std::string parent;
  // Whether the file's root attributes carry their CRC (`meta_crc32`): files
  // written before it was added do not; they are read without it.
  bool meta_crc_present = false;
};

// CRC-32 of the root attributes' values (every CheckpointMeta field written as
// an attribute, in a fixed order, as "name=value\n" text; doubles by their bit
// pattern), stored as the root attribute `meta_crc32`.
std::uint32_t checkpoint_meta_crc(const CheckpointMeta& meta);

// A state vector to write: `data` holds elements [lo, hi) of the global vector
// (data[0] is element lo), in `type` (F32, F16 or BF16: the file's element
// type, and memory's: no conversion).
struct CheckpointVectorOut {
  std::string name;  // a name of core/state_vectors.hpp kSavedVectors
  DType type = DType::F32;
  const void* data = nullptr;
};

struct CheckpointWriteStats {
  std::uint64_t bytes = 0;     // state vector bytes in the file (all ranks)
  double write_s = 0.0;        // CRCs + create + every rank's writes
  double sync_s = 0.0;         // fsync on every rank
};

inline constexpr std::string_view kCheckpointFormat = "shardtrain-checkpoint";
inline constexpr std::int64_t kCheckpointSchema = 1;

class IoDeadline;  // io/checkpoint_phase.hpp

// Writes a complete checkpoint to `path` (created or truncated). First, with
// no I/O, every rank's CRC piece of its elements [lo, hi) of every vector is
// combined (collective), so each vector's CRC-32 is known before the file is
// laid out; then three phases, each ended by a status agreement of every rank
// (io/checkpoint_phase.hpp):
//   create  rank 0 lays the file out with HDF5 in a file in memory (the
//           header, every state dataset allocated so its offset is fixed,
//           with its real crc32 attribute, the views; the format pinned by
//           h5::set_format_bounds) and copies the bytes HDF5 wrote into
//           `path` with pwrite;
//   write   rank r writes elements [lo, hi) of every vector at its
//           dataset's offset with pwrite (the shards tile [0,
//           meta.padded_size) in rank order);
//   fsync   every rank fsyncs the file.
// Nothing HDF5 wrote is changed afterwards.
// HDF5 never touches the checkpoint's storage (a failed write inside HDF5
// leaves the library broken; see checkpoint_write.cpp), no MPI call runs inside a
// phase, so one rank's failure is known to every rank at the end of that
// phase: every rank throws the same CheckpointIoError (failing rank, phase,
// file, errno). HDF5 is called only under the HDF5 lock (io/h5_lock.hpp): a
// background writer thread (session/background_checkpoint.hpp) calls this beside
// a training loop that reads HDF5 data sets, on a communicator no other thread
// uses (MPI must then provide MPI_THREAD_MULTIPLE). `deadline` (may be null)
// watches each phase.
// `pause`, when set, is called on every rank after the write phase (the file
// complete, its checksums included; not yet fsynced): a test hook. Collective.
CheckpointWriteStats write_checkpoint(const std::string& path, MPI_Comm comm,
                                      const CheckpointMeta& meta,
                                      const std::vector<CheckpointTensor>& layout,
                                      const std::vector<CheckpointVectorOut>& vectors,
                                      std::int64_t lo, std::int64_t hi,
                                      const std::function<void()>& pause = {},
                                      IoDeadline* deadline = nullptr);

// Brings up the checkpoint write path once, without a checkpoint: writes
// DIR/.shardtrain-io-probe-<job>.h5 with write_checkpoint itself -- the
// attributes and config text of `like`, one layout row and one virtual
// /params view per name in `tensor_names` (each tensor a single element), a
// state vector per entry of `vectors` -- then deletes it. Every structure a
// real checkpoint of that model has is created once (HDF5's metadata caches,
// the compound layout type, the virtual datasets, the CRC combine, fsync); only
// the state data is tiny; the file is then read back as a resume reads it.
// What this leaves resident (HDF5's library state and caches) would otherwise
// first appear at the first checkpoint; the trainer runs it before it measures
// the process's RSS before the model (rundir/process_memory.hpp), and VmHWM's
// rise during it is the checkpoint I/O scratch. Collective; throws Error on
// I/O failure.
void warm_checkpoint_io(const std::string& dir, MPI_Comm comm, const CheckpointMeta& like,
                        const std::vector<std::string>& tensor_names,
                        const std::vector<std::pair<std::string, DType>>& vectors);

// An open checkpoint. Construction validates the structure (format, schema,
// attributes, layout table, every state vector's type, length, storage and
// data offset) without reading any state: rank 0 alone, with HDF5's POSIX
// driver, in the phase 'open'; every rank then holds what it found. The state
// is read with pread at those offsets, each rank its own slice, in the phase
// 'read' (io/checkpoint_phase.hpp read_phase: no MPI inside a phase). A bad
// file is the same InputError on every rank, as it always was; a failing
// read (EIO) on any rank is a CheckpointIoError on every rank naming that
// rank, the phase, the file and the errno; `deadline` (may be null: no time
// limit) ends the job (exit 1) when a rank's read does not return in time.
class CheckpointReader {
 public:
  CheckpointReader(const std::string& path, MPI_Comm comm, IoDeadline* deadline = nullptr);  // collective
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const;
  const CheckpointMeta& meta() const;
  const std::vector<CheckpointTensor>& layout() const;
  // State vectors present, in file order, with their element type.
  const std::vector<std::pair<std::string, DType>>& vectors() const;
  bool has_vector(std::string_view name) const;

  // Collective. Reads elements [lo, hi) of vector `name` into dst (in its
  // DType); elements at or beyond the vector's length read as zero. The
  // ranks' [lo, hi) must tile [0, N) in rank order for some N (N may differ
  // from the file's length: another rank count pads differently); the last
  // rank also reads the file's tail beyond N, so the pieces cover the whole
  // dataset and its CRC can be checked in finish_reads().
  void read_vector(std::string_view name, std::int64_t lo, std::int64_t hi, void* dst);
  // Reads [lo, hi) of `name` on this rank alone, no CRC (the tool's export);
  // the deadline watches it (no agreement: a failure throws on this rank).
  void read_range(std::string_view name, std::int64_t lo, std::int64_t hi, void* dst);
  // Collective. Checks the CRC of every vector read since construction (and of
  // /config and /layout); throws InputError("PATH: dataset /state/X: checksum
  // mismatch ...") on every rank if any differs.
  void finish_reads();
  // Collective. Reads every vector whole (each rank a contiguous part), checks
  // every CRC; returns one line per dataset ("/state/master  ok  crc32 ...") and
  // throws InputError listing the bad ones.
  std::vector<std::string> verify_all();
  // File offset in bytes of a dataset's data (for tests that damage it), or -1.
  std::int64_t data_offset(std::string_view dataset) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m;
};

}  // namespace shardtrain
