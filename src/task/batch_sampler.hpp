// shardtrain/task/batch_sampler.hpp
// Owns the global order of training and validation samples. No I/O here: the
// sampler only turns a global sample index into a token offset; io/TokenDataset
// reads the windows.
// Invariants:
//  - The sample stream depends only on (n_tokens, seq_len, seed), never on the
//    number of ranks: a global batch is a contiguous range of global indices, and
//    each rank takes its rank_slice of it.
//  - The random stream is our own (splitmix64 + xoshiro256**, Fisher-Yates with
//    rejection sampling), so it is bit-identical across compilers and standard
//    libraries (std::shuffle and std distributions are implementation-defined).
//    Changing it changes every run's data order: tests pin it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace shardtrain {

// splitmix64 (Steele, Lea, Flood 2014): used to derive seeds.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : m_state(seed) {}
  std::uint64_t next();

 private:
  std::uint64_t m_state;
};

// xoshiro256** 1.0 (Blackman, Vigna 2018).
class Xoshiro256ss {
 public:
  explicit Xoshiro256ss(std::uint64_t seed);  // state from four splitmix64 outputs
  Xoshiro256ss(std::uint64_t s0, std::uint64_t s1, std::uint64_t s2, std::uint64_t s3)
      : m_s{s0, s1, s2, s3} {}
  std::uint64_t next();
  // Uniform in [0, bound), bound >= 1, without modulo bias (rejection).
  std::uint64_t uniform(std::uint64_t bound);

 private:
  std::uint64_t m_s[4];
};

// Training windows. A sample is seq_len + 1 consecutive tokens (inputs and the
// targets shifted by one). Global index g lies in epoch e = g / W at position
// p = g % W and starts at offset(e) + perm_e[p] * seq_len, where the offset in
// [0, seq_len) and the permutation perm_e of 0..W-1 come from (seed, e) alone.
// The random offset lets every token start a window over the epochs while the
// windows of one epoch never overlap by more than the one shared target token.
// Not thread-safe: window_start caches the current epoch's permutation (W int64s).
class WindowSampler {
 public:
  // Throws InputError (message without a file name: callers prefix it) if
  // seq_len < 1 or the split is too short for even one window.
  WindowSampler(std::int64_t n_tokens, std::int64_t seq_len, std::uint64_t seed);

  std::int64_t n_tokens() const { return m_n_tokens; }
  std::int64_t windows_per_epoch() const { return m_windows; }
  std::int64_t seq_len() const { return m_seq_len; }
  std::int64_t window_len() const { return m_seq_len + 1; }

  // First token of global sample `global_index` (>= 0). Each window
  // [start, start + seq_len + 1) lies inside [0, n_tokens).
  std::int64_t window_start(std::int64_t global_index) const;
  // The offset(e) of epoch e.
  std::int64_t epoch_offset(std::int64_t epoch) const;

 private:
  void load_epoch(std::int64_t epoch) const;

  std::int64_t m_n_tokens;
  std::int64_t m_seq_len;
  std::uint64_t m_seed;
  std::int64_t m_windows;
  mutable std::int64_t m_cached_epoch = -1;
  mutable std::int64_t m_cached_offset = 0;
  mutable std::vector<std::int64_t> m_perm;
};

// Labelled samples (classifiers): global index g lies in epoch e = g / N at
// position p = g % N and is sample perm_e[p] of the training split, where the
// permutation of 0..N-1 comes from (seed, e) alone (the same generator as the
// windows'). Every epoch visits every sample once.
// Not thread-safe: sample() caches the current epoch's permutation (N int64s).
class SampleSampler {
 public:
  // Throws InputError (message without a file name) if n_samples < 1.
  SampleSampler(std::int64_t n_samples, std::uint64_t seed);
  std::int64_t n_samples() const { return m_n; }
  std::int64_t sample(std::int64_t global_index) const;

 private:
  std::int64_t m_n;
  std::uint64_t m_seed;
  mutable std::int64_t m_cached_epoch = -1;
  mutable std::vector<std::int64_t> m_perm;
};

// Balanced contiguous partition of [0, count) over `world` ranks: rank r gets
// [lo, hi); the first count % world ranks get one extra. Ranks may get none.
std::pair<std::int64_t, std::int64_t> rank_slice(std::int64_t count, int rank, int world);

// Validation windows: deterministic, no shuffling. Window i starts at i * seq_len
// and spans seq_len + 1 tokens; there are (n_tokens - 1) / seq_len of them (0 if
// the split is shorter than seq_len + 1).
std::int64_t eval_window_count(std::int64_t n_tokens, std::int64_t seq_len);
inline std::int64_t eval_window_start(std::int64_t index, std::int64_t seq_len) { return index * seq_len; }

}  // namespace shardtrain
