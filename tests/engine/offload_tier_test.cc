// OffloadTier: vLLM's CPUOffloadingManager rules under LRU and ARC (eviction
// order, protection, pinned blocks, slot reuse, events), failure atomicity of
// every refusal, a randomized comparison with a naive reference, and check()
// catching each planted fault.
#include "engine/offload/offload_tier.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace kvreplay {

// Reaches into the tier's state: reads ARC's figures, plants faults.
struct OffloadTierFaults {
  using State = OffloadTier::State;
  static State& state(OffloadTier& tier) { return *tier.state_; }
  static const State& state(const OffloadTier& tier) { return *tier.state_; }

  static double target(const OffloadTier& tier) { return state(tier).target; }
  static std::vector<std::uint64_t> ghosts(const OffloadTier& tier, int which) {
    const auto& list = state(tier).ghosts[static_cast<std::size_t>(which)];
    return {list.begin(), list.end()};
  }
  static std::vector<std::uint64_t> list(const OffloadTier& tier, int which) {
    const auto& list = state(tier).lists[static_cast<std::size_t>(which)];
    return {list.begin(), list.end()};
  }

  // T1
  static void share_slot(OffloadTier& tier, std::uint64_t a, std::uint64_t b) {
    State& s = state(tier);
    s.entries.at(b).slot = s.entries.at(a).slot;
  }
  static void slot_past_capacity(OffloadTier& tier, std::uint64_t a) {
    state(tier).entries.at(a).slot = state(tier).capacity + 3;
  }
  static void leak_free_slot(OffloadTier& tier) {
    REQUIRE(!state(tier).freed.empty());
    state(tier).freed.pop_back();
  }
  static void free_used_slot(OffloadTier& tier, std::uint64_t a) {
    state(tier).freed.push_back(state(tier).entries.at(a).slot);
  }
  // T2
  static void unlist(OffloadTier& tier, std::uint64_t a) {
    State& s = state(tier);
    const State::Entry& e = s.entries.at(a);
    s.lists[e.list].erase(e.at);
  }
  static void list_twice(OffloadTier& tier, std::uint64_t a) { state(tier).lists[0].push_back(a); }
  static void ghost_cached(OffloadTier& tier, std::uint64_t a) { state(tier).add_ghost(a, 0); }
  static void ghost_in_both(OffloadTier& tier, std::uint64_t ghost) {
    State& s = state(tier);
    REQUIRE(s.ghost_of.contains(ghost));
    s.ghosts[1 - s.ghost_of.at(ghost).list].push_back(ghost);
  }
  // T3
  static void miscount_evictable(OffloadTier& tier) { ++state(tier).evictable; }
  static void corrupt_ref(OffloadTier& tier, std::uint64_t a) {
    State& s = state(tier);
    if (s.entries.at(a).ref == 0) --s.evictable;  // keep the count right: only the ref is bad
    s.entries.at(a).ref = -2;
  }
  // T4
  static void set_target(OffloadTier& tier, double target) { state(tier).target = target; }
  static void overfill_ghosts(OffloadTier& tier) {
    State& s = state(tier);
    for (std::uint64_t k = 0; k <= s.capacity; ++k) s.add_ghost(900000 + k, 1);
  }
};

}  // namespace kvreplay

namespace {

using kvreplay::OffloadEvent;
using kvreplay::OffloadPolicy;
using kvreplay::OffloadTier;
using kvreplay::OffloadTierFaults;
using Keys = std::vector<std::uint64_t>;

// Stores keys and completes the store: they end ready.
void put(OffloadTier& tier, const Keys& keys) {
  auto plan = tier.prepare_store(keys);
  REQUIRE(plan);
  tier.complete_store(keys);
}

// The keys evicted by storing keys (and completing them).
Keys evicted_by(OffloadTier& tier, const Keys& keys) {
  auto plan = tier.prepare_store(keys);
  REQUIRE(plan);
  tier.complete_store(keys);
  return plan->evicted;
}

std::string caught(const OffloadTier& tier) {
  auto found = tier.check();
  return found ? found->invariant : std::string("none");
}

OffloadEvent stored(Keys keys) {
  return OffloadEvent{std::move(keys), false};
}
OffloadEvent removed(Keys keys) {
  return OffloadEvent{std::move(keys), true};
}

// ---- policy names ------------------------------------------------------------

TEST_CASE("offload tier: policy names round-trip, unknown ones are refused",
          "[offload][offload_tier]") {
  CHECK(to_string(OffloadPolicy::kLru) == "lru");
  CHECK(to_string(OffloadPolicy::kArc) == "arc");
  CHECK(kvreplay::parse_offload_policy("lru") == OffloadPolicy::kLru);
  CHECK(kvreplay::parse_offload_policy("arc") == OffloadPolicy::kArc);
  CHECK_FALSE(kvreplay::parse_offload_policy("LRU"));
  CHECK_FALSE(kvreplay::parse_offload_policy("fifo"));
  CHECK_FALSE(kvreplay::parse_offload_policy(""));
}

// ---- LRU ---------------------------------------------------------------------

TEST_CASE("offload tier lru: touch walks last first, eviction from the least recent, slots LIFO",
          "[offload][offload_tier]") {
  OffloadTier tier(OffloadPolicy::kLru, 4);
  auto first = tier.prepare_store(Keys{1, 2, 3, 4});
  REQUIRE(first);
  CHECK(first->stored == Keys{1, 2, 3, 4});
  CHECK(first->slots == std::vector<std::uint32_t>{0, 1, 2, 3});  // never-used slots in order
  CHECK(first->evicted.empty());
  CHECK(tier.complete_store(Keys{1, 2, 3, 4}) == 4);
  // [1 2 3 4]; touch {3, 1}: 1 then 3 to the recent end -> [2 4 1 3].
  tier.touch(Keys{3, 1});
  auto plan = tier.prepare_store(Keys{5, 6, 7});
  REQUIRE(plan);
  CHECK(plan->evicted == Keys{2, 4, 1});
  // Freed in eviction order (slots 1, 3, 0), reused last freed first.
  CHECK(plan->slots == std::vector<std::uint32_t>{0, 3, 1});
  CHECK(tier.slot_of(5) == 0u);
  CHECK(tier.slot_of(7) == 1u);
  CHECK(tier.slot_of(3) == 2u);
  CHECK_FALSE(tier.slot_of(2));
  CHECK(tier.used() == 4);
  CHECK(tier.evictable() == 1);  // 3; the new ones are writing
  CHECK(tier.evicted_blocks() == 3);
  CHECK_FALSE(tier.check());
}

TEST_CASE("offload tier lru: a key of the store itself is never evicted",
          "[offload][offload_tier]") {
  OffloadTier tier(OffloadPolicy::kLru, 4);
  put(tier, Keys{1, 2, 3, 4});
  // 1 is the least recent but is in the input: 2 goes instead.
  auto plan = tier.prepare_store(Keys{1, 5});
  REQUIRE(plan);
  CHECK(plan->stored == Keys{5});
  CHECK(plan->evicted == Keys{2});
  CHECK(tier.contains(1));
  CHECK(tier.ready(1));
  // A repeated key is stored once.
  put(tier, Keys{5});
  auto twice = tier.prepare_store(Keys{6, 6});
  REQUIRE(twice);
  CHECK(twice->stored == Keys{6});
  CHECK(twice->evicted == Keys{1});
  CHECK_FALSE(tier.check());
}

TEST_CASE("offload tier lru: writing and reading blocks are never evicted",
          "[offload][offload_tier]") {
  OffloadTier tier(OffloadPolicy::kLru, 4);
  REQUIRE(tier.prepare_store(Keys{1, 2}));  // writing, the least recent
  put(tier, Keys{3, 4});
  REQUIRE(tier.prepare_load(Keys{3}));  // reading
  CHECK(tier.lookup(Keys{1, 2}) == 0);  // writing is not readable
  CHECK(tier.lookup(Keys{3, 4, 1}) == 2);
  CHECK(tier.evictable() == 1);
  auto plan = tier.prepare_store(Keys{5});
  REQUIRE(plan);
  CHECK(plan->evicted == Keys{4});
  CHECK_FALSE(tier.prepare_store(Keys{6}));  // 1, 2 writing, 3 reading, 5 writing
  REQUIRE(tier.complete_load(Keys{3}));
  CHECK(tier.evictable() == 1);
  auto next = tier.prepare_store(Keys{6});
  REQUIRE(next);
  CHECK(next->evicted == Keys{3});
  CHECK_FALSE(tier.check());
}

TEST_CASE("offload tier lru: one removed event per evicting store, one stored per completion",
          "[offload][offload_tier]") {
  OffloadTier tier(OffloadPolicy::kLru, 3);
  put(tier, Keys{1, 2});
  CHECK(tier.complete_store(Keys{1, 2}) == 0);  // already ready: ignored, no event
  put(tier, Keys{3});                           // a free slot: nothing evicted
  tier.touch(Keys{2});                          // [1 3 2]
  auto plan = tier.prepare_store(Keys{4, 5});
  REQUIRE(plan);
  CHECK(plan->evicted == Keys{1, 3});
  CHECK(tier.complete_store(Keys{5, 4, 9}) == 2);  // in the order given; 9 absent
  CHECK(tier.take_events() ==
        std::vector<OffloadEvent>{stored({1, 2}), stored({3}), removed({1, 3}), stored({5, 4})});
  CHECK(tier.take_events().empty());
  CHECK(tier.stored_blocks() == 5);
  CHECK(tier.evicted_blocks() == 2);
  // [2 4 5] -> touch {2} -> [4 5 2]. An aborted store frees its slot, no event.
  tier.touch(Keys{2});
  auto aborted = tier.prepare_store(Keys{6});
  REQUIRE(aborted);
  CHECK(aborted->evicted == Keys{4});
  const std::uint32_t slot = aborted->slots.at(0);
  tier.abort_store(Keys{6, 2});  // 2 is ready: left alone
  CHECK_FALSE(tier.contains(6));
  CHECK(tier.contains(2));
  CHECK(tier.used() == 2);
  CHECK(tier.take_events() == std::vector<OffloadEvent>{removed({4})});
  CHECK(tier.ready_keys() == Keys{2, 5});
  auto again = tier.prepare_store(Keys{7});
  REQUIRE(again);
  CHECK(again->evicted.empty());
  CHECK(again->slots == std::vector<std::uint32_t>{slot});
  CHECK_FALSE(tier.check());
}

// ---- ARC ---------------------------------------------------------------------

TEST_CASE("offload tier arc: touch promotes a ready T1 key to T2, a writing key stays in T1",
          "[offload][offload_tier]") {
  OffloadTier tier(OffloadPolicy::kArc, 4);
  put(tier, Keys{1, 2});
  REQUIRE(tier.prepare_store(Keys{3}));  // writing
  // Walked 3, 2, 1: 3 to T1's recent end, 2 then 1 to T2.
  tier.touch(Keys{1, 2, 3});
  CHECK(OffloadTierFaults::list(tier, 0) == Keys{3});
  CHECK(OffloadTierFaults::list(tier, 1) == Keys{2, 1});
  tier.complete_store(Keys{3});
  put(tier, Keys{4});  // T1 [3 4], T2 [2 1], target 0
  // T1 first while its unpicked size >= 0: 3, 4; then T1 is empty: T2's 2.
  CHECK(evicted_by(tier, Keys{5, 6, 7}) == Keys{3, 4, 2});
  CHECK(OffloadTierFaults::ghosts(tier, 0) == Keys{3, 4});
  CHECK(OffloadTierFaults::ghosts(tier, 1) == Keys{2});
  // A T2 touch moves the key to T2's recent end; a reading T1 key is promoted.
  REQUIRE(tier.prepare_load(Keys{5}));
  tier.touch(Keys{5});
  CHECK(OffloadTierFaults::list(tier, 1) == Keys{1, 5});
  tier.touch(Keys{1});
  CHECK(OffloadTierFaults::list(tier, 1) == Keys{5, 1});
  CHECK_FALSE(tier.check());
}

TEST_CASE("offload tier arc: ghost hits move the target, T1 is used while it is at the target",
          "[offload][offload_tier]") {
  OffloadTier tier(OffloadPolicy::kArc, 4);
  put(tier, Keys{1, 2, 3, 4});
  tier.touch(Keys{1, 2});  // T1 [3 4], T2 [2 1]
  CHECK(evicted_by(tier, Keys{5, 6}) == Keys{3, 4});
  // T1 [5 6], T2 [2 1], B1 [3 4], B2 [].
  tier.touch(Keys{3});  // + max(1, 0/2)
  CHECK(OffloadTierFaults::target(tier) == 1.0);
  CHECK(OffloadTierFaults::ghosts(tier, 0) == Keys{4, 3});  // the hit moves to the recent end
  tier.touch(Keys{4, 3});
  CHECK(OffloadTierFaults::target(tier) == 3.0);
  // |T1| = 2 < int(3): T2's least recent goes, to B2.
  CHECK(evicted_by(tier, Keys{7}) == Keys{2});
  CHECK(OffloadTierFaults::ghosts(tier, 1) == Keys{2});
  // T1 [5 6 7], T2 [1]: 3 >= int(3) picks 5, then 2 < 3 picks T2's 1.
  CHECK(evicted_by(tier, Keys{8, 9}) == Keys{5, 1});
  CHECK(OffloadTierFaults::ghosts(tier, 0) == Keys{3, 4, 5});
  CHECK(OffloadTierFaults::ghosts(tier, 1) == Keys{2, 1});
  // B1 hits: + max(1, 2/3) each, capped at the capacity.
  tier.touch(Keys{3});
  CHECK(OffloadTierFaults::target(tier) == 4.0);
  tier.touch(Keys{4});
  CHECK(OffloadTierFaults::target(tier) == 4.0);
  // B2 hits: - max(1, |B1|/|B2|) = - 1.5 each, floored at 0.
  tier.touch(Keys{2});
  CHECK(OffloadTierFaults::target(tier) == 2.5);
  tier.touch(Keys{1});
  CHECK(OffloadTierFaults::target(tier) == 1.0);
  tier.touch(Keys{2});
  CHECK(OffloadTierFaults::target(tier) == 0.0);
  CHECK_FALSE(tier.check());
}

TEST_CASE("offload tier arc: below the target with T2 pinned, T1's ready blocks are not taken",
          "[offload][offload_tier]") {
  OffloadTier tier(OffloadPolicy::kArc, 4);
  put(tier, Keys{1, 2, 3, 4});
  tier.touch(Keys{1, 2});
  CHECK(evicted_by(tier, Keys{5, 6}) == Keys{3, 4});
  tier.touch(Keys{3});
  tier.touch(Keys{4});
  tier.touch(Keys{3});
  REQUIRE(OffloadTierFaults::target(tier) == 3.0);
  REQUIRE(tier.prepare_load(Keys{1, 2}));
  tier.take_events();
  CHECK(tier.evictable() == 2);              // 5 and 6, in T1
  CHECK_FALSE(tier.prepare_store(Keys{7}));  // |T1| 2 < 3 and T2 has none
  CHECK(tier.take_events().empty());
  CHECK(OffloadTierFaults::target(tier) == 3.0);
  CHECK(OffloadTierFaults::list(tier, 0) == Keys{5, 6});
  // Once T2 has a ready block it goes, and T1 is left alone.
  REQUIRE(tier.complete_load(Keys{2}));
  CHECK(evicted_by(tier, Keys{7}) == Keys{2});
  CHECK_FALSE(tier.check());
}

TEST_CASE("offload tier arc: ghost lists are trimmed to the capacity, oldest first",
          "[offload][offload_tier]") {
  OffloadTier tier(OffloadPolicy::kArc, 2);
  put(tier, Keys{1, 2});
  CHECK(evicted_by(tier, Keys{3, 4}) == Keys{1, 2});
  CHECK(evicted_by(tier, Keys{5, 6}) == Keys{3, 4});
  CHECK(OffloadTierFaults::ghosts(tier, 0) == Keys{3, 4});
  tier.touch(Keys{1});  // forgotten: no longer a ghost
  CHECK(OffloadTierFaults::target(tier) == 0.0);
  tier.touch(Keys{3});
  CHECK(OffloadTierFaults::target(tier) == 1.0);
  // Storing a ghost's key again: 5 joins B1 [4 3 5], trimmed to [3 5],
  // then 3, stored, leaves it.
  CHECK(evicted_by(tier, Keys{3}) == Keys{5});
  CHECK(OffloadTierFaults::ghosts(tier, 0) == Keys{5});
  CHECK_FALSE(tier.check());
}

// ---- failure atomicity -------------------------------------------------------

struct Snapshot {
  std::uint32_t used = 0;
  std::uint32_t evictable = 0;
  std::vector<std::uint32_t> lookups;
  std::vector<std::optional<std::uint32_t>> slots;
  std::vector<OffloadEvent> events;
  std::uint64_t stored = 0;
  std::uint64_t evicted = 0;
  std::vector<std::optional<Keys>> eviction_order;  // what the drain below evicts
  bool operator==(const Snapshot&) const = default;
};

constexpr std::uint64_t kUniverse = 20;

// The observable state, then a drain that shows what ARC's lists, ghosts
// and target hold: loads and stores finished, ghosts touched, fresh keys
// stored one at a time.
Snapshot observe(OffloadTier& tier) {
  Snapshot s;
  s.used = tier.used();
  s.evictable = tier.evictable();
  for (std::uint64_t k = 1; k <= kUniverse; ++k) {
    s.lookups.push_back(tier.lookup(Keys{k}));
    s.slots.push_back(tier.slot_of(k));
  }
  s.events = tier.take_events();
  s.stored = tier.stored_blocks();
  s.evicted = tier.evicted_blocks();
  REQUIRE_FALSE(tier.check());
  for (std::uint64_t k = 1; k <= kUniverse; ++k) {
    while (tier.complete_load(Keys{k})) {
    }
  }
  Keys all;
  for (std::uint64_t k = 1; k <= kUniverse; ++k) all.push_back(k);
  tier.complete_store(all);
  tier.touch(all);
  for (std::uint64_t k = 100; k < 110; ++k) {
    auto plan = tier.prepare_store(Keys{k});
    s.eviction_order.push_back(plan ? std::optional<Keys>(plan->evicted) : std::nullopt);
    tier.complete_store(Keys{k});
  }
  s.eviction_order.push_back(tier.ready_keys());
  REQUIRE_FALSE(tier.check());
  return s;
}

// A history that leaves every list and ghost list nonempty (ARC) and the
// target at 1: T1 [5 6], T2 [2 1], B1 [4 3].
void history(OffloadTier& tier) {
  put(tier, Keys{1, 2, 3, 4});
  tier.touch(Keys{1, 2});
  put(tier, Keys{5, 6});
  tier.touch(Keys{3});
}

TEST_CASE("offload tier: every refusal changes nothing", "[offload][offload_tier]") {
  struct Refusal {
    const char* name;
    void (*setup)(OffloadTier&);
    bool (*refused)(OffloadTier&);
  };
  const std::vector<Refusal> refusals = {
      {"store, every block writing",
       [](OffloadTier& t) {
         REQUIRE(t.prepare_store(Keys{7, 8, 9, 10}));
       },
       [](OffloadTier& t) { return !t.prepare_store(Keys{11}); }},
      {"store, every block reading",
       [](OffloadTier& t) {
         REQUIRE(t.prepare_load(Keys{1, 2, 5, 6}));
       },
       [](OffloadTier& t) {
         return !t.prepare_store(Keys{11, 12});
       }},
      {"store, every ready block protected", [](OffloadTier&) {},
       [](OffloadTier& t) {
         return !t.prepare_store(Keys{1, 2, 5, 6, 11});
       }},
      {"store, reading and protected",
       [](OffloadTier& t) {
         REQUIRE(t.prepare_load(Keys{1, 2}));
       },
       [](OffloadTier& t) {
         return !t.prepare_store(Keys{5, 6, 11, 12});
       }},
      {"store, two needed, one evictable",
       [](OffloadTier& t) {
         REQUIRE(t.prepare_load(Keys{1, 2, 5}));
       },
       [](OffloadTier& t) {
         return !t.prepare_store(Keys{11, 12});
       }},
      {"load of an absent key", [](OffloadTier&) {},
       [](OffloadTier& t) {
         return !t.prepare_load(Keys{1, 2, 99});
       }},
      {"load of a writing key", [](OffloadTier& t) { REQUIRE(t.prepare_store(Keys{11})); },
       [](OffloadTier& t) {
         return !t.prepare_load(Keys{1, 11});
       }},
      {"complete_load with none in flight", [](OffloadTier&) {},
       [](OffloadTier& t) { return !t.complete_load(Keys{1}); }},
      {"complete_load of a key twice, one in flight",
       [](OffloadTier& t) {
         REQUIRE(t.prepare_load(Keys{1, 2}));
       },
       [](OffloadTier& t) {
         return !t.complete_load(Keys{2, 1, 1});
       }},
  };
  for (OffloadPolicy policy : {OffloadPolicy::kLru, OffloadPolicy::kArc}) {
    for (const Refusal& r : refusals) {
      INFO(to_string(policy) << ": " << r.name);
      OffloadTier before(policy, 4);
      OffloadTier tier(policy, 4);
      for (OffloadTier* t : {&before, &tier}) {
        history(*t);
        r.setup(*t);
      }
      const double target = OffloadTierFaults::target(tier);
      const Keys b1 = OffloadTierFaults::ghosts(tier, 0);
      CHECK(r.refused(tier));
      CHECK_FALSE(tier.check());
      CHECK(OffloadTierFaults::target(tier) == target);
      CHECK(OffloadTierFaults::ghosts(tier, 0) == b1);
      const Snapshot expected = observe(before);
      const Snapshot got = observe(tier);
      CHECK(got == expected);
    }
  }
}

// ---- randomized, against a naive reference -----------------------------------

// The rules of offload_tier.h written the plain way: vectors scanned whole.
struct Reference {
  OffloadPolicy policy;
  std::uint32_t capacity;
  std::map<std::uint64_t, int> ref;  // -1 writing, 0 ready, n reading
  std::map<std::uint64_t, std::uint32_t> slot;
  Keys t1, t2, b1, b2;  // lru: t1 alone
  double target = 0;
  std::uint32_t next = 0;
  std::vector<std::uint32_t> freed;
  std::vector<OffloadEvent> events;

  static void erase(Keys& list, std::uint64_t key) {
    list.erase(std::remove(list.begin(), list.end(), key), list.end());
  }
  static bool has(const Keys& list, std::uint64_t key) {
    return std::find(list.begin(), list.end(), key) != list.end();
  }
  bool evictable(std::uint64_t key, const Keys& input) const {
    return ref.at(key) == 0 && !has(input, key);
  }

  std::optional<OffloadTier::StorePlan> prepare_store(const Keys& keys) {
    OffloadTier::StorePlan plan;
    for (std::uint64_t k : keys) {
      if (!ref.contains(k) && !has(plan.stored, k)) plan.stored.push_back(k);
    }
    if (plan.stored.empty()) return plan;
    const std::size_t free = capacity - next + freed.size();
    std::vector<std::pair<std::uint64_t, bool>> picks;  // key, from T1
    if (plan.stored.size() > free) {
      const std::size_t need = plan.stored.size() - free;
      if (policy == OffloadPolicy::kLru) {
        for (std::uint64_t k : t1) {
          if (picks.size() < need && evictable(k, keys)) picks.emplace_back(k, true);
        }
      } else {
        std::size_t t1_left = t1.size();
        std::set<std::uint64_t> taken;
        while (picks.size() < need) {
          std::optional<std::pair<std::uint64_t, bool>> pick;
          if (t1_left >= static_cast<std::size_t>(target)) {
            for (std::uint64_t k : t1) {
              if (evictable(k, keys) && !taken.contains(k)) {
                pick = {k, true};
                --t1_left;
                break;
              }
            }
          }
          if (!pick) {
            for (std::uint64_t k : t2) {
              if (evictable(k, keys) && !taken.contains(k)) {
                pick = {k, false};
                break;
              }
            }
          }
          if (!pick) break;
          taken.insert(pick->first);
          picks.push_back(*pick);
        }
      }
      if (picks.size() < need) return std::nullopt;
      for (const auto& [k, from_t1] : picks) {
        erase(t1, k);
        erase(t2, k);
        freed.push_back(slot.at(k));
        slot.erase(k);
        ref.erase(k);
        plan.evicted.push_back(k);
        if (policy == OffloadPolicy::kArc) (from_t1 ? b1 : b2).push_back(k);
      }
      for (Keys* ghost : {&b1, &b2}) {
        while (ghost->size() > capacity) ghost->erase(ghost->begin());
      }
      events.push_back(OffloadEvent{plan.evicted, true});
    }
    for (std::uint64_t k : plan.stored) {
      std::uint32_t s = 0;
      if (next < capacity) {
        s = next++;
      } else {
        s = freed.back();
        freed.pop_back();
      }
      plan.slots.push_back(s);
      slot[k] = s;
      ref[k] = -1;
      t1.push_back(k);
      erase(b1, k);
      erase(b2, k);
    }
    return plan;
  }

  std::uint32_t complete_store(const Keys& keys) {
    OffloadEvent event;
    for (std::uint64_t k : keys) {
      if (ref.contains(k) && ref[k] == -1) {
        ref[k] = 0;
        event.keys.push_back(k);
      }
    }
    if (!event.keys.empty()) events.push_back(event);
    return static_cast<std::uint32_t>(event.keys.size());
  }

  void abort_store(const Keys& keys) {
    for (std::uint64_t k : keys) {
      if (ref.contains(k) && ref[k] == -1) {
        ref.erase(k);
        freed.push_back(slot.at(k));
        slot.erase(k);
        erase(t1, k);
        erase(t2, k);
      }
    }
  }

  bool prepare_load(const Keys& keys) {
    for (std::uint64_t k : keys) {
      if (!ref.contains(k) || ref[k] < 0) return false;
    }
    for (std::uint64_t k : keys) ++ref[k];
    return true;
  }

  bool complete_load(const Keys& keys) {
    for (std::uint64_t k : keys) {
      const auto n = std::count(keys.begin(), keys.end(), k);
      if (!ref.contains(k) || ref[k] < n) return false;
    }
    for (std::uint64_t k : keys) --ref[k];
    return true;
  }

  void touch(const Keys& keys) {
    for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
      const std::uint64_t k = *it;
      if (policy == OffloadPolicy::kLru) {
        if (has(t1, k)) {
          erase(t1, k);
          t1.push_back(k);
        }
      } else if (has(t1, k)) {
        erase(t1, k);
        (ref[k] >= 0 ? t2 : t1).push_back(k);
      } else if (has(t2, k)) {
        erase(t2, k);
        t2.push_back(k);
      } else if (has(b1, k)) {
        const double delta =
            std::max(1.0, static_cast<double>(b2.size()) / static_cast<double>(b1.size()));
        target = std::min(target + delta, static_cast<double>(capacity));
        erase(b1, k);
        b1.push_back(k);
      } else if (has(b2, k)) {
        const double delta =
            std::max(1.0, static_cast<double>(b1.size()) / static_cast<double>(b2.size()));
        target = std::max(target - delta, 0.0);
        erase(b2, k);
        b2.push_back(k);
      }
    }
  }

  std::uint32_t lookup(const Keys& keys) const {
    std::uint32_t n = 0;
    while (n < keys.size() && ref.contains(keys[n]) && ref.at(keys[n]) >= 0) ++n;
    return n;
  }
};

TEST_CASE("offload tier: random operations agree with a naive reference",
          "[offload][offload_tier]") {
  for (OffloadPolicy policy : {OffloadPolicy::kLru, OffloadPolicy::kArc}) {
    for (std::uint32_t seed = 1; seed <= 4; ++seed) {
      INFO(to_string(policy) << " seed " << seed);
      constexpr std::uint32_t kCapacity = 8;
      std::mt19937_64 rng(seed);
      OffloadTier tier(policy, kCapacity);
      Reference model{policy, kCapacity, {}, {}, {}, {}, {}, {}, 0, 0, {}, {}};
      auto pick = [&](std::uint64_t bound) {
        return std::uniform_int_distribution<std::uint64_t>(0, bound - 1)(rng);
      };
      auto some_keys = [&] {
        Keys keys(1 + pick(5));
        for (std::uint64_t& k : keys) k = 1 + pick(16);
        return keys;
      };
      std::size_t refused = 0;
      std::size_t evictions = 0;
      for (int op = 0; op < 3000; ++op) {
        const Keys keys = some_keys();
        INFO("op " << op);
        switch (pick(7)) {
          case 0:
          case 1: {
            auto got = tier.prepare_store(keys);
            auto want = model.prepare_store(keys);
            REQUIRE(got.has_value() == want.has_value());
            if (got) {
              CHECK(got->stored == want->stored);
              CHECK(got->slots == want->slots);
              CHECK(got->evicted == want->evicted);
              evictions += got->evicted.size();
            } else {
              ++refused;
            }
            break;
          }
          case 2: CHECK(tier.complete_store(keys) == model.complete_store(keys)); break;
          case 3:
            if (pick(4) == 0) {
              tier.abort_store(keys);
              model.abort_store(keys);
            } else {
              CHECK(tier.complete_load(keys).ok() == model.complete_load(keys));
            }
            break;
          case 4: CHECK(tier.prepare_load(keys).ok() == model.prepare_load(keys)); break;
          case 5: {
            // Half the touches are a run of consecutive keys, as a request's
            // prefix is touched again at each store (lru moves such runs
            // whole): the queue then holds runs to find.
            Keys touched = keys;
            if (pick(2) == 0) {
              touched.resize(1 + pick(8));
              const std::uint64_t from = 1 + pick(10);
              for (std::size_t k = 0; k < touched.size(); ++k) touched[k] = from + k;
            }
            tier.touch(touched);
            model.touch(touched);
            break;
          }
          default: CHECK(tier.lookup(keys) == model.lookup(keys)); break;
        }
        REQUIRE(tier.used() <= kCapacity);
        REQUIRE(tier.used() == model.ref.size());
        REQUIRE(tier.evictable() == static_cast<std::uint32_t>(std::count_if(
                                        model.ref.begin(), model.ref.end(),
                                        [](const auto& kv) { return kv.second == 0; })));
        for (std::uint64_t k = 1; k <= 16; ++k) {
          REQUIRE(tier.lookup(Keys{k}) == model.lookup(Keys{k}));
          REQUIRE(tier.contains(k) == model.ref.contains(k));
        }
        REQUIRE(tier.take_events() == model.events);
        model.events.clear();
        auto found = tier.check();
        REQUIRE_FALSE(found);
      }
      CHECK(OffloadTierFaults::target(tier) == model.target);
      CHECK(refused > 0);
      CHECK(evictions > 0);
    }
  }
}

// ---- check() -----------------------------------------------------------------

// An ARC tier with both lists and both ghost lists nonempty, a reading block
// and a free slot: T1 [8], T2 [1 6] (1 reading), B1 [5 3 4 7], B2 [2].
OffloadTier checked_tier() {
  OffloadTier tier(OffloadPolicy::kArc, 4);
  put(tier, Keys{1, 2, 3, 4});
  tier.touch(Keys{1, 2});  // T1 [3 4], T2 [2 1]
  put(tier, Keys{5, 6});   // evicts 3, 4
  tier.touch(Keys{6});     // T1 [5], T2 [2 1 6]
  put(tier, Keys{7});      // evicts 5
  tier.touch(Keys{3});
  tier.touch(Keys{4});                   // target 2
  put(tier, Keys{8});                    // |T1| 1 < 2: evicts T2's 2
  REQUIRE(tier.prepare_store(Keys{9}));  // |T1| 2 >= 2: evicts 7
  tier.abort_store(Keys{9});             // a free slot
  REQUIRE(tier.prepare_load(Keys{1}));
  REQUIRE(OffloadTierFaults::list(tier, 0) == Keys{8});
  REQUIRE(OffloadTierFaults::list(tier, 1) == Keys{1, 6});
  REQUIRE(OffloadTierFaults::ghosts(tier, 0) == Keys{5, 3, 4, 7});
  REQUIRE(OffloadTierFaults::ghosts(tier, 1) == Keys{2});
  REQUIRE(tier.used() == 3);
  REQUIRE(OffloadTierFaults::target(tier) == 2.0);
  REQUIRE(caught(tier) == "none");
  return tier;
}

TEST_CASE("offload tier: check() catches each planted fault, naming the invariant",
          "[offload][offload_tier]") {
  auto message = [](const OffloadTier& tier) {
    auto found = tier.check();
    return found ? found->message : std::string();
  };
  SECTION("T1: two keys in one slot") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::share_slot(tier, 1, 6);
    CHECK(caught(tier) == "T1");
    CHECK_THAT(message(tier), Catch::Contains("block 0x6"));
  }
  SECTION("T1: a slot past the capacity") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::slot_past_capacity(tier, 8);
    CHECK(caught(tier) == "T1");
    CHECK_THAT(message(tier), Catch::Contains("block 0x8"));
  }
  SECTION("T1: a free slot lost") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::leak_free_slot(tier);
    CHECK(caught(tier) == "T1");
    CHECK_THAT(message(tier), Catch::Contains("lost"));
  }
  SECTION("T1: a used slot on the free list") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::free_used_slot(tier, 6);
    CHECK(caught(tier) == "T1");
    CHECK_THAT(message(tier), Catch::Contains("holds block 0x6"));
  }
  SECTION("T2: a key missing from the policy's lists") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::unlist(tier, 6);
    CHECK(caught(tier) == "T2");
    CHECK_THAT(message(tier), Catch::Contains("block 0x6 is in no policy list"));
  }
  SECTION("T2: a key listed twice") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::list_twice(tier, 1);
    CHECK(caught(tier) == "T2");
    CHECK_THAT(message(tier), Catch::Contains("block 0x1"));
  }
  SECTION("T2: a ghost cached too") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::ghost_cached(tier, 8);
    CHECK(caught(tier) == "T2");
    CHECK_THAT(message(tier), Catch::Contains("ghost 0x8"));
  }
  SECTION("T2: a ghost in both ghost lists") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::ghost_in_both(tier, 3);
    CHECK(caught(tier) == "T2");
    CHECK_THAT(message(tier), Catch::Contains("ghost 0x3"));
  }
  SECTION("T3: the evictable count off by one") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::miscount_evictable(tier);
    CHECK(caught(tier) == "T3");
    CHECK_THAT(message(tier), Catch::Contains("evictable"));
  }
  SECTION("T3: a count of loads below writing") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::corrupt_ref(tier, 8);
    CHECK(caught(tier) == "T3");
    CHECK_THAT(message(tier), Catch::Contains("block 0x8"));
  }
  SECTION("T4: the target past the capacity, or below 0") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::set_target(tier, 4.5);
    CHECK(caught(tier) == "T4");
    OffloadTierFaults::set_target(tier, -1);
    CHECK(caught(tier) == "T4");
    OffloadTierFaults::set_target(tier, 4);
    CHECK(caught(tier) == "none");
  }
  SECTION("T4: a ghost list past the capacity") {
    OffloadTier tier = checked_tier();
    OffloadTierFaults::overfill_ghosts(tier);
    CHECK(caught(tier) == "T4");
    CHECK_THAT(message(tier), Catch::Contains("B2"));
  }
  SECTION("lru: a ghost or a second list is a fault") {
    OffloadTier tier(OffloadPolicy::kLru, 4);
    put(tier, Keys{1, 2});
    REQUIRE(caught(tier) == "none");
    OffloadTierFaults::ghost_cached(tier, 9);
    CHECK(caught(tier) == "T2");
  }
}

}  // namespace
