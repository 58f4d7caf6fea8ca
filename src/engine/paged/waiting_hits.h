// WaitingHits: a waiting request's prefix-cache hits, kept across its
// admission attempts instead of searched again each time.
//
// A request that cannot be admitted now (too few free blocks) is tried again
// every step. Its hits are found once; on each later attempt only the blocks
// evicted since are looked at (PrefixCache::evicted_since), since a block
// stops being cached only by eviction. One request at a time is "tracked":
// the one verified last, normally the head of the queue. Its hits are watched
// in the cache, so that how many of them are evictable (and would be counted
// twice as room: once as free, once as hits) is read in O(1).
//
// Invariant W1 (check()): the blocks the cache watches are exactly the tracked
// list's first `watched` hits that are still cached (an eviction unwatches a
// block), each recorded at its position in the list.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/block_pool.h"
#include "core/invariants.h"
#include "engine/paged/prefix_cache.h"

namespace kvreplay {

// One waiting request's hits.
struct HitList {
  std::vector<BlockId> blocks;  // the hit pages' blocks, page 0 first
  std::uint64_t track_id = 0;   // names this list while tracked; 0: never tracked
  std::uint32_t watched = 0;    // the leading hits watched so far (track)
};

class WaitingHits {
 public:
  // Keeps the leading hits of the list's last attempt that are still cached
  // under their keys (key_of(page) is the key of page `page`). For the
  // tracked list, only the blocks evicted since are looked at; any other is
  // verified hit by hit and becomes the tracked one.
  template <class KeyOf>
  void verify(HitList& list, PrefixCache& cache, KeyOf key_of);
  // Watches the tracked list's hits not watched yet. Done only once its
  // admission is not settled by the free blocks alone: a request admitted at
  // its first attempt never needs its hits watched.
  void track(HitList& list, PrefixCache& cache);
  // Clears an admitted request's hits; when it was the tracked one, none is.
  void forget(HitList& list, PrefixCache& cache);
  // The track id of the tracked list, 0 when none is.
  std::uint64_t tracked() const { return tracked_; }
  // W1 against the tracked list (nullptr: the engine holds none, and nothing is checked).
  std::optional<InvariantViolation> check(const HitList* tracked, const PrefixCache& cache) const;

 private:
  friend struct WaitingHitsFaults;  // tests plant faults through it
  struct Slot {
    std::uint64_t owner = 0;  // the track id of the list holding the block
    std::uint32_t pos = 0;    // its place in that list
  };
  std::vector<Slot> slots_;  // by block
  std::uint64_t tracked_ = 0;
  std::uint64_t last_track_id_ = 0;
  std::uint64_t mark_ = 0;  // cache.evictions() when the tracked list was verified
};

template <class KeyOf>
void WaitingHits::verify(HitList& list, PrefixCache& cache, KeyOf key_of) {
  std::vector<BlockId>& hits = list.blocks;
  std::size_t valid = hits.size();
  std::optional<std::span<const BlockId>> evicted;
  if (list.track_id != 0 && list.track_id == tracked_) evicted = cache.evicted_since(mark_);
  if (evicted) {
    for (BlockId b : *evicted) {
      if (b >= slots_.size()) continue;
      const Slot& slot = slots_[b];
      if (slot.owner == tracked_ && slot.pos < valid && hits[slot.pos] == b) valid = slot.pos;
    }
    for (std::size_t i = valid; i < hits.size(); ++i) cache.unwatch(hits[i]);
  } else {
    // This list becomes the tracked one: its hits, and only they, watched
    // (once track runs).
    cache.unwatch_all();
    valid = 0;
    while (valid < hits.size() &&
           cache.cached_as(hits[valid], key_of(static_cast<std::uint32_t>(valid)))) {
      ++valid;
    }
    list.track_id = tracked_ = ++last_track_id_;  // never reused
  }
  // A list verified again is one whose last attempt failed: track ran.
  assert(!evicted || list.watched == hits.size());
  hits.resize(valid);
  list.watched = evicted ? static_cast<std::uint32_t>(valid) : 0;
  mark_ = cache.evictions();
}

}  // namespace kvreplay
