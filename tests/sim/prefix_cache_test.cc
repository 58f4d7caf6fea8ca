// PrefixCache: eviction order under each policy, and memory bounded by the
// blocks cached rather than by the number of hits and releases.
#include "sim/prefix_cache.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using kvreplay::BlockId;
using kvreplay::BlockPool;
using kvreplay::EvictPolicy;
using kvreplay::PageKey;
using kvreplay::PrefixCache;

// A sequence computes `count` pages, the cache keeps them, the sequence ends:
// every block is then held by the cache alone (evictable).
std::vector<BlockId> cache_pages(PrefixCache& cache, BlockPool& pool, std::uint32_t count,
                                 std::uint64_t tick) {
  std::vector<BlockId> blocks;
  for (std::uint32_t i = 0; i < count; ++i) {
    auto block = pool.allocate();
    REQUIRE(block.ok());
    auto inserted = cache.insert(PageKey{1000 + i, 16}, block.value(), pool, tick);
    REQUIRE(inserted.ok());
    REQUIRE(inserted.value());
    blocks.push_back(block.value());
  }
  for (BlockId b : blocks) {
    REQUIRE(pool.release(b).ok());
    cache.released(b, pool, tick);
  }
  return blocks;
}

// A request hits cached block b, holds it for a while and releases it.
// Returns false when the pool refused (then the test fails).
bool hit_and_release(PrefixCache& cache, BlockPool& pool, BlockId b, std::uint64_t tick) {
  cache.touch(b, tick);
  if (!pool.retain(b).ok() || !pool.release(b).ok()) return false;
  cache.released(b, pool, tick);
  return true;
}

std::vector<BlockId> evict_all(PrefixCache& cache, BlockPool& pool) {
  std::vector<BlockId> order;
  std::vector<BlockId> before = pool.free_list();
  while (cache.evict_one(pool)) {
    std::vector<BlockId> after = pool.free_list();
    for (BlockId b : after) {
      bool was_free = false;
      for (BlockId f : before) was_free = was_free || f == b;
      if (!was_free) order.push_back(b);
    }
    before = std::move(after);
  }
  return order;
}

}  // namespace

TEST_CASE("prefix_cache: hits and releases of cached blocks keep the candidates bounded") {
  for (EvictPolicy policy : {EvictPolicy::kLru, EvictPolicy::kFifo, EvictPolicy::kLfu}) {
    INFO("policy " << kvreplay::to_string(policy));
    BlockPool pool(64);
    PrefixCache cache(policy, 64);
    std::vector<BlockId> blocks = cache_pages(cache, pool, 4, 1);
    const auto bound = [&] { return 2 * cache.size() + PrefixCache::kCandidateSlack; };
    std::size_t most = 0;
    // Two million cycles on one block (and a few on the others): each used to
    // leave a stale candidate behind until an eviction reached it.
    bool pool_ok = true;
    for (std::uint64_t cycle = 0; cycle < 2'000'000 && pool_ok; ++cycle) {
      pool_ok = hit_and_release(cache, pool, blocks[cycle % 1000 == 0 ? cycle / 1000 % 4 : 0],
                                cycle + 2);
      most = std::max(most, cache.candidates());
      if (cache.candidates() > bound()) break;
    }
    REQUIRE(pool_ok);
    CHECK(most <= bound());
    CHECK(cache.candidates() <= 2 * cache.evictable() + PrefixCache::kCandidateSlack);
    CHECK(cache.size() == 4);
    CHECK(cache.evictable() == 4);
    // Blocks in use (hit, not yet released) leave stale candidates too.
    for (BlockId b : blocks) {
      cache.touch(b, 3'000'000);
      REQUIRE(pool.retain(b).ok());
    }
    CHECK(cache.evictable() == 0);
    CHECK(cache.candidates() <= PrefixCache::kCandidateSlack);
    CHECK_FALSE(cache.evict_one(pool));
  }
}

TEST_CASE("prefix_cache: purging stale candidates keeps the eviction order") {
  // 40 blocks, hit in a fixed pseudo-random pattern: enough cycles to purge
  // many times. The expected order is computed from the policy's definition.
  constexpr std::uint32_t kBlocks = 40;
  for (EvictPolicy policy : {EvictPolicy::kLru, EvictPolicy::kFifo, EvictPolicy::kLfu}) {
    INFO("policy " << kvreplay::to_string(policy));
    BlockPool pool(kBlocks);
    PrefixCache cache(policy, kBlocks);
    std::vector<BlockId> blocks = cache_pages(cache, pool, kBlocks, 1);
    std::vector<std::uint64_t> last_use(kBlocks, 1), hits(kBlocks, 0), released_at(kBlocks, 0);
    std::uint64_t release_count = kBlocks;  // cache_pages released them in block order
    for (std::uint32_t i = 0; i < kBlocks; ++i) released_at[blocks[i]] = i;
    std::uint64_t x = 12345;
    for (std::uint64_t cycle = 0; cycle < 20'000; ++cycle) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      // Skewed: low blocks are hit far more often than high ones.
      const std::uint32_t pick = static_cast<std::uint32_t>((x >> 33) % kBlocks);
      const BlockId b = blocks[pick * pick / kBlocks];
      const std::uint64_t tick = 2 + cycle / 3;  // several releases share a tick
      REQUIRE(hit_and_release(cache, pool, b, tick));
      last_use[b] = tick;
      ++hits[b];
      released_at[b] = release_count++;
    }
    REQUIRE(cache.candidates() <= 2 * cache.evictable() + PrefixCache::kCandidateSlack);
    std::vector<BlockId> expected(blocks);
    std::sort(expected.begin(), expected.end(), [&](BlockId a, BlockId b) {
      switch (policy) {
        case EvictPolicy::kLru: return released_at[a] < released_at[b];  // release order
        case EvictPolicy::kFifo: return a < b;  // all cached at tick 1: ties by block id
        case EvictPolicy::kLfu:
          if (hits[a] != hits[b]) return hits[a] < hits[b];
          if (last_use[a] != last_use[b]) return last_use[a] < last_use[b];
          return a < b;
      }
      return false;
    });
    CHECK(evict_all(cache, pool) == expected);
    CHECK(cache.size() == 0);
    CHECK(cache.candidates() == 0);
  }
}
