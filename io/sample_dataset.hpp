// shardtrain/io/sample_dataset.hpp
// Owns read access to a labelled-sample data set file (format "shardtrain-samples",
// share/doc/dataset-format.md; written by io/sample_dataset_writer.hpp), opened
// on every rank of an MPI communicator with HDF5's POSIX (sec2) driver.
// Invariants:
//  - Everything about the file is validated in the constructor, before any buffer
//    sized from the file is allocated; a bad file is an InputError whose message
//    starts with the path ("data.h5: ..."), never a crash or a huge allocation.
//    Every rank runs the same checks on the same bytes, so all ranks agree.
//  - The constructor is collective over `comm` (its read phase's agreement); each
//    rank opens the file itself (no MPI inside HDF5); the destructor is local;
//    read() is independent: each rank reads only the rows it is given, and a rank
//    may pass no rows at all.
//  - Every label handed out is in [0, num_classes()), every token id in
//    [0, vocab_size()), every length in [1, seq_len]; a value outside is an
//    InputError naming the file, the split and the row.
//  - hold_in_memory() (optional, per rank, not collective) reads both splits
//    into tracked buffers once, one H5Dread per dataset and split, and checks
//    every value then (the same InputError, naming the first bad row); read()
//    then serves rows from memory, bit for bit what it reads from the file
//    (pixels are held as the file's uint8 and converted per read by the same
//    table), without HDF5 or its lock.
// Not thread-safe (HDF5 is not): use from one thread per rank.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "core/types.hpp"
#include "io/sample_dataset_writer.hpp"  // SampleKind, SampleSplit, the format's limits

namespace shardtrain {

class SampleDataset {
 public:
  // Collective over `comm`. Throws InputError("PATH: ...") for a missing or
  // unreadable file, a non-HDF5 file, or any deviation from the format.
  // The file is opened and checked on every rank in one read phase
  // (io/checkpoint_phase.hpp read_phase) watched by a deadline of
  // `io_timeout_s` (0: none; the trainer passes checkpoint.io_timeout_s): a
  // rank whose storage does not answer ends the job (exit 1) naming itself,
  // the phase 'open' and the file; a read that fails in the system (EIO) is a
  // CheckpointIoError on every rank naming the rank and the errno.
  SampleDataset(const std::string& path, MPI_Comm comm, double io_timeout_s = 0);
  ~SampleDataset();  // local (HDF5's POSIX driver)
  SampleDataset(const SampleDataset&) = delete;
  SampleDataset& operator=(const SampleDataset&) = delete;
  SampleDataset(SampleDataset&&) noexcept;
  SampleDataset& operator=(SampleDataset&&) noexcept;

  const std::string& path() const;
  SampleKind kind() const;
  const std::vector<std::int64_t>& sample_shape() const;  // (C, H, W) or (seq_len)
  std::int64_t sample_elems() const;                      // product of sample_shape
  std::int64_t num_classes() const;
  const std::vector<std::string>& class_names() const;    // num_classes entries
  std::int64_t vocab_size() const;                        // tokens only; 0 for images
  std::int64_t pad_id() const;                            // tokens only; -1 for images
  std::int64_t cls_id() const;                            // tokens: -1 if none; -1 for images
  std::int64_t sep_id() const;                            // tokens: [SEP] after the text, -1 if none or not recorded
  const std::string& tokenizer() const;                   // tokens only; "" for images
  const std::string& source() const;                      // informational ("" if absent)
  const std::string& split_rule() const;                  // informational ("" if absent)
  std::int64_t size(SampleSplit split) const;             // samples in the split

  // Reads the rows `indices` of `split` (any order, repeats allowed) with one
  // H5Dread per dataset over the union of the rows (independent transfer), and
  // writes sample i to:
  //   images: inputs[i*sample_elems ...] as float pixel/255 in [0, 1]; tokens must be null;
  //   tokens: tokens[i*sample_elems ...] (ids); inputs must be null;
  //   labels[i]; lengths[i] (tokens only, may be null; must be null for images).
  // Throws Error for an index outside [0, size(split)) or a wrong combination of
  // buffers (caller bugs), InputError for a bad value in the file.
  // Once held in memory, from memory (the same values, no HDF5 call).
  void read(SampleSplit split, std::span<const std::int64_t> indices, float* inputs, TokenIndex* tokens,
            std::int32_t* labels, std::int32_t* lengths) const;

  // Bytes hold_in_memory() allocates for both splits: the inputs as held
  // (images 1 byte per pixel, as stored; token ids 4 bytes), 4 per label and,
  // for tokens, 4 per length.
  std::int64_t in_memory_bytes() const;

  // Reads both splits into buffers tracked under `category` in `tracker`, which
  // must outlive this object: one H5Dread per dataset and split (the whole
  // dataset, independent transfer), then every label, token id and length is
  // checked (InputError "PATH: /train/labels[ROW]: label 12 out of range [0, 10)",
  // the first bad row of the split). Independent (not collective). A second
  // call does nothing.
  void hold_in_memory(MemoryTracker& tracker, MemCategory category);
  bool in_memory() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace shardtrain
