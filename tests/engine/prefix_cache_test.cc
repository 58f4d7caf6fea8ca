// PrefixCache: eviction order under each policy, and memory bounded by the
// blocks cached rather than by the number of hits and releases.
#include "engine/paged/prefix_cache.h"
#include "engine/paged/waiting_hits.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
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
      pool_ok =
          hit_and_release(cache, pool, blocks[cycle % 1000 == 0 ? cycle / 1000 % 4 : 0], cycle + 2);
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

TEST_CASE("prefix_cache: insert retains the block once per key, find and cached_as see it") {
  BlockPool pool(8);
  PrefixCache cache(EvictPolicy::kLru, 8);
  auto block = pool.allocate();
  REQUIRE(block.ok());
  const BlockId b = block.value();
  const PageKey key{42, 16};
  CHECK_FALSE(cache.find(key).has_value());
  auto inserted = cache.insert(key, b, pool, 1);
  REQUIRE(inserted.ok());
  CHECK(inserted.value());
  CHECK(pool.refcount(b) == 2);  // the sequence's and the cache's
  CHECK(cache.find(key) == b);
  CHECK(cache.cached_as(b, key));
  CHECK_FALSE(cache.cached_as(b, PageKey{42, 8}));  // same chain, another page end
  CHECK(cache.size() == 1);
  // The same key again, or the same block under another key: nothing happens.
  auto again = cache.insert(key, b, pool, 2);
  REQUIRE(again.ok());
  CHECK_FALSE(again.value());
  auto other_key = cache.insert(PageKey{43, 16}, b, pool, 2);
  REQUIRE(other_key.ok());
  CHECK_FALSE(other_key.value());
  CHECK(pool.refcount(b) == 2);
  CHECK(cache.size() == 1);
  std::vector<BlockId> held;
  cache.holds(held);
  CHECK(held == std::vector<BlockId>{b});
}

TEST_CASE("prefix_cache: an insert the pool refuses changes nothing") {
  BlockPool pool(4);
  PrefixCache cache(EvictPolicy::kFifo, 4);
  // Block 3 is free: retaining it is a core error, and the cache must not keep the key.
  auto inserted = cache.insert(PageKey{7, 16}, 3, pool, 1);
  CHECK_FALSE(inserted.ok());
  // A block past the pool is refused as the pool would; no block is nothing.
  auto past = cache.insert(PageKey{7, 16}, 4, pool, 1);
  REQUIRE_FALSE(past.ok());
  CHECK(past.error() == kvreplay::CoreError::kBlockOutOfRange);
  auto none = cache.insert(PageKey{7, 16}, kvreplay::kInvalidBlock, pool, 1);
  REQUIRE(none.ok());
  CHECK_FALSE(none.value());
  CHECK_FALSE(cache.find(PageKey{7, 16}).has_value());
  CHECK(cache.size() == 0);
  CHECK(pool.free_count() == 4);
  std::vector<BlockId> held;
  cache.holds(held);
  CHECK(held.empty());
  // Refused again where the key's run already holds a block, then where it
  // is new: the index keeps what it had and takes the key later.
  auto b = pool.allocate();
  REQUIRE(b.ok());
  REQUIRE(cache.insert(PageKey{7, 16}, b.value(), pool, 2).ok());
  const BlockId free_block = pool.free_list().front();
  CHECK_FALSE(cache.insert(PageKey{7, 32}, free_block, pool, 3).ok());
  CHECK_FALSE(cache.insert(PageKey{8, 16}, free_block, pool, 3).ok());
  CHECK(cache.find(PageKey{7, 16}) == b.value());
  CHECK_FALSE(cache.find(PageKey{7, 32}).has_value());
  CHECK_FALSE(cache.find(PageKey{8, 16}).has_value());
  CHECK(cache.size() == 1);
  auto c = pool.allocate();
  REQUIRE(c.ok());
  auto later = cache.insert(PageKey{8, 16}, c.value(), pool, 4);
  REQUIRE(later.ok());
  CHECK(later.value());
  CHECK(cache.find(PageKey{8, 16}) == c.value());
  CHECK(cache.size() == 2);
}

TEST_CASE("prefix_cache: a block is evictable only while the cache alone holds it") {
  BlockPool pool(8);
  PrefixCache cache(EvictPolicy::kLru, 8);
  auto block = pool.allocate();
  REQUIRE(block.ok());
  const BlockId b = block.value();
  REQUIRE(cache.insert(PageKey{1, 16}, b, pool, 1).ok());
  cache.released(b, pool, 1);  // the sequence still holds it: refcount 2
  CHECK(cache.evictable() == 0);
  CHECK_FALSE(cache.evict_one(pool));
  REQUIRE(pool.release(b).ok());
  cache.released(b, pool, 2);
  CHECK(cache.evictable() == 1);
  // A hit takes it out of reach of eviction until it is released again.
  cache.touch(b, 3);
  REQUIRE(pool.retain(b).ok());
  CHECK(cache.evictable() == 0);
  CHECK_FALSE(cache.evict_one(pool));
  REQUIRE(pool.release(b).ok());
  cache.released(b, pool, 4);
  CHECK(cache.evictable() == 1);
  // Eviction returns the block to the pool and forgets its key.
  CHECK(cache.evict_one(pool));
  CHECK(cache.evictions() == 1);
  CHECK(pool.refcount(b) == 0);
  CHECK(pool.free_count() == 8);
  CHECK_FALSE(cache.find(PageKey{1, 16}).has_value());
  CHECK(cache.size() == 0);
  CHECK(cache.evictable() == 0);
  // The block can be cached again under a new key.
  auto again = pool.allocate();
  REQUIRE(again.ok());
  auto inserted = cache.insert(PageKey{2, 16}, again.value(), pool, 5);
  REQUIRE(inserted.ok());
  CHECK(inserted.value());
}

TEST_CASE("prefix_cache: lfu evicts the fewest hits first, then the least recently used") {
  BlockPool pool(8);
  PrefixCache cache(EvictPolicy::kLfu, 8);
  std::vector<BlockId> blocks = cache_pages(cache, pool, 3, 1);
  // Block 0: two hits; block 1: none; block 2: one hit.
  REQUIRE(hit_and_release(cache, pool, blocks[0], 2));
  REQUIRE(hit_and_release(cache, pool, blocks[0], 3));
  REQUIRE(hit_and_release(cache, pool, blocks[2], 4));
  CHECK(evict_all(cache, pool) == std::vector<BlockId>{blocks[1], blocks[2], blocks[0]});
}

TEST_CASE("prefix_cache: the key index finds every key through growth and deletions") {
  constexpr std::uint32_t kBlocks = 3000;  // past several growths of the open-addressing table
  BlockPool pool(kBlocks);
  PrefixCache cache(EvictPolicy::kFifo, kBlocks);
  std::vector<BlockId> blocks;
  for (std::uint32_t i = 0; i < kBlocks; ++i) {
    auto block = pool.allocate();
    REQUIRE(block.ok());
    // Keys that collide in their low bits, to exercise probing.
    auto inserted = cache.insert(PageKey{std::uint64_t{i} << 20, i % 3}, block.value(), pool, i);
    REQUIRE(inserted.ok());
    REQUIRE(inserted.value());
    blocks.push_back(block.value());
  }
  for (BlockId b : blocks) {
    REQUIRE(pool.release(b).ok());
    cache.released(b, pool, 0);
  }
  // fifo: the first third cached is evicted first; every other key stays findable.
  for (std::uint32_t i = 0; i < kBlocks / 3; ++i) REQUIRE(cache.evict_one(pool));
  CHECK(cache.size() == kBlocks - kBlocks / 3);
  std::uint32_t found = 0, gone = 0;
  for (std::uint32_t i = 0; i < kBlocks; ++i) {
    auto hit = cache.find(PageKey{std::uint64_t{i} << 20, i % 3});
    if (i < kBlocks / 3) {
      gone += hit.has_value() ? 0 : 1;
    } else {
      found += (hit.has_value() && *hit == blocks[i]) ? 1 : 0;
    }
  }
  CHECK(gone == kBlocks / 3);
  CHECK(found == kBlocks - kBlocks / 3);
}

TEST_CASE("prefix_cache: the eviction log names the blocks evicted since a count, and forgets") {
  BlockPool pool(8);
  PrefixCache cache(EvictPolicy::kLru, 8);
  std::vector<BlockId> blocks = cache_pages(cache, pool, 4, 1);
  auto none = cache.evicted_since(0);
  REQUIRE(none.has_value());
  CHECK(none->empty());
  CHECK_FALSE(cache.evicted_since(1).has_value());  // a count not reached yet
  REQUIRE(cache.evict_one(pool));
  REQUIRE(cache.evict_one(pool));
  auto since0 = cache.evicted_since(0);
  REQUIRE(since0.has_value());
  CHECK(std::vector<BlockId>(since0->begin(), since0->end()) ==
        std::vector<BlockId>{blocks[0], blocks[1]});
  auto since1 = cache.evicted_since(1);
  REQUIRE(since1.has_value());
  CHECK(std::vector<BlockId>(since1->begin(), since1->end()) == std::vector<BlockId>{blocks[1]});

  // The log is bounded: past max(blocks ever cached, slack) entries it starts
  // over, and counts before the restart are no longer answered.
  constexpr std::uint32_t kBlocks = 4;
  BlockPool small(kBlocks);
  PrefixCache churn(EvictPolicy::kLru, kBlocks);
  std::uint64_t tick = 1;
  const std::uint64_t rounds = PrefixCache::kCandidateSlack + 8;
  for (std::uint64_t round = 0; round < rounds; ++round) {
    auto block = small.allocate();
    REQUIRE(block.ok());
    REQUIRE(churn.insert(PageKey{round, 16}, block.value(), small, tick).ok());
    REQUIRE(small.release(block.value()).ok());
    churn.released(block.value(), small, tick++);
    REQUIRE(churn.evict_one(small));
  }
  CHECK(churn.evictions() == rounds);
  CHECK_FALSE(churn.evicted_since(0).has_value());
  auto recent = churn.evicted_since(rounds - 1);
  REQUIRE(recent.has_value());
  CHECK(recent->size() == 1);
}

TEST_CASE("prefix_cache: with duplicates a key holds every block cached under it, earliest first") {
  constexpr std::uint32_t kKeys = 1500;  // two blocks per key: past several growths of the index
  BlockPool pool(2 * kKeys);
  PrefixCache cache(EvictPolicy::kFifo, 2 * kKeys, /*duplicates=*/true);
  std::vector<BlockId> first, second;
  for (std::uint64_t round = 0; round < 2; ++round) {
    for (std::uint32_t k = 0; k < kKeys; ++k) {
      auto block = pool.allocate();
      REQUIRE(block.ok());
      auto inserted = cache.insert(PageKey{k, 16}, block.value(), pool, 1 + round);
      REQUIRE(inserted.ok());
      REQUIRE(inserted.value());
      (round == 0 ? first : second).push_back(block.value());
    }
  }
  CHECK(cache.size() == 2 * kKeys);
  bool earliest = true;
  for (std::uint32_t k = 0; k < kKeys; ++k)
    earliest = earliest && cache.find(PageKey{k, 16}) == first[k];
  CHECK(earliest);
  // A block already cached is not cached twice, under any key.
  auto again = cache.insert(PageKey{0, 16}, first[0], pool, 3);
  REQUIRE(again.ok());
  CHECK_FALSE(again.value());
  // Released in insertion order; fifo evicts the first round first, and each
  // key then finds its second block, until that goes too.
  for (BlockId b : first) {
    REQUIRE(pool.release(b).ok());
    cache.released(b, pool, 4);
  }
  for (BlockId b : second) {
    REQUIRE(pool.release(b).ok());
    cache.released(b, pool, 5);
  }
  for (std::uint32_t k = 0; k < kKeys; ++k) REQUIRE(cache.evict_one(pool));
  bool now_second = true;
  for (std::uint32_t k = 0; k < kKeys; ++k) {
    now_second = now_second && cache.find(PageKey{k, 16}) == second[k] &&
                 !cache.cached_as(first[k], PageKey{k, 16});
  }
  CHECK(now_second);
  while (cache.evict_one(pool)) {
  }
  CHECK(cache.size() == 0);
  CHECK_FALSE(cache.find(PageKey{7, 16}).has_value());
  CHECK(pool.free_count() == 2 * kKeys);

  // Without duplicates the second insert of a key is refused.
  BlockPool single_pool(4);
  PrefixCache single(EvictPolicy::kLru, 4);
  auto a = single_pool.allocate();
  auto b = single_pool.allocate();
  REQUIRE((a.ok() && b.ok()));
  REQUIRE(single.insert(PageKey{1, 16}, a.value(), single_pool, 1).value());
  auto refused = single.insert(PageKey{1, 16}, b.value(), single_pool, 1);
  REQUIRE(refused.ok());
  CHECK_FALSE(refused.value());
  CHECK(single_pool.refcount(b.value()) == 1);
}

TEST_CASE("prefix_cache: watched blocks count as evictable exactly while they are") {
  for (EvictPolicy policy : {EvictPolicy::kLru, EvictPolicy::kFifo, EvictPolicy::kLfu}) {
    INFO(to_string(policy));
    BlockPool pool(8);
    PrefixCache cache(policy, 8);
    std::vector<BlockId> blocks = cache_pages(cache, pool, 4, 1);  // all evictable
    cache.watch(blocks[0]);
    cache.watch(blocks[1]);
    cache.watch(blocks[1]);  // idempotent
    CHECK(cache.watched_evictable() == 2);
    // A hit makes a block unevictable; its release makes it evictable again.
    cache.touch(blocks[0], 2);
    REQUIRE(pool.retain(blocks[0]).ok());
    CHECK(cache.watched_evictable() == 1);
    cache.touch(blocks[2], 2);  // not watched
    REQUIRE(pool.retain(blocks[2]).ok());
    CHECK(cache.watched_evictable() == 1);
    REQUIRE(pool.release(blocks[0]).ok());
    cache.released(blocks[0], pool, 3);
    CHECK(cache.watched_evictable() == 2);
    cache.unwatch(blocks[0]);
    CHECK(cache.watched_evictable() == 1);
    // Eviction unwatches: the block cached again later is not counted.
    while (cache.evict_one(pool)) {
    }
    CHECK(cache.watched_evictable() == 0);
    auto again = pool.allocate();
    REQUIRE(again.ok());
    REQUIRE(cache.insert(PageKey{77, 16}, again.value(), pool, 4).ok());
    REQUIRE(pool.release(again.value()).ok());
    cache.released(again.value(), pool, 4);
    CHECK(cache.watched_evictable() == 0);
    cache.watch(again.value());
    CHECK(cache.watched_evictable() == 1);
    cache.unwatch_all();
    CHECK(cache.watched_evictable() == 0);
  }
}

TEST_CASE("prefix_cache: evict(n) is evict_one n times, with blocks on the free list") {
  for (EvictPolicy policy : {EvictPolicy::kLru, EvictPolicy::kFifo, EvictPolicy::kLfu}) {
    for (kvreplay::AllocOrder order : {kvreplay::AllocOrder::kLifo, kvreplay::AllocOrder::kFifo}) {
      INFO(kvreplay::to_string(policy) << " " << kvreplay::to_string(order));
      constexpr std::uint32_t kBlocks = 10;
      BlockPool batch_pool(kBlocks, order);
      BlockPool one_pool(kBlocks, order);
      PrefixCache batch(policy, kBlocks);
      PrefixCache one(policy, kBlocks);
      std::vector<BlockId> blocks = cache_pages(batch, batch_pool, 8, 1);
      REQUIRE(cache_pages(one, one_pool, 8, 1) == blocks);
      // Hits reorder the candidates; block 2 stays held; two blocks stay free.
      for (BlockId b : {blocks[5], blocks[1], blocks[5], blocks[6]}) {
        REQUIRE(hit_and_release(batch, batch_pool, b, 2));
        REQUIRE(hit_and_release(one, one_pool, b, 2));
      }
      for (PrefixCache* cache : {&batch, &one}) cache->touch(blocks[2], 3);
      REQUIRE(batch_pool.retain(blocks[2]).ok());
      REQUIRE(one_pool.retain(blocks[2]).ok());
      REQUIRE(batch_pool.free_count() == 2);

      CHECK(batch.evict(batch_pool, 4) == 4);
      for (int i = 0; i < 4; ++i) REQUIRE(one.evict_one(one_pool));
      CHECK(batch_pool.snapshot() == one_pool.snapshot());  // the free list's order too
      CHECK(batch.evictions() == one.evictions());
      CHECK(batch.evictable() == one.evictable());
      CHECK(batch.size() == one.size());
      auto batch_log = batch.evicted_since(0);
      auto one_log = one.evicted_since(0);
      REQUIRE(batch_log.has_value());
      REQUIRE(one_log.has_value());
      CHECK(std::vector<BlockId>(batch_log->begin(), batch_log->end()) ==
            std::vector<BlockId>(one_log->begin(), one_log->end()));
      CHECK_FALSE(batch.check(batch_pool));

      // More than is evictable: what there is (block 2 is held), then none.
      CHECK(batch.evict(batch_pool, kBlocks) == 3);
      CHECK(batch.evictable() == 0);
      CHECK(batch.evict(batch_pool, 1) == 0);
      CHECK(batch_pool.free_count() == kBlocks - 1);
      CHECK_FALSE(batch.check(batch_pool));
    }
  }
}

TEST_CASE("prefix_cache: evict_for_reuse is evict_one then allocate, block for block") {
  for (EvictPolicy policy : {EvictPolicy::kLru, EvictPolicy::kFifo, EvictPolicy::kLfu}) {
    INFO(kvreplay::to_string(policy));
    constexpr std::uint32_t kBlocks = 8;
    BlockPool reuse_pool(kBlocks);
    BlockPool evict_pool(kBlocks);
    PrefixCache reuse(policy, kBlocks);
    PrefixCache evict(policy, kBlocks);
    std::vector<BlockId> blocks = cache_pages(reuse, reuse_pool, kBlocks, 1);
    REQUIRE(cache_pages(evict, evict_pool, kBlocks, 1) == blocks);
    // Hits reorder the candidates under every policy; block 2 stays held.
    for (BlockId b : {blocks[5], blocks[1], blocks[5]}) {
      REQUIRE(hit_and_release(reuse, reuse_pool, b, 2));
      REQUIRE(hit_and_release(evict, evict_pool, b, 2));
    }
    for (PrefixCache* cache : {&reuse, &evict}) cache->touch(blocks[2], 3);
    REQUIRE(reuse_pool.retain(blocks[2]).ok());
    REQUIRE(evict_pool.retain(blocks[2]).ok());
    // Nothing is free: every block is cached, so reuse may begin.
    REQUIRE(reuse_pool.free_count() == 0);

    std::vector<BlockId> reused;
    CHECK(reuse.evict_for_reuse(reuse_pool, 3, reused) == 3);
    std::vector<BlockId> allocated;
    for (int i = 0; i < 3; ++i) {
      REQUIRE(evict.evict_one(evict_pool));
      allocated.push_back(evict_pool.allocate().value());
    }
    CHECK(reused == allocated);
    CHECK(reuse_pool.snapshot() == evict_pool.snapshot());
    CHECK(reuse.evictions() == evict.evictions());
    CHECK(reuse.evictable() == evict.evictable());
    CHECK(reuse.size() == evict.size());
    auto log = reuse.evicted_since(0);
    REQUIRE(log.has_value());
    CHECK(std::vector<BlockId>(log->begin(), log->end()) == reused);

    // Asking for more than is evictable takes what there is (block 2 is held).
    std::vector<BlockId> rest;
    CHECK(reuse.evict_for_reuse(reuse_pool, kBlocks, rest) == kBlocks - 4);
    CHECK(reuse.evictable() == 0);
    CHECK(reuse.size() == 1);
    // With a block on the free list it refuses, untouched.
    REQUIRE(reuse_pool.release(rest.back()).ok());
    REQUIRE(reuse.insert(PageKey{1, 16}, rest[0], reuse_pool, 4).value());
    REQUIRE(reuse_pool.release(rest[0]).ok());
    reuse.released(rest[0], reuse_pool, 4);
    const auto before = reuse_pool.snapshot();
    std::vector<BlockId> none;
    CHECK(reuse.evict_for_reuse(reuse_pool, 1, none) == 0);
    CHECK(none.empty());
    CHECK(reuse_pool.snapshot() == before);
    CHECK(reuse.evictable() == 1);
  }
}

TEST_CASE(
    "prefix_cache: the key index agrees with a reference through random inserts and evictions") {
  // Few distinct keys whose hashes collide in the low bits, duplicates kept,
  // random hits and evictions: deletions shift long probe runs, and find must
  // still give the earliest block cached under each key.
  constexpr std::uint32_t kBlocks = 600;
  BlockPool pool(kBlocks);
  PrefixCache cache(EvictPolicy::kLru, kBlocks, /*duplicates=*/true);
  std::mt19937 rng(7);
  // Reference: per key, its cached blocks in insertion order.
  std::vector<std::vector<BlockId>> by_key(40);
  auto key_of = [](std::size_t k) {
    return PageKey{std::uint64_t{k % 8} << 24, static_cast<std::uint32_t>(k / 8)};
  };
  std::uint64_t tick = 1;
  std::uint32_t mismatches = 0, checks = 0;
  for (int round = 0; round < 20000; ++round) {
    const std::size_t hit_key = rng() % by_key.size();
    if (rng() % 4 == 0 && !by_key[hit_key].empty()) {
      // A hit on a random block of the key: lru then evicts it after the
      // key's later blocks, so deletions come from inside probe runs too.
      const BlockId b = by_key[hit_key][rng() % by_key[hit_key].size()];
      REQUIRE(hit_and_release(cache, pool, b, tick++));
    } else if (pool.free_count() > 0 && rng() % 3 != 0) {
      const std::size_t k = rng() % by_key.size();
      const BlockId b = pool.allocate().value();
      auto inserted = cache.insert(key_of(k), b, pool, tick);
      REQUIRE(inserted.ok());
      REQUIRE(inserted.value());
      by_key[k].push_back(b);
      REQUIRE(pool.release(b).ok());
      cache.released(b, pool, tick++);
    } else {
      REQUIRE(cache.evict_one(pool));
      const BlockId gone = cache.evicted_since(cache.evictions() - 1).value()[0];
      for (auto& blocks : by_key)
        blocks.erase(std::remove(blocks.begin(), blocks.end(), gone), blocks.end());
    }
    for (std::size_t k = 0; k < by_key.size(); ++k) {
      auto found = cache.find(key_of(k));
      const bool ok = by_key[k].empty() ? !found.has_value() : found == by_key[k].front();
      mismatches += ok ? 0 : 1;
      ++checks;
    }
  }
  CHECK(checks == 20000u * 40u);
  CHECK(mismatches == 0);
  CHECK(cache.index_slots() <= 4 * kBlocks);  // grows with the keys, never with the churn
}

TEST_CASE("prefix_cache: placing a chain's pages side by side changes no answer") {
  // The same operations on caches whose index places keys by page_tokens 1,
  // 16 and 7 (the index's placement only): every find, the evicted blocks
  // and the order of duplicates agree. Chains of consecutive pages, some
  // keys cached twice, and evictions in between, over several index growths.
  constexpr std::uint32_t kBlocks = 3000;
  struct World {
    BlockPool pool{kBlocks};
    PrefixCache cache;
    explicit World(std::uint32_t page_tokens)
        : cache(EvictPolicy::kLru, kBlocks, /*duplicates=*/true, page_tokens) {}
  };
  std::vector<World> worlds;
  for (std::uint32_t pt : {1u, 16u, 7u}) worlds.emplace_back(pt);
  std::mt19937_64 rng(7);
  std::vector<PageKey> keys;
  for (std::uint64_t tick = 1; tick <= 400; ++tick) {
    // A sequence of 1 to 40 pages of one of 30 chains, page ends 16 apart.
    const std::uint64_t chain = rng() % 30;
    const auto pages = static_cast<std::uint32_t>(1 + rng() % 40);
    std::vector<std::vector<BlockId>> held(worlds.size());
    for (std::uint32_t p = 0; p < pages; ++p) {
      const PageKey key{chain, 16 * (p + 1), static_cast<std::uint32_t>(rng() % 2)};
      keys.push_back(key);
      for (std::size_t w = 0; w < worlds.size(); ++w) {
        World& world = worlds[w];
        std::vector<BlockId> got;
        if (world.pool.free_count() == 0) {
          REQUIRE(world.cache.evict_for_reuse(world.pool, 1, got) == 1);
        } else {
          got.push_back(world.pool.allocate().value());
        }
        REQUIRE(world.cache.insert(key, got[0], world.pool, tick).ok());
        held[w].push_back(got[0]);
      }
    }
    for (std::size_t w = 0; w < worlds.size(); ++w) {
      for (auto it = held[w].rbegin(); it != held[w].rend(); ++it) {
        REQUIRE(worlds[w].pool.release(*it).ok());
        worlds[w].cache.released(*it, worlds[w].pool, tick);
      }
    }
    for (const PageKey& key : keys) {
      const auto expected = worlds[0].cache.find(key);
      for (std::size_t w = 1; w < worlds.size(); ++w)
        REQUIRE(worlds[w].cache.find(key) == expected);
    }
  }
  CHECK(worlds[0].cache.evictions() > 0);
  for (std::size_t w = 1; w < worlds.size(); ++w) {
    CHECK(worlds[w].cache.evictions() == worlds[0].cache.evictions());
    CHECK(worlds[w].cache.size() == worlds[0].cache.size());
  }
}

TEST_CASE("prefix_cache: released_last_first is released of each block, the last first") {
  for (EvictPolicy policy : {EvictPolicy::kLru, EvictPolicy::kFifo, EvictPolicy::kLfu}) {
    INFO(to_string(policy));
    // Two caches given the same history; one hears of a table's release
    // block by block, the other at once.
    constexpr std::uint32_t kBlocks = 12;
    BlockPool one_pool(kBlocks);
    BlockPool all_pool(kBlocks);
    PrefixCache one(policy, kBlocks);
    PrefixCache all(policy, kBlocks);
    std::vector<BlockId> earlier = cache_pages(one, one_pool, 3, 1);  // evictable already
    REQUIRE(cache_pages(all, all_pool, 3, 1) == earlier);
    std::vector<BlockId> table;
    for (std::uint32_t i = 0; i < 6; ++i) {
      auto b1 = one_pool.allocate();
      auto b2 = all_pool.allocate();
      REQUIRE((b1.ok() && b2.ok()));
      REQUIRE(b1.value() == b2.value());
      table.push_back(b1.value());
      // Pages 0, 2 and 4 cached; 1, 3 and 5 the table's own.
      if (i % 2 == 0) {
        REQUIRE(one.insert(PageKey{500 + i, 16}, b1.value(), one_pool, 2).value());
        REQUIRE(all.insert(PageKey{500 + i, 16}, b2.value(), all_pool, 2).value());
      }
    }
    // Page 2's block is also held by another table, page 0's is watched, and
    // an evictable block is named again (released twice).
    REQUIRE(one_pool.retain(table[2]).ok());
    REQUIRE(all_pool.retain(table[2]).ok());
    all.watch(table[0]);
    one.watch(table[0]);
    std::vector<BlockId> released = table;
    released.insert(released.begin() + 3, earlier[1]);
    for (BlockId b : table) {
      REQUIRE(one_pool.release(b).ok());
      REQUIRE(all_pool.release(b).ok());
    }
    for (std::size_t i = released.size(); i-- > 0;) one.released(released[i], one_pool, 3);
    all.released_last_first(released, all_pool, 3);
    CHECK(all.evictable() == one.evictable());
    CHECK(all.evictable() == 5);  // three earlier, pages 0 and 4
    CHECK(all.watched_evictable() == one.watched_evictable());
    CHECK(all.watched_evictable() == 1);
    CHECK(evict_all(all, all_pool) == evict_all(one, one_pool));
    CHECK(all_pool.snapshot() == one_pool.snapshot());
  }
}

TEST_CASE("prefix_cache: lru evicts in release order through hits, re-releases and batches") {
  // A reference list of the evictable blocks, least recently released first,
  // against the cache's queue with lazy deletion: random hits (a block leaves
  // the order), releases (it joins the back), releases of a block evictable
  // already (it moves to the back), and evictions one at a time and in
  // batches, enough of them to purge stale slots and drop consumed ones many
  // times over.
  constexpr std::uint32_t kBlocks = 48;
  BlockPool pool(kBlocks);
  PrefixCache cache(EvictPolicy::kLru, kBlocks);
  std::vector<BlockId> order = cache_pages(cache, pool, kBlocks, 1);  // release order
  std::vector<BlockId> held;
  std::uint64_t next_chain = 5000;
  std::mt19937 rng(7);
  std::size_t batches = 0;
  for (int op = 0; op < 20'000; ++op) {
    const auto kind = static_cast<std::uint32_t>(rng() % 8);
    if (kind < 3 && !order.empty()) {
      // A hit: the block is held and leaves the order.
      const std::size_t i = rng() % order.size();
      const BlockId b = order[i];
      cache.touch(b, 2);
      REQUIRE(pool.retain(b).ok());
      order.erase(order.begin() + static_cast<std::ptrdiff_t>(i));
      held.push_back(b);
    } else if (kind < 5 && !held.empty()) {
      const std::size_t i = rng() % held.size();
      const BlockId b = held[i];
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      REQUIRE(pool.release(b).ok());
      cache.released(b, pool, 2);
      order.push_back(b);
    } else if (kind == 5 && !order.empty()) {
      // Released again while evictable: to the back.
      const std::size_t i = rng() % order.size();
      const BlockId b = order[i];
      cache.released(b, pool, 2);
      order.erase(order.begin() + static_cast<std::ptrdiff_t>(i));
      order.push_back(b);
    } else if (!order.empty()) {
      // Evictions (the free list is empty: every block is cached), then the
      // evicted blocks cached again under new keys and released.
      REQUIRE(pool.free_count() == 0);
      const auto want = static_cast<std::uint32_t>(1 + rng() % 5);
      std::vector<BlockId> got;
      if (kind == 6) {
        REQUIRE(cache.evict_one(pool));
        got.push_back(pool.allocate().value());
      } else {
        cache.evict_for_reuse(pool, want, got);
        ++batches;
      }
      const std::size_t n = std::min<std::size_t>(order.size(), kind == 6 ? 1 : want);
      REQUIRE(got.size() == n);
      CHECK(std::equal(got.begin(), got.end(), order.begin()));
      order.erase(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n));
      for (BlockId b : got) {
        REQUIRE(cache.insert(PageKey{next_chain++, 16}, b, pool, 2).value());
        REQUIRE(pool.release(b).ok());
        cache.released(b, pool, 2);
        order.push_back(b);
      }
    }
    REQUIRE(cache.evictable() == order.size());
    REQUIRE(cache.candidates() <= 2 * cache.evictable() + PrefixCache::kCandidateSlack);
  }
  CHECK(batches > 1000);
  CHECK(cache.size() == kBlocks);
  for (BlockId b : held) {
    REQUIRE(pool.release(b).ok());
    cache.released(b, pool, 3);
    order.push_back(b);
  }
  CHECK(evict_all(cache, pool) == order);
}

TEST_CASE("prefix_cache: insert_run and find_run are insert and find key by key") {
  // Two caches given the same operations, one key by key, the other a run
  // at a time: runs of a chain's pages (index pages of 16 and of 7, with and
  // without duplicates, lru and lfu) whose blocks include ones cached
  // already, a block without a page (the run stops) and a free block (the
  // pool refuses it: the blocks before it are cached, it and those after are
  // not). Every find, find_run, eviction and the pools agree.
  for (const bool duplicates : {true, false}) {
    for (const std::uint32_t pt : {16u, 7u}) {
      for (const EvictPolicy policy : {EvictPolicy::kLru, EvictPolicy::kLfu}) {
        INFO("duplicates " << duplicates << ", page_tokens " << pt << ", " << to_string(policy));
        constexpr std::uint32_t kBlocks = 400;
        BlockPool one_pool(kBlocks);
        BlockPool run_pool(kBlocks);
        PrefixCache one(policy, kBlocks, duplicates, pt);
        PrefixCache run(policy, kBlocks, duplicates, pt);
        std::mt19937 rng(11);
        std::vector<PageKey> keys;
        std::size_t refused = 0;
        std::size_t stopped = 0;
        for (std::uint64_t tick = 1; tick <= 300; ++tick) {
          const PageKey first{rng() % 12, 16 * (1 + static_cast<std::uint32_t>(rng() % 40)),
                              static_cast<std::uint32_t>(rng() % 2)};
          const auto pages = static_cast<std::uint32_t>(1 + rng() % 50);
          std::vector<BlockId> blocks;
          for (std::uint32_t p = 0; p < pages; ++p) {
            std::vector<BlockId> got;
            if (one_pool.free_count() == 0) {
              REQUIRE(one.evict_for_reuse(one_pool, 1, got) == 1);
              std::vector<BlockId> same;
              REQUIRE(run.evict_for_reuse(run_pool, 1, same) == 1);
              REQUIRE(same == got);
            } else {
              got.push_back(one_pool.allocate().value());
              REQUIRE(run_pool.allocate().value() == got[0]);
            }
            blocks.push_back(got[0]);
          }
          std::vector<BlockId> run_blocks = blocks;
          const auto kind = rng() % 6;
          const std::size_t at = rng() % pages;
          if (kind == 0) {
            run_blocks[at] = kvreplay::kInvalidBlock;
          } else if (kind == 1) {
            // A free block (one evicted first if none is): retain fails.
            if (one_pool.free_count() == 0) {
              REQUIRE(one.evict_one(one_pool));
              REQUIRE(run.evict_one(run_pool));
            }
            REQUIRE(run_pool.free_list() == one_pool.free_list());
            run_blocks[at] = one_pool.free_list().front();
          } else if (kind == 2 && !keys.empty()) {
            // A block cached already (under another key) goes into the run.
            const auto cached = one.find(keys[rng() % keys.size()]);
            if (cached) run_blocks[at] = *cached;
          }
          // Key by key, as insert_run describes it.
          std::uint32_t handled = 0;
          std::uint32_t cached_count = 0;
          bool failed = false;
          for (; handled < pages; ++handled) {
            const BlockId b = run_blocks[handled];
            if (b == kvreplay::kInvalidBlock) break;
            PageKey key = first;
            key.offset += 16 * handled;
            auto inserted = one.insert(key, b, one_pool, tick);
            if (!inserted.ok()) {
              failed = true;
              break;
            }
            cached_count += inserted.value() ? 1 : 0;
          }
          PrefixCache::RunInserted done;
          auto status = run.insert_run(first, 16, run_blocks, run_pool, tick, done);
          REQUIRE(status.ok() == !failed);
          REQUIRE(done.handled == handled);
          REQUIRE(done.cached == cached_count);
          refused += failed ? 1 : 0;
          stopped += !failed && handled < pages ? 1 : 0;
          for (std::uint32_t p = 0; p < pages; ++p) {
            keys.push_back(PageKey{first.chain, first.offset + 16 * p, first.group});
          }
          // find_run against find, from the run's first key.
          std::vector<BlockId> found;
          const std::uint32_t n = run.find_run(first, 16, pages, found);
          std::vector<BlockId> expected;
          for (std::uint32_t p = 0; p < pages; ++p) {
            const auto b = one.find(PageKey{first.chain, first.offset + 16 * p, first.group});
            if (!b) break;
            expected.push_back(*b);
          }
          REQUIRE(n == expected.size());
          REQUIRE(found == expected);
          // The sequence ends: last page first.
          for (std::size_t i = pages; i-- > 0;) {
            REQUIRE(one_pool.release(blocks[i]).ok());
            REQUIRE(run_pool.release(blocks[i]).ok());
            one.released(blocks[i], one_pool, tick);
            run.released(blocks[i], run_pool, tick);
          }
          REQUIRE(run.size() == one.size());
          REQUIRE(run.evictable() == one.evictable());
        }
        CHECK(refused > 10);
        CHECK(stopped > 10);
        for (const PageKey& key : keys) REQUIRE(run.find(key) == one.find(key));
        CHECK(run_pool.snapshot() == one_pool.snapshot());
        CHECK(evict_all(run, run_pool) == evict_all(one, one_pool));
      }
    }
  }
}

TEST_CASE("prefix_cache: unwatch_all forgets every watch, also when its generations wrap") {
  // unwatch_all is O(1): a block is watched while its entry carries the
  // current generation. After 65,535 calls the 16-bit generation comes round
  // to the value a block was watched with long ago; that block must not
  // count, nor may any block never watched.
  BlockPool pool(8);
  PrefixCache cache(EvictPolicy::kLru, 8);
  std::vector<BlockId> blocks = cache_pages(cache, pool, 4, 1);  // all evictable
  cache.watch(blocks[0]);
  CHECK(cache.watched_evictable() == 1);
  for (std::uint32_t i = 0; i < 65'535; ++i) {
    cache.unwatch_all();
    REQUIRE(cache.watched_evictable() == 0);
  }
  cache.watch(blocks[1]);
  CHECK(cache.watched_evictable() == 1);
  // A hit on the block watched long ago changes nothing watched; one on the
  // watched block does.
  cache.touch(blocks[0], 2);
  REQUIRE(pool.retain(blocks[0]).ok());
  CHECK(cache.watched_evictable() == 1);
  cache.touch(blocks[1], 2);
  REQUIRE(pool.retain(blocks[1]).ok());
  CHECK(cache.watched_evictable() == 0);
  REQUIRE(pool.release(blocks[0]).ok());
  cache.released(blocks[0], pool, 3);
  CHECK(cache.watched_evictable() == 0);
  REQUIRE(pool.release(blocks[1]).ok());
  cache.released(blocks[1], pool, 3);
  CHECK(cache.watched_evictable() == 1);
}

TEST_CASE("prefix_cache: touch_all is touch of each block") {
  for (EvictPolicy policy : {EvictPolicy::kLru, EvictPolicy::kFifo, EvictPolicy::kLfu}) {
    INFO(to_string(policy));
    // Two caches given the same history; one hears of a table's hits block
    // by block, the other at once: evictable, watched, held already (not
    // evictable), uncached and out-of-range blocks among them.
    constexpr std::uint32_t kBlocks = 16;
    BlockPool one_pool(kBlocks);
    BlockPool all_pool(kBlocks);
    PrefixCache one(policy, kBlocks);
    PrefixCache all(policy, kBlocks);
    const std::vector<BlockId> cached = cache_pages(one, one_pool, 8, 1);
    REQUIRE(cache_pages(all, all_pool, 8, 1) == cached);
    for (PrefixCache* cache : {&one, &all}) {
      cache->watch(cached[1]);
      cache->watch(cached[4]);
      cache->touch(cached[2], 2);  // held already
    }
    REQUIRE(one_pool.retain(cached[2]).ok());
    REQUIRE(all_pool.retain(cached[2]).ok());
    const BlockId uncached = one_pool.free_list().front();
    const std::vector<BlockId> hits = {cached[1], cached[2],   uncached, cached[5],
                                       cached[4], kBlocks + 3, cached[0]};
    for (BlockId b : hits) one.touch(b, 3);
    all.touch_all(hits, 3);
    CHECK(all.evictable() == one.evictable());
    CHECK(all.evictable() == 3);  // cached 3, 6 and 7
    CHECK(all.watched_evictable() == one.watched_evictable());
    CHECK(all.watched_evictable() == 0);
    CHECK(all.candidates() <= 2 * all.evictable() + PrefixCache::kCandidateSlack);
    // The hits are held, then released: the same order of eviction after.
    for (BlockId b : hits) {
      if (b >= kBlocks || b == uncached || b == cached[2]) continue;
      REQUIRE(one_pool.retain(b).ok());
      REQUIRE(all_pool.retain(b).ok());
    }
    for (BlockId b : hits) {
      if (b >= kBlocks || b == uncached) continue;
      REQUIRE(one_pool.release(b).ok());
      REQUIRE(all_pool.release(b).ok());
      one.released(b, one_pool, 4);
      all.released(b, all_pool, 4);
    }
    CHECK(all.watched_evictable() == one.watched_evictable());
    CHECK(all.watched_evictable() == 2);
    CHECK(evict_all(all, all_pool) == evict_all(one, one_pool));
    CHECK(all_pool.snapshot() == one_pool.snapshot());
  }
}

// check(): each numbered invariant (prefix_cache.h) is caught when a fault
// breaks it. The faults are planted through the cache's test accessor.
namespace kvreplay {

struct PrefixCacheFaults {
  static void set_node(PrefixCache& cache, BlockId b, std::uint32_t node) {
    cache.entries_[b].node = node;
  }
  static void miscount_node(PrefixCache& cache, BlockId b) {
    ++cache.nodes_[cache.entries_[b].node].live;
  }
  static void miscount_size(PrefixCache& cache) { ++cache.size_; }
  static void corrupt_slot_hash(PrefixCache& cache) {
    for (auto& slot : cache.slots_) {
      if (slot.node != PrefixCache::kNoNode) {
        slot.hash ^= 1;
        return;
      }
    }
  }
  static void set_evictable(PrefixCache& cache, BlockId b, bool evictable) {
    cache.entries_[b].evictable = evictable;
  }
  static void miscount_evictable(PrefixCache& cache) { ++cache.evictable_count_; }
  static void miscount_watched(PrefixCache& cache) { ++cache.watched_evictable_; }
  static void duplicate_lru_slot(PrefixCache& cache, BlockId b) {
    cache.lru_queue_.push_back({b, cache.entries_[b].version});
  }
  static void drop_candidates(PrefixCache& cache) {
    cache.lru_queue_.clear();
    cache.lru_front_ = 0;
    cache.heap_.clear();
  }
  static void disorder_heap(PrefixCache& cache) {
    REQUIRE(cache.heap_.size() >= 2);
    std::swap(cache.heap_.front(), cache.heap_.back());
  }
  static void stale_candidates(PrefixCache& cache, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) cache.lru_queue_.push_back({0, 0xFFFFFFFFu});
  }
  static void miscount_log(PrefixCache& cache) { cache.eviction_log_.push_back(0); }
  static void forbid_duplicates(PrefixCache& cache) { cache.duplicates_ = false; }
  // Lists block b a second time, after the last block at its place.
  static void relist(PrefixCache& cache, BlockId b, BlockId at) {
    auto& entry = cache.entries_[at];
    auto& node = cache.nodes_[entry.node];
    BlockId* link = &node.heads[cache.place_of(entry.offset).pos];
    while (*link != kInvalidBlock) link = &cache.entries_[*link].dup_next;
    *link = b;
  }
};

}  // namespace kvreplay

namespace {

using kvreplay::PrefixCacheFaults;

// Four cached pages of one chain: two evictable (released by their
// sequence), two still held by it, one of the evictable ones watched.
struct CheckedCache {
  BlockPool pool{16};
  PrefixCache cache;
  std::vector<BlockId> blocks;
  explicit CheckedCache(EvictPolicy policy, bool duplicates = false)
      : cache(policy, 16, duplicates, 16) {
    for (std::uint32_t i = 0; i < 4; ++i) {
      auto block = pool.allocate();
      REQUIRE(block.ok());
      REQUIRE(cache.insert(PageKey{7, 16 * (i + 1)}, block.value(), pool, 1).ok());
      blocks.push_back(block.value());
    }
    for (std::size_t i = 2; i < 4; ++i) {
      REQUIRE(pool.release(blocks[i]).ok());
      cache.released(blocks[i], pool, 2);
    }
    cache.watch(blocks[3]);
    REQUIRE(cache.evictable() == 2);
  }
  std::string caught() const {
    auto found = cache.check(pool);
    return found ? found->invariant : std::string("none");
  }
};

}  // namespace

TEST_CASE("prefix_cache: check() holds through inserts, hits, releases and evictions") {
  for (EvictPolicy policy : {EvictPolicy::kLru, EvictPolicy::kFifo, EvictPolicy::kLfu}) {
    for (bool duplicates : {false, true}) {
      BlockPool pool(64);
      PrefixCache cache(policy, 64, duplicates, 16);
      std::mt19937 rng(7);
      std::vector<BlockId> held;
      for (std::uint64_t tick = 1; tick < 400; ++tick) {
        const std::uint32_t op = rng() % 4;
        if (op == 0 && pool.free_count() > 0) {
          auto block = pool.allocate();
          REQUIRE(block.ok());
          const PageKey key{rng() % 5, static_cast<std::uint32_t>(16 * (1 + rng() % 40))};
          REQUIRE(cache.insert(key, block.value(), pool, tick).ok());
          held.push_back(block.value());
        } else if (op == 1 && !held.empty()) {
          const BlockId b = held.back();
          held.pop_back();
          REQUIRE(pool.release(b).ok());
          cache.released(b, pool, tick);
        } else if (op == 2) {
          std::vector<BlockId> found;
          const PageKey key{rng() % 5, static_cast<std::uint32_t>(16 * (1 + rng() % 40))};
          if (auto b = cache.find(key); b && pool.refcount(*b) == 1) {
            cache.touch(*b, tick);
            REQUIRE(pool.retain(*b).ok());
            held.push_back(*b);
          }
        } else if (op == 3) {
          cache.evict_one(pool);
        }
        if (rng() % 7 == 0) cache.watch(static_cast<BlockId>(rng() % 64));
        if (rng() % 31 == 0) cache.unwatch_all();
        auto found = cache.check(pool);
        INFO("policy " << static_cast<int>(policy) << " duplicates " << duplicates << " tick "
                       << tick << ": " << (found ? found->message : std::string()));
        REQUIRE_FALSE(found);
      }
    }
  }
}

TEST_CASE("prefix_cache: check() catches each planted fault by its invariant") {
  {
    CheckedCache c(EvictPolicy::kLru);
    REQUIRE(c.caught() == "none");
  }
  {
    CheckedCache c(EvictPolicy::kLru);  // an entry names another node
    PrefixCacheFaults::set_node(c.cache, c.blocks[1], 99);
    CHECK(c.caught() == "C1");
  }
  {
    CheckedCache c(EvictPolicy::kLru);  // a node miscounts its blocks
    PrefixCacheFaults::miscount_node(c.cache, c.blocks[0]);
    CHECK(c.caught() == "C1");
  }
  {
    CheckedCache c(EvictPolicy::kLru);  // the size miscounts
    PrefixCacheFaults::miscount_size(c.cache);
    CHECK(c.caught() == "C1");
  }
  {
    CheckedCache c(EvictPolicy::kLru);  // a block listed twice (a cycle in its list)
    PrefixCacheFaults::relist(c.cache, c.blocks[2], c.blocks[2]);
    CHECK(c.caught() == "C1");
  }
  {
    CheckedCache c(EvictPolicy::kLru);  // a slot's hash is not its node's
    PrefixCacheFaults::corrupt_slot_hash(c.cache);
    CHECK(c.caught() == "C2");
  }
  {
    // Two blocks under one key in a cache without duplicates (one built with
    // them, then told it has none).
    CheckedCache c(EvictPolicy::kLru, /*duplicates=*/true);
    auto extra = c.pool.allocate();
    REQUIRE(extra.ok());
    REQUIRE(c.cache.insert(PageKey{7, 16}, extra.value(), c.pool, 3).value());
    REQUIRE(c.caught() == "none");
    PrefixCacheFaults::forbid_duplicates(c.cache);
    CHECK(c.caught() == "C2");
  }
  {
    CheckedCache c(EvictPolicy::kLru);         // a block a sequence holds is evictable
    REQUIRE(c.pool.retain(c.blocks[2]).ok());  // a hit that forgot touch()
    CHECK(c.caught() == "C3");
  }
  {
    CheckedCache c(EvictPolicy::kLru);          // a block the cache alone holds is not evictable
    REQUIRE(c.pool.release(c.blocks[0]).ok());  // a release that forgot released()
    CHECK(c.caught() == "C3");
  }
  {
    CheckedCache c(EvictPolicy::kLru);  // an evicted block left evictable
    REQUIRE(c.cache.evict_one(c.pool));
    PrefixCacheFaults::set_evictable(c.cache, c.blocks[2], true);
    CHECK(c.caught() == "C3");
  }
  {
    CheckedCache c(EvictPolicy::kLru);
    PrefixCacheFaults::miscount_evictable(c.cache);
    CHECK(c.caught() == "C4");
  }
  {
    CheckedCache c(EvictPolicy::kLfu);
    PrefixCacheFaults::miscount_watched(c.cache);
    CHECK(c.caught() == "C4");
  }
  {
    CheckedCache c(EvictPolicy::kLru);  // two live queue slots for one block
    PrefixCacheFaults::duplicate_lru_slot(c.cache, c.blocks[2]);
    CHECK(c.caught() == "C5");
  }
  for (EvictPolicy policy : {EvictPolicy::kLru, EvictPolicy::kFifo}) {
    CheckedCache c(policy);  // evictable blocks with no candidate
    PrefixCacheFaults::drop_candidates(c.cache);
    CHECK(c.caught() == "C5");
  }
  {
    CheckedCache c(EvictPolicy::kLfu);  // the heap out of order
    PrefixCacheFaults::disorder_heap(c.cache);
    CHECK(c.caught() == "C5");
  }
  {
    CheckedCache c(EvictPolicy::kLru);  // stale candidates past the bound
    PrefixCacheFaults::stale_candidates(c.cache, 2 * 2 + PrefixCache::kCandidateSlack + 1);
    CHECK(c.caught() == "C6");
  }
  {
    CheckedCache c(EvictPolicy::kLru);  // the log holds an eviction never made
    PrefixCacheFaults::miscount_log(c.cache);
    CHECK(c.caught() == "C7");
  }
}

// WaitingHits: W1 holds through verify, track and forget, and a planted
// fault (a block watched that is no tracked hit, a hit recorded at the wrong
// place) is caught.
namespace kvreplay {

struct WaitingHitsFaults {
  static void misplace(WaitingHits& hits, BlockId b) { ++hits.slots_[b].pos; }
};

}  // namespace kvreplay

TEST_CASE("waiting_hits: W1 holds while a waiting request's hits are tracked, faults are caught") {
  using kvreplay::HitList;
  using kvreplay::WaitingHits;
  BlockPool pool(16);
  PrefixCache cache(EvictPolicy::kLru, 16, false, 16);
  std::vector<BlockId> blocks = cache_pages(cache, pool, 4, 1);  // keys {1000 + i, 16}
  auto key_of = [](std::uint32_t page) { return PageKey{1000 + page, 16}; };
  WaitingHits tracker;
  HitList list;
  list.blocks = blocks;
  tracker.verify(list, cache, key_of);  // becomes the tracked list
  REQUIRE(list.blocks.size() == 4);
  REQUIRE_FALSE(tracker.check(&list, cache));
  tracker.track(list, cache);
  REQUIRE(cache.watched_count() == 4);
  REQUIRE(cache.watched_evictable() == 4);
  REQUIRE_FALSE(tracker.check(&list, cache));

  SECTION("an eviction unwatches the block; the list keeps it until verified again") {
    REQUIRE(cache.evict_one(pool));  // the first page, released first
    CHECK(cache.watched_count() == 3);
    CHECK_FALSE(tracker.check(&list, cache));
    tracker.verify(list, cache, key_of);
    CHECK(list.blocks.empty());  // the chain is broken at its first page
    CHECK_FALSE(tracker.check(&list, cache));
  }
  SECTION("a block watched that is no tracked hit") {
    auto extra = pool.allocate();
    REQUIRE(extra.ok());
    REQUIRE(cache.insert(PageKey{77, 16}, extra.value(), pool, 2).value());
    cache.watch(extra.value());
    auto found = tracker.check(&list, cache);
    REQUIRE(found);
    CHECK(found->invariant == "W1");
  }
  SECTION("a hit recorded at the wrong place") {
    REQUIRE_FALSE(list.blocks.empty());
    kvreplay::WaitingHitsFaults::misplace(tracker, list.blocks[0]);
    auto found = tracker.check(&list, cache);
    REQUIRE(found);
    CHECK(found->invariant == "W1");
  }
  SECTION("forget leaves nothing watched") {
    tracker.forget(list, cache);
    CHECK(tracker.tracked() == 0);
    CHECK(cache.watched_count() == 0);
    CHECK_FALSE(tracker.check(nullptr, cache));
  }
}
