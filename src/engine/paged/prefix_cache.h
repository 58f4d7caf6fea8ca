// PrefixCache: vLLM-v1-style reuse of full KV pages whose content hash chain
// matches, over the real BlockPool.
//
// Contract:
//   - The cache holds one pool reference on every cached block (an I1 "hold").
//     A cached block that no sequence uses (refcount 1: only the cache's) is
//     evictable; evict_one() drops the cache's reference, returning the block to
//     the free list, in --evict order: lru (least recently used first), fifo
//     (least recently cached first) or lfu (fewest hits first, then lru). Under
//     lru, blocks released together go in release order (the simulator releases
//     a sequence's pages last to first, so its tail is evicted before its
//     prefix); under fifo and lfu ties go to the lower block id.
//   - Keys identify content, not position: a page ending at token E inside hash
//     block k (tokens [k*B, (k+1)*B)) has key (hash_ids[k], E - k*B). Equal hash
//     ids mean an identical prefix up to and including that block, so any page
//     size works, whether or not it divides B.
//   - Duplicates (vLLM's BlockHashToBlockMap, which keeps every block cached
//     under a hash): when constructed with `duplicates`, insert caches a block
//     under a key already cached, and find returns the earliest-cached block
//     still cached under the key. Without, a key holds one block.
//   - Memory grows with the blocks ever cached, not with the pool's size nor
//     with the number of operations. lru keeps the evictable blocks in a
//     queue in release order, fifo and lfu in a heap by rank; candidates that
//     went stale (the block was hit, released again or evicted) are purged
//     once they outnumber the live ones. After every call
//     candidates() <= 2 * evictable() + kCandidateSlack.
//
// Invariants, which check() verifies by recounting (a violation names its
// number; `--check every` runs it after every step of a simulation):
//   C1 every cached block is listed once, under its key's place, by the node
//      its entry names; every block a node lists is cached and names that
//      node; size() is the number of cached blocks; a node's count of blocks
//      is the number it lists, and a node lists at least one.
//   C2 the key index finds every live node from its home slot (linear probing
//      with no empty slot between), holds each once, is at most half full, and
//      each slot's hash is its node's; without duplicates a key lists one block.
//   C3 a cached block is held by the pool (refcount >= 1, the cache's
//      reference), and it is evictable exactly when the cache alone holds it
//      (refcount 1); a block that is not cached is not evictable.
//   C4 evictable() and watched_evictable() are the numbers of evictable, and of
//      watched evictable, blocks.
//   C5 every evictable block has exactly one live eviction candidate (lru: a
//      queue slot at or past the front carrying its version; fifo, lfu: a heap
//      entry carrying its rank's version), and the heap is a heap.
//   C6 candidates() <= 2 * evictable() + kCandidateSlack.
//   C7 the eviction log holds the evictions since its base (its size is
//      evictions() less the base) and at most max(entries, kCandidateSlack)
//      of them; every logged block id is a block of the pool.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/block_pool.h"
#include "core/invariants.h"

namespace kvreplay {

enum class EvictPolicy : std::uint8_t { kLru, kFifo, kLfu };
std::string_view to_string(EvictPolicy policy);
std::optional<EvictPolicy> parse_evict_policy(std::string_view name);
std::vector<std::string> evict_policy_names();  // in table order, for the command line

struct PageKey {
  std::uint64_t chain = 0;   // the hash id of the block holding the page's last token
  std::uint32_t offset = 0;  // the page's end, in tokens from the start of that block
  // The KV-cache group whose page this is (vLLM's BlockHashWithGroupId: the
  // groups of a hybrid model share block hashes, their keys differ by group).
  std::uint32_t group = 0;
  bool operator==(const PageKey&) const = default;
};

class PrefixCache {
 public:
  // page_tokens groups the keys of a chain's consecutive pages into one node
  // of the index (see Node); any value gives the same answers.
  PrefixCache(EvictPolicy policy, std::uint32_t pool_blocks, bool duplicates = false,
              std::uint32_t page_tokens = 1);

  // The block cached under key (with duplicates, the earliest cached).
  std::optional<BlockId> find(const PageKey& key) const {
    const Place at = place(key);
    const std::uint32_t n = find_node(key, at.run, found_node_);
    if (n == kNoNode) return std::nullopt;
    const BlockId b = first_of(nodes_[n].heads[at.pos], key.offset);
    if (b == kInvalidBlock) return std::nullopt;
    return b;
  }
  // find() of up to `count` keys, `first` with its offset advanced by i *
  // step for the i-th, appending each block found to out and stopping at the
  // first key not cached: one index lookup per node instead of one per key.
  // Returns how many it found.
  std::uint32_t find_run(const PageKey& first, std::uint32_t step, std::uint32_t count,
                         std::vector<BlockId>& out) const {
    PageKey key = first;
    std::uint32_t n = kNoNode;
    std::uint32_t run = 0;
    std::uint32_t found = 0;
    for (; found < count; ++found, key.offset += step) {
      const Place at = place(key);
      if (n == kNoNode || at.run != run) {
        n = find_node(key, at.run, found_node_);
        run = at.run;
        if (n == kNoNode) break;
      }
      const BlockId b = first_of(nodes_[n].heads[at.pos], key.offset);
      if (b == kInvalidBlock) break;
      out.push_back(b);
    }
    return found;
  }
  // Whether block b is still cached under key (cheaper than find).
  bool cached_as(BlockId b, const PageKey& key) const {
    if (b >= entry_count_) return false;
    const Entry& entry = entries_[b];
    return entry.cached && entry.offset == key.offset &&
           node_is(nodes_[entry.node], key, place(key).run);
  }
  // A sequence is about to retain cached block b (a hit): it stops being evictable.
  void touch(BlockId b, std::uint64_t tick) {
    if (b >= entry_count_ || !entries_[b].cached) return;
    make_unevictable(b);
    if (policy_ == EvictPolicy::kLru) return;
    Rank& rank = ranks_[b];
    ++rank.hits;
    rank.last_use = tick;
  }
  // touch() of each of blocks (a table's hits), the purge checked once.
  void touch_all(std::span<const BlockId> blocks, std::uint64_t tick);
  // Caches block b (held by a sequence) under key; the cache retains it.
  // Returns false, doing nothing, when the block already belongs to the cache,
  // (without duplicates) the key is already cached, or b is kInvalidBlock.
  // Error: that of BlockPool::retain (kBlockOutOfRange for a block past the
  // cache's pool).
  CoreResult<bool> insert(const PageKey& key, BlockId b, BlockPool& pool, std::uint64_t tick);
  // insert() of each of blocks in turn, blocks[i] under `first` with its
  // offset advanced by i * step, stopping at the first error: the same
  // effect, with one index lookup per node instead of one per key (a chain's
  // consecutive pages share nodes). Stops early, without error, at a block
  // kInvalidBlock. `done` counts the blocks gone through (on error,
  // blocks[done.handled] is the one that failed) and those of them cached.
  // Error: that of BlockPool::retain (kBlockOutOfRange for a block past the
  // cache's pool).
  struct RunInserted {
    std::uint32_t handled = 0;
    std::uint32_t cached = 0;
  };
  CoreStatus insert_run(const PageKey& first, std::uint32_t step, std::span<const BlockId> blocks,
                        BlockPool& pool, std::uint64_t tick, RunInserted& done);
  // After a sequence released block b: if b is cached and only the cache holds
  // it now, it becomes evictable.
  void released(BlockId b, const BlockPool& pool, std::uint64_t tick) {
    if (b >= entry_count_ || !entries_[b].cached || pool.refcount(b) != 1) return;
    if (policy_ != EvictPolicy::kLru) ranks_[b].last_use = tick;
    make_evictable(b);
  }
  // released(b) for each of blocks, the last first (a released table's
  // pages: its tail becomes evictable before its prefix).
  void released_last_first(std::span<const BlockId> blocks, const BlockPool& pool,
                           std::uint64_t tick);
  // Evicts one evictable block. Returns false when none is evictable.
  bool evict_one(BlockPool& pool);
  // evict_one() up to n times, in one pass: the blocks freed in eviction
  // order. Returns how many it evicted (fewer than n when no more are evictable).
  std::uint32_t evict(BlockPool& pool, std::uint32_t n);
  // With the pool's free list empty: evicts up to n evictable blocks in
  // eviction order and hands the cache's reference on each to the caller
  // (BlockPool::recycle), appending them to out: the same as n times
  // evict_one() then pool.allocate(). Returns how many it evicted: fewer than
  // n when no more are evictable, none when the free list is not empty.
  std::uint32_t evict_for_reuse(BlockPool& pool, std::uint32_t n, std::vector<BlockId>& out);
  // Blocks that evict_one() could free.
  std::uint32_t evictable() const { return evictable_count_; }
  // Watched blocks: a caller marks some cached blocks (a waiting request's
  // hits) and reads in O(1) how many of them are evictable now. Eviction
  // unwatches a block. unwatch_all is O(1) (amortised): a block is watched
  // while its entry carries the current watch generation.
  void watch(BlockId b) {
    Entry& entry = entry_of(b);
    if (watched(entry)) return;
    entry.watch = watch_generation_;
    watched_evictable_ += entry.evictable ? 1 : 0;
  }
  void unwatch(BlockId b) {
    if (b >= entry_count_) return;
    Entry& entry = entries_[b];
    if (!watched(entry)) return;
    entry.watch = 0;
    watched_evictable_ -= entry.evictable ? 1 : 0;
  }
  void unwatch_all() {
    watched_evictable_ = 0;
    if (++watch_generation_ == 0) restart_watch_generations();
  }
  std::uint32_t watched_evictable() const { return watched_evictable_; }
  // Whether block b is watched; how many blocks are (a recount, for checks).
  bool is_watched(BlockId b) const { return b < entry_count_ && watched(entries_[b]); }
  std::uint32_t watched_count() const;
  std::uint64_t evictions() const { return evictions_; }
  // The blocks evicted since evictions() was `since`, oldest first, or nullopt
  // when the log no longer reaches back that far. A caller holding hits across
  // calls re-verifies them in time proportional to the evictions, not to the
  // hits: a block stops being cached only by eviction. The log keeps at most
  // max(blocks ever cached, kCandidateSlack) entries.
  std::optional<std::span<const BlockId>> evicted_since(std::uint64_t since) const {
    if (since < log_base_ || since > evictions_) return std::nullopt;
    return std::span<const BlockId>(eviction_log_).subspan(since - log_base_);
  }
  std::size_t size() const { return size_; }
  // Slots of the key index (its live nodes, each a run of a chain's pages,
  // are at most half of them).
  std::size_t index_slots() const { return slots_.size(); }
  // Eviction candidates queued, stale ones included (bounded: see the contract).
  std::size_t candidates() const {
    return policy_ == EvictPolicy::kLru ? lru_queue_.size() - lru_front_ : heap_.size();
  }
  static constexpr std::size_t kCandidateSlack = 64;
  // Every block the cache holds a reference on (for the invariant checker).
  void holds(std::vector<BlockId>& out) const;
  // The keys cached now, each once (KV events' tests compare them with the
  // events' set), in no particular order; `every_block`: a key once for each
  // block cached under it (the events' per-block counts).
  void cached_keys(std::vector<PageKey>& out, bool every_block = false) const;
  // The blocks cached, as vLLM's KV events report them (--kv-events): while a
  // log is set, every block the cache takes is appended as stored under its
  // key, with its parent (the key of the page before it, nullopt for a
  // chain's first page), and every block it lets go as removed, in the order
  // they happen. A key cached in two blocks (duplicates) is stored twice and
  // removed twice, as BlockPool.cache_full_blocks lists each block it caches
  // and _maybe_evict_cached_block sends a BlockRemoved for each block it
  // evicts (vllm/v1/core/block_pool.py). The parent of the first block an
  // insert or insert_run caches is the one given to log_parent before the
  // call (nullopt when none was: the caller knows the chain); a run's later
  // blocks have the page before them in the run. `call` numbers the caching
  // call a store came from: the inserts between log_call_begin and
  // log_call_end are one call (one cache_full_blocks, one BlockStored), any
  // other insert or insert_run is a call of its own; removals carry 0.
  struct KeyChange {
    PageKey key;
    std::optional<PageKey> parent;
    bool stored = false;
    std::uint64_t call = 0;
  };
  void log_changes(std::vector<KeyChange>* log) { change_log_ = log; }
  // While set, every block evicted is appended to `log`, in eviction order
  // (simulate --emit-trace: each becomes an `uncache`). Unlike evicted_since,
  // nothing is dropped: the caller empties it.
  void log_evictions(std::vector<BlockId>* log) { evicted_log_ = log; }
  // Whether block b is cached now (under any key).
  bool is_cached(BlockId b) const { return b < entry_count_ && entries_[b].cached; }
  void log_parent(std::optional<PageKey> parent) { log_parent_ = parent; }
  void log_call_begin() {
    ++log_call_;
    in_call_ = true;
  }
  void log_call_end() { in_call_ = false; }
  // The inserts while one lives are one caching call (log_call_begin/end).
  class LoggedCall {
   public:
    explicit LoggedCall(PrefixCache& cache) : cache_(cache) { cache_.log_call_begin(); }
    ~LoggedCall() { cache_.log_call_end(); }
    LoggedCall(const LoggedCall&) = delete;
    LoggedCall& operator=(const LoggedCall&) = delete;

   private:
    PrefixCache& cache_;
  };
  // Verifies C1-C7 (see the top of this file) against `pool`, the pool whose
  // blocks the cache holds; the first violation found, or nullopt. Linear in
  // the blocks ever cached, the index's slots and the candidates.
  std::optional<InvariantViolation> check(const BlockPool& pool) const;
  // check()'s parts: C1 (and C2's duplicate keys), C2, C3-C4, C5-C7.
  std::vector<std::uint8_t> freed_nodes() const;
  std::optional<InvariantViolation> check_lists(std::span<const std::uint8_t> node_freed,
                                                std::size_t& counted_nodes) const;
  std::optional<InvariantViolation> check_index(std::span<const std::uint8_t> node_freed,
                                                std::size_t counted_nodes) const;
  std::optional<InvariantViolation> check_holds(const BlockPool& pool) const;
  std::optional<InvariantViolation> check_candidates() const;
  // Tests plant faults through this (tests/engine/prefix_cache_test.cc).
  friend struct PrefixCacheFaults;

 private:
  // What every operation reads of a block, twenty bytes. A cached block's
  // key is its node's chain and group and its own offset.
  struct Entry {
    // lru: bumped whenever the block joins the queue (see lru_queue_).
    std::uint32_t version = 0;
    // While cached: the next block listed at the key's place in its index
    // node (see Node), kInvalidBlock at the end.
    BlockId dup_next = kInvalidBlock;
    std::uint32_t node = 0;    // while cached: the index node listing it
    std::uint32_t offset = 0;  // and its key's offset (which gives its place)
    // The watch generation it was watched in (see watched()); 0: never.
    std::uint16_t watch = 0;
    bool cached = false;
    bool evictable = false;
  };
  bool watched(const Entry& entry) const { return entry.watch == watch_generation_; }
  // The generations wrapped: every entry unwatched, generation 1 next.
  void restart_watch_generations();
  // What fifo and lfu rank a block by (kept only under those policies).
  struct Rank {
    std::uint64_t inserted = 0;
    std::uint64_t last_use = 0;
    std::uint64_t hits = 0;
    std::uint32_t version = 0;  // bumped whenever the block's evictable rank changes
  };
  // A candidate for eviction; stale when its version no longer matches.
  struct Candidate {
    std::uint64_t first;
    std::uint64_t second;
    BlockId block;
    std::uint32_t version;
    // Heap order: the smallest rank is evicted first.
    bool operator>(const Candidate& other) const {
      if (first != other.first) return first > other.first;
      if (second != other.second) return second > other.second;
      return block > other.block;
    }
  };
  Entry& entry_of(BlockId b) {  // grows entries_ as needed
    return b < entry_count_ ? entries_[b] : grow_entries(b);
  }
  Entry& grow_entries(BlockId b);
  void make_evictable(BlockId b) {
    if (policy_ != EvictPolicy::kLru) return make_evictable_ranked(b);
    // To the back of the queue: least recently released first.
    Entry& entry = entries_[b];
    if (!entry.evictable) {
      ++evictable_count_;
      watched_evictable_ += watched(entry) ? 1 : 0;
      entry.evictable = true;
    }
    lru_queue_.push_back(QueueSlot{b, ++entry.version});  // an older slot goes stale
    purge_stale_if_due();
  }
  void make_evictable_ranked(BlockId b);  // fifo, lfu
  void make_unevictable(BlockId b) {
    Entry& entry = entries_[b];
    if (entry.evictable) {
      --evictable_count_;
      watched_evictable_ -= watched(entry) ? 1 : 0;
      entry.evictable = false;  // its candidate goes stale
    }
    if (policy_ != EvictPolicy::kLru) ++ranks_[b].version;
    purge_stale_if_due();
  }
  // Drops stale candidates once they outnumber the live ones (amortised O(1)).
  // Eviction order is unchanged: the lru queue keeps its order, and the heap's
  // ranks are a strict order over live candidates (one per block).
  void purge_stale_if_due() {
    // Each evictable block has exactly one live candidate (its latest version).
    if (candidates() > 2 * std::size_t{evictable_count_} + kCandidateSlack) purge_stale();
  }
  void purge_stale();
  bool stale(const Candidate& candidate) const;
  // The key index, in two levels. A node holds the blocks of one run of
  // kRunPages consecutive pages of a chain (same chain id and group, page
  // number (offset - 1) >> page_shift_ divided by kRunPages): for each place
  // in the run, the blocks cached under keys of that place, in insertion
  // order, listed through Entry::dup_next. Every block a node lists shares
  // its chain, group and run, and offsets are compared along the list, so
  // any page size (or an offset that is no page end) gives the same
  // answers; the page size only decides which keys share a node (with a
  // page size that is no power of two, pages are numbered in units of the
  // power of two below it, and two pages may share a place). Nodes are
  // found through an open-addressing table (linear probing, backward-shift
  // deletion) of eight-byte slots, at most half of them live, and the node
  // found last is remembered: the simulator inserts and looks up a chain's
  // pages in order, so most operations skip the table. A cached block's
  // entry names its node and place, so an eviction never searches. A node
  // is freed when its last block leaves it. Runs of 32 pages: a Mooncake
  // hash block of 512 tokens in pages of 16 is one node, so a chain's
  // inserts and evictions reach the table once per hash block (on that
  // trace runs of 8 pages took 3% more instructions, runs of 16 1% more).
  // A node is then 152 bytes, three cache lines.
  static constexpr std::uint32_t kRunBits = 5;
  static constexpr std::uint32_t kRunPages = 1u << kRunBits;
  static constexpr std::uint32_t kNoNode = 0xFFFFFFFFu;
  struct Place {
    std::uint32_t run;  // the run of pages, within the chain
    std::uint32_t pos;  // the page's place in it
  };
  Place place(const PageKey& key) const { return place_of(key.offset); }
  Place place_of(std::uint32_t offset) const {
    // Offset 0, never a page's end, wraps: a placement only.
    const std::uint32_t end = offset - 1u;
    return {end >> run_shift_, (end >> page_shift_) & (kRunPages - 1)};
  }
  struct alignas(64) Node {
    std::uint64_t chain = 0;
    std::uint32_t group = 0;
    std::uint32_t run = 0;
    std::uint32_t hash = 0;  // node_hash of the above: its home in the table
    std::uint32_t live = 0;  // blocks listed
    BlockId heads[kRunPages];
  };
  static std::uint32_t node_hash(std::uint64_t chain, std::uint32_t group, std::uint32_t run) {
    // murmur3's 64-bit finaliser over the chain id, the run and the group.
    std::uint64_t x = chain ^ (std::uint64_t{run} * 0x9E3779B97F4A7C15ull) ^
                      (std::uint64_t{group} * 0xD6E8FEB86659FD93ull);
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return static_cast<std::uint32_t>(x);
  }
  static bool node_is(const Node& node, const PageKey& key, std::uint32_t run) {
    return node.chain == key.chain && node.run == run && node.group == key.group;
  }
  // The node of key's run, or kNoNode; `last` is the node found last by the
  // same kind of operation (remembered apart: lookups and inserts walk
  // different chains in turn).
  std::uint32_t find_node(const PageKey& key, std::uint32_t run, std::uint32_t& last) const {
    if (last != kNoNode && node_is(nodes_[last], key, run)) return last;
    const std::uint32_t h = node_hash(key.chain, key.group, run);
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t slot = h & mask;; slot = (slot + 1) & mask) {
      const Slot& at = slots_[slot];
      if (at.node == kNoNode) return kNoNode;
      if (at.hash == h && node_is(nodes_[at.node], key, run)) return last = at.node;
    }
  }
  // A new, empty node for key's run (the table grown first when due).
  std::uint32_t add_node(const PageKey& key, std::uint32_t run);
  // Frees node n, which lists no block.
  void remove_node(std::uint32_t n);
  // The first block of the list from b cached under the key of that node
  // and offset, or kInvalidBlock (every block a node lists has the node's
  // chain, group and run: the offset tells the keys apart).
  BlockId first_of(BlockId b, std::uint32_t offset) const {
    while (b != kInvalidBlock && entries_[b].offset != offset) b = entries_[b].dup_next;
    return b;
  }
  // Removes cached block b from the index.
  void index_erase(BlockId b);
  // Lists block b (retained already) at place pos of node n, after the
  // blocks cached there before it, and marks it cached under that key.
  void link_cached(std::uint32_t n, std::uint32_t pos, BlockId b, std::uint32_t offset,
                   std::uint64_t tick);

  EvictPolicy policy_;
  std::uint32_t pool_blocks_;
  bool duplicates_;
  // floor(log2(page_tokens)), the page size of the index's placement, and
  // that plus kRunBits.
  std::uint32_t page_shift_;
  std::uint32_t run_shift_;
  std::vector<Entry> entries_;     // by block id, grown on demand
  std::vector<Rank> ranks_;        // fifo, lfu: by block id, as many as entries_
  std::uint32_t entry_count_ = 0;  // entries_.size(), kept apart: read on every operation
  std::vector<Candidate> heap_;    // fifo, lfu: min-heap of candidates, with stale ones
  // lru: the evictable blocks in the order they became evictable, like
  // vLLM's FreeKVCacheBlockQueue, as a queue with lazy deletion: a block
  // joins at the back with a new version, and a slot whose version is not
  // its block's (the block rejoined later) or whose block is no longer
  // evictable (hit or evicted) is stale, skipped at the front and purged with
  // the heap's rule. The same order as a linked list, but eviction reads the
  // queue in order instead of chasing links, and a hit touches no neighbour.
  struct QueueSlot {
    BlockId block;
    std::uint32_t version;
  };
  std::vector<QueueSlot> lru_queue_;
  std::size_t lru_front_ = 0;  // slots before it were evicted or stale
  bool live(const QueueSlot& slot) const {
    const Entry& entry = entries_[slot.block];
    return entry.evictable && entry.version == slot.version;
  }
  // Skips the stale slots at the front; drops the consumed slots once they
  // are most of the queue (amortised O(1)).
  void lru_advance() {
    while (lru_front_ < lru_queue_.size() && !live(lru_queue_[lru_front_])) ++lru_front_;
    if (lru_front_ > kCandidateSlack && 2 * lru_front_ > lru_queue_.size()) {
      lru_queue_.erase(lru_queue_.begin(),
                       lru_queue_.begin() + static_cast<std::ptrdiff_t>(lru_front_));
      lru_front_ = 0;
    }
  }
  // Drops the cache's reference on evictable block b, freeing it.
  void evict_block(BlockId b, BlockPool& pool);
  // Uncaches evictable block b (its reference still held): the part of an
  // eviction before the pool sees it.
  void uncache(BlockId b);
  // The next block to evict (its candidate taken off the heap under fifo and
  // lfu), or kInvalidBlock when none is evictable.
  BlockId take_victim();
  // evict_for_reuse under lru: the first n blocks of the list.
  std::uint32_t evict_lru_for_reuse(BlockPool& pool, std::uint32_t n, std::vector<BlockId>& out);
  // The uncache() of the first `count` (<= evictable_count_) blocks of the lru
  // queue, their slots consumed at once, each handed to taken(b).
  template <typename Taken>
  void uncache_lru_front(std::uint32_t count, Taken&& taken);
  std::uint32_t evictable_count_ = 0;
  std::uint32_t watched_evictable_ = 0;
  std::uint16_t watch_generation_ = 1;  // never 0
  // Eight bytes a slot, so that the index of a large pool stays in cache.
  struct Slot {
    std::uint32_t hash = 0;        // the node's hash
    std::uint32_t node = kNoNode;  // kNoNode: empty
  };
  std::vector<Slot> slots_;
  std::vector<Node> nodes_;                // by node number, the freed ones too
  std::vector<std::uint32_t> free_nodes_;  // freed node numbers, reused last freed first
  std::size_t live_nodes_ = 0;
  // The node found last by find (so find is not thread-safe) and by insert.
  mutable std::uint32_t found_node_ = kNoNode;
  std::uint32_t inserted_node_ = kNoNode;
  std::size_t size_ = 0;  // cached blocks
  std::uint64_t evictions_ = 0;
  std::vector<BlockId> eviction_log_;  // evictions [log_base_, evictions_)
  std::uint64_t log_base_ = 0;
  std::vector<KeyChange>* change_log_ = nullptr;  // see log_changes
  std::vector<BlockId>* evicted_log_ = nullptr;   // see log_evictions
  std::optional<PageKey> log_parent_;
  std::uint64_t log_call_ = 0;  // the caching calls logged (see KeyChange)
  bool in_call_ = false;        // between log_call_begin and log_call_end
};

inline CoreResult<bool> PrefixCache::insert(const PageKey& key, BlockId b, BlockPool& pool,
                                            std::uint64_t tick) {
  RunInserted done;
  if (auto inserted = insert_run(key, 0, {&b, 1}, pool, tick, done); !inserted) {
    return Unexpected{inserted.error()};
  }
  return done.cached == 1;
}

}  // namespace kvreplay
