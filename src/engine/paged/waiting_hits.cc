#include "engine/paged/waiting_hits.h"

#include <fmt/format.h>

namespace kvreplay {

void WaitingHits::track(HitList& list, PrefixCache& cache) {
  // verify made this list the tracked one, and no block was evicted since.
  assert(list.track_id == tracked_ && mark_ == cache.evictions());
  for (std::size_t i = list.watched; i < list.blocks.size(); ++i) {
    const BlockId block = list.blocks[i];
    if (block >= slots_.size()) slots_.resize(std::size_t{block} + 1);
    slots_[block] = Slot{tracked_, static_cast<std::uint32_t>(i)};
    cache.watch(block);
  }
  list.watched = static_cast<std::uint32_t>(list.blocks.size());
}

void WaitingHits::forget(HitList& list, PrefixCache& cache) {
  list.blocks.clear();
  list.watched = 0;
  if (list.track_id == tracked_) {
    cache.unwatch_all();
    tracked_ = 0;  // the next verification is hit by hit
  }
}

std::optional<InvariantViolation> WaitingHits::check(const HitList* tracked,
                                                     const PrefixCache& cache) const {
  if (tracked == nullptr) return std::nullopt;
  if (tracked->track_id != tracked_) {
    return InvariantViolation{"W1", fmt::format("waiting hits: the list checked has track id {}, "
                                                "the tracked one is {}",
                                                tracked->track_id, tracked_)};
  }
  if (tracked->watched > tracked->blocks.size()) {
    return InvariantViolation{"W1", fmt::format("waiting hits: {} watched of {} hits",
                                                tracked->watched, tracked->blocks.size())};
  }
  std::uint32_t watched = 0;
  for (std::uint32_t i = 0; i < tracked->watched; ++i) {
    const BlockId b = tracked->blocks[i];
    if (!cache.is_watched(b)) continue;  // evicted since it was watched
    ++watched;
    if (b >= slots_.size() || slots_[b].owner != tracked_ || slots_[b].pos != i) {
      return InvariantViolation{
          "W1", fmt::format("waiting hits: hit {} (block {}) is watched but recorded {}", i, b,
                            b < slots_.size()
                                ? fmt::format("at {} of list {}", slots_[b].pos, slots_[b].owner)
                                : std::string("nowhere"))};
    }
  }
  const std::uint32_t in_cache = cache.watched_count();
  if (in_cache != watched) {
    return InvariantViolation{"W1", fmt::format("waiting hits: the cache watches {} blocks, {} of "
                                                "them the tracked request's hits",
                                                in_cache, watched)};
  }
  return std::nullopt;
}

}  // namespace kvreplay
