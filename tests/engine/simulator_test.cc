// Simulator: scheduling, preemption, forks, the prefix cache and the
// contiguous baselines on small hand-made traces, with invariant checks after
// every step. The real-trace figures: tests/app/simulation_test.cc.
#include "engine/simulator.h"
#include "engine/paged/paged_scheduler.h"

#include <catch2/catch.hpp>

#include <limits>
#include <vector>

#include "engine/micro_config.h"
#include "engine/run_to_end.h"

namespace {

using kvreplay::AllocatorKind;
using kvreplay::AllocOrder;
using kvreplay::CheckPolicy;
using kvreplay::EvictPolicy;
using kvreplay::Request;
using kvreplay::RunConfig;
using kvreplay::SimOptions;
using kvreplay::Simulator;
using kvreplay::tiny_config;

SimOptions checked_options() {
  SimOptions options;
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  options.watermark = 0.0;
  return options;
}

Request request(double arrival, std::uint32_t prompt, std::uint32_t output, std::uint32_t n = 1) {
  Request r;
  r.arrival = arrival;
  r.prompt = prompt;
  r.output = output;
  r.n = n;
  r.id = std::to_string(arrival);
  return r;
}

}  // namespace

TEST_CASE("simulator: one request prefills, decodes and frees every block") {
  Simulator sim(tiny_config(16), checked_options());
  run_to_end(sim, {request(0.0, 10, 5)});
  CHECK(sim.sim_totals().finished == 1);
  CHECK(sim.sim_totals().output_tokens == 5);
  // KV holds prompt + output - 1 = 14 tokens at the end: 4 pages of 4.
  CHECK(sim.totals().peak_used == 4);
  CHECK(sim.totals().tokens_appended == 14);
  CHECK(sim.pool().used_count() == 0);
  CHECK(sim.sim_totals().preemptions == 0);
}

TEST_CASE("simulator: under --alloc-order vllm the null block is neither used nor wasted") {
  // The generic engine with vLLM's free queue holds block 0 as the null block
  // (BlockPool.get_usage counts num_gpu_blocks - 1). Prompt 6, output 4, no
  // prefix cache: step 1 prefills 6 tokens into 2 blocks (2 of 8 slots
  // unfilled), steps 2-3 fill page 1, step 4 takes page 2 and finishes: no
  // block used after it, so no waste either (the null block's 1.0 before).
  RunConfig config = tiny_config(4);
  config.alloc_order = AllocOrder::kVllm;
  SimOptions options = checked_options();
  options.prefix_cache = false;
  Simulator sim(config, options);
  std::vector<std::uint32_t> used;
  sim.on_step = [&](const Simulator& s) { used.push_back(s.state().used); };
  run_to_end(sim, {request(0.0, 6, 4)});
  CHECK(used == std::vector<std::uint32_t>{2, 2, 2, 0});
  CHECK(sim.totals().peak_used == 2);
  CHECK(sim.sim_totals().peak_in_use == 2);
  CHECK(sim.totals().waste_ratio_max == 0.25);
  CHECK(sim.totals().waste_slots_at_peak == 2);
  CHECK(sim.null_block());
  CHECK(sim.pool().used_count() == 1);  // block 0, held (the checks count it)
  CHECK(sim.used_blocks() == 0);
}

TEST_CASE(
    "simulator: n > 1 forks after prefill and copies the shared partial page once per branch") {
  Simulator sim(tiny_config(32), checked_options());
  run_to_end(sim, {request(0.0, 10, 3, 3)});
  CHECK(sim.totals().forks == 2);
  // Each of the 3 samples writes into the shared partial page 2 (10 % 4 != 0):
  // the first two writers copy, the last holds it alone and writes in place.
  CHECK(sim.totals().cow_copies == 2);
  CHECK(sim.sim_totals().output_tokens == 9);
  CHECK(sim.sim_totals().finished == 1);
  CHECK(sim.pool().used_count() == 0);
}

TEST_CASE("simulator: a pool too small for everyone preempts the most recent request") {
  SimOptions options = checked_options();
  options.prefix_cache = false;
  // Two requests of 8 prompt tokens growing to 8 + 12 - 1 = 19 tokens (5 pages
  // each) cannot both finish in 8 blocks: the second one admitted is preempted.
  Simulator sim(tiny_config(8), options);
  run_to_end(sim, {request(0.0, 8, 12), request(0.0, 8, 12)});
  CHECK(sim.sim_totals().preemptions >= 1);
  CHECK(sim.sim_totals().finished == 2);
  CHECK(sim.pool().used_count() == 0);
  // Recomputed prompt tokens are counted as computed, never as hits or queries.
  CHECK(sim.sim_totals().prompt_tokens_computed > 16);
  CHECK(sim.sim_totals().query_tokens == 16);
}

TEST_CASE("simulator: a request of n samples preempted in its prefill gives back all n seats") {
  // The generic engine counts a request's n samples as running from its
  // admission, while its prefill has one table for them all. b (n = 2) is
  // preempted in its prefill: it used to give back one of its two seats, so
  // with --max-seqs 4 the seat it kept blocked c (n = 4) for ever, and the
  // run stopped with P1 (nothing runs, nothing is awaited).
  SimOptions options = checked_options();
  options.max_seqs = 4;
  options.max_batched_tokens = 40;
  RunConfig config = tiny_config(30, 16);
  config.kv.max_seq_tokens = 4096;
  Simulator sim(config, options);
  run_to_end(sim, {request(0.0, 160, 100, 2), request(0.001, 320, 1, 2), request(20.0, 10, 1, 4)});
  CHECK(sim.sim_totals().preemptions > 0);
  CHECK(sim.sim_totals().finished == 3);
  CHECK(sim.sim_totals().max_running <= 4);
}

TEST_CASE("simulator: requests that can never fit are skipped and counted") {
  Simulator sim(tiny_config(4), checked_options());
  run_to_end(sim, {request(0.0, 8, 2), request(1.0, 200, 100), request(2.0, 40, 2)});
  CHECK(sim.sim_totals().skipped == 2);  // past max_seq_tokens; more blocks than the pool
  CHECK(sim.sim_totals().finished == 1);
}

TEST_CASE("simulator: a request with more samples than --max-seqs is skipped, not waited for") {
  // Admission keeps the running samples within max_seqs: a request asking for
  // more used to wait at the head of the queue forever (run_until never returned).
  SimOptions options = checked_options();
  options.max_seqs = 4;
  for (AllocatorKind allocator : {AllocatorKind::kPaged, AllocatorKind::kContiguousOracle}) {
    options.allocator = allocator;
    Simulator sim(tiny_config(64), options);
    Request wide = request(1.0, 8, 2, 5);
    wide.line = 2;
    wide.id = "wide";
    run_to_end(sim, {request(0.0, 8, 2), wide, request(2.0, 8, 2, 4), request(3.0, 8, 2, 9)});
    CHECK(sim.sim_totals().skipped == 2);
    CHECK(sim.sim_totals().skipped_too_many_samples == 2);
    CHECK(sim.sim_totals().skipped_too_long == 0);
    CHECK(sim.sim_totals().finished == 2);
    CHECK(sim.sim_totals().max_running <= 4);
    const auto& first = sim.first_skipped(kvreplay::SkipReason::kTooManySamples);
    REQUIRE(first);
    CHECK(first->line == 2);
    CHECK(first->id == "wide");
    CHECK(first->need == 5);
    CHECK_FALSE(sim.first_skipped(kvreplay::SkipReason::kPoolTooSmall));
  }
}

TEST_CASE("simulator: the prefix cache reuses full pages of a shared hash chain") {
  SimOptions options = checked_options();
  Simulator sim(tiny_config(64), options);
  Request first = request(0.0, 20, 2);
  first.hash_ids = {7, 8};  // 16-token hash blocks: [0,16) and [16,20)
  first.hash_block_tokens = 16;
  Request second = request(10.0, 20, 2);
  second.hash_ids = {7, 9};  // the same first 16 tokens, then different
  second.hash_block_tokens = 16;
  run_to_end(sim, {first, second});
  // The second request hits the 4 full pages of hash block 7.
  CHECK(sim.sim_totals().hit_tokens == 16);
  CHECK(sim.sim_totals().hit_blocks == 4);
  CHECK(sim.sim_totals().query_tokens == 40);
  CHECK(sim.totals().prefix_installs == 1);
  // Cached pages stay in the pool after the requests finish (evictable).
  CHECK(sim.pool().used_count() > 0);
}

TEST_CASE("simulator: hits on one cached prefix keep the cache's candidates bounded") {
  // 20,000 requests one after the other, each hitting the same 4 cached pages:
  // every hit and release used to leave a candidate behind until an eviction.
  SimOptions options;
  options.watermark = 0.0;
  Simulator sim(tiny_config(64), options);
  std::vector<Request> requests;
  for (int i = 0; i < 20000; ++i) {
    Request r = request(i * 1.0, 20, 1);
    r.hash_ids = {7, 8};
    r.hash_block_tokens = 16;
    requests.push_back(std::move(r));
  }
  run_to_end(sim, std::move(requests));
  CHECK(sim.sim_totals().hit_blocks == 4 * 19999);
  CHECK(sim.evictions() == 0);
  const kvreplay::PrefixCache& cache =
      dynamic_cast<const kvreplay::PagedScheduler&>(sim.scheduler()).prefix_cache();
  CHECK(cache.size() == 5);  // the 5th page holds the last prompt token: computed, never hit
  CHECK(cache.candidates() <= 2 * cache.size() + kvreplay::PrefixCache::kCandidateSlack);
}

TEST_CASE("simulator: a full-prompt hit still computes the last token") {
  Simulator sim(tiny_config(64), checked_options());
  Request a = request(0.0, 16, 2);
  a.hash_ids = {1};
  a.hash_block_tokens = 16;
  Request b = a;
  b.arrival = 5.0;
  run_to_end(sim, {a, b});
  CHECK(sim.sim_totals().hit_tokens == 12);  // 3 of 4 pages: page 4 holds the last token
}

TEST_CASE("simulator: eviction frees cached blocks when the pool runs short") {
  for (EvictPolicy policy : {EvictPolicy::kLru, EvictPolicy::kFifo, EvictPolicy::kLfu}) {
    SimOptions options = checked_options();
    options.evict = policy;
    Simulator sim(tiny_config(12), options);
    std::vector<Request> requests;
    for (int i = 0; i < 8; ++i) {
      Request r = request(i * 10.0, 16, 2);
      r.hash_ids = {static_cast<std::uint64_t>(100 + i)};  // all different
      r.hash_block_tokens = 16;
      requests.push_back(r);
    }
    run_to_end(sim, requests);
    CHECK(sim.evictions() > 0);
    CHECK(sim.sim_totals().finished == 8);
    CHECK(sim.sim_totals().hit_tokens == 0);
  }
}

TEST_CASE("simulator: contiguous baselines reserve whole regions and waste what they do not fill") {
  for (AllocatorKind kind : {AllocatorKind::kContiguousMax, AllocatorKind::kContiguousPow2,
                             AllocatorKind::kContiguousOracle}) {
    SimOptions options = checked_options();
    options.allocator = kind;
    Simulator sim(tiny_config(256), options);
    run_to_end(sim, {request(0.0, 10, 7)});  // final KV length 16
    // max: the longest sequence; pow2: 16, the power of two at or above 16;
    // oracle: the final length, 16.
    const std::uint64_t reserved = kind == AllocatorKind::kContiguousMax ? 256 : 16;
    CHECK(sim.totals().peak_used == reserved / 4);
    CHECK(sim.sim_totals().finished == 1);
  }
  // Oracle reserves prompt + output - 1 = 17 tokens for (12, 6); pow2 reserves 32.
  SimOptions pow2 = checked_options();
  pow2.allocator = AllocatorKind::kContiguousPow2;
  Simulator sim(tiny_config(256), pow2);
  run_to_end(sim, {request(0.0, 12, 6)});
  CHECK(sim.totals().peak_used == 8);
  CHECK(sim.totals().waste_ratio_max > 0.4);
}

TEST_CASE("simulator: paged waste is below contiguous waste on the same trace") {
  std::vector<Request> requests;
  for (int i = 0; i < 40; ++i)
    requests.push_back(request(i * 0.01, static_cast<std::uint32_t>(5 + (i * 7) % 40),
                               static_cast<std::uint32_t>(3 + (i * 13) % 50)));
  double waste[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    SimOptions options = checked_options();
    options.allocator = k == 0 ? AllocatorKind::kPaged : AllocatorKind::kContiguousMax;
    Simulator sim(tiny_config(512), options);
    run_to_end(sim, requests);
    CHECK(sim.sim_totals().finished == 40);
    waste[k] = sim.totals().waste_ratio_mean();
  }
  CHECK(waste[0] < 0.25);
  CHECK(waste[1] > 0.5);
}

TEST_CASE("simulator: blocks in use leave out the cache residency that no request holds") {
  // Request A caches 4 pages of hash block 7 and finishes; B, later, hits them.
  Request a = request(0.0, 20, 2);
  a.hash_ids = {7, 8};
  a.hash_block_tokens = 16;
  Request b = request(10.0, 20, 2);
  b.hash_ids = {7, 9};
  b.hash_block_tokens = 16;
  Simulator sim(tiny_config(32), checked_options());
  run_to_end(sim, {a, b});
  // A holds ceil(20 / 4) = 5 blocks after its prefill, and so does B (4 of them
  // hits); the page of the 21st token comes and goes inside the last step (this
  // scheduler frees a finished request within the step), unseen by a record.
  CHECK(sim.sim_totals().peak_in_use == 5);
  // Every block still used at the end is cache residency: none is in use.
  CHECK(sim.pool().used_count() > 0);
  CHECK(sim.in_use_blocks() == 0);
  CHECK(sim.cache_resident_blocks() == sim.pool().used_count());
  CHECK(sim.sim_totals().peak_cache_resident >= 4);
  CHECK(sim.sim_totals().in_use_sum > 0.0);
  // PrefixCacheStats: queries and hits in tokens, once per admission.
  CHECK(sim.sim_totals().queries == 40);
  CHECK(sim.sim_totals().hits == 16);
  CHECK(sim.sim_totals().preempted_queries == 0);
  CHECK(sim.sim_totals().preempted_hits == 0);
}

TEST_CASE("simulator: a preempted request's recomputed tokens are not output, nor first queries") {
  SimOptions options = checked_options();
  // Two requests of 8 prompt tokens growing to 19 tokens (5 pages each) in 8
  // blocks: one is preempted, recomputes its prompt and its first tokens again.
  Simulator sim(tiny_config(8), options);
  run_to_end(sim, {request(0.0, 8, 12), request(0.0, 8, 12)});
  REQUIRE(sim.sim_totals().preemptions >= 1);
  CHECK(sim.sim_totals().finished == 2);
  CHECK(sim.sim_totals().output_tokens == 24);  // 12 each, however often recomputed
  CHECK(sim.sim_totals().queries == 16);
  // Every readmission looks up its prompt again, counted apart.
  CHECK(sim.sim_totals().preempted_queries == 8 * sim.sim_totals().preemptions);
  CHECK(sim.sim_totals().preempted_hits <= sim.sim_totals().preempted_queries);
  CHECK(sim.sim_totals().peak_in_use <= 8);
}

TEST_CASE("simulator: saved blocks lie between 0 and the pool less the blocks in use") {
  // n = 4 samples share their prompt pages: at the peak, the samples' tables
  // reference more blocks than they hold.
  Simulator sim(tiny_config(64), checked_options());
  run_to_end(sim, {request(0.0, 16, 6, 4)});
  const kvreplay::SimTotals& st = sim.sim_totals();
  CHECK(st.saved_blocks_at_peak > 0);
  CHECK(st.saved_blocks_at_peak <= 64u - st.peak_in_use);
  CHECK(sim.totals().saved_blocks_at_peak == static_cast<std::int64_t>(st.saved_blocks_at_peak));
  // Contiguous baselines share nothing: nothing saved.
  SimOptions contiguous = checked_options();
  contiguous.allocator = AllocatorKind::kContiguousMax;
  Simulator baseline(tiny_config(256), contiguous);
  run_to_end(baseline, {request(0.0, 16, 6, 4)});
  CHECK(baseline.sim_totals().saved_blocks_at_peak == 0);
  CHECK(baseline.totals().saved_blocks_at_peak == 0);
  CHECK(baseline.sim_totals().peak_in_use == baseline.totals().peak_used);
}

TEST_CASE(
    "simulator: an engine that can run nothing and awaits nothing stops with P1, not stepping "
    "in place forever") {
  // The pool's free blocks taken behind the engine's back (the fault a leak
  // would be): the second request can never be admitted, nothing runs, no
  // load is awaited. The vllm and generic engines step in place (each empty
  // step costs the cost model's overhead, so the clock crept on forever); the
  // run stops after kStallSteps such steps with a violation saying where it
  // stood. The sglang engine gives such a request up (its own rule) and ends.
  for (const auto engine : {kvreplay::EngineKind::kVllm, kvreplay::EngineKind::kGeneric,
                            kvreplay::EngineKind::kSglang}) {
    CAPTURE(static_cast<int>(engine));
    SimOptions options;
    options.engine = engine;
    options.watermark = 0.0;
    options.prefix_cache = false;
    Simulator sim(tiny_config(16), options);
    sim.submit(request(0.0, 8, 2));
    REQUIRE(sim.run_until(1.0));
    REQUIRE(sim.sim_totals().finished == 1);
    auto& pool = const_cast<kvreplay::BlockPool&>(sim.pool());
    while (pool.free_count() > 0) (void)pool.take_free();
    sim.submit(request(2.0, 8, 2));
    const std::uint64_t steps = sim.sim_totals().steps;
    const bool ended = sim.run_until(std::numeric_limits<double>::infinity());
    if (engine == kvreplay::EngineKind::kSglang) {
      CHECK(ended);
      CHECK(sim.sim_totals().skipped == 1);
      continue;
    }
    CHECK_FALSE(ended);
    REQUIRE(sim.violation());
    CHECK(sim.violation()->invariant == "P1");
    CHECK(sim.violation()->message.find("ran nothing for 10000 steps in a row") !=
          std::string::npos);
    CHECK(sim.violation()->message.find("(requests waiting: 1, running: 0; free blocks: 0)") !=
          std::string::npos);
    CHECK(sim.sim_totals().steps - steps == 9999);  // the last one stopped the run
  }
}
