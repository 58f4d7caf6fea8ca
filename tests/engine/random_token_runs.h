// The radix tree's random tests (tests/engine/sglang_scheduler_test.cc,
// tests/engine/hicache_test.cc): a small deterministic generator and
// sequences of token runs that share, split and extend prefixes.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/sglang/radix_cache.h"

namespace kvreplay::test {

// A linear congruential generator: next(n) is in [0, n).
struct Lcg {
  std::uint64_t state;
  std::uint64_t operator()(std::uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  }
};

// `count` sequences of six runs over a few ids, each run `min_run` to
// `min_run + spread - 1` tokens long. Sequences agree on a prefix: the ids
// of the first two runs come from two choices, the others from four.
inline std::vector<TokenRuns> random_token_runs(Lcg& next, int count, std::uint32_t min_run,
                                                std::uint32_t spread) {
  std::vector<TokenRuns> seqs;
  for (int s = 0; s < count; ++s) {
    TokenRuns seq;
    std::uint32_t end = 0;
    std::uint64_t id = 0;
    for (int r = 0; r < 6; ++r) {
      id = id * 8 + 1 + next(r < 2 ? 2 : 4);
      end += min_run + static_cast<std::uint32_t>(next(spread));
      seq.push_back(TokenRun{id, end});
    }
    seqs.push_back(std::move(seq));
  }
  return seqs;
}

}  // namespace kvreplay::test
