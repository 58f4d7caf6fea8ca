// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", 2014): the 64-bit mixing every deterministic hash and seeded
// choice of kvreplay is built from, the same on every platform.
#pragma once

#include <cstdint>

namespace kvreplay {

inline constexpr std::uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// SplitMix64's finalizer: a bijection of 64-bit words that spreads every bit.
constexpr std::uint64_t mix64_finalize(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One SplitMix64 output for the state `x`: the finalizer of x plus the gamma.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  return mix64_finalize(x + kGoldenGamma);
}

}  // namespace kvreplay
