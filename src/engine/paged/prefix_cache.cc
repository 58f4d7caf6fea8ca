#include "engine/paged/prefix_cache.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <functional>

#include <fmt/format.h>

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

PrefixCache::PrefixCache(EvictPolicy policy, std::uint32_t pool_blocks, bool duplicates,
                         std::uint32_t page_tokens)
    : policy_(policy),
      pool_blocks_(pool_blocks),
      duplicates_(duplicates),
      page_shift_(
          static_cast<std::uint32_t>(std::bit_width(std::max<std::uint32_t>(page_tokens, 1)) - 1)),
      run_shift_(page_shift_ + kRunBits) {
  assert(pool_blocks <= kInvalidBlock);  // block ids stay below the list's end marker
  // The tables grow with what is cached, not with the pool.
  slots_.resize(256);
}

PrefixCache::Entry& PrefixCache::grow_entries(BlockId b) {
  entries_.resize(
      std::min<std::size_t>(pool_blocks_, std::max<std::size_t>(b + 1, entries_.size() * 2)));
  entry_count_ = static_cast<std::uint32_t>(entries_.size());
  if (policy_ != EvictPolicy::kLru) ranks_.resize(entries_.size());
  return entries_[b];
}

std::uint32_t PrefixCache::add_node(const PageKey& key, std::uint32_t run) {
  if ((live_nodes_ + 1) * 2 > slots_.size()) {
    // Doubles the table: O(slots) once per slots / 4 new nodes at least.
    // Nodes of equal hash need no order among themselves: each is one run.
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    const std::size_t mask = slots_.size() - 1;
    for (const Slot& slot : old) {
      if (slot.node == kNoNode) continue;
      std::size_t at = slot.hash & mask;
      while (slots_[at].node != kNoNode) at = (at + 1) & mask;
      slots_[at] = slot;
    }
  }
  std::uint32_t n;
  if (!free_nodes_.empty()) {
    n = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    n = static_cast<std::uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& node = nodes_[n];
  node.chain = key.chain;
  node.group = key.group;
  node.run = run;
  node.hash = node_hash(key.chain, key.group, run);
  node.live = 0;
  std::fill(std::begin(node.heads), std::end(node.heads), kInvalidBlock);
  const std::size_t mask = slots_.size() - 1;
  std::size_t at = node.hash & mask;
  while (slots_[at].node != kNoNode) at = (at + 1) & mask;
  slots_[at] = Slot{node.hash, n};
  ++live_nodes_;
  return n;
}

void PrefixCache::remove_node(std::uint32_t n) {
  // The node's slot: along the run from its home.
  const std::size_t mask = slots_.size() - 1;
  std::size_t hole = nodes_[n].hash & mask;
  while (slots_[hole].node != n) hole = (hole + 1) & mask;
  // Backward-shift deletion: each later entry of the run whose home is not
  // between the hole and itself moves back into the hole.
  for (std::size_t next = (hole + 1) & mask; slots_[next].node != kNoNode;
       next = (next + 1) & mask) {
    const std::size_t at = slots_[next].hash & mask;
    if (((next - at) & mask) < ((next - hole) & mask)) continue;  // home in (hole, next]
    slots_[hole] = slots_[next];
    hole = next;
  }
  slots_[hole] = Slot{};
  --live_nodes_;
  free_nodes_.push_back(n);
  for (std::uint32_t* last : {&found_node_, &inserted_node_}) {
    if (*last == n) *last = kNoNode;
  }
}

inline void PrefixCache::index_erase(BlockId b) {
  // Unlinked from its place's list, the order of the others kept.
  const Entry& entry = entries_[b];
  const std::uint32_t n = entry.node;
  Node& node = nodes_[n];
  BlockId* link = &node.heads[place_of(entry.offset).pos];
  while (*link != b) link = &entries_[*link].dup_next;
  *link = entry.dup_next;
  --size_;
  // BlockPool._maybe_evict_cached_block: one BlockRemoved per block, so a key
  // cached in two blocks is removed twice.
  if (change_log_ != nullptr) {
    change_log_->push_back(
        KeyChange{PageKey{node.chain, entry.offset, node.group}, std::nullopt, false});
  }
  if (--node.live == 0) remove_node(n);
}

inline void PrefixCache::link_cached(std::uint32_t n, std::uint32_t pos, BlockId b,
                                     std::uint32_t offset, std::uint64_t tick) {
  Entry& cached = entries_[b];
  // At the end of its place's list: after the blocks cached before it.
  Node& node = nodes_[n];
  BlockId* link = &node.heads[pos];
  while (*link != kInvalidBlock) link = &entries_[*link].dup_next;
  *link = b;
  ++node.live;
  ++size_;
  cached.dup_next = kInvalidBlock;
  cached.node = n;
  cached.offset = offset;
  cached.cached = true;
  cached.evictable = false;
  if (policy_ != EvictPolicy::kLru) {
    Rank& rank = ranks_[b];
    rank.inserted = rank.last_use = tick;
    rank.hits = 0;
    ++rank.version;
  }
}

CoreStatus PrefixCache::insert_run(const PageKey& first, std::uint32_t step,
                                   std::span<const BlockId> blocks, BlockPool& pool,
                                   std::uint64_t tick, RunInserted& done) {
  // insert() key by key, the node looked up again only when the run changes.
  done = RunInserted{};
  PageKey key = first;
  std::uint32_t n = kNoNode;
  std::uint32_t run = 0;
  // The key before this one in the run, for the change log.
  std::optional<PageKey> parent = change_log_ != nullptr ? log_parent_ : std::nullopt;
  log_parent_.reset();
  if (change_log_ != nullptr && !in_call_) ++log_call_;  // a call of its own
  for (; done.handled < blocks.size(); ++done.handled, key.offset += step) {
    const BlockId b = blocks[done.handled];
    if (b == kInvalidBlock) break;
    // A block the pool cannot hold has no entry either: retain's error.
    if (b >= pool_blocks_) return Unexpected{CoreError::kBlockOutOfRange};
    if (change_log_ != nullptr && done.handled > 0) {
      parent = PageKey{key.chain, key.offset - step, key.group};
    }
    if (entry_of(b).cached) continue;
    const Place at = place(key);
    if (n == kNoNode || at.run != run) {
      n = find_node(key, at.run, inserted_node_);
      run = at.run;
    }
    if (!duplicates_ && n != kNoNode &&
        first_of(nodes_[n].heads[at.pos], key.offset) != kInvalidBlock) {
      continue;
    }
    if (n == kNoNode) n = inserted_node_ = add_node(key, at.run);
    if (auto retained = pool.retain(b); !retained) {
      if (nodes_[n].live == 0) remove_node(n);
      return retained;
    }
    link_cached(n, at.pos, b, key.offset, tick);
    ++done.cached;
    // BlockPool.cache_full_blocks lists every block it caches, one whose
    // hash another block holds included (BlockHashToBlockMap keeps both).
    if (change_log_ != nullptr) change_log_->push_back(KeyChange{key, parent, true, log_call_});
  }
  return {};
}

void PrefixCache::make_evictable_ranked(BlockId b) {
  Entry& entry = entries_[b];
  if (!entry.evictable) {
    ++evictable_count_;
    watched_evictable_ += watched(entry) ? 1 : 0;
  }
  entry.evictable = true;
  Rank& rank = ranks_[b];
  ++rank.version;
  Candidate candidate{0, 0, b, rank.version};
  if (policy_ == EvictPolicy::kFifo) {
    candidate.first = rank.inserted;
  } else {
    candidate.first = rank.hits;
    candidate.second = rank.last_use;
  }
  heap_.push_back(candidate);
  std::push_heap(heap_.begin(), heap_.end(), std::greater<>{});
  purge_stale_if_due();
}

bool PrefixCache::stale(const Candidate& candidate) const {
  const Entry& entry = entries_[candidate.block];
  return !entry.cached || !entry.evictable || ranks_[candidate.block].version != candidate.version;
}

void PrefixCache::purge_stale() {
  if (policy_ == EvictPolicy::kLru) {
    // The live slots, in order, moved to the front.
    std::size_t kept = 0;
    for (std::size_t i = lru_front_; i < lru_queue_.size(); ++i) {
      if (live(lru_queue_[i])) lru_queue_[kept++] = lru_queue_[i];
    }
    lru_queue_.resize(kept);
    lru_front_ = 0;
    return;
  }
  auto is_stale = [this](const Candidate& candidate) { return stale(candidate); };
  heap_.erase(std::remove_if(heap_.begin(), heap_.end(), is_stale), heap_.end());
  std::make_heap(heap_.begin(), heap_.end(), std::greater<>{});
}

inline void PrefixCache::uncache(BlockId b) {
  Entry& entry = entries_[b];
  make_unevictable(b);
  unwatch(b);
  entry.cached = false;
  index_erase(b);
  if (eviction_log_.size() >= std::max(entries_.size(), kCandidateSlack)) {
    log_base_ = evictions_;
    eviction_log_.clear();
  }
  eviction_log_.push_back(b);
  if (evicted_log_ != nullptr) evicted_log_->push_back(b);
  ++evictions_;
}

BlockId PrefixCache::take_victim() {
  if (policy_ == EvictPolicy::kLru) {
    lru_advance();
    return lru_front_ < lru_queue_.size() ? lru_queue_[lru_front_].block : kInvalidBlock;
  }
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>{});
    const Candidate candidate = heap_.back();
    heap_.pop_back();
    if (!stale(candidate)) return candidate.block;
  }
  return kInvalidBlock;
}

bool PrefixCache::evict_one(BlockPool& pool) {
  const BlockId b = take_victim();
  if (b == kInvalidBlock) return false;
  evict_block(b, pool);
  return true;
}

std::uint32_t PrefixCache::evict_for_reuse(BlockPool& pool, std::uint32_t n,
                                           std::vector<BlockId>& out) {
  if (pool.free_count() != 0) return 0;
  if (policy_ == EvictPolicy::kLru) return evict_lru_for_reuse(pool, n, out);
  std::uint32_t evicted = 0;
  for (; evicted < n; ++evicted) {
    const BlockId b = take_victim();
    if (b == kInvalidBlock) break;
    uncache(b);
    (void)pool.recycle(b);  // held by the cache alone, the free list empty
    out.push_back(b);
  }
  return evicted;
}

template <typename Taken>
void PrefixCache::uncache_lru_front(std::uint32_t count, Taken&& taken) {
  const std::size_t log_cap = std::max(entries_.size(), kCandidateSlack);
  // The log starts over before the batch rather than within it: count is at
  // most the blocks cached, so it still keeps at most log_cap entries.
  if (eviction_log_.size() + count > log_cap) {
    log_base_ = evictions_;
    eviction_log_.clear();
  }
  const std::size_t logged = eviction_log_.size();
  eviction_log_.resize(logged + count);
  BlockId* const log = eviction_log_.data() + logged;
  std::size_t at = lru_front_;
  for (std::uint32_t i = 0; i < count; ++at) {
    assert(at < lru_queue_.size());  // each evictable block has one live slot
    const QueueSlot slot = lru_queue_[at];
    if (!live(slot)) continue;
    Entry& entry = entries_[slot.block];
    watched_evictable_ -= watched(entry) ? 1 : 0;  // evictable until now
    entry.watch = 0;
    entry.evictable = entry.cached = false;
    index_erase(slot.block);
    log[i] = slot.block;
    taken(i, slot.block);
    ++i;
  }
  lru_front_ = at;
  if (evicted_log_ != nullptr) evicted_log_->insert(evicted_log_->end(), log, log + count);
  evictions_ += count;
  evictable_count_ -= count;
  lru_advance();
  purge_stale_if_due();
}

std::uint32_t PrefixCache::evict_lru_for_reuse(BlockPool& pool, std::uint32_t n,
                                               std::vector<BlockId>& out) {
  // uncache() of the front of the lru queue, n times, the evicted blocks'
  // slots consumed at once.
  const std::uint32_t count = std::min(n, evictable_count_);
  const std::size_t first = out.size();
  out.resize(first + count);
  BlockId* const taken = out.data() + first;
  uncache_lru_front(count, [taken](std::uint32_t i, BlockId b) { taken[i] = b; });
  (void)pool.recycle_all({taken, count});  // held by the cache alone, the free list empty
  return count;
}

std::uint32_t PrefixCache::evict(BlockPool& pool, std::uint32_t n) {
  if (policy_ != EvictPolicy::kLru) {
    std::uint32_t evicted = 0;
    while (evicted < n && evict_one(pool)) ++evicted;
    return evicted;
  }
  const std::uint32_t count = std::min(n, evictable_count_);
  // Held by the cache alone: each release frees the block, in eviction order.
  uncache_lru_front(count, [&pool](std::uint32_t, BlockId b) { (void)pool.release(b); });
  return count;
}

void PrefixCache::touch_all(std::span<const BlockId> blocks, std::uint64_t tick) {
  if (policy_ != EvictPolicy::kLru) {
    for (BlockId b : blocks) touch(b, tick);
    return;
  }
  // make_unevictable() block by block, the counts kept in locals.
  std::uint32_t removed = 0;
  std::uint32_t watched_removed = 0;
  const std::uint16_t generation = watch_generation_;  // a local: entry stores may alias it
  for (BlockId b : blocks) {
    if (b >= entry_count_) continue;
    Entry& entry = entries_[b];
    if (!entry.cached || !entry.evictable) continue;
    ++removed;
    watched_removed += entry.watch == generation ? 1 : 0;
    entry.evictable = false;  // its slot goes stale
  }
  evictable_count_ -= removed;
  watched_evictable_ -= watched_removed;
  purge_stale_if_due();
}

void PrefixCache::released_last_first(std::span<const BlockId> blocks, const BlockPool& pool,
                                      std::uint64_t tick) {
  if (policy_ != EvictPolicy::kLru) {
    for (std::size_t i = blocks.size(); i-- > 0;) released(blocks[i], pool, tick);
    return;
  }
  // released() block by block, the counts kept in locals and the purge
  // checked once at the end.
  std::uint32_t added = 0;
  std::uint32_t watched_added = 0;
  const std::uint16_t generation = watch_generation_;  // a local: entry stores may alias it
  for (std::size_t i = blocks.size(); i-- > 0;) {
    const BlockId b = blocks[i];
    if (b >= entry_count_ || pool.refcount(b) != 1) continue;
    Entry& entry = entries_[b];
    if (!entry.cached) continue;
    if (!entry.evictable) {
      ++added;
      watched_added += entry.watch == generation ? 1 : 0;
      entry.evictable = true;
    }
    // Evictable already (released twice): it moves to the back.
    lru_queue_.push_back(QueueSlot{b, ++entry.version});
  }
  evictable_count_ += added;
  watched_evictable_ += watched_added;
  purge_stale_if_due();
}

void PrefixCache::restart_watch_generations() {
  for (Entry& entry : entries_) entry.watch = 0;
  watch_generation_ = 1;
}

void PrefixCache::evict_block(BlockId b, BlockPool& pool) {
  uncache(b);
  (void)pool.release(b);  // held by the cache alone: frees it
}

std::uint32_t PrefixCache::watched_count() const {
  std::uint32_t count = 0;
  for (BlockId b = 0; b < entry_count_; ++b) count += watched(entries_[b]) ? 1 : 0;
  return count;
}

void PrefixCache::holds(std::vector<BlockId>& out) const {
  for (BlockId b = 0; b < entries_.size(); ++b) {
    if (entries_[b].cached) out.push_back(b);
  }
}

void PrefixCache::cached_keys(std::vector<PageKey>& out, bool every_block) const {
  for (BlockId b = 0; b < entries_.size(); ++b) {
    const Entry& entry = entries_[b];
    if (!entry.cached) continue;
    const Node& node = nodes_[entry.node];
    // Once per key (the first block listed under it), or once per block.
    if (every_block || first_of(node.heads[place_of(entry.offset).pos], entry.offset) == b) {
      out.push_back(PageKey{node.chain, entry.offset, node.group});
    }
  }
}

}  // namespace kvreplay

namespace kvreplay {

namespace {

std::optional<InvariantViolation> violated(std::string_view invariant, std::string message) {
  return InvariantViolation{std::string(invariant), "prefix cache: " + std::move(message)};
}

}  // namespace

std::vector<std::uint8_t> PrefixCache::freed_nodes() const {
  std::vector<std::uint8_t> node_freed(nodes_.size(), 0);
  for (std::uint32_t n : free_nodes_) {
    if (n < node_freed.size()) node_freed[n] = 1;
  }
  return node_freed;
}

std::optional<InvariantViolation> PrefixCache::check_lists(std::span<const std::uint8_t> node_freed,
                                                           std::size_t& counted_nodes) const {
  counted_nodes = 0;
  // C1: the nodes' lists against the entries, counted from the lists.
  std::vector<std::uint8_t> listed(entry_count_, 0);
  std::size_t listed_blocks = 0;
  for (std::uint32_t n = 0; n < nodes_.size(); ++n) {
    if (node_freed[n]) continue;
    const Node& node = nodes_[n];
    ++counted_nodes;
    std::uint32_t count = 0;
    for (std::uint32_t pos = 0; pos < kRunPages; ++pos) {
      // A cycle in a list is caught as a block listed twice.
      for (BlockId b = node.heads[pos]; b != kInvalidBlock; b = entries_[b].dup_next) {
        if (b >= entry_count_) {
          return violated("C1", fmt::format("node {} lists block {}, past the entries", n, b));
        }
        const Entry& entry = entries_[b];
        if (listed[b]++) {
          return violated("C1", fmt::format("block {} is listed twice (node {})", b, n));
        }
        if (!entry.cached || entry.node != n) {
          return violated("C1", fmt::format("node {} lists block {}, which {}", n, b,
                                            entry.cached ? fmt::format("names node {}", entry.node)
                                                         : std::string("is not cached")));
        }
        const Place at = place_of(entry.offset);
        if (at.pos != pos || at.run != node.run) {
          return violated("C1", fmt::format("block {} (offset {}) is listed at place {} of run "
                                            "{}, its key's place is {} of run {}",
                                            b, entry.offset, pos, node.run, at.pos, at.run));
        }
        ++count;
        ++listed_blocks;
        if (!duplicates_) {
          // Without duplicates, no earlier block at this place has its offset.
          for (BlockId o = node.heads[pos]; o != b; o = entries_[o].dup_next) {
            if (entries_[o].offset == entry.offset) {
              return violated("C2", fmt::format("blocks {} and {} are cached under one key "
                                                "(chain {} offset {}) without duplicates",
                                                o, b, node.chain, entry.offset));
            }
          }
        }
      }
    }
    if (count != node.live || count == 0) {
      return violated("C1",
                      fmt::format("node {} counts {} blocks but lists {}", n, node.live, count));
    }
  }
  std::size_t cached = 0;
  for (BlockId b = 0; b < entry_count_; ++b) {
    const Entry& entry = entries_[b];
    if (entry.cached) ++cached;
    if (entry.cached && !listed[b]) {
      return violated("C1", fmt::format("block {} is cached but no node lists it", b));
    }
  }
  if (cached != size_ || listed_blocks != size_) {
    return violated(
        "C1", fmt::format("size {} but {} blocks cached, {} listed", size_, cached, listed_blocks));
  }

  return std::nullopt;
}

std::optional<InvariantViolation> PrefixCache::check_index(std::span<const std::uint8_t> node_freed,
                                                           std::size_t counted_nodes) const {
  // C2: the index table.
  std::size_t occupied = 0;
  std::vector<std::uint8_t> in_table(nodes_.size(), 0);
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    const Slot& slot = slots_[s];
    if (slot.node == kNoNode) continue;
    ++occupied;
    if (slot.node >= nodes_.size() || node_freed[slot.node]) {
      return violated("C2", fmt::format("slot {} names node {}, which is not live", s, slot.node));
    }
    const Node& node = nodes_[slot.node];
    if (in_table[slot.node]++) {
      return violated("C2", fmt::format("node {} is in the index twice", slot.node));
    }
    if (slot.hash != node.hash || node.hash != node_hash(node.chain, node.group, node.run)) {
      return violated("C2", fmt::format("slot {}: hash {:#x}, node {}'s is {:#x}", s, slot.hash,
                                        slot.node, node_hash(node.chain, node.group, node.run)));
    }
    for (std::size_t at = slot.hash & mask; at != s; at = (at + 1) & mask) {
      if (slots_[at].node == kNoNode) {
        return violated("C2", fmt::format("node {} sits in slot {} past the empty slot {} "
                                          "from its home {}",
                                          slot.node, s, at, slot.hash & mask));
      }
    }
  }
  if (occupied != live_nodes_ || occupied != counted_nodes || 2 * occupied > slots_.size()) {
    return violated("C2", fmt::format("{} nodes live, {} in the index of {} slots, {} counted",
                                      live_nodes_, occupied, slots_.size(), counted_nodes));
  }

  return std::nullopt;
}

std::optional<InvariantViolation> PrefixCache::check_holds(const BlockPool& pool) const {
  // C3, C4: holds and evictability.
  std::uint32_t evictable = 0;
  std::uint32_t watched_evictable = 0;
  for (BlockId b = 0; b < entry_count_; ++b) {
    const Entry& entry = entries_[b];
    if (!entry.cached) {
      if (entry.evictable) {
        return violated("C3", fmt::format("block {} is evictable but not cached", b));
      }
      continue;
    }
    const std::uint32_t refs = b < pool.total() ? pool.refcount(b) : 0;
    if (refs == 0) {
      return violated("C3",
                      fmt::format("block {} is cached but the pool holds it {} times", b, refs));
    }
    if (entry.evictable != (refs == 1)) {
      return violated("C3", fmt::format("block {} has refcount {} but is {}evictable", b, refs,
                                        entry.evictable ? "" : "not "));
    }
    if (entry.evictable) {
      ++evictable;
      watched_evictable += watched(entry) ? 1 : 0;
    }
  }
  if (evictable != evictable_count_ || watched_evictable != watched_evictable_) {
    return violated(
        "C4", fmt::format("counts {} evictable ({} watched), recounted {} ({})", evictable_count_,
                          watched_evictable_, evictable, watched_evictable));
  }

  return std::nullopt;
}

std::optional<InvariantViolation> PrefixCache::check_candidates() const {
  // C5: one live candidate per evictable block.
  std::vector<std::uint32_t> live_candidates(entry_count_, 0);
  if (policy_ == EvictPolicy::kLru) {
    for (std::size_t i = lru_front_; i < lru_queue_.size(); ++i) {
      const QueueSlot& slot = lru_queue_[i];
      if (slot.block >= entry_count_) {
        return violated(
            "C5", fmt::format("queue slot {} names block {}, past the entries", i, slot.block));
      }
      if (live(slot)) ++live_candidates[slot.block];
    }
  } else {
    if (!std::is_heap(heap_.begin(), heap_.end(), std::greater<>{})) {
      return violated("C5", "the eviction heap is out of order");
    }
    for (const Candidate& candidate : heap_) {
      if (candidate.block >= entry_count_) {
        return violated("C5", fmt::format("a heap candidate names block {}, past the entries",
                                          candidate.block));
      }
      if (!stale(candidate)) ++live_candidates[candidate.block];
    }
  }
  for (BlockId b = 0; b < entry_count_; ++b) {
    const std::uint32_t expected = entries_[b].evictable ? 1 : 0;
    if (live_candidates[b] != expected) {
      return violated("C5", fmt::format("block {} is {}evictable and has {} live candidates", b,
                                        expected ? "" : "not ", live_candidates[b]));
    }
  }

  // C6: the candidates are bounded.
  if (candidates() > 2 * std::size_t{evictable_count_} + kCandidateSlack) {
    return violated(
        "C6", fmt::format("{} candidates for {} evictable blocks", candidates(), evictable_count_));
  }

  // C7: the eviction log.
  if (log_base_ > evictions_ || eviction_log_.size() != evictions_ - log_base_ ||
      eviction_log_.size() > std::max(entries_.size(), kCandidateSlack)) {
    return violated("C7", fmt::format("the log holds {} evictions from {}, {} made",
                                      eviction_log_.size(), log_base_, evictions_));
  }
  for (BlockId b : eviction_log_) {
    if (b >= pool_blocks_) {
      return violated("C7", fmt::format("the log names block {}, past the pool", b));
    }
  }
  return std::nullopt;
}

std::optional<InvariantViolation> PrefixCache::check(const BlockPool& pool) const {
  const std::vector<std::uint8_t> node_freed = freed_nodes();
  std::size_t counted_nodes = 0;
  if (auto found = check_lists(node_freed, counted_nodes)) return found;
  if (auto found = check_index(node_freed, counted_nodes)) return found;
  if (auto found = check_holds(pool)) return found;
  return check_candidates();
}

}  // namespace kvreplay
