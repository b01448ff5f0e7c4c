// shardtrain/core/param_layout.hpp
// Owns ParamLayout: the ordered table (name, shape, offset) that maps every
// parameter tensor into ONE flat vector. Gradients, fp32 master weights and
// optimizer moments use the same layout, so a ZeRO shard is the contiguous
// range [rank*S, (rank+1)*S) of the padded vector.
// Invariants: offsets are multiples of `alignment` elements and increase in
// insertion order; tensors of one group (a transformer block) are contiguous;
// padded_size() is a multiple of world_size * alignment; padding is never a
// parameter (zero, no gradient, no weight decay). Groups are numbered 0, 1, 2, ...
// in insertion order without gaps (the unit ZeRO stage 3 gathers).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain {

struct ParamEntry {
  std::string name;                  // e.g. "h.0.attn.c_attn.weight" (nanoGPT names)
  std::vector<std::int64_t> shape;   // row-major; Linear weights are (out, in)
  std::int64_t offset = 0;           // element offset into the flat vector
  std::int64_t numel = 0;
  bool weight_decay = false;         // AdamW decays only matrix weights of Linear layers
  int group = 0;                     // 0: embeddings, 1..L: blocks, L+1: final LayerNorm
};

class ParamLayout {
 public:
  explicit ParamLayout(std::int64_t alignment = 16) : m_alignment(alignment) {}

  // Parameters a layout holds at most (a checkpoint's bound too).
  static constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;
  // Appends a tensor; returns its index. Not allowed after finalize(). Throws
  // InputError naming the tensor when its shape, or the layout, would pass kMaxElements.
  int add(std::string name, std::vector<std::int64_t> shape, bool weight_decay, int group);
  // Pads the total to a multiple of world_size * alignment. Call once.
  void finalize(int world_size);

  const std::vector<ParamEntry>& entries() const { return m_entries; }
  const ParamEntry& operator[](int i) const { return m_entries.at(i); }
  const ParamEntry& find(const std::string& name) const;  // throws if absent
  int count() const { return static_cast<int>(m_entries.size()); }

  std::int64_t num_parameters() const;       // sum of numel (what a user calls the model size)
  std::int64_t padded_size() const { return m_padded; }
  std::int64_t alignment() const { return m_alignment; }
  int world_size() const { return m_world; }
  std::int64_t shard_size() const { return m_padded / m_world; }
  std::pair<std::int64_t, std::int64_t> shard_range(int rank) const {
    return {rank * shard_size(), (rank + 1) * shard_size()};
  }
  // Groups are numbered 0..num_groups()-1 in layout order; group g occupies
  // [group_range(g).first, group_range(g).second) (first tensor's offset to the
  // last tensor's end). Valid after finalize().
  int num_groups() const { return static_cast<int>(m_groups.size()); }
  std::pair<std::int64_t, std::int64_t> group_range(int g) const { return m_groups.at(g); }

 private:
  std::int64_t m_alignment;
  std::int64_t m_end = 0;      // end of the last tensor, before final padding
  std::int64_t m_padded = 0;   // 0 until finalize()
  int m_world = 0;
  std::vector<ParamEntry> m_entries;
  std::vector<std::pair<std::int64_t, std::int64_t>> m_groups;
};

}  // namespace shardtrain
