// shardtrain/io/token_dataset.hpp
// Owns read access to a token data set file (format: share/doc/dataset-format.md),
// opened on every rank of an MPI communicator with HDF5's POSIX (sec2) driver.
// Invariants:
//  - Everything about the file is validated in the constructor, before any buffer
//    sized from the file is allocated; a bad file is an InputError whose message
//    starts with the path ("data.h5: ..."), never a crash. Every rank of `comm`
//    runs the same checks on the same bytes, so all ranks agree on the outcome.
//  - The constructor is collective over `comm` (its read phase's agreement); each
//    rank opens the file itself (no MPI inside HDF5); the destructor is local;
//    read_windows is independent: each rank reads only its own windows, and a rank
//    may call it with no windows at all.
//  - Every token handed out is in [0, vocab_size()); a token outside that range is
//    an InputError naming the file, the split and the token's position.
// Not thread-safe (HDF5 is not): use from one thread per rank.
#pragma once

#include "core/types.hpp"
#include "io/text_tokenizer.hpp"

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain {


enum class Split : int { Train = 0, Val = 1 };
std::string_view to_string(Split s);  // "train" / "val"

class TokenDataset {
 public:
  static constexpr std::string_view kFormat = "shardtrain-tokens";
  static constexpr std::int64_t kFormatVersion = 1;
  static constexpr std::int64_t kMaxVocabSize = std::int64_t{1} << 24;

  // Collective over `comm`. Throws InputError("PATH: ...") for a missing or
  // unreadable file, a non-HDF5 file, or any deviation from the format; Error for
  // failures that are not the file's fault.
  // The file is opened and checked on every rank in one read phase
  // (io/checkpoint_phase.hpp read_phase) watched by a deadline of
  // `io_timeout_s` (0: none; the trainer passes checkpoint.io_timeout_s): a
  // rank whose storage does not answer ends the job (exit 1) naming itself,
  // the phase 'open' and the file; a read that fails in the system (EIO) is a
  // CheckpointIoError on every rank naming the rank and the errno.
  TokenDataset(const std::string& path, MPI_Comm comm, double io_timeout_s = 0);
  ~TokenDataset();  // local (HDF5's POSIX driver)
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;
  TokenDataset(TokenDataset&&) noexcept;
  TokenDataset& operator=(TokenDataset&&) noexcept;

  const std::string& path() const;
  std::int64_t vocab_size() const;
  TextTokenizer tokenizer() const;             // its 'tokenizer' attribute (io/text_tokenizer.hpp)
  const std::string& source() const;           // importer's input name ("" if absent)
  double val_fraction() const;                 // as recorded by the importer (0 if absent)
  std::int64_t size(Split split) const;        // tokens in the split
  // token id -> UTF-8 text (display); empty for a "pretokenized" file without strings
  const std::vector<std::string>& vocab() const;

  // Reads starts.size() windows of `len` tokens: window i = tokens
  // [starts[i], starts[i] + len) of `split`, written to out[i*len, (i+1)*len).
  // One H5Dread over the union of the windows (independent transfer); windows may
  // overlap, repeat and come in any order. Throws Error if a window is out of
  // bounds (a caller bug) and InputError if a token read is out of range.
  void read_windows(Split split, std::span<const std::int64_t> starts, std::int64_t len,
                    TokenIndex* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace shardtrain
