#include "engine/prefix_cache.h"

#include <algorithm>
#include <cassert>
#include <functional>

#include "core/enum_names.h"

namespace kvreplay {

namespace {

constexpr EnumName<EvictPolicy> kEvictPolicyNames[] = {
    {EvictPolicy::kLru, "lru"},
    {EvictPolicy::kFifo, "fifo"},
    {EvictPolicy::kLfu, "lfu"},
};
static_assert(enum_names_unique(kEvictPolicyNames));

}  // namespace

std::string_view to_string(EvictPolicy policy) {
  return enum_name(kEvictPolicyNames, policy);
}

std::optional<EvictPolicy> parse_evict_policy(std::string_view name) {
  return enum_parse(kEvictPolicyNames, name);
}

std::vector<std::string> evict_policy_names() {
  return enum_names(kEvictPolicyNames);
}

namespace {

std::uint64_t mix(const PageKey& key) {
  // murmur3's 64-bit finaliser over the chain id and the offset.
  std::uint64_t x = key.chain ^ (std::uint64_t{key.offset} * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace

PrefixCache::PrefixCache(EvictPolicy policy, std::uint32_t pool_blocks, bool duplicates)
    : policy_(policy), pool_blocks_(pool_blocks), duplicates_(duplicates) {
  assert(pool_blocks <= kTombstone);  // block ids stay below the slot markers
  // Both tables grow with what is cached, not with the pool.
  slots_.resize(1024);
}

PrefixCache::Entry& PrefixCache::grow_entries(BlockId b) {
  entries_.resize(
      std::min<std::size_t>(pool_blocks_, std::max<std::size_t>(b + 1, entries_.size() * 2)));
  return entries_[b];
}

void PrefixCache::rehash() {
  // Doubles when live keys fill more than a quarter, else only drops the
  // tombstones: O(slots) once per slots / 4 erasures or inserts at least.
  std::vector<Slot> old(size_ * 4 > slots_.size() ? slots_.size() * 2 : slots_.size());
  old.swap(slots_);
  size_ = 0;
  tombstones_ = 0;
  // Start after an empty slot, so that a run wrapping past the end is
  // reinserted in probe order (duplicates keep their order).
  const std::size_t n = old.size();
  std::size_t start = 0;
  while (old[start].block != kInvalidBlock) ++start;  // at most half taken: one is empty
  for (std::size_t i = 1; i <= n; ++i) {
    const Slot& slot = old[(start + i) % n];
    if (live(slot)) {
      slots_[free_slot_of(PageKey{slot.chain, slot.offset})] = slot;
      ++size_;
    }
  }
}

std::size_t PrefixCache::free_slot_of(const PageKey& key) const {
  // The empty slot ending the key's run: past its entries and tombstones, so
  // a key's blocks stay in insertion order along the probe sequence.
  const std::size_t mask = slots_.size() - 1;
  std::size_t slot = static_cast<std::size_t>(mix(key)) & mask;
  while (slots_[slot].block != kInvalidBlock) slot = (slot + 1) & mask;
  return slot;
}

std::size_t PrefixCache::slot_of(const PageKey& key) const {
  const std::size_t mask = slots_.size() - 1;
  std::size_t slot = static_cast<std::size_t>(mix(key)) & mask;
  while (slots_[slot].block != kInvalidBlock &&
         (slots_[slot].block == kTombstone || slots_[slot].chain != key.chain ||
          slots_[slot].offset != key.offset)) {
    slot = (slot + 1) & mask;
  }
  return slot;
}

void PrefixCache::reserve_slot() {
  if ((size_ + tombstones_ + 1) * 2 > slots_.size()) rehash();  // at most half taken
}

void PrefixCache::index_insert(const PageKey& key, BlockId b) {
  reserve_slot();
  slots_[free_slot_of(key)] = Slot{key.chain, key.offset, b};
  ++size_;
}

void PrefixCache::index_erase(const PageKey& key, BlockId b) {
  const std::size_t mask = slots_.size() - 1;
  std::size_t slot = slot_of(key);
  while (slots_[slot].block != kInvalidBlock &&
         !(slots_[slot].block == b && slots_[slot].chain == key.chain &&
           slots_[slot].offset == key.offset)) {
    slot = (slot + 1) & mask;
  }
  if (slots_[slot].block == kInvalidBlock) return;
  // A tombstone: the run stays as it is, and rehash() drops it later.
  slots_[slot].block = kTombstone;
  --size_;
  ++tombstones_;
}

std::optional<BlockId> PrefixCache::find(const PageKey& key) const {
  BlockId b = slots_[slot_of(key)].block;
  if (b == kInvalidBlock) return std::nullopt;
  return b;
}

void PrefixCache::lru_push_back(BlockId b) {
  Entry& entry = entries_[b];
  entry.prev = lru_tail_;
  entry.next = kInvalidBlock;
  if (lru_tail_ != kInvalidBlock) {
    entries_[lru_tail_].next = b;
  } else {
    lru_head_ = b;
  }
  lru_tail_ = b;
}

void PrefixCache::lru_unlink(BlockId b) {
  Entry& entry = entries_[b];
  if (entry.prev != kInvalidBlock) {
    entries_[entry.prev].next = entry.next;
  } else {
    lru_head_ = entry.next;
  }
  if (entry.next != kInvalidBlock) {
    entries_[entry.next].prev = entry.prev;
  } else {
    lru_tail_ = entry.prev;
  }
  entry.prev = entry.next = kInvalidBlock;
}

void PrefixCache::make_evictable(BlockId b) {
  Entry& entry = entry_of(b);
  if (policy_ == EvictPolicy::kLru) {
    // To the back of the list: least recently released first.
    if (entry.evictable) {
      lru_unlink(b);
    } else {
      ++evictable_count_;
      watched_evictable_ += entry.watched ? 1 : 0;
    }
    entry.evictable = true;
    lru_push_back(b);
    return;
  }
  if (!entry.evictable) {
    ++evictable_count_;
    watched_evictable_ += entry.watched ? 1 : 0;
  }
  entry.evictable = true;
  ++entry.version;
  Candidate candidate{0, 0, b, entry.version};
  if (policy_ == EvictPolicy::kFifo) {
    candidate.first = entry.inserted;
  } else {
    candidate.first = entry.hits;
    candidate.second = entry.last_use;
  }
  heap_.push_back(candidate);
  std::push_heap(heap_.begin(), heap_.end(), std::greater<>{});
  purge_stale_if_due();
}

bool PrefixCache::stale(const Candidate& candidate) const {
  const Entry& entry = entries_[candidate.block];
  return !entry.cached || !entry.evictable || entry.version != candidate.version;
}

void PrefixCache::purge_stale() {
  auto is_stale = [this](const Candidate& candidate) { return stale(candidate); };
  heap_.erase(std::remove_if(heap_.begin(), heap_.end(), is_stale), heap_.end());
  std::make_heap(heap_.begin(), heap_.end(), std::greater<>{});
}

void PrefixCache::make_unevictable(BlockId b) {
  Entry& entry = entry_of(b);
  if (entry.evictable) {
    --evictable_count_;
    watched_evictable_ -= entry.watched ? 1 : 0;
    if (policy_ == EvictPolicy::kLru) lru_unlink(b);
  }
  entry.evictable = false;
  if (policy_ == EvictPolicy::kLru) return;
  ++entry.version;  // its candidate goes stale
  purge_stale_if_due();
}

void PrefixCache::touch(BlockId b, std::uint64_t tick) {
  Entry& entry = entry_of(b);
  if (!entry.cached) return;
  make_unevictable(b);
  ++entry.hits;
  entry.last_use = tick;
}

CoreResult<bool> PrefixCache::insert(const PageKey& key, BlockId b, BlockPool& pool,
                                     std::uint64_t tick) {
  Entry& cached = entry_of(b);
  if (cached.cached) return false;
  reserve_slot();
  // One probe: the lookup finds the free slot too (past the key's entries
  // when duplicates are kept).
  std::size_t slot = slot_of(key);
  if (slots_[slot].block != kInvalidBlock) {
    if (!duplicates_) return false;
    slot = free_slot_of(key);
  }
  if (auto retained = pool.retain(b); !retained) return Unexpected{retained.error()};
  slots_[slot] = Slot{key.chain, key.offset, b};
  ++size_;
  cached.key = key;
  cached.inserted = cached.last_use = tick;
  cached.hits = 0;
  cached.cached = true;
  cached.evictable = false;
  ++cached.version;
  return true;
}

void PrefixCache::released(BlockId b, const BlockPool& pool, std::uint64_t tick) {
  Entry& entry = entry_of(b);
  if (!entry.cached || pool.refcount(b) != 1) return;
  entry.last_use = tick;
  make_evictable(b);
}

bool PrefixCache::evict_one(BlockPool& pool) {
  if (policy_ == EvictPolicy::kLru) {
    if (lru_head_ == kInvalidBlock) return false;
    evict_block(lru_head_, pool);
    return true;
  }
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>{});
    const Candidate candidate = heap_.back();
    heap_.pop_back();
    if (stale(candidate)) continue;
    evict_block(candidate.block, pool);
    return true;
  }
  return false;
}

void PrefixCache::watch(BlockId b) {
  Entry& entry = entry_of(b);
  if (entry.watched) return;
  entry.watched = true;
  watched_.push_back(b);
  watched_evictable_ += entry.evictable ? 1 : 0;
}

void PrefixCache::unwatch(BlockId b) {
  if (b >= entries_.size()) return;
  Entry& entry = entries_[b];
  if (!entry.watched) return;
  entry.watched = false;
  watched_evictable_ -= entry.evictable ? 1 : 0;
}

void PrefixCache::unwatch_all() {
  for (BlockId b : watched_) unwatch(b);
  watched_.clear();
}

void PrefixCache::evict_block(BlockId b, BlockPool& pool) {
  Entry& entry = entries_[b];
  make_unevictable(b);
  unwatch(b);
  entry.cached = false;
  index_erase(entry.key, b);
  (void)pool.release(b);  // held by the cache alone: frees it
  if (eviction_log_.size() >= std::max(entries_.size(), kCandidateSlack)) {
    log_base_ = evictions_;
    eviction_log_.clear();
  }
  eviction_log_.push_back(b);
  ++evictions_;
}

void PrefixCache::holds(std::vector<BlockId>& out) const {
  for (BlockId b = 0; b < entries_.size(); ++b) {
    if (entries_[b].cached) out.push_back(b);
  }
}

}  // namespace kvreplay
