// Replayer: each operation's handler on its own. For every op: the bad input it
// refuses (naming the field, changing nothing), what it does to the pool and
// the tables, pool exhaustion (no effect; later events of a skipped sequence
// or prefix count as skipped), and the checks a `check` event runs.
#include "engine/replay/replayer.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/micro_config.h"

namespace kvreplay {
namespace {

// Feeds events with increasing index and line, as a reader would.
class Driver {
 public:
  explicit Driver(std::uint32_t pool_blocks, OomPolicy on_oom = OomPolicy::kSkip,
                  CheckPolicy check = CheckPolicy{CheckPolicy::Mode::kEvery, 1})
      : replayer(micro_config(pool_blocks, 64), check, on_oom) {}

  InputResult<Replayer::Outcome> apply(Event event) {
    ++index_;
    event.index = index_;
    event.line = index_ + 1;  // line 1 is the header
    return replayer.apply(event, "t.jsonl");
  }
  // Applies an event that must be valid; returns its outcome.
  Replayer::Outcome ok(Event event) {
    auto outcome = apply(std::move(event));
    INFO((outcome ? std::string("applied") : outcome.error().to_string()));
    REQUIRE(outcome);
    return outcome.value();
  }
  // Applies an event that must be refused; returns the message.
  std::string refused(Event event) {
    const ReplayState before = replayer.state();
    const std::uint32_t free_before = replayer.pool().free_count();
    auto outcome = apply(std::move(event));
    REQUIRE_FALSE(outcome);
    // Refused input changes nothing.
    CHECK(replayer.state().used == before.used);
    CHECK(replayer.state().logical_tokens == before.logical_tokens);
    CHECK(replayer.state().live_sequences == before.live_sequences);
    CHECK(replayer.pool().free_count() == free_before);
    return outcome.error().to_string();
  }

  Replayer replayer;

 private:
  std::uint64_t index_ = 0;
};

Event admit(std::uint64_t seq, std::uint32_t prompt, std::string prefix = "") {
  Event e;
  e.op = Op::kAdmit;
  e.seq = seq;
  e.prompt = prompt;
  e.has_prefix = !prefix.empty();
  e.id = std::move(prefix);
  return e;
}
Event append(std::uint64_t seq, std::uint32_t tokens) {
  Event e;
  e.op = Op::kAppend;
  e.seq = seq;
  e.tokens = tokens;
  return e;
}
Event decode(std::vector<std::uint64_t> seqs, std::uint32_t tokens = 1) {
  Event e;
  e.op = Op::kDecode;
  e.seqs = std::move(seqs);
  e.tokens = tokens;
  return e;
}
Event fork(std::uint64_t parent, std::uint64_t child) {
  Event e;
  e.op = Op::kFork;
  e.seq = parent;
  e.child = child;
  return e;
}
Event free_seq(std::uint64_t seq) {
  Event e;
  e.op = Op::kFree;
  e.seq = seq;
  return e;
}
Event prefix(std::string id, std::uint32_t tokens) {
  Event e;
  e.op = Op::kPrefix;
  e.id = std::move(id);
  e.tokens = tokens;
  return e;
}
Event drop_prefix(std::string id) {
  Event e;
  e.op = Op::kDropPrefix;
  e.id = std::move(id);
  return e;
}
Event check() {
  return Event{};  // op defaults to check
}
Event admit_on(std::uint64_t seq, std::uint32_t prompt, std::vector<std::uint64_t> hits) {
  Event e = admit(seq, prompt);
  e.hits = std::move(hits);
  return e;
}
Event cache(std::uint64_t seq, std::uint32_t page, std::uint64_t name) {
  Event e;
  e.op = Op::kCache;
  e.seq = seq;
  e.page = page;
  e.block = name;
  return e;
}
Event uncache(std::uint64_t name) {
  Event e;
  e.op = Op::kUncache;
  e.block = name;
  return e;
}
Event store(std::uint64_t seq, std::uint32_t page, std::uint8_t tier, std::uint64_t key) {
  Event e;
  e.op = Op::kStore;
  e.seq = seq;
  e.page = page;
  e.tier = tier;
  e.key = key;
  return e;
}
Event load(std::uint8_t tier, std::uint64_t key, std::uint64_t name) {
  Event e;
  e.op = Op::kLoad;
  e.tier = tier;
  e.key = key;
  e.block = name;
  return e;
}
Event drop(std::uint8_t tier, std::uint64_t key) {
  Event e;
  e.op = Op::kDrop;
  e.tier = tier;
  e.key = key;
  return e;
}

TEST_CASE("replayer admit: takes ceil(prompt / page) blocks, refuses duplicates and long prompts") {
  Driver d(16);
  CHECK(d.ok(admit(1, 9)) == Replayer::Outcome::kApplied);
  CHECK(d.replayer.state().used == 3);  // 9 tokens in 4-token pages
  CHECK(d.replayer.state().logical_tokens == 9);
  CHECK(d.replayer.state().live_sequences == 1);
  CHECK(d.refused(admit(1, 4)) == "t.jsonl:3: seq: 1 is already admitted");
  CHECK(d.refused(admit(2, 65)) == "t.jsonl:4: prompt: 65 exceeds max_seq_tokens 64");
  CHECK(d.refused(admit(2, 4, "p")) == "t.jsonl:5: prefix: 'p' is not a live prefix");
}

TEST_CASE("replayer admit: pool exhaustion has no effect and skips the sequence's later events") {
  Driver d(4);
  d.ok(admit(1, 8));                                     // 2 blocks
  CHECK(d.ok(admit(2, 12)) == Replayer::Outcome::kOom);  // needs 3 of the 2 left
  CHECK(d.replayer.state().used == 2);
  CHECK(d.replayer.totals().oom_events == 1);
  CHECK(d.replayer.totals().oom_first_event == 2u);
  // Everything about seq 2 is now skipped, not an error.
  CHECK(d.ok(append(2, 1)) == Replayer::Outcome::kApplied);
  CHECK(d.ok(decode({1, 2})) == Replayer::Outcome::kApplied);
  CHECK(d.ok(fork(2, 3)) == Replayer::Outcome::kApplied);  // the child is skipped too
  CHECK(d.ok(free_seq(3)) == Replayer::Outcome::kApplied);
  CHECK(d.ok(free_seq(2)) == Replayer::Outcome::kApplied);
  CHECK(d.replayer.totals().skipped_events == 5);
  // A skipped sequence once freed is unknown again.
  CHECK(d.refused(free_seq(2)) == "t.jsonl:9: seq: 2 is not admitted");
}

TEST_CASE("replayer append: grows the last page first, refuses unknown seqs and overlong growth") {
  Driver d(16);
  d.ok(admit(1, 3));
  CHECK(d.replayer.state().used == 1);
  d.ok(append(1, 1));  // fills the first page
  CHECK(d.replayer.state().used == 1);
  d.ok(append(1, 1));
  CHECK(d.replayer.state().used == 2);
  CHECK(d.replayer.state().logical_tokens == 5);
  CHECK(d.refused(append(7, 1)) == "t.jsonl:5: seq: 7 is not admitted");
  CHECK(d.refused(append(1, 60)) ==
        "t.jsonl:6: tokens: 60 more tokens make seq 1 65 tokens long, past max_seq_tokens 64");
}

TEST_CASE("replayer decode: validates the whole batch before any sequence advances") {
  Driver d(32);
  d.ok(admit(1, 4));
  d.ok(admit(2, 62));
  d.ok(decode({1, 2}));
  CHECK(d.replayer.state().logical_tokens == 68);
  // Seq 2 would pass 64 tokens: seq 1, listed first, must not have advanced.
  CHECK(d.refused(decode({1, 2}, 2)) ==
        "t.jsonl:5: tokens: 2 more tokens make seq 2 65 tokens long, past max_seq_tokens 64");
  CHECK(d.refused(decode({1, 1})) == "t.jsonl:6: seqs: 1 appears twice");
  CHECK(d.refused(decode({1, 9})) == "t.jsonl:7: seqs: 9 is not admitted");
  d.ok(decode({1}));
  CHECK(d.replayer.state().logical_tokens == 69);
}

TEST_CASE("replayer decode: under --on-oom fail the batch stops at the first exhausted sequence") {
  Driver d(3, OomPolicy::kFail);
  d.ok(admit(1, 4));
  d.ok(admit(2, 4));
  d.ok(admit(3, 4));  // every block used, every page full
  CHECK(d.ok(decode({1, 2, 3})) == Replayer::Outcome::kOom);
  CHECK(d.replayer.state().logical_tokens == 12);  // nobody grew: no page to grow into
  CHECK(d.replayer.totals().oom_events == 1);
}

TEST_CASE("replayer fork: shares every page, then a write copies the shared last page") {
  Driver d(16);
  d.ok(admit(1, 6));  // pages: [4 full][2 of 4]
  d.ok(fork(1, 2));
  CHECK(d.replayer.state().used == 2);  // shared, no new block
  CHECK(d.replayer.state().live_sequences == 2);
  CHECK(d.replayer.totals().forks == 1);
  d.ok(append(2, 1));  // writes into the shared partial page: copy-on-write
  CHECK(d.replayer.totals().cow_copies == 1);
  CHECK(d.replayer.state().used == 3);
  CHECK(d.refused(fork(1, 2)) == "t.jsonl:5: child: 2 is already admitted");
  CHECK(d.refused(fork(8, 9)) == "t.jsonl:6: seq: 8 is not admitted");
}

TEST_CASE("replayer free: returns every block not shared, refuses an unknown seq") {
  Driver d(16);
  d.ok(admit(1, 8));
  d.ok(fork(1, 2));
  d.ok(free_seq(1));
  CHECK(d.replayer.state().used == 2);  // still held by the child
  d.ok(free_seq(2));
  CHECK(d.replayer.state().used == 0);
  CHECK(d.replayer.state().live_sequences == 0);
  CHECK(d.replayer.pool().free_count() == 16);
  CHECK(d.refused(free_seq(1)) == "t.jsonl:6: seq: 1 is not admitted");
}

TEST_CASE("replayer prefix: installs shared pages into admits, drop releases the prefix's hold") {
  Driver d(16);
  d.ok(prefix("sys", 8));
  CHECK(d.replayer.state().used == 2);
  d.ok(admit(1, 10, "sys"));  // 8 shared tokens + 2 fresh
  CHECK(d.replayer.state().used == 3);
  CHECK(d.replayer.totals().prefix_installs == 1);
  CHECK(d.replayer.totals().shared_pages_installed == 2);
  CHECK(d.refused(prefix("sys", 4)) == "t.jsonl:4: id: prefix 'sys' already exists");
  CHECK(d.refused(prefix("long", 65)) == "t.jsonl:5: tokens: 65 exceeds max_seq_tokens 64");
  CHECK(d.refused(admit(2, 4, "sys")) ==
        "t.jsonl:6: prompt: 4 is shorter than its prefix 'sys' (8 tokens)");
  d.ok(drop_prefix("sys"));
  CHECK(d.replayer.state().used == 3);  // seq 1 still holds the shared pages
  d.ok(free_seq(1));
  CHECK(d.replayer.state().used == 0);
  CHECK(d.refused(drop_prefix("sys")) == "t.jsonl:9: id: 'sys' is not a live prefix");
}

TEST_CASE("replayer prefix: one that does not fit is skipped with its admits") {
  Driver d(2);
  CHECK(d.ok(prefix("big", 12)) == Replayer::Outcome::kOom);
  CHECK(d.replayer.state().used == 0);
  CHECK(d.ok(admit(1, 16, "big")) == Replayer::Outcome::kApplied);  // skipped with its prefix
  CHECK(d.ok(append(1, 1)) == Replayer::Outcome::kApplied);
  CHECK(d.ok(drop_prefix("big")) == Replayer::Outcome::kApplied);
  CHECK(d.replayer.totals().skipped_events == 3);
  CHECK(d.refused(drop_prefix("big")) == "t.jsonl:6: id: 'big' is not a live prefix");
}

TEST_CASE("replayer check: a check event runs the invariants even when the policy is end") {
  Driver d(16, OomPolicy::kSkip, CheckPolicy{CheckPolicy::Mode::kEnd, 1});
  d.ok(admit(1, 5));
  CHECK(d.replayer.totals().checks == 0);
  CHECK(d.ok(check()) == Replayer::Outcome::kApplied);
  CHECK(d.replayer.totals().checks == 1);
  CHECK(d.replayer.state().used == 2);  // a check changes nothing
  CHECK(d.replayer.finish() == Replayer::Outcome::kApplied);
  CHECK(d.replayer.totals().checks == 2);
  CHECK_FALSE(d.replayer.violation().has_value());
}

TEST_CASE("replayer: --check off runs no check, not even for a check event") {
  Driver d(16, OomPolicy::kSkip, CheckPolicy{CheckPolicy::Mode::kOff, 1});
  d.ok(admit(1, 5));
  d.ok(check());
  CHECK(d.replayer.finish() == Replayer::Outcome::kApplied);
  CHECK(d.replayer.totals().checks == 0);
  CHECK(d.replayer.totals().events == 2);
}

TEST_CASE("replayer --alloc-order vllm: the null block is neither used nor wasted") {
  // vLLM's BlockPool holds block 0 as the null block (BlockPool.get_usage
  // counts num_gpu_blocks - 1). Pool 8 under vllm: admit 6 tokens (2 blocks,
  // 2 of 8 slots unfilled), append 2 (full), free: nothing used, so the
  // waste ratio is 0 there, not the null block's 1.0. The checks, run after
  // every event, still count block 0 held.
  RunConfig config = micro_config(8, 64);
  config.alloc_order = AllocOrder::kVllm;
  Replayer replayer(config, CheckPolicy{CheckPolicy::Mode::kEvery, 1}, OomPolicy::kFail);
  std::uint64_t index = 0;
  auto ok = [&](Event event) {
    event.index = ++index;
    event.line = index + 1;
    auto outcome = replayer.apply(event, "t.jsonl");
    REQUIRE(outcome);
    REQUIRE(outcome.value() == Replayer::Outcome::kApplied);
  };
  ok(admit(1, 6));
  CHECK(replayer.state().used == 2);
  CHECK(replayer.state().waste_slots == 2);
  ok(append(1, 2));
  CHECK(replayer.state().waste_ratio == 0.0);
  ok(free_seq(1));
  CHECK(replayer.state().used == 0);
  CHECK(replayer.state().waste_ratio == 0.0);
  CHECK(replayer.finish() == Replayer::Outcome::kApplied);
  const ReplayTotals& t = replayer.totals();
  CHECK(t.peak_used == 2);
  CHECK(t.waste_ratio_max == 0.25);
  CHECK(t.waste_ratio_at_peak == 0.25);
  CHECK(t.waste_slots_at_peak == 2);
  CHECK(t.saved_blocks_at_peak == 0);  // 2 table entries, 2 blocks
  CHECK(replayer.null_blocks() == 1);
  CHECK(replayer.pool().used_count() == 1);  // block 0, held
  CHECK(t.checks >= 3);
}

TEST_CASE("replayer layout: runs and continued pages of the sequence tables, per order") {
  // Two sequences grow in turn, so their pages interleave: under lowest, seq 1
  // gets b0 b2 b4, seq 2 b1 b3 b5 (3 runs each); freeing seq 1 and admitting
  // seq 3 for 3 pages hands it b0 b2 b4 again.
  RunConfig config = micro_config(16, 64);
  config.alloc_order = AllocOrder::kLowest;
  Replayer r(config, CheckPolicy{CheckPolicy::Mode::kEvery, 1}, OomPolicy::kFail);
  std::uint64_t index = 0;
  auto apply = [&](Event e) {
    e.index = ++index;
    e.line = index + 1;
    auto outcome = r.apply(e, "t.jsonl");
    REQUIRE(outcome);
    REQUIRE(outcome.value() == Replayer::Outcome::kApplied);
  };
  apply(admit(1, 4));
  apply(admit(2, 4));
  CHECK(r.state().seq_pages == 2);
  CHECK(r.state().seq_continued == 0);
  CHECK(r.state().seq_tables == 2);
  for (int i = 0; i < 2; ++i) {
    apply(append(1, 4));
    apply(append(2, 4));
  }
  CHECK(r.state().seq_pages == 6);
  CHECK(r.state().seq_continued == 0);  // [0 2 4] and [1 3 5]
  // One sequence alone, growing by whole pages from an empty pool tail: contiguous.
  apply(admit(3, 16));  // b6 b7 b8 b9
  CHECK(r.state().seq_pages == 10);
  CHECK(r.state().seq_continued == 3);
  CHECK(r.state().seq_tables == 3);
  apply(free_seq(3));
  apply(free_seq(1));
  CHECK(r.state().seq_pages == 3);
  CHECK(r.state().seq_tables == 1);
  // Figures after each event: runs per sequence and the continued share.
  const ReplayTotals& t = r.totals();
  CHECK(t.runs_events == 9);
  // At the peak (10 blocks, after admitting seq 3): (10 - 3) runs / 3 sequences.
  CHECK(t.runs_per_seq_at_peak == Approx(7.0 / 3.0));
  CHECK(t.continued_share_at_peak == Approx(3.0 / 7.0));
}

}  // namespace
TEST_CASE("replayer cache: holds a full page by name, a hit shares it, uncache lets it go") {
  Driver d(16);
  d.ok(admit(1, 9));  // pages 0, 1 full, page 2 holds one token
  d.ok(cache(1, 0, 100));
  d.ok(cache(1, 1, 101));
  CHECK(d.replayer.cached_pages() == 2);
  d.ok(free_seq(1));
  CHECK(d.replayer.state().used == 2);  // the cache still holds pages 0 and 1
  d.ok(admit_on(2, 10, {100, 101}));    // 8 tokens shared, 2 written
  CHECK(d.replayer.state().used == 3);
  CHECK(d.replayer.totals().hit_pages == 2);
  d.ok(uncache(100));
  d.ok(uncache(101));
  CHECK(d.replayer.state().used == 3);  // seq 2 holds them
  d.ok(free_seq(2));
  CHECK(d.replayer.state().used == 0);
  d.ok(check());  // I1 counts the cache's holds: no violation at any step
  CHECK_FALSE(d.replayer.violation());
}

TEST_CASE("replayer cache: refuses pages that are not full, unknown names and misplaced hits") {
  Driver d(16);
  d.ok(admit(1, 9));
  CHECK(d.refused(cache(1, 2, 5)) ==
        "t.jsonl:3: page: page 2 of seq 1 is not full (9 tokens, 4 per page)");
  CHECK(d.refused(cache(7, 0, 5)) == "t.jsonl:4: seq: 7 is not admitted");
  d.ok(cache(1, 1, 5));
  CHECK(d.refused(cache(1, 0, 5)) == "t.jsonl:6: block: 5 is already cached");
  CHECK(d.refused(uncache(6)) == "t.jsonl:7: block: 6 is not cached");
  CHECK(d.refused(admit_on(2, 8, {9})) == "t.jsonl:8: hits: block 9 is not cached");
  CHECK(d.refused(admit_on(2, 8, {5})) == "t.jsonl:9: hits: block 5 holds page 1, not page 0");
  CHECK(d.refused(admit_on(2, 3, {5})) ==
        "t.jsonl:10: hits: 1 pages of 4 tokens are more than the prompt of 3 tokens");
}

TEST_CASE("replayer tiers: store, load back into a fresh cached block, drop") {
  Driver d(16);
  d.ok(admit(1, 8));
  d.ok(store(1, 0, 0, 70));
  d.ok(store(1, 1, 1, 71));
  CHECK(d.refused(store(1, 0, 0, 70)) == "t.jsonl:5: key: 70 is already in the cpu tier");
  CHECK(d.refused(load(0, 71, 3)) == "t.jsonl:6: key: 71 is not in the cpu tier");
  d.ok(free_seq(1));
  CHECK(d.replayer.state().used == 0);  // a copy holds no block of the pool
  d.ok(load(0, 70, 3));
  d.ok(load(1, 71, 4));
  CHECK(d.replayer.state().used == 2);
  CHECK(d.replayer.state().physical_tokens == 8);  // loaded pages are full
  d.ok(admit_on(2, 9, {3, 4}));
  CHECK(d.replayer.state().used == 3);
  d.ok(drop(0, 70));
  CHECK(d.refused(drop(0, 70)) == "t.jsonl:12: key: 70 is not in the cpu tier");
  d.ok(check());
  CHECK_FALSE(d.replayer.violation());
  CHECK(d.replayer.totals().tier_stores == std::array<std::uint64_t, kTraceTiers>{1, 1});
  CHECK(d.replayer.totals().tier_loads == std::array<std::uint64_t, kTraceTiers>{1, 1});
  CHECK(d.replayer.totals().tier_drops == std::array<std::uint64_t, kTraceTiers>{1, 0});
}

TEST_CASE(
    "replayer tiers: a load that finds no free block has no effect, and its name is skipped") {
  Driver d(3);
  d.ok(admit(1, 8));
  d.ok(store(1, 0, 0, 9));
  d.ok(admit(2, 4));  // every block used
  const std::uint32_t used = d.replayer.state().used;
  CHECK(d.ok(load(0, 9, 1)) == Replayer::Outcome::kOom);
  CHECK(d.replayer.state().used == used);
  CHECK(d.replayer.cached_pages() == 0);
  CHECK(d.replayer.totals().oom_events == 1);
  // An admit on the skipped name is skipped, and so is the uncache.
  CHECK(d.ok(admit_on(3, 4, {1})) == Replayer::Outcome::kApplied);
  CHECK(d.ok(uncache(1)) == Replayer::Outcome::kApplied);
  CHECK(d.replayer.totals().skipped_events == 2);
  CHECK(d.refused(uncache(1)) == "t.jsonl:8: block: 1 is not cached");
  // The failed admit on a hit undoes its install: nothing leaks.
  d.ok(free_seq(2));
  d.ok(cache(1, 0, 50));
  d.ok(free_seq(1));
  CHECK(d.ok(admit_on(4, 16, {50})) == Replayer::Outcome::kOom);  // needs 3 fresh of 2 free
  CHECK(d.replayer.state().used == 1);
  CHECK(d.ok(check()) == Replayer::Outcome::kApplied);
}

}  // namespace kvreplay
