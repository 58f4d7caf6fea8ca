// OffloadTier: one tier of KV kept beyond the GPU (host DRAM, or a disk), as
// vLLM's native offloading keeps it (vllm/v1/kv_offload/: CPUOffloadingManager
// in cpu/manager.py, LRUCachePolicy and ARCCachePolicy in cpu/policies/). It
// holds whole blocks (one GPU page each), named by kvreplay's chained 64-bit
// block keys, in a fixed number of slots.
//
// Each block is in one of three states (vLLM's BlockStatus.ref_cnt):
//   writing  (ref_cnt -1): a store is in flight; not readable, not evictable;
//   ready    (ref_cnt 0):  readable and evictable;
//   reading  (ref_cnt n>0): n loads are in flight; readable, not evictable.
//
// The operations follow OffloadingManager's, each failure-atomic: one that
// cannot do all it was asked changes nothing.
//   lookup         the run of ready blocks from the first key;
//   prepare_store  the keys not yet present get a slot each (state writing),
//                  evicting ready blocks by the policy when the free slots do
//                  not suffice; nullopt, nothing changed, when fewer ready
//                  blocks than needed can be evicted (a key of this very call
//                  is never evicted);
//   complete_store writing -> ready (a key no longer writing is ignored);
//   prepare_load   every key ready or reading -> one more load; an error,
//                  nothing changed, when a key is absent or still writing;
//   complete_load  one load fewer;
//   touch          the policy's recency update, the keys walked last first
//                  (so a request's first block ends up most recent).
// Events (take_events) are the manager's OffloadingEvent: one "removed" event
// per prepare_store that evicted, listing the evicted keys in eviction order,
// and one "stored" event per complete_store that readied any key.
//
// Policies:
//   lru  one queue from least to most recently used; insert and touch move a
//        key to the most recent end; evict takes the first evictable blocks
//        from the least recent end.
//   arc  T1 (seen once), T2 (seen again), their ghosts B1 and B2 (keys only,
//        each trimmed to the capacity), and a target size for T1 starting at
//        0. Insert puts a key at T1's recent end and drops it from B1/B2.
//        touch: a ready T1 key moves to T2's recent end, a writing T1 key to
//        T1's recent end, a T2 key to T2's recent end; a B1 ghost raises the
//        target by max(1, |B2|/|B1|) (capped at the capacity), a B2 ghost
//        lowers it by max(1, |B1|/|B2|) (floored at 0), and moves to its
//        list's recent end. Evict picks one block at a time: from T1's least
//        recent end while the T1 size not yet picked is at least int(target),
//        else (or when T1 has none evictable) from T2's; the picks from T1
//        go to B1, those from T2 to B2.
//
// Invariants, which check() verifies by recounting:
//   T1 every key is in exactly one slot and every used slot holds one key;
//      no slot past the capacity; used() + free slots == capacity.
//   T2 every key is in the policy's lists exactly once (arc: in T1 or T2,
//      and a ghost is in neither T1 nor T2, nor in both ghosts).
//   T3 evictable() is the number of ready blocks; reading blocks have a
//      positive count of loads in flight.
//   T4 (arc) 0 <= target <= capacity, each ghost list at most the capacity.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/invariants.h"

namespace kvreplay {

enum class OffloadPolicy : std::uint8_t { kLru, kArc };
std::string_view to_string(OffloadPolicy policy);
std::optional<OffloadPolicy> parse_offload_policy(std::string_view name);

// The manager's OffloadingEvent: keys stored (ready) or removed (evicted).
struct OffloadEvent {
  std::vector<std::uint64_t> keys;
  bool removed = false;
  bool operator==(const OffloadEvent&) const = default;
};

class OffloadTier {
 public:
  OffloadTier(OffloadPolicy policy, std::uint32_t capacity_blocks);
  ~OffloadTier();
  OffloadTier(OffloadTier&&) noexcept;
  OffloadTier& operator=(OffloadTier&&) noexcept;

  OffloadPolicy policy() const;
  std::uint32_t capacity() const;
  std::uint32_t used() const;              // slots holding a block, in any state
  std::uint32_t evictable() const;         // ready blocks
  bool contains(std::uint64_t key) const;  // in any state
  bool ready(std::uint64_t key) const;     // ready or reading
  // The keys ready or reading, sorted (what the tier's KV events say it holds).
  std::vector<std::uint64_t> ready_keys() const;
  // The slot holding key (for byte-verified tiers), or nullopt.
  std::optional<std::uint32_t> slot_of(std::uint64_t key) const;

  // How many keys from keys[0] on are ready or reading, stopping at the
  // first that is absent or writing.
  std::uint32_t lookup(std::span<const std::uint64_t> keys) const;

  struct StorePlan {
    std::vector<std::uint64_t> stored;   // the keys given a slot, in key order
    std::vector<std::uint32_t> slots;    // their slots
    std::vector<std::uint64_t> evicted;  // the keys evicted for them, in eviction order
  };
  // See the top of this file. Keys already present (in any state) are left
  // as they are; a key repeated in `keys` is stored once.
  std::optional<StorePlan> prepare_store(std::span<const std::uint64_t> keys);
  // Writing keys become ready; others are ignored. Returns how many did.
  std::uint32_t complete_store(std::span<const std::uint64_t> keys);
  // A failed store: writing keys are dropped, their slots freed, no event.
  void abort_store(std::span<const std::uint64_t> keys);
  // kBlockNotLive, nothing changed, when a key is absent or writing.
  CoreStatus prepare_load(std::span<const std::uint64_t> keys);
  // kBlockNotLive, nothing changed, when a key has no load in flight.
  CoreStatus complete_load(std::span<const std::uint64_t> keys);
  void touch(std::span<const std::uint64_t> keys);
  // The events since the last call, oldest first.
  std::vector<OffloadEvent> take_events();

  // Figures since construction.
  std::uint64_t stored_blocks() const;   // keys readied by complete_store
  std::uint64_t evicted_blocks() const;  // keys evicted by prepare_store

  // T1-T4 (see the top of this file): the first violation, or nullopt.
  std::optional<InvariantViolation> check() const;

  // Tests plant faults through this.
  friend struct OffloadTierFaults;

 private:
  struct State;  // defined below, for OffloadTierFaults' sake
  std::unique_ptr<State> state_;
};

// The tier's state (private to OffloadTier: only its own code and
// OffloadTierFaults can name it). Every key in `entries` is in one policy
// list, its node at `at`; lru uses lists[0] alone, arc lists[0] as T1 and
// lists[1] as T2, ghosts[0] as B1 and ghosts[1] as B2 (least recent first).
struct OffloadTier::State {
  using Queue = std::list<std::uint64_t>;
  struct Entry {
    std::uint32_t slot = 0;
    std::int32_t ref = -1;  // -1 writing, 0 ready, n > 0 reading (n loads)
    std::uint8_t list = 0;  // index into lists
    Queue::iterator at;
  };
  struct Ghost {
    std::uint8_t list = 0;  // index into ghosts
    Queue::iterator at;
  };

  OffloadPolicy policy = OffloadPolicy::kLru;
  std::uint32_t capacity = 0;
  std::unordered_map<std::uint64_t, Entry> entries;
  std::array<Queue, 2> lists;
  std::array<Queue, 2> ghosts;
  std::unordered_map<std::uint64_t, Ghost> ghost_of;
  double target = 0;  // arc: T1's target size
  // Slots: [0, next_slot) have been used; of those, `freed` (a LIFO stack)
  // are free again, the others hold slot_key[slot].
  std::uint32_t next_slot = 0;
  std::vector<std::uint32_t> freed;
  std::vector<std::optional<std::uint64_t>> slot_key;
  std::uint32_t evictable = 0;  // entries with ref 0
  std::vector<OffloadEvent> events;
  std::uint64_t stored = 0;
  std::uint64_t evicted = 0;

  std::uint32_t free_slots() const;
  std::uint32_t take_slot();
  void insert(std::uint64_t key);
  void remove(std::uint64_t key);
  void add_ghost(std::uint64_t key, std::uint8_t which);
  void drop_ghost(std::uint64_t key);
  void trim_ghosts();
  void move_to_recent(std::uint64_t key, Entry& entry, std::uint8_t list);
  // The policy's n victims (key, list), or nullopt; `protect` is sorted.
  std::optional<std::vector<std::pair<std::uint64_t, std::uint8_t>>> pick_victims(
      std::size_t n, const std::vector<std::uint64_t>& protect) const;
  std::optional<InvariantViolation> check() const;
};

}  // namespace kvreplay
