// Global, rank-count-independent sample order (see batch_sampler.hpp).
#include "task/batch_sampler.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace shardtrain {

std::uint64_t SplitMix64::next() {
  const std::uint64_t z = m_state;
  m_state += 0x9E3779B97F4A7C15ull;  // the state after this output, as Steele et al.'s generator steps
  return mix64(z);                   // which adds the same constant before mixing (core/rng.hpp)
}

Xoshiro256ss::Xoshiro256ss(std::uint64_t seed) {
  SplitMix64 sm(seed);
  for (auto& s : m_s) s = sm.next();
}

namespace {
constexpr std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

std::uint64_t Xoshiro256ss::next() {
  const std::uint64_t result = rotl(m_s[1] * 5, 7) * 9;
  const std::uint64_t t = m_s[1] << 17;
  m_s[2] ^= m_s[0];
  m_s[3] ^= m_s[1];
  m_s[1] ^= m_s[2];
  m_s[0] ^= m_s[3];
  m_s[2] ^= t;
  m_s[3] = rotl(m_s[3], 45);
  return result;
}

std::uint64_t Xoshiro256ss::uniform(std::uint64_t bound) {
  SHARDTRAIN_CHECK(bound >= 1, "uniform() needs bound >= 1");
  // Accept r only below the largest multiple of bound that fits in 2^64, so
  // r % bound is exactly uniform. threshold = 2^64 mod bound.
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t r = next();
    if (r >= threshold) return r % bound;
  }
}

// Why W = (n_tokens - 1) / seq_len - 1 keeps every window inside the split.
// Let T = seq_len and q = (n - 1) / T (floor), so q*T <= n - 1, and W = q - 1.
// A window starts at s = offset + perm[p]*T with offset <= T - 1 and
// perm[p] <= W - 1, so s <= (T - 1) + (W - 1)*T = W*T - 1 = (q - 1)*T - 1.
// Its last token is s + T <= q*T - 1 <= n - 2 < n. And s >= 0 trivially.
// Hence all windows [s, s + T + 1) lie in [0, n) for every offset in [0, T).
// W >= 1 needs q >= 2, i.e. n >= 2T + 1.
WindowSampler::WindowSampler(std::int64_t n_tokens, std::int64_t seq_len, std::uint64_t seed)
    : m_n_tokens(n_tokens), m_seq_len(seq_len), m_seed(seed), m_windows(0) {
  if (seq_len < 1) throw InputError("seq_len must be >= 1, got " + std::to_string(seq_len));
  if (n_tokens < 0) throw InputError("negative token count " + std::to_string(n_tokens));
  m_windows = (n_tokens - 1) / seq_len - 1;
  if (n_tokens < 1 || m_windows < 1)
    throw InputError("split of " + std::to_string(n_tokens) + " tokens is too short for seq_len " +
                     std::to_string(seq_len) + " (needs at least " +
                     std::to_string(2 * seq_len + 1) + " tokens)");
}

namespace {
// One generator per (seed, epoch): the epoch is mixed in through splitmix64 so
// neighbouring epochs (and seeds) give unrelated streams.
Xoshiro256ss epoch_rng(std::uint64_t seed, std::int64_t epoch) {
  SplitMix64 e(static_cast<std::uint64_t>(epoch) ^ 0x5DEECE66DA3C1E5Bull);
  return Xoshiro256ss(seed ^ e.next());
}


// perm = a uniformly random permutation of 0..n-1 drawn from rng.
void random_permutation(Xoshiro256ss& rng, std::int64_t n, std::vector<std::int64_t>& perm) {
  perm.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) perm[static_cast<std::size_t>(i)] = i;
  // Fisher-Yates (Durstenfeld): for i = n-1 .. 1 swap perm[i] with perm[j], j uniform in [0, i].
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.uniform(static_cast<std::uint64_t>(i) + 1));
    std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(j)]);
  }
}
}  // namespace

void WindowSampler::load_epoch(std::int64_t epoch) const {
  Xoshiro256ss rng = epoch_rng(m_seed, epoch);
  m_cached_offset = static_cast<std::int64_t>(rng.uniform(static_cast<std::uint64_t>(m_seq_len)));
  random_permutation(rng, m_windows, m_perm);
  m_cached_epoch = epoch;
}

SampleSampler::SampleSampler(std::int64_t n_samples, std::uint64_t seed) : m_n(n_samples), m_seed(seed) {
  if (n_samples < 1) throw InputError("the training split has no samples");
}

std::int64_t SampleSampler::sample(std::int64_t global_index) const {
  SHARDTRAIN_CHECK(global_index >= 0, "negative sample index " + std::to_string(global_index));
  const std::int64_t epoch = global_index / m_n;
  if (epoch != m_cached_epoch) {
    Xoshiro256ss rng = epoch_rng(m_seed, epoch);
    random_permutation(rng, m_n, m_perm);
    m_cached_epoch = epoch;
  }
  return m_perm[static_cast<std::size_t>(global_index % m_n)];
}

std::int64_t WindowSampler::epoch_offset(std::int64_t epoch) const {
  SHARDTRAIN_CHECK(epoch >= 0, "negative epoch");
  if (epoch != m_cached_epoch) load_epoch(epoch);
  return m_cached_offset;
}

std::int64_t WindowSampler::window_start(std::int64_t global_index) const {
  SHARDTRAIN_CHECK(global_index >= 0, "negative sample index " + std::to_string(global_index));
  const std::int64_t epoch = global_index / m_windows;
  const std::int64_t pos = global_index % m_windows;
  if (epoch != m_cached_epoch) load_epoch(epoch);
  return m_cached_offset + m_perm[static_cast<std::size_t>(pos)] * m_seq_len;
}

std::pair<std::int64_t, std::int64_t> rank_slice(std::int64_t count, int rank, int world) {
  SHARDTRAIN_CHECK(world >= 1 && rank >= 0 && rank < world,
                   "bad rank " + std::to_string(rank) + " of " + std::to_string(world));
  SHARDTRAIN_CHECK(count >= 0, "negative count " + std::to_string(count));
  const std::int64_t base = count / world;
  const std::int64_t extra = count % world;
  const std::int64_t lo = rank * base + std::min<std::int64_t>(rank, extra);
  const std::int64_t hi = lo + base + (rank < extra ? 1 : 0);
  return {lo, hi};
}

std::int64_t eval_window_count(std::int64_t n_tokens, std::int64_t seq_len) {
  SHARDTRAIN_CHECK(seq_len >= 1, "seq_len must be >= 1");
  if (n_tokens < 1) return 0;
  return (n_tokens - 1) / seq_len;
}

}  // namespace shardtrain
