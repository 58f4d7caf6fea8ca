// OffloadTier: vLLM's CPUOffloadingManager (vllm/v1/kv_offload/cpu/manager.py)
// with its LRUCachePolicy (cpu/policies/lru.py) and ARCCachePolicy
// (cpu/policies/arc.py). See offload_tier.h for the rules.
#include "engine/offload/offload_tier.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>
#include <utility>

namespace kvreplay {

namespace {

constexpr std::uint8_t kT1 = 0;  // lru's one list, or arc's T1 (B1 among ghosts)
constexpr std::uint8_t kT2 = 1;  // arc's T2 (B2 among ghosts)

}  // namespace

std::string_view to_string(OffloadPolicy policy) {
  switch (policy) {
    case OffloadPolicy::kLru: return "lru";
    case OffloadPolicy::kArc: return "arc";
  }
  return "?";
}

std::optional<OffloadPolicy> parse_offload_policy(std::string_view name) {
  if (name == "lru") return OffloadPolicy::kLru;
  if (name == "arc") return OffloadPolicy::kArc;
  return std::nullopt;
}

// ---- State ------------------------------------------------------------------

// CPUOffloadingManager._get_num_free_blocks: the never-used slots and the freed.
std::uint32_t OffloadTier::State::free_slots() const {
  return capacity - next_slot + static_cast<std::uint32_t>(freed.size());
}

// CPUOffloadingManager._allocate_blocks: never-used slots first, then the
// free list, last freed first.
std::uint32_t OffloadTier::State::take_slot() {
  if (next_slot < capacity) {
    slot_key.emplace_back();
    return next_slot++;
  }
  const std::uint32_t slot = freed.back();
  freed.pop_back();
  return slot;
}

// A new key, writing, at the recent end of lru's list or arc's T1
// (ARCCachePolicy.insert also forgets its ghost).
void OffloadTier::State::insert(std::uint64_t key) {
  Entry entry;
  entry.slot = take_slot();
  entry.ref = -1;
  entry.list = kT1;
  entry.at = lists[kT1].insert(lists[kT1].end(), key);
  slot_key[entry.slot] = key;
  entries.emplace(key, entry);
  if (policy == OffloadPolicy::kArc) drop_ghost(key);
}

// Drops a key from the policy and frees its slot (CPUOffloadingManager._free_block).
void OffloadTier::State::remove(std::uint64_t key) {
  auto it = entries.find(key);
  const Entry& entry = it->second;
  lists[entry.list].erase(entry.at);
  slot_key[entry.slot].reset();
  freed.push_back(entry.slot);
  if (entry.ref == 0) --evictable;
  entries.erase(it);
}

void OffloadTier::State::add_ghost(std::uint64_t key, std::uint8_t which) {
  drop_ghost(key);
  ghost_of[key] = Ghost{which, ghosts[which].insert(ghosts[which].end(), key)};
}

void OffloadTier::State::drop_ghost(std::uint64_t key) {
  auto it = ghost_of.find(key);
  if (it == ghost_of.end()) return;
  ghosts[it->second.list].erase(it->second.at);
  ghost_of.erase(it);
}

// ARCCachePolicy.evict_until: each ghost list cut from its least recent end
// down to the capacity.
void OffloadTier::State::trim_ghosts() {
  for (Queue& ghost : ghosts) {
    while (ghost.size() > capacity) {
      ghost_of.erase(ghost.front());
      ghost.pop_front();
    }
  }
}

void OffloadTier::State::move_to_recent(std::uint64_t key, Entry& entry, std::uint8_t list) {
  (void)key;
  // Spliced, not erased and reinserted: the node (and entry.at) stays, and a
  // touch of a long prefix allocates nothing.
  lists[list].splice(lists[list].end(), lists[entry.list], entry.at);
  entry.list = list;
}

// LRUCachePolicy.evict / ARCCachePolicy.evict_until: candidates are ready
// (ref 0) and not protected; picked without changing anything, so a failure
// leaves the tier as it was. Each list is scanned once, from its least recent
// end: the cost is the picked plus the skipped.
std::optional<std::vector<std::pair<std::uint64_t, std::uint8_t>>> OffloadTier::State::pick_victims(
    std::size_t n, const std::vector<std::uint64_t>& protect) const {
  std::vector<std::pair<std::uint64_t, std::uint8_t>> picked;
  picked.reserve(n);
  auto eligible = [&](std::uint64_t key) {
    return entries.at(key).ref == 0 && !std::binary_search(protect.begin(), protect.end(), key);
  };
  std::array<Queue::const_iterator, 2> next{lists[kT1].begin(), lists[kT2].begin()};
  // The next eligible key of a list, or false when it has none left.
  auto advance = [&](std::uint8_t list) {
    while (next[list] != lists[list].end() && !eligible(*next[list])) ++next[list];
    return next[list] != lists[list].end();
  };
  if (policy == OffloadPolicy::kLru) {
    while (picked.size() < n && advance(kT1)) picked.emplace_back(*next[kT1]++, kT1);
  } else {
    // From T1 while the size of T1 not yet picked is at least int(target),
    // else (or when T1 has none eligible) from T2; none in T2 fails.
    std::size_t t1_left = lists[kT1].size();
    while (picked.size() < n) {
      if (t1_left >= static_cast<std::size_t>(target) && advance(kT1)) {
        picked.emplace_back(*next[kT1]++, kT1);
        --t1_left;
      } else if (advance(kT2)) {
        picked.emplace_back(*next[kT2]++, kT2);
      } else {
        break;
      }
    }
  }
  if (picked.size() < n) return std::nullopt;
  return picked;
}

// ---- OffloadTier ------------------------------------------------------------

OffloadTier::OffloadTier(OffloadPolicy policy, std::uint32_t capacity_blocks)
    : state_(std::make_unique<State>()) {
  state_->policy = policy;
  state_->capacity = capacity_blocks;
}
OffloadTier::~OffloadTier() = default;
OffloadTier::OffloadTier(OffloadTier&&) noexcept = default;
OffloadTier& OffloadTier::operator=(OffloadTier&&) noexcept = default;

OffloadPolicy OffloadTier::policy() const {
  return state_->policy;
}
std::uint32_t OffloadTier::capacity() const {
  return state_->capacity;
}
std::uint32_t OffloadTier::used() const {
  return static_cast<std::uint32_t>(state_->entries.size());
}
std::uint32_t OffloadTier::evictable() const {
  return state_->evictable;
}
bool OffloadTier::contains(std::uint64_t key) const {
  return state_->entries.contains(key);
}

// BlockStatus.is_ready: ref_cnt >= 0.
bool OffloadTier::ready(std::uint64_t key) const {
  auto it = state_->entries.find(key);
  return it != state_->entries.end() && it->second.ref >= 0;
}

std::vector<std::uint64_t> OffloadTier::ready_keys() const {
  std::vector<std::uint64_t> out;
  for (const auto& [key, entry] : state_->entries) {
    if (entry.ref >= 0) out.push_back(key);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::uint32_t> OffloadTier::slot_of(std::uint64_t key) const {
  auto it = state_->entries.find(key);
  if (it == state_->entries.end()) return std::nullopt;
  return it->second.slot;
}

// OffloadingManager.lookup (the count form): ready keys from the first.
std::uint32_t OffloadTier::lookup(std::span<const std::uint64_t> keys) const {
  std::uint32_t n = 0;
  while (n < keys.size() && ready(keys[n])) ++n;
  return n;
}

// CPUOffloadingManager.prepare_store.
std::optional<OffloadTier::StorePlan> OffloadTier::prepare_store(
    std::span<const std::uint64_t> keys) {
  State& s = *state_;
  StorePlan plan;
  std::unordered_set<std::uint64_t> seen;
  for (std::uint64_t key : keys) {
    if (!s.entries.contains(key) && seen.insert(key).second) plan.stored.push_back(key);
  }
  if (plan.stored.empty()) return plan;
  const std::uint32_t free = s.free_slots();
  if (plan.stored.size() > free) {
    const std::size_t need = plan.stored.size() - free;
    if (need > s.evictable) return std::nullopt;
    // The input's keys already present stay (protected).
    std::vector<std::uint64_t> protect(keys.begin(), keys.end());
    std::sort(protect.begin(), protect.end());
    auto victims = s.pick_victims(need, protect);
    if (!victims) return std::nullopt;
    plan.evicted.reserve(victims->size());
    for (const auto& [key, list] : *victims) {
      s.remove(key);
      if (s.policy == OffloadPolicy::kArc) s.add_ghost(key, list);
      plan.evicted.push_back(key);
    }
    if (s.policy == OffloadPolicy::kArc) s.trim_ghosts();
    s.evicted += plan.evicted.size();
    s.events.push_back(OffloadEvent{plan.evicted, true});
  }
  plan.slots.reserve(plan.stored.size());
  for (std::uint64_t key : plan.stored) {
    s.insert(key);
    plan.slots.push_back(s.entries.at(key).slot);
  }
  return plan;
}

// CPUOffloadingManager.complete_store(success=True).
std::uint32_t OffloadTier::complete_store(std::span<const std::uint64_t> keys) {
  State& s = *state_;
  OffloadEvent event;
  for (std::uint64_t key : keys) {
    auto it = s.entries.find(key);
    if (it == s.entries.end() || it->second.ref != -1) continue;
    it->second.ref = 0;
    ++s.evictable;
    event.keys.push_back(key);
  }
  const auto n = static_cast<std::uint32_t>(event.keys.size());
  s.stored += n;
  if (n > 0) s.events.push_back(std::move(event));
  return n;
}

// CPUOffloadingManager.complete_store(success=False).
void OffloadTier::abort_store(std::span<const std::uint64_t> keys) {
  State& s = *state_;
  for (std::uint64_t key : keys) {
    auto it = s.entries.find(key);
    if (it != s.entries.end() && it->second.ref == -1) s.remove(key);
  }
}

// CPUOffloadingManager.prepare_load, its asserts checked first.
CoreStatus OffloadTier::prepare_load(std::span<const std::uint64_t> keys) {
  State& s = *state_;
  for (std::uint64_t key : keys) {
    if (!ready(key)) return Unexpected{CoreError::kBlockNotLive};
  }
  for (std::uint64_t key : keys) {
    State::Entry& entry = s.entries.at(key);
    if (entry.ref == 0) --s.evictable;
    ++entry.ref;
  }
  return {};
}

// CPUOffloadingManager.complete_load, its asserts checked first (a key
// repeated needs as many loads in flight).
CoreStatus OffloadTier::complete_load(std::span<const std::uint64_t> keys) {
  State& s = *state_;
  std::unordered_map<std::uint64_t, std::int32_t> wanted;
  for (std::uint64_t key : keys) {
    auto it = s.entries.find(key);
    if (it == s.entries.end() || it->second.ref < ++wanted[key]) {
      return Unexpected{CoreError::kBlockNotLive};
    }
  }
  for (std::uint64_t key : keys) {
    State::Entry& entry = s.entries.at(key);
    if (--entry.ref == 0) ++s.evictable;
  }
  return {};
}

// LRUCachePolicy.touch / ARCCachePolicy.touch: the keys walked last first.
void OffloadTier::touch(std::span<const std::uint64_t> keys) {
  State& s = *state_;
  if (s.policy == OffloadPolicy::kLru) {
    // Each key moved to the recent end, the last first. A run of keys whose
    // nodes already follow one another in the queue, in the order walked, is
    // moved as one splice (the same order as moving them one by one): a
    // request's prefix, touched at each of its stores, is mostly such a run,
    // so a touch costs a lookup per run, not per key.
    State::Queue& queue = s.lists[kT1];
    std::size_t i = keys.size();
    while (i > 0) {
      auto it = s.entries.find(keys[i - 1]);
      --i;
      if (it == s.entries.end()) continue;
      const State::Queue::iterator first = it->second.at;
      State::Queue::iterator last = std::next(first);
      while (i > 0 && last != queue.end() && *last == keys[i - 1]) {
        ++last;
        --i;
      }
      queue.splice(queue.end(), queue, first, last);
    }
    return;
  }
  for (auto k = keys.rbegin(); k != keys.rend(); ++k) {
    const std::uint64_t key = *k;
    auto it = s.entries.find(key);
    if (it != s.entries.end()) {
      State::Entry& entry = it->second;
      // arc: a T1 block still being written stays in T1 (it was only just
      // stored, not seen twice); any other cached block goes to T2.
      const bool to_t2 = s.policy == OffloadPolicy::kArc && (entry.list == kT2 || entry.ref >= 0);
      s.move_to_recent(key, entry, to_t2 ? kT2 : kT1);
      continue;
    }
    if (s.policy != OffloadPolicy::kArc) continue;
    auto ghost = s.ghost_of.find(key);
    if (ghost == s.ghost_of.end()) continue;
    const auto b1 = static_cast<double>(s.ghosts[kT1].size());
    const auto b2 = static_cast<double>(s.ghosts[kT2].size());
    const auto cap = static_cast<double>(s.capacity);
    const std::uint8_t which = ghost->second.list;
    if (which == kT1) {
      s.target = std::min(s.target + std::max(1.0, b2 / b1), cap);
    } else {
      s.target = std::max(s.target - std::max(1.0, b1 / b2), 0.0);
    }
    s.ghosts[which].erase(ghost->second.at);
    ghost->second.at = s.ghosts[which].insert(s.ghosts[which].end(), key);
  }
}

std::vector<OffloadEvent> OffloadTier::take_events() {
  return std::exchange(state_->events, {});
}

std::uint64_t OffloadTier::stored_blocks() const {
  return state_->stored;
}
std::uint64_t OffloadTier::evicted_blocks() const {
  return state_->evicted;
}

std::optional<InvariantViolation> OffloadTier::check() const {
  return state_->check();
}

// T1-T4, recounted from the lists and the slot table; never trusts the
// counters it checks.
std::optional<InvariantViolation> OffloadTier::State::check() const {
  auto fail = [](const char* invariant, std::string message) {
    return InvariantViolation{invariant, std::move(message)};
  };

  // T1: slots.
  if (next_slot > capacity || slot_key.size() != next_slot) {
    return fail("T1", fmt::format("{} slots used of {} ({} in the slot table)", next_slot, capacity,
                                  slot_key.size()));
  }
  for (const auto& [key, entry] : entries) {
    if (entry.slot >= next_slot) {
      return fail("T1", fmt::format("block {:#x}: slot {} is past the {} slots used of {}", key,
                                    entry.slot, next_slot, capacity));
    }
    const std::optional<std::uint64_t>& holder = slot_key[entry.slot];
    if (holder != key) {
      return fail("T1", holder ? fmt::format("block {:#x}: its slot {} holds block {:#x}", key,
                                             entry.slot, *holder)
                               : fmt::format("block {:#x}: its slot {} is empty", key, entry.slot));
    }
  }
  std::vector<std::uint8_t> on_free(next_slot, 0);
  for (std::uint32_t slot : freed) {
    if (slot >= next_slot) {
      return fail("T1", fmt::format("free slot {} was never used ({} used)", slot, next_slot));
    }
    if (on_free[slot]++ != 0) return fail("T1", fmt::format("slot {} is free twice", slot));
    if (slot_key[slot]) {
      return fail("T1",
                  fmt::format("free slot {} holds block {:#x}", slot, slot_key[slot].value()));
    }
  }
  std::size_t held = 0;
  for (std::uint32_t slot = 0; slot < next_slot; ++slot) {
    if (!slot_key[slot]) {
      if (on_free[slot] == 0)
        return fail("T1", fmt::format("slot {} is lost: empty, not free", slot));
      continue;
    }
    ++held;
    auto it = entries.find(*slot_key[slot]);
    if (it == entries.end() || it->second.slot != slot) {
      return fail("T1", fmt::format("slot {} holds block {:#x}, which is not in it", slot,
                                    slot_key[slot].value()));
    }
  }
  if (held != entries.size() || held + free_slots() != capacity) {
    return fail("T1", fmt::format("{} blocks, {} slots held, {} free, capacity {}", entries.size(),
                                  held, free_slots(), capacity));
  }

  // T2: every block once in the policy's lists; ghosts apart.
  const std::size_t num_lists = policy == OffloadPolicy::kArc ? 2 : 1;
  std::unordered_set<std::uint64_t> listed;
  for (std::uint8_t list = 0; list < lists.size(); ++list) {
    for (auto node = lists[list].begin(); node != lists[list].end(); ++node) {
      const std::uint64_t key = *node;
      auto it = entries.find(key);
      if (list >= num_lists) {
        return fail("T2", fmt::format("block {:#x} is in list {}, which lru lacks", key, list));
      }
      if (it == entries.end()) {
        return fail("T2", fmt::format("block {:#x} is listed but not in the tier", key));
      }
      if (!listed.insert(key).second || it->second.list != list || it->second.at != node) {
        return fail("T2", fmt::format("block {:#x} is listed more than once", key));
      }
    }
  }
  if (listed.size() != entries.size()) {
    for (const auto& [key, entry] : entries) {
      if (!listed.contains(key)) {
        return fail("T2", fmt::format("block {:#x} is in no policy list", key));
      }
    }
  }
  std::size_t ghosts_listed = 0;
  for (std::uint8_t which = 0; which < ghosts.size(); ++which) {
    for (auto node = ghosts[which].begin(); node != ghosts[which].end(); ++node) {
      const std::uint64_t key = *node;
      const char* name = which == kT1 ? "B1" : "B2";
      if (policy != OffloadPolicy::kArc) {
        return fail("T2", fmt::format("lru holds ghost {:#x}", key));
      }
      if (entries.contains(key)) {
        return fail("T2", fmt::format("ghost {:#x} in {} is also cached", key, name));
      }
      auto it = ghost_of.find(key);
      if (it == ghost_of.end() || it->second.list != which || it->second.at != node) {
        return fail("T2", fmt::format("ghost {:#x} in {} is listed twice", key, name));
      }
      ++ghosts_listed;
    }
  }
  if (ghosts_listed != ghost_of.size()) {
    return fail("T2", fmt::format("{} ghosts listed, {} known", ghosts_listed, ghost_of.size()));
  }

  // T3: evictable() is the ready blocks; no count below writing's -1.
  std::uint32_t ready = 0;
  for (const auto& [key, entry] : entries) {
    if (entry.ref < -1) {
      return fail("T3", fmt::format("block {:#x} has {} loads in flight", key, entry.ref));
    }
    if (entry.ref == 0) ++ready;
  }
  if (ready != evictable) {
    return fail("T3", fmt::format("{} blocks evictable but {} ready", evictable, ready));
  }

  // T4: arc's target and ghost lists within the capacity.
  if (!(target >= 0 && target <= static_cast<double>(capacity))) {
    return fail("T4", fmt::format("target {} outside [0, {}]", target, capacity));
  }
  for (std::uint8_t which = 0; which < ghosts.size(); ++which) {
    if (ghosts[which].size() > capacity) {
      return fail("T4", fmt::format("{} holds {} ghosts, past the capacity {}",
                                    which == kT1 ? "B1" : "B2", ghosts[which].size(), capacity));
    }
  }
  return std::nullopt;
}

}  // namespace kvreplay
