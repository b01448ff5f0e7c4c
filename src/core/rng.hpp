// shardtrain/core/rng.hpp
// Portable, counter-based random numbers. Unlike std:: distributions, results
// are identical on every compiler and platform, and value i of a stream can be
// computed without computing values 0..i-1 -- so any rank can initialise any
// slice of the parameter vector and get the same numbers as a single rank.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.hpp"  // SHARDTRAIN_HOST_DEVICE: callable from device code too

namespace shardtrain {

// SplitMix64 finaliser: a bijective 64-bit mix (Steele, Lea, Flood 2014).
SHARDTRAIN_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Value `index` of the stream `(seed, stream)`.
SHARDTRAIN_HOST_DEVICE constexpr std::uint64_t hash64(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

// Uniform in (0, 1), 53 random bits, never exactly 0.
inline double uniform01(std::uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal number `index` of stream (seed, stream), Box-Muller.
inline double normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const double u1 = uniform01(hash64(seed, stream, 2 * index));
  const double u2 = uniform01(hash64(seed, stream, 2 * index + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace shardtrain
