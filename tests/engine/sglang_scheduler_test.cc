// The sglang engine and its radix tree rule by rule, on micro-traces worked by
// hand (traces/README.md, "The sglang engine, worked by hand"): one-token
// pages unless a case says otherwise, pools of a few dozen tokens, the linear
// cost model (the figures checked do not depend on time), and the invariants
// checked after every step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "engine/micro_config.h"
#include "engine/random_token_runs.h"
#include "engine/run_to_end.h"
#include "engine/sglang/radix_cache.h"
#include "engine/sglang/sglang_scheduler.h"
#include "engine/simulator.h"

namespace kvreplay {

// Reaches into the tree to plant faults for check().
struct RadixCacheFaults {
  static void add_evictable(RadixCache& cache, std::uint64_t tokens) { cache.evictable_ += tokens; }
};

// Reaches into the engine to plant faults for check().
struct SglangFaults {
  static SglangScheduler& of(Simulator& sim) {
    return const_cast<SglangScheduler&>(dynamic_cast<const SglangScheduler&>(sim.scheduler()));
  }
  // A page taken from the pool that nobody holds.
  static void leak(Simulator& sim) { (void)of(sim).pool_.take_free(); }
  // The first running request's first page swapped for its last.
  static void swap_pages(Simulator& sim) {
    auto& kv = of(sim).running_kv(0);
    std::swap(kv.front(), kv.back());
  }
  static bool check(Simulator& sim) { return of(sim).check(); }
};

namespace {

TokenRuns runs(std::initializer_list<TokenRun> list) {
  return TokenRuns(list);
}

std::vector<BlockId> take(BlockPool& pool, std::uint32_t n) {
  std::vector<BlockId> out;
  for (std::uint32_t i = 0; i < n; ++i) out.push_back(pool.take_free());
  return out;
}

TEST_CASE("radix_cache: insert, match capped and page-aligned, split at a partial match") {
  BlockPool pool(64);
  RadixCache cache(&pool, 1);
  const TokenRuns a = runs({{1, 4}, {2, 8}});
  const std::vector<BlockId> pages = take(pool, 8);
  REQUIRE(cache.insert(a, 8, pages) == 0);
  CHECK(cache.evictable_size() == 8);
  CHECK(cache.nodes() == 1);
  std::vector<BlockId> got;
  RadixCache::Node* last = nullptr;
  // _compute_max_prefix_len: at most input_len - 1 tokens; the node splits there.
  CHECK(cache.match_prefix(a, 7, &got, last) == 7);
  CHECK(got == std::vector<BlockId>(pages.begin(), pages.begin() + 7));
  CHECK(last->end == 7);
  CHECK(cache.nodes() == 2);
  // A sequence sharing the first block only matches 4 tokens.
  const TokenRuns b = runs({{1, 4}, {3, 8}});
  got.clear();
  CHECK(cache.match_prefix(b, 8, &got, last) == 4);
  CHECK(last->end == 4);
  CHECK(cache.nodes() == 3);
  // Inserting b keeps the shared 4 tokens and adds a leaf for its own 4.
  std::vector<BlockId> b_pages(pages.begin(), pages.begin() + 4);
  for (BlockId x : take(pool, 4)) b_pages.push_back(x);
  CHECK(cache.insert(b, 8, b_pages) == 4);
  CHECK(cache.evictable_size() == 12);
  const std::vector<const RadixCache::Node*> none;
  CHECK_FALSE(cache.check(none));
}

TEST_CASE("radix_cache: pages of several tokens match whole pages only") {
  BlockPool pool(16);
  RadixCache cache(&pool, 4);
  const TokenRuns a = runs({{1, 8}, {2, 12}});
  REQUIRE(cache.insert(a, 12, take(pool, 3)) == 0);
  RadixCache::Node* last = nullptr;
  CHECK(cache.match_prefix(a, 11, nullptr, last) == 8);  // 11 cut to 8
  const TokenRuns b = runs({{1, 8}, {5, 10}});
  CHECK(cache.match_prefix(b, 10, nullptr, last) == 8);
  // A difference inside the first page matches nothing.
  const TokenRuns c = runs({{7, 12}});
  CHECK(cache.match_prefix(c, 12, nullptr, last) == 0);
}

TEST_CASE("radix_cache: evict frees unlocked leaves least recently used first, then parents") {
  BlockPool pool(64);
  RadixCache cache(&pool, 1);
  const TokenRuns shared = runs({{1, 4}, {2, 8}});
  const TokenRuns other = runs({{1, 4}, {3, 6}});
  const std::vector<BlockId> pages = take(pool, 8);
  cache.insert(shared, 8, pages);
  std::vector<BlockId> other_pages(pages.begin(), pages.begin() + 4);
  for (BlockId x : take(pool, 2)) other_pages.push_back(x);
  cache.insert(other, 6, other_pages);  // [0,4) with children [4,8) and [4,6)
  REQUIRE(cache.nodes() == 3);
  RadixCache::Node* last = nullptr;
  cache.match_prefix(shared, 8, nullptr, last);  // touches [4,8) after [4,6)
  CHECK(pool.used_count() == 10);
  CHECK(cache.evict(1) == 2);  // the least recently used leaf, whole: [4,6)
  CHECK(pool.used_count() == 8);
  // A locked path is never evicted.
  cache.inc_lock_ref(last);
  CHECK(cache.evictable_size() == 0);
  CHECK(cache.protected_size() == 8);
  CHECK(cache.evict(100) == 0);
  cache.dec_lock_ref(last);
  // The leaf goes, then its parent once it is a leaf.
  CHECK(cache.evict(5) == 8);
  CHECK(cache.nodes() == 0);
  CHECK(pool.used_count() == 0);
}

TEST_CASE("radix_cache: check() catches each planted fault") {
  BlockPool pool(64);
  RadixCache cache(&pool, 1);
  const TokenRuns a = runs({{1, 4}, {2, 8}});
  cache.insert(a, 8, take(pool, 8));
  RadixCache::Node* last = nullptr;
  cache.match_prefix(a, 8, nullptr, last);
  cache.inc_lock_ref(last);
  std::vector<const RadixCache::Node*> holders{last};
  REQUIRE_FALSE(cache.check(holders));
  SECTION("R3: a lock nobody holds") {
    std::vector<const RadixCache::Node*> nobody;
    auto problem = cache.check(nobody);
    REQUIRE(problem);
    CHECK(problem->invariant == "R3");
  }
  SECTION("R2: the evictable count drifts") {
    RadixCacheFaults::add_evictable(cache, 3);
    auto problem = cache.check(holders);
    REQUIRE(problem);
    CHECK(problem->invariant == "R2");
  }
  SECTION("R1: a node that does not start where its parent ends") {
    last->start += 1;
    auto problem = cache.check(holders);
    REQUIRE(problem);
    CHECK(problem->invariant == "R1");
    last->start -= 1;
  }
  SECTION("R1: a node with a page missing") {
    const BlockId dropped = last->pages.back();
    last->pages.pop_back();
    auto problem = cache.check(holders);
    REQUIRE(problem);
    CHECK(problem->invariant == "R1");
    last->pages.push_back(dropped);
  }
}

TEST_CASE("radix_cache: random inserts, matches, locks and evictions keep R1-R3") {
  // Sequences over a few ids in runs of 1-6 tokens, so that prefixes are
  // shared, split and extended; pages of 1 and of 2 tokens.
  for (const std::uint32_t page : {1u, 2u}) {
    BlockPool pool(4096);
    RadixCache cache(&pool, page);
    test::Lcg next{12345};
    const std::vector<TokenRuns> seqs = test::random_token_runs(next, 12, 1, 6);
    std::vector<RadixCache::Node*> held;
    for (int op = 0; op < 400; ++op) {
      const TokenRuns& seq = seqs[next(seqs.size())];
      const std::uint32_t length = seq.back().end / page * page;
      switch (next(4)) {
        case 0: {  // insert with fresh pages; the caller frees those the tree had
          if (pool.free_count() < length / page) break;
          std::vector<BlockId> pages = take(pool, length / page);
          const std::uint32_t present = cache.insert(seq, length, pages);
          REQUIRE(present % page == 0);
          for (std::uint32_t p = 0; p < present / page; ++p) REQUIRE(pool.release(pages[p]));
          break;
        }
        case 1: {  // match and lock
          RadixCache::Node* last = nullptr;
          const std::uint32_t cap = static_cast<std::uint32_t>(next(length + 1));
          const std::uint32_t got = cache.match_prefix(seq, cap, nullptr, last);
          REQUIRE(got <= cap);
          REQUIRE(got % page == 0);
          REQUIRE(last->end == got);
          if (last != cache.root()) {
            cache.inc_lock_ref(last);
            held.push_back(last);
          }
          break;
        }
        case 2:  // unlock one
          if (!held.empty()) {
            const std::size_t k = next(held.size());
            cache.dec_lock_ref(held[k]);
            held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
          }
          break;
        default: {
          const std::uint64_t before = cache.evictable_size();
          const std::uint32_t freed = cache.evict(static_cast<std::uint32_t>(next(12)));
          REQUIRE(cache.evictable_size() == before - freed);
          break;
        }
      }
      std::vector<const RadixCache::Node*> holders(held.begin(), held.end());
      auto problem = cache.check(holders);
      INFO("op " << op << " page " << page << ": " << (problem ? problem->message : ""));
      REQUIRE_FALSE(problem);
      REQUIRE(std::uint64_t{pool.used_count()} * page == cache.total_size());
    }
  }
}

// --- the engine ---

SimOptions sglang_options() {
  SimOptions options;
  options.engine = EngineKind::kSglang;
  options.watermark = 0.0;
  options.cost.kind = CostKind::kLinear;
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  return options;
}

RunConfig token_config(std::uint32_t pool_tokens) {
  RunConfig config = micro_config(pool_tokens);
  config.kv.page_tokens = 1;
  return config;
}

Request req(std::string id, std::uint32_t prompt, std::uint32_t output, double arrival = 0,
            std::vector<std::uint64_t> ids = {}, std::uint32_t block = 4) {
  Request r;
  r.id = std::move(id);
  r.line = 1;
  r.prompt = prompt;
  r.output = output;
  r.arrival = arrival;
  r.hash_ids = std::move(ids);
  r.hash_block_tokens = block;
  return r;
}

struct Steps {
  std::vector<std::uint64_t> prompt_computed, output, preemptions, hits, tree_tokens, used;
};

const SglangScheduler& engine(const Simulator& sim) {
  return dynamic_cast<const SglangScheduler&>(sim.scheduler());
}

Steps run(Simulator& sim, std::vector<Request> requests) {
  Steps steps;
  sim.on_step = [&steps](const Simulator& s) {
    steps.prompt_computed.push_back(s.sim_totals().prompt_tokens_computed);
    steps.output.push_back(s.sim_totals().output_tokens);
    steps.preemptions.push_back(s.sim_totals().preemptions);
    steps.hits.push_back(s.sim_totals().hit_tokens);
    steps.tree_tokens.push_back(engine(s).tree().total_size());
    steps.used.push_back(s.pool().used_count());
  };
  run_to_end(sim, std::move(requests));
  return steps;
}

TEST_CASE("sglang: a prompt enters the tree when its prefill ends, and a later request hits it") {
  // A's prefill (step 1) inserts its 8 prompt tokens (cache_unfinished_req);
  // B, with the same prompt, arrives after it and matches 7 of them (capped
  // at input_len - 1), computes 1. Step 3 decodes both (B finishes: its 8
  // prompt tokens and 1 output token with KV enter the tree), step 4 A.
  Simulator sim(token_config(64), sglang_options());
  const Steps steps = run(sim, {req("A", 8, 3, 0, {1, 2}), req("B", 8, 2, 0.001, {1, 2})});
  CHECK(steps.prompt_computed == std::vector<std::uint64_t>{8, 9, 9, 9});
  CHECK(steps.hits == std::vector<std::uint64_t>{0, 7, 7, 7});
  CHECK(steps.output == std::vector<std::uint64_t>{1, 2, 4, 5});
  // The tree: 8 shared prompt tokens, B's own output token, then A's two.
  CHECK(steps.tree_tokens == std::vector<std::uint64_t>{8, 8, 9, 11});
  CHECK(steps.used.back() == 11);
  CHECK(sim.sim_totals().queries == 16);
  CHECK(sim.sim_totals().hits == 7);
}

TEST_CASE("sglang: pages of 4 tokens cap the hit at whole pages") {
  RunConfig config = token_config(64);
  config.kv.page_tokens = 4;
  config.kv.pool_blocks = 16;
  Simulator sim(config, sglang_options());
  const Steps steps = run(sim, {req("A", 8, 3, 0, {1, 2}), req("B", 8, 2, 0.001, {1, 2})});
  CHECK(steps.hits[1] == 4);  // 7 cut to one page
  CHECK(steps.prompt_computed[1] == 12);
}

TEST_CASE("sglang: a long prompt is prefilled in chunks, each entering the tree") {
  SimOptions options = sglang_options();
  options.sglang.chunked_prefill_size = 8;
  Simulator sim(token_config(64), options);
  const Steps steps = run(sim, {req("A", 20, 2)});
  CHECK(steps.prompt_computed == std::vector<std::uint64_t>{8, 16, 20, 20});
  CHECK(steps.tree_tokens == std::vector<std::uint64_t>{8, 16, 20, 21});
  CHECK(steps.output == std::vector<std::uint64_t>{0, 0, 1, 2});
}

TEST_CASE("sglang: lpm admits the longest cached prefix first, fcfs the first arrived") {
  // W's prompt is cached after step 1; X (nothing cached) then Y (first 4
  // tokens cached) arrive. The input budget (max_prefill_tokens 8, no
  // chunking) admits one of them at step 2.
  for (const SchedulePolicy policy : {SchedulePolicy::kLpm, SchedulePolicy::kFcfs}) {
    SimOptions options = sglang_options();
    options.sglang.policy = policy;
    options.sglang.chunked_prefill_size = 0;
    options.sglang.max_prefill_tokens = 8;
    Simulator sim(token_config(128), options);
    const Steps steps = run(sim, {req("W", 8, 2, 0, {1, 2}), req("X", 8, 2, 0.001, {7, 8}),
                                  req("Y", 8, 2, 0.001, {1, 9})});
    INFO(to_string(policy));
    if (policy == SchedulePolicy::kLpm) {
      CHECK(steps.prompt_computed[1] == 12);  // Y: 4 computed, 4 hit
      CHECK(steps.hits[1] == 4);
    } else {
      CHECK(steps.prompt_computed[1] == 16);  // X: 8 computed
      CHECK(steps.hits[1] == 0);
    }
  }
}

TEST_CASE("sglang: max_running_requests bounds the batch") {
  SimOptions options = sglang_options();
  options.sglang.max_running_requests = 2;
  Simulator sim(token_config(128), options);
  const Steps steps = run(sim, {req("A", 4, 3), req("B", 4, 3), req("C", 4, 3)});
  CHECK(steps.prompt_computed[0] == 8);  // A and B
  CHECK(sim.sim_totals().max_running == 2);
  CHECK(sim.sim_totals().finished == 3);
}

TEST_CASE("sglang: the new_token_ratio reservation, batch_is_full, and decode retraction") {
  // Pool 34, conservativeness 0.1 (ratio 0.07). Step 1 prefills A (4, out 16)
  // and C (4, out 2); B (4, out 16) gets NO_TOKEN (the new requests reserve
  // their whole output): batch_is_full, on the running batch, empty then.
  // Step 2: get_next_batch_to_run replaces that empty batch with the last
  // prefill batch (ScheduleBatch.init_new: batch_is_full false), so B is
  // tried again: A and C reserve 0.07 x their remaining output, and B's 21 <
  // 26 - 1.12: prefilled. Decoding A, B and C (C finishes at step 3) fills
  // the pool: step 13 evicts C's tokens, step 16 finds no room and retracts
  // B (equal outputs and prompts: the later one). At step 17 B does not fit
  // beside A (NO_TOKEN, batch_is_full) and A finishes; step 18's
  // update_running_batch empties the batch (the flag cleared, the ratio
  // reset at idle) and B re-prefills its prompt and 14 output tokens (18).
  SimOptions options = sglang_options();
  options.sglang.schedule_conservativeness = 0.1;
  Simulator sim(token_config(34), options);
  const Steps steps = run(sim, {req("A", 4, 16), req("C", 4, 2), req("B", 4, 16)});
  REQUIRE(steps.preemptions.size() == 19);
  CHECK(steps.prompt_computed[0] == 8);
  CHECK(steps.prompt_computed[1] == 12);  // B at step 2, not after C left
  CHECK(steps.output[1] == 3);
  CHECK(steps.output[2] == 6);  // step 3 decodes A, C and B
  CHECK(steps.preemptions[14] == 0);
  CHECK(steps.preemptions[15] == 1);  // step 16
  CHECK(steps.prompt_computed[16] == 12);
  CHECK(steps.output[16] == 32);  // step 17: A's last token, B refused
  CHECK(steps.prompt_computed.back() == 30);
  CHECK(steps.output.back() == 34);  // each token once
  CHECK(sim.sim_totals().preempted_queries == 18);
  CHECK(sim.sim_totals().finished == 3);
  // Reset to 0.07 by the idle round of step 18, decayed by step 19's decode.
  CHECK(engine(sim).new_token_ratio() == Approx(0.07 - (0.07 - 0.0098) / 600));
}

TEST_CASE("sglang: batch_is_full clears when the last prefill batch loses a request") {
  // Pool 40, chunks of 4, ratio 0.7. A (4, out 30), X (12, out 1) and W (4,
  // out 8) at 0. Step 1 prefills A (the chunk budget is spent). Step 2
  // starts X's chunks (A reserves 0.7 x 29 = 20.3). Steps 3 and 4: X's
  // chunks take the budget, W needs 13 >= 32 - 20.3 - 4 (then 28 - 20.3 -
  // 5): NO_TOKEN, batch_is_full. X's last chunk samples its one token and X
  // finishes. Step 5: get_next_batch_to_run filters X out of the last
  // prefill batch (filter_batch); the batch shrank, so the running batch's
  // batch_is_full clears, and W (13 < 24 free + 12 of X's - 20.3) is
  // prefilled, without waiting for A's 30 tokens.
  SimOptions options = sglang_options();
  options.sglang.chunked_prefill_size = 4;
  Simulator sim(token_config(40), options);
  const Steps steps = run(sim, {req("A", 4, 30), req("X", 12, 1), req("W", 4, 8)});
  REQUIRE(steps.prompt_computed.size() > 5);
  CHECK(steps.prompt_computed[0] == 4);
  CHECK(steps.prompt_computed[3] == 16);  // X's three chunks
  CHECK(steps.output[3] == 2);            // A's first and X's only token
  CHECK(steps.prompt_computed[4] == 20);  // step 5: W
  CHECK(steps.output[4] == 3);
  CHECK(sim.sim_totals().finished == 3);
  CHECK(steps.output.back() == 30 + 1 + 8);
}

TEST_CASE("sglang: check() catches a leaked page (S2) and a request off its tree path (S1)") {
  SimOptions options = sglang_options();
  options.check = CheckPolicy{CheckPolicy::Mode::kOff, 1};
  for (const char* fault : {"S2", "S1"}) {
    Simulator sim(token_config(64), options);
    sim.submit(req("A", 8, 10, 0, {1, 2}));
    REQUIRE(sim.run_until(0.02));  // prefilled, decoding
    REQUIRE(SglangFaults::check(sim));
    if (std::string(fault) == "S2") {
      SglangFaults::leak(sim);
    } else {
      SglangFaults::swap_pages(sim);
    }
    INFO(fault);
    CHECK_FALSE(SglangFaults::check(sim));
    REQUIRE(sim.violation());
    CHECK(sim.violation()->invariant == fault);
  }
}

TEST_CASE("sglang: without the prefix cache nothing is matched or kept (ChunkCache)") {
  SimOptions options = sglang_options();
  options.prefix_cache = false;
  Simulator sim(token_config(64), options);
  const Steps steps = run(sim, {req("A", 8, 3, 0, {1, 2}), req("B", 8, 2, 0.001, {1, 2})});
  CHECK(steps.hits.back() == 0);
  CHECK(steps.prompt_computed.back() == 16);
  CHECK(steps.tree_tokens.back() == 0);
  CHECK(steps.used.back() == 0);  // every page freed at finish
}

TEST_CASE("sglang: n > 1 runs n requests that share the prompt through the tree") {
  // Both children are admitted in step 1 (the tree is empty, so neither
  // hits); each samples its own tokens; the request finishes once.
  Simulator sim(token_config(64), sglang_options());
  Request r = req("N", 8, 3, 0, {1, 2});
  r.n = 2;
  const Steps steps = run(sim, {r});
  CHECK(steps.prompt_computed[0] == 16);
  CHECK(steps.output.back() == 6);
  CHECK(sim.sim_totals().finished == 1);
  // The tree keeps the shared prompt once and each child's 2 own tokens.
  CHECK(steps.tree_tokens.back() == 12);
}

TEST_CASE("sglang: a trace whose ids break the prefix contract is matched page by page") {
  // 2-token hash blocks, 4-token pages: A and B end their first page with the
  // same id (2) but begin it differently (1, 3), which the formats' contract
  // (equal ids mean an equal prefix) rules out. B must not hit A's page; both
  // first pages are filed under the same id, every step checked.
  RunConfig config = token_config(64);
  config.kv.page_tokens = 4;
  config.kv.pool_blocks = 16;
  Simulator sim(config, sglang_options());
  const Steps steps =
      run(sim, {req("A", 8, 2, 0, {1, 2, 5, 6}, 2), req("B", 8, 2, 0.001, {3, 2, 7, 8}, 2),
                req("C", 8, 2, 0.1, {3, 2, 7, 8}, 2)});
  CHECK(steps.hits[1] == 0);      // B
  CHECK(steps.hits.back() == 4);  // C hits B's first page (7 cut to 4)
  CHECK(sim.sim_totals().finished == 3);
}

TEST_CASE("radix_cache: kv events follow SGLang's mixin: a split removes and re-stores its pages") {
  // Pages of 2 tokens. a = [1 1 1 1 2 2]: one leaf of 3 pages, stored in
  // order, each chained to the one before. b shares a's first 4 tokens: the
  // leaf splits there (_split_node: its 3 pages removed, then the 2 shared
  // and the 1 left stored again under the same hashes), and b's own page is
  // stored under the shared part. Evicting frees leaves: their pages removed.
  BlockPool pool(64);
  RadixCache cache(&pool, 2);
  std::vector<PageChange> log;
  cache.log_changes(&log);
  const TokenRuns a = runs({{1, 4}, {2, 6}});
  REQUIRE(cache.insert(a, 6, take(pool, 3)) == 0);
  REQUIRE(log.size() == 3);
  const std::uint64_t h0 = log[0].hash, h1 = log[1].hash, h2 = log[2].hash;
  CHECK(log[0].stored);
  CHECK_FALSE(log[0].parent);
  CHECK(log[1].parent == h0);
  CHECK(log[2].parent == h1);
  CHECK(h0 != h1);  // the same tokens at another position: another hash
  log.clear();
  const TokenRuns b = runs({{1, 4}, {3, 6}});
  std::vector<BlockId> b_pages = take(pool, 3);
  REQUIRE(cache.insert(b, 6, b_pages) == 4);
  (void)pool.release_each(std::span<const BlockId>(b_pages).first(2));
  REQUIRE(log.size() == 3 + 2 + 1 + 1);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK_FALSE(log[i].stored);
    CHECK(log[i].hash == (i == 0 ? h0 : i == 1 ? h1 : h2));
  }
  CHECK(log[3].stored);
  CHECK(log[3].hash == h0);
  CHECK_FALSE(log[3].parent);
  CHECK(log[4].hash == h1);
  CHECK(log[5].hash == h2);
  CHECK(log[5].parent == h1);  // the child's page, under the new node's last
  CHECK(log[6].stored);
  CHECK(log[6].parent == h1);  // b's own page, a sibling of a's third
  CHECK(log[6].hash != h2);
  const std::vector<const RadixCache::Node*> none;
  CHECK_FALSE(cache.check(none));  // R4: every node's hashes are its path's chain
  std::vector<std::uint64_t> held;
  cache.page_hashes(held);
  std::sort(held.begin(), held.end());
  std::vector<std::uint64_t> want{h0, h1, h2, log[6].hash};
  std::sort(want.begin(), want.end());
  CHECK(held == want);
  // A hash that is not its path's chain is R4.
  RadixCache::Node* shared = cache.root()->children.begin()->second.get();
  shared->hashes[1] ^= 1;
  const auto problem = cache.check(none);
  REQUIRE(problem);
  CHECK(problem->invariant == "R4");
  shared->hashes[1] ^= 1;
  log.clear();
  CHECK(cache.evict(100) == 8);  // tokens: the shared 4 and 2 of each leaf
  REQUIRE(log.size() == 4);
  for (const PageChange& change : log) CHECK_FALSE(change.stored);
  CHECK(log[2].hash == h0);  // the shared node went last, when it became a leaf
  CHECK(log[3].hash == h1);
}

TEST_CASE("sglang kv events: replayed in order, the events are the tree's pages at every step") {
  // Random requests over six prompt families: every stored page's parent is
  // held when it is stored, none is stored twice or removed unknown, and
  // after every step the set is the tree's pages (R4 checked every step).
  for (const std::uint32_t page : {1u, 4u}) {
    RunConfig config = token_config(160);
    config.kv.page_tokens = page;
    config.kv.pool_blocks = 160 / page;
    SimOptions options = sglang_options();
    options.kv_events = true;
    Simulator sim(config, options);
    std::set<std::uint64_t> held;
    std::uint64_t stored = 0, removed = 0, mismatches = 0;
    std::string first_problem;
    auto problem = [&](std::string what) {
      if (first_problem.empty()) first_problem = std::move(what);
    };
    sim.on_kv_events = [&](double, const KvEventLog& log) {
      CHECK(log.gpu.empty());
      for (const PageChange& change : log.pages) {
        if (!change.stored) {
          ++removed;
          if (held.erase(change.hash) == 0) problem("an unknown page removed");
          continue;
        }
        ++stored;
        if (change.parent && held.count(*change.parent) == 0) problem("a parent not held");
        if (!held.insert(change.hash).second) problem("a page stored twice");
      }
    };
    sim.on_step = [&](const Simulator& s) {
      std::vector<std::uint64_t> pages;
      engine(s).tree().page_hashes(pages);
      if (std::set<std::uint64_t>(pages.begin(), pages.end()) != held ||
          pages.size() != held.size()) {
        ++mismatches;
      }
    };
    test::Lcg next{99 + page};
    std::vector<Request> requests;
    for (int i = 0; i < 120; ++i) {
      const std::uint64_t family = next(6);
      const auto blocks = static_cast<std::uint32_t>(1 + next(6));
      std::vector<std::uint64_t> ids;
      for (std::uint32_t k = 0; k < blocks; ++k) ids.push_back(family * 100 + k + 1);
      requests.push_back(req(std::to_string(i), blocks * 4 + static_cast<std::uint32_t>(next(4)),
                             static_cast<std::uint32_t>(1 + next(9)), i * 0.002, ids));
    }
    run_to_end(sim, std::move(requests));
    INFO("page " << page << ": " << first_problem);
    CHECK(first_problem.empty());
    CHECK(mismatches == 0);
    CHECK(removed > 0);
    CHECK(stored > removed);
  }
}

TEST_CASE("sglang: a request that cannot fit the pool is skipped") {
  Simulator sim(token_config(16), sglang_options());
  run(sim, {req("big", 10, 6), req("ok", 4, 2)});
  CHECK(sim.sim_totals().skipped == 1);
  CHECK(sim.sim_totals().finished == 1);
}

}  // namespace
}  // namespace kvreplay
