// shardtrain/io/sample_dataset_writer.hpp
// Owns writing a labelled-sample data set file (format "shardtrain-samples",
// documented in share/doc/dataset-format.md) for the importers of trainer-data
// (MNIST images, labelled text). One process writes, serially, STREAMING:
// samples are appended one at a time into chunked, extendable datasets and
// flushed chunk by chunk, so memory stays bounded by a chunk whatever the size
// of the data set.
// Invariants: the file appears atomically (PATH.partial, closed and checked,
// renamed to PATH by commit(); on any failure or without commit() the partial
// file is removed and PATH is untouched); every label is in [0, num_classes);
// every sample has exactly the spec's sample_shape; token ids are in
// [0, vocab_size).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/types.hpp"

namespace shardtrain {

enum class SampleKind { Image, Tokens };
enum class SampleSplit { Train, Val };
std::string to_string(SampleKind k);   // "image" / "tokens"
std::string to_string(SampleSplit s);  // "train" / "val"

// The format's identity and the limits shared by the writer and the reader
// (io/sample_dataset.hpp) that separate a real data set from a hostile one.
inline constexpr const char* kSampleFormat = "shardtrain-samples";
inline constexpr std::int64_t kSampleFormatVersion = 1;
inline constexpr std::int64_t kMaxSampleClasses = 1000000;            // num_classes in [2, 1e6]
inline constexpr std::int64_t kMaxSampleElems = std::int64_t{1} << 24;  // elements of one sample
inline constexpr std::int64_t kMaxSampleDim = 65536;                  // any one of C, H, W
inline constexpr std::int64_t kMaxSamples = std::int64_t{1} << 32;     // rows of one split
inline constexpr std::int64_t kMaxSampleVocab = std::int64_t{1} << 24;  // vocab_size
inline constexpr std::int64_t kMaxClassNameBytes = 1024;              // one /classes entry

struct SampleDatasetSpec {
  SampleKind kind = SampleKind::Image;
  // Image: {channels, height, width}, pixels uint8. Tokens: {seq_len}, ids int32
  // padded with pad_id after `length` valid tokens.
  std::vector<std::int64_t> sample_shape;
  std::vector<std::string> class_names;  // num_classes = class_names.size() >= 2
  // Tokens only:
  std::string tokenizer;                 // e.g. "byte"
  std::int64_t vocab_size = 0;           // ids in [0, vocab_size), pad_id included
  std::int64_t pad_id = -1;              // the padding token (in range), -1 for images
  std::int64_t cls_id = -1;              // the [CLS] token the importer puts first, or -1
  std::int64_t sep_id = -1;              // the [SEP] token the importer puts after the text, or -1
  // Tokens made by a vocabulary file (wordpiece): written as the attributes
  // vocab_file, vocab_sha256 and lowercase when vocab_sha256 is set (informational).
  std::string vocab_file;                // its file name
  std::string vocab_sha256;              // its SHA-256, hex
  bool lowercase = false;                // uncased rules (lower-casing, accents stripped)
  // Informational (root attributes):
  std::string source;                    // what was imported
  std::string split_rule;                // e.g. "MNIST's own train/test files" or "seeded 80/20: seed 1234"
};

class SampleDatasetWriter {
 public:
  // Creates PATH.partial. Throws InputError naming PATH if it cannot be created
  // or the spec is invalid.
  SampleDatasetWriter(const std::string& path, const SampleDatasetSpec& spec);
  ~SampleDatasetWriter();  // removes PATH.partial unless committed
  SampleDatasetWriter(const SampleDatasetWriter&) = delete;
  SampleDatasetWriter& operator=(const SampleDatasetWriter&) = delete;

  // One image sample: channels*height*width pixels (C, H, W order).
  void append_image(SampleSplit split, std::span<const std::uint8_t> pixels, std::int32_t label);
  // One token sample: exactly seq_len ids (padded), of which the first `length` are real.
  void append_tokens(SampleSplit split, std::span<const TokenIndex> ids, std::int64_t length,
                     std::int32_t label);
  // Flushes, writes the counts, closes, renames PATH.partial to PATH. Throws
  // InputError if a split is empty.
  void commit();

  std::int64_t count(SampleSplit split) const;
  // Samples per HDF5 chunk (rows), the writer's buffer per split: about 1 MiB
  // of inputs, between 1 and 4096 samples.
  std::int64_t chunk_samples() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace shardtrain
