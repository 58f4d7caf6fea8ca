// Fleet and Router (SPEC 3.6): one instance is a lone Simulator; round-robin
// is each sub-trace simulated alone; each policy's choices on hand-worked
// 4-request, 2-instance traces; the router's approximate view; the bundled
// Mooncake slice's hit rates against one instance holding the fleet's memory.
#include "engine/fleet/fleet.h"

#include <catch2/catch.hpp>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/fleet/policies/prefix_aware.h"
#include "engine/fleet/router.h"
#include "engine/micro_config.h"
#include "formats/requests/request_reader.h"

namespace {

using namespace kvreplay;

SimOptions options_of(EngineKind engine) {
  SimOptions options;
  options.engine = engine;
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  options.watermark = 0.0;
  options.max_seqs = 8;
  options.max_batched_tokens = 64;
  options.cost.kind = CostKind::kLinear;
  options.sglang.chunked_prefill_size = 64;
  options.sglang.max_prefill_tokens = 64;
  return options;
}

Request request(double arrival, std::uint32_t prompt, std::uint32_t output,
                std::vector<std::uint64_t> hash_ids = {}) {
  Request r;
  r.arrival = arrival;
  r.prompt = prompt;
  r.output = output;
  r.id = std::to_string(arrival);
  r.hash_ids = std::move(hash_ids);
  r.hash_block_tokens = 8;
  return r;
}

// Runs the fleet over the requests; returns each request's instance.
std::vector<std::uint32_t> run_fleet(Fleet& fleet, const std::vector<Request>& requests) {
  std::vector<std::uint32_t> chosen;
  for (const Request& r : requests) {
    REQUIRE(fleet.run_until(r.arrival));
    chosen.push_back(fleet.submit(r));
  }
  REQUIRE(fleet.run_until(std::numeric_limits<double>::infinity()));
  REQUIRE(fleet.finish());
  REQUIRE_FALSE(fleet.violated_instance());
  return chosen;
}

void run_alone(Simulator& sim, const std::vector<Request>& requests) {
  for (const Request& r : requests) {
    REQUIRE(sim.run_until(r.arrival));
    sim.submit(r);
  }
  REQUIRE(sim.run_until(std::numeric_limits<double>::infinity()));
  REQUIRE(sim.finish());
  REQUIRE_FALSE(sim.violation());
}

// A trace of `count` requests whose prompts share prefixes (hash ids drawn
// from a few chains), arriving 20 ms apart.
std::vector<Request> shared_prefix_trace(std::size_t count) {
  std::vector<Request> out;
  std::uint64_t x = 12345;
  auto next = [&x] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x >> 33;
  };
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t chain = next() % 4;
    const std::uint32_t blocks = 1 + static_cast<std::uint32_t>(next() % 4);
    std::vector<std::uint64_t> ids;
    for (std::uint32_t b = 0; b < blocks; ++b) ids.push_back(chain * 100 + b);
    out.push_back(request(0.02 * static_cast<double>(i), blocks * 8 + 3,
                          1 + static_cast<std::uint32_t>(next() % 12), ids));
  }
  return out;
}

void require_same_run(const Simulator& a, const Simulator& b) {
  const SimTotals& x = a.sim_totals();
  const SimTotals& y = b.sim_totals();
  CHECK(x.requests == y.requests);
  CHECK(x.finished == y.finished);
  CHECK(x.steps == y.steps);
  CHECK(x.preemptions == y.preemptions);
  CHECK(x.output_tokens == y.output_tokens);
  CHECK(x.prompt_tokens_computed == y.prompt_tokens_computed);
  CHECK(x.query_tokens == y.query_tokens);
  CHECK(x.hit_tokens == y.hit_tokens);
  CHECK(x.peak_in_use == y.peak_in_use);
  CHECK(x.in_use_sum == y.in_use_sum);
  CHECK(x.virtual_seconds == y.virtual_seconds);
  CHECK(a.totals().peak_used == b.totals().peak_used);
  CHECK(a.totals().tokens_appended == b.totals().tokens_appended);
  CHECK(a.pool().allocations() == b.pool().allocations());
  CHECK(a.evictions() == b.evictions());
  CHECK(a.latencies().ttft_ms.summary().p99 == b.latencies().ttft_ms.summary().p99);
  CHECK(a.latencies().tpot_ms.summary().mean == b.latencies().tpot_ms.summary().mean);
  CHECK(a.latencies().e2e_ms.summary().max == b.latencies().e2e_ms.summary().max);
}

FleetOptions fleet_of(std::uint32_t replicas, RouterPolicy policy) {
  FleetOptions fleet;
  fleet.replicas = replicas;
  fleet.router.policy = policy;
  return fleet;
}

}  // namespace

TEST_CASE("fleet: one instance is a lone simulator, every figure equal") {
  for (EngineKind engine : {EngineKind::kGeneric, EngineKind::kVllm, EngineKind::kSglang}) {
    INFO("engine " << to_string(engine));
    const std::vector<Request> trace = shared_prefix_trace(60);
    Fleet fleet(tiny_config(24), options_of(engine), fleet_of(1, RouterPolicy::kPrefixAware));
    run_fleet(fleet, trace);
    Simulator alone(tiny_config(24), options_of(engine));
    run_alone(alone, trace);
    require_same_run(fleet.instance(0), alone);
    // The pool is tight: vLLM's and the generic engine preempt (SGLang's
    // reservation admits fewer instead).
    if (engine != EngineKind::kSglang) CHECK(fleet.instance(0).sim_totals().preemptions > 0);
  }
}

TEST_CASE("fleet: round-robin is each instance's sub-trace simulated alone") {
  for (EngineKind engine : {EngineKind::kGeneric, EngineKind::kVllm, EngineKind::kSglang}) {
    INFO("engine " << to_string(engine));
    const std::vector<Request> trace = shared_prefix_trace(90);
    Fleet fleet(tiny_config(24), options_of(engine), fleet_of(3, RouterPolicy::kRoundRobin));
    const std::vector<std::uint32_t> chosen = run_fleet(fleet, trace);
    for (std::uint32_t i = 0; i < 3; ++i) {
      std::vector<Request> sub;
      for (std::size_t k = 0; k < trace.size(); ++k) {
        CHECK(chosen[k] == k % 3);
        if (k % 3 == i) sub.push_back(trace[k]);
      }
      Simulator alone(tiny_config(24), options_of(engine));
      run_alone(alone, sub);
      INFO("instance " << i);
      require_same_run(fleet.instance(i), alone);
      CHECK(fleet.routed()[i].requests == 30);
      CHECK(fleet.instance(i).sim_totals().finished == 30);
      CHECK(fleet.instance(i).totals().checks > 0);  // --check every ran on this instance
    }
  }
}

TEST_CASE("fleet: each policy's choices on four requests and two instances") {
  // All four arrive at once, before any instance steps: only the requests
  // routed so far tell the instances apart.
  std::vector<Request> together;
  for (int k = 0; k < 4; ++k) together.push_back(request(0.0, 12, 4));
  SECTION("round-robin: 0, 1, 0, 1") {
    Fleet fleet(tiny_config(32), options_of(EngineKind::kVllm),
                fleet_of(2, RouterPolicy::kRoundRobin));
    CHECK(run_fleet(fleet, together) == std::vector<std::uint32_t>{0, 1, 0, 1});
  }
  SECTION("least-requests: a tie goes to the lower index, then to the emptier one") {
    Fleet fleet(tiny_config(32), options_of(EngineKind::kVllm),
                fleet_of(2, RouterPolicy::kLeastRequests));
    CHECK(run_fleet(fleet, together) == std::vector<std::uint32_t>{0, 1, 0, 1});
  }
  SECTION("power-of-two: with two instances both are drawn, the emptier wins") {
    for (std::uint64_t seed : {0ULL, 1ULL, 7ULL}) {
      FleetOptions options = fleet_of(2, RouterPolicy::kPowerOfTwo);
      options.router.seed = seed;
      Fleet fleet(tiny_config(32), options_of(EngineKind::kVllm), options);
      CHECK(run_fleet(fleet, together) == std::vector<std::uint32_t>{0, 1, 0, 1});
    }
  }
  SECTION("least-kv: the lower usage, ties to the fewer requests") {
    // r0 (40 tokens: 10 pages) runs on 0 and is decoding 200 tokens when r1
    // (8 tokens, 2 pages) arrives: 1 is empty. r2 then finds 0 at 10+ pages
    // and 1 at 2+: 1. r3 arrives with r1 and r2 done: 1 empty again.
    const std::vector<Request> trace = {request(0.0, 40, 200), request(0.5, 8, 3),
                                        request(0.6, 8, 300), request(30.0, 8, 3)};
    Fleet fleet(tiny_config(128), options_of(EngineKind::kVllm),
                fleet_of(2, RouterPolicy::kLeastKv));
    const std::vector<std::uint32_t> chosen = run_fleet(fleet, trace);
    CHECK(chosen == std::vector<std::uint32_t>{0, 1, 1, 0});
  }
  SECTION("prefix-aware: a prompt goes where its prefix is cached") {
    for (RouterView view : {RouterView::kPrecise, RouterView::kApproximate}) {
      INFO("view " << to_string(view));
      // r0 (chain A) to 0 (all equal); r1 (chain C) to 1 (0 holds r0's active
      // blocks); later r2 extends A and r3 extends C: each follows its prefix
      // even though the other instance is equally idle.
      const std::vector<Request> trace = {request(0.0, 16, 2, {1, 2}), request(0.0, 16, 2, {7, 8}),
                                          request(5.0, 24, 2, {1, 2, 3}),
                                          request(5.0, 24, 2, {7, 8, 9})};
      FleetOptions options = fleet_of(2, RouterPolicy::kPrefixAware);
      options.router.view = view;
      Fleet fleet(tiny_config(32), options_of(EngineKind::kVllm), options);
      std::vector<std::vector<std::uint32_t>> seen;
      fleet.on_route = [&seen](const Request&, const RouteChoice& choice) {
        seen.push_back(choice.cached_blocks);
      };
      CHECK(run_fleet(fleet, trace) == std::vector<std::uint32_t>{0, 1, 0, 1});
      // r2 saw its 16 cached tokens (4 pages) on instance 0 and none on 1.
      CHECK(seen[2] == std::vector<std::uint32_t>{4, 0});
      CHECK(seen[3] == std::vector<std::uint32_t>{0, 4});
      CHECK(fleet.instance(0).sim_totals().hit_tokens == 16);
    }
  }
  SECTION("session: a session stays on its instance") {
    std::vector<Request> trace = {request(0.0, 12, 4), request(0.0, 12, 4), request(1.0, 12, 4),
                                  request(1.0, 12, 4)};
    trace[0].session = trace[2].session = "alice";
    trace[1].session = trace[3].session = "bob";
    Fleet fleet(tiny_config(32), options_of(EngineKind::kVllm),
                fleet_of(2, RouterPolicy::kSession));
    const std::vector<std::uint32_t> chosen = run_fleet(fleet, trace);
    CHECK(chosen[0] == chosen[2]);
    CHECK(chosen[1] == chosen[3]);
  }
}

TEST_CASE("router: the approximate view forgets by capacity and by age") {
  RouterOptions options;
  options.policy = RouterPolicy::kPrefixAware;
  options.view = RouterView::kApproximate;
  options.approx_ttl_s = 10.0;
  options.approx_blocks = 4;  // 4 pages of 4 tokens: two hash blocks of 8
  PrefixAwarePolicy router(RouterSetup{options, 2, 4, 1024});
  std::vector<InstanceView> views(2);
  const Request a = request(0.0, 16, 1, {1, 2});
  CHECK(router.pick(a, 0.0, views).instance == 0);
  CHECK(router.approximate_tokens(a, 0, 5.0) == 16);
  CHECK(router.approximate_tokens(a, 1, 5.0) == 0);
  CHECK(router.approximate_tokens(a, 0, 10.5) == 0);  // older than the time to live
  // Another chain on instance 0 pushes the first out (capacity: 16 tokens).
  // With a's blocks freed, both instances cost the same: b to instance 0.
  router.finished(0, a.tag);
  const Request b = request(1.0, 16, 1, {5, 6});
  CHECK(router.pick(b, 1.0, views).instance == 0);
  CHECK(router.approximate_tokens(b, 0, 2.0) == 16);
  CHECK(router.approximate_tokens(a, 0, 2.0) == 0);
}

// Dynamo's cost (DefaultWorkerSelector::select_worker, scheduler.rs at
// db19bd2a): overlap weight × (new tokens + active tokens) ÷ block + active
// unique blocks + the request's blocks not active there
// (ActiveSequences::potential_blocks_and_tokens, sequence.rs). 4-token pages,
// hash blocks of 8 tokens (2 pages each), weight 1, temperature 0.
TEST_CASE("router: prefix-aware counts unique active blocks and pending prefill tokens") {
  RouterOptions options;
  options.policy = RouterPolicy::kPrefixAware;
  PrefixAwarePolicy router(RouterSetup{options, 2, 4, 1024});
  std::vector<InstanceView> views(2);
  auto tagged = [](Request r, std::uint64_t tag) {
    r.tag = tag;
    return r;
  };
  // r1 {1,2}: 4 blocks, 16 new tokens everywhere: 16/4 + 4 = 8 each, tie to 0.
  CHECK(router.pick(tagged(request(0.0, 16, 9, {1, 2}), 1), 0.0, views).instance == 0);
  // r4 {5,6,7}: instance 0 has r1's 16 tokens still to prefill:
  // (24 + 16)/4 + (4 + 6) = 20; instance 1: 24/4 + 6 = 12.
  RouteChoice c = router.pick(tagged(request(0.0, 24, 9, {5, 6, 7}), 4), 0.0, views);
  CHECK(c.cost == std::vector<double>{20, 12});
  CHECK(c.instance == 1);
  // First tokens (mark_prefill_completed): their tokens stop counting.
  router.prefill_done(0, 1);
  router.prefill_done(1, 4);
  CHECK(router.active(0).active_tokens() == 0);
  CHECK(router.active(1).active_blocks() == 6);
  // r2 repeats r1, cached on instance 0: 0 new tokens, no new block: 0 + 4.
  views[0].cached_tokens = 16;
  c = router.pick(tagged(request(0.0, 16, 9, {1, 2}), 2), 0.0, views);
  CHECK(c.cost == std::vector<double>{4, 14});
  router.prefill_done(0, 2);
  // r1 and r2 share their 4 blocks: instance 0 holds 4 unique blocks, not 8.
  CHECK(router.active(0).active_blocks() == 4);
  CHECK(router.active(0).requests() == 2);
  views[0].cached_tokens = 0;
  // r5 {9,10}: 16/4 + (4 + 4) = 12 on instance 0 (a sum of every request's
  // blocks would make it 16 and send r5 to instance 1), 4 + (6 + 4) = 14.
  c = router.pick(tagged(request(0.0, 16, 9, {9, 10}), 5), 0.0, views);
  CHECK(c.cost == std::vector<double>{12, 14});
  CHECK(c.instance == 0);
  // r6 {1,2,3}: of its 6 blocks only 2 are new on instance 0, but r5's 16
  // tokens are still to prefill there: (24 + 16)/4 + (8 + 2) = 20 against
  // 24/4 + (6 + 6) = 18 on instance 1.
  const Request r6 = tagged(request(0.0, 24, 9, {1, 2, 3}), 6);
  SECTION("r5 not yet prefilled: r6 to instance 1") {
    c = router.pick(r6, 0.0, views);
    CHECK(c.cost == std::vector<double>{20, 18});
    CHECK(c.instance == 1);
  }
  SECTION("r5 prefilled: 24/4 + 10 = 16, r6 to instance 0") {
    router.prefill_done(0, 5);
    c = router.pick(r6, 0.0, views);
    CHECK(c.cost == std::vector<double>{16, 18});
    CHECK(c.instance == 0);
  }
  SECTION("freed (ActiveSequences::free): a shared block stays while one request names it") {
    router.finished(0, 1);
    CHECK(router.active(0).active_blocks() == 8);  // r2's 4 and r5's 4
    router.finished(0, 2);
    CHECK(router.active(0).active_blocks() == 4);
    CHECK(router.active(0).active_tokens() == 16);  // r5's, never prefilled
    router.finished(0, 5);
    CHECK(router.active(0).active_tokens() == 0);
    CHECK(router.active(0).active_blocks() == 0);
  }
}

// Dynamo hashes whole blocks only (compute_block_hash_for_seq: chunks_exact):
// a prompt's partial last page is no block of the router's; a page the trace
// names no hash for is the request's own.
TEST_CASE("router: the router's blocks of a prompt are its full pages") {
  CHECK(router_blocks(request(0.0, 18, 1, {1, 2, 3}), 4).count() == 4);  // 18 tokens: 4 pages
  CHECK(router_blocks(request(0.0, 18, 1, {1, 2, 3}), 4).own == 0);
  CHECK(router_blocks(request(0.0, 3, 1, {1}), 4).count() == 0);
  const RouterBlocks own = router_blocks(request(0.0, 20, 1, {1}), 4);  // ids name 8 tokens
  CHECK(own.named.size() == 2);
  CHECK(own.own == 3);
  // The same page of two prompts has one key; another hash id, another key.
  const std::vector<std::uint64_t> a = router_blocks(request(0.0, 8, 1, {1}), 4).named;
  const std::vector<std::uint64_t> b = router_blocks(request(0.0, 16, 1, {1, 2}), 4).named;
  const std::vector<std::uint64_t> c = router_blocks(request(0.0, 8, 1, {9}), 4).named;
  REQUIRE(a.size() == 2);
  REQUIRE(b.size() == 4);
  CHECK(b[0] == a[0]);
  CHECK(b[1] == a[1]);
  CHECK(a[0] != a[1]);
  CHECK(c[0] != a[0]);
}

// Through a fleet: a request's prefill tokens leave the router's account at
// its first token, its blocks at its end.
TEST_CASE(
    "fleet: prefix-aware forgets a request's prefill at its first token, its blocks at its end") {
  // r0 {1,2} at 0 to instance 0 (8 against 8). r1 {5,6} at 0.5: r0 is past
  // its first token but still decoding (200 tokens of about 5 ms steps):
  // 16/4 + (4 + 4) = 12 against 8. r2 {7,8} at 5, every request done: 4 + 4
  // on both (r0's blocks left instance 0's account).
  const std::vector<Request> trace = {request(0.0, 16, 200, {1, 2}), request(0.5, 16, 2, {5, 6}),
                                      request(5.0, 16, 2, {7, 8})};
  Fleet fleet(tiny_config(64), options_of(EngineKind::kVllm),
              fleet_of(2, RouterPolicy::kPrefixAware));
  std::vector<std::vector<double>> costs;
  fleet.on_route = [&costs](const Request&, const RouteChoice& choice) {
    costs.push_back(choice.cost);
  };
  CHECK(run_fleet(fleet, trace) == std::vector<std::uint32_t>{0, 1, 0});
  REQUIRE(costs.size() == 3);
  CHECK(costs[0] == std::vector<double>{8, 8});
  CHECK(costs[1] == std::vector<double>{12, 8});
  CHECK(costs[2] == std::vector<double>{8, 8});
}

// Dynamo's cost weighs the backlog of prompt tokens still to prefill against
// the cache: on this slice, under load, prefix-aware finds about as many hits
// as round-robin (it was asserted above it while the cost left the backlog
// out); its figures are the README's.
TEST_CASE(
    "fleet: on the bundled Mooncake slice no router beats one instance holding the fleet's "
    "memory") {
  auto load = [] {
    auto reader = RequestReader::open(
        std::string(KVREPLAY_SOURCE_DIR) + "/traces/requests/mooncake_conv.jsonl", std::nullopt);
    REQUIRE(reader);
    std::vector<Request> trace;
    Request r;
    for (;;) {
      auto more = reader.value()->next(r);
      REQUIRE(more);
      if (!more.value()) break;
      trace.push_back(r);
    }
    return trace;
  };
  const std::vector<Request> trace = load();
  REQUIRE(trace.size() == 500);
  RunConfig config = tiny_config(1);
  config.kv.page_tokens = 16;
  config.kv.max_seq_tokens = 131072;
  config.kv.pool_blocks = 40000;  // 640k tokens an instance
  SimOptions options;
  options.engine = EngineKind::kVllm;
  options.watermark = 0.0;
  options.cost.kind = CostKind::kLinear;
  auto hit_rate = [](std::uint64_t hits, std::uint64_t queried) {
    return static_cast<double>(hits) / static_cast<double>(queried);
  };
  auto fleet_hit_rate = [&](RouterPolicy policy) {
    Fleet fleet(config, options, fleet_of(4, policy));
    run_fleet(fleet, trace);
    std::uint64_t hits = 0, queried = 0;
    for (std::size_t i = 0; i < fleet.size(); ++i) {
      hits += fleet.instance(i).sim_totals().hit_tokens;
      queried += fleet.instance(i).sim_totals().query_tokens;
    }
    return hit_rate(hits, queried);
  };
  RunConfig one = config;
  one.kv.pool_blocks = 4 * config.kv.pool_blocks;
  Simulator alone(one, options);
  run_alone(alone, trace);
  const double single = hit_rate(alone.sim_totals().hit_tokens, alone.sim_totals().query_tokens);
  INFO("one instance " << single);
  CHECK(single > 0.0);
  // One pool of the fleet's memory sees every request: no router finds more.
  // Tolerance: 0.002 of the prompt tokens (a request's timing differs).
  for (RouterPolicy policy :
       {RouterPolicy::kRoundRobin, RouterPolicy::kLeastRequests, RouterPolicy::kLeastKv,
        RouterPolicy::kPowerOfTwo, RouterPolicy::kPrefixAware, RouterPolicy::kSession}) {
    INFO("router " << to_string(policy));
    CHECK(fleet_hit_rate(policy) <= single + 0.002);
  }
}

TEST_CASE(
    "fleet: disaggregated prefill moves each prompt's pages the decode side lacks, bytes = "
    "blocks x block bytes, and the decode side computes only the tail") {
  for (EngineKind engine : {EngineKind::kGeneric, EngineKind::kVllm}) {
    INFO("engine " << to_string(engine));
    FleetOptions pd;
    pd.prefill_replicas = 1;
    pd.decode_replicas = 1;
    pd.kv_transfer_gbps = 1e-6;  // 1 kB/s: a 4-page transfer (512 bytes) takes 0.512 s
    pd.kv_transfer_latency_us = 1000;
    Fleet fleet(tiny_config(64), options_of(engine), pd);
    REQUIRE(fleet.size() == 2);
    CHECK(fleet.role(0) == InstanceRole::kPrefill);
    CHECK(fleet.role(1) == InstanceRole::kDecode);
    std::vector<RequestTimes> prefilled, decoded;
    fleet.instance(0).on_request = [&](const RequestTimes& t) { prefilled.push_back(t); };
    fleet.instance(1).on_request = [&](const RequestTimes& t) { decoded.push_back(t); };
    // 19-token prompts: pages 0-3 (16 tokens) are within prompt - 1 and move.
    // The second shares its first hash block (pages 0 and 1) with the first,
    // cached on the decode side by then: pages 2 and 3 move. The third names
    // no hash ids: its pages are keyed by the fleet, all four move.
    const std::vector<Request> trace = {request(0.0, 19, 5, {1, 2}), request(10.0, 19, 3, {1, 3}),
                                        request(20.0, 19, 2)};
    const std::vector<std::uint32_t> chosen = run_fleet(fleet, trace);
    CHECK(chosen == std::vector<std::uint32_t>{0, 0, 0});
    const std::uint64_t block_bytes = fleet.instance(1).block_bytes();
    REQUIRE(block_bytes == 4 * 2 * 16);  // 4 tokens of K and V, 16 bytes each (4 fp32 values)
    const Fleet::Transfers& moved = fleet.transfers();
    CHECK(moved.requests == 3);
    CHECK(moved.blocks == 4 + 2 + 4);
    CHECK(moved.bytes == moved.blocks * block_bytes);
    CHECK(moved.ms.summary().max == Approx(1.0 + 512.0));  // 1 ms + 512 bytes at 1 kB/s
    CHECK(moved.ms.summary().mean == Approx(1.0 + (512.0 + 256.0 + 512.0) / 3));
    // The prefill side computes each prompt and one token; the decode side
    // finds the 16 tokens it received cached and computes the 3 after them.
    const SimTotals& p = fleet.instance(0).sim_totals();
    const SimTotals& d = fleet.instance(1).sim_totals();
    CHECK(p.finished == 3);
    CHECK(p.output_tokens == 3);
    CHECK(d.finished == 3);
    CHECK(d.output_tokens == 5 + 3 + 2);
    CHECK(d.query_tokens == 3 * 19);
    CHECK(d.hit_tokens == 3 * 16);
    CHECK(d.prompt_tokens_computed == 3 * 3);
    // A request reaches the decode side when its prefill step ends plus the
    // transfer.
    REQUIRE(prefilled.size() == 3);
    REQUIRE(decoded.size() == 3);
    const double seconds[] = {0.001 + 0.512, 0.001 + 0.256, 0.001 + 0.512};
    for (std::size_t k = 0; k < 3; ++k) {
      INFO("request " << k);
      CHECK(decoded[k].tag == prefilled[k].tag);
      CHECK(decoded[k].arrival == Approx(prefilled[k].finished + seconds[k]));
    }
    // Invariants ran on both pools, the held blocks counted; once all is
    // done, nothing is held: what stays is the decode side's cache.
    CHECK(fleet.instance(0).totals().checks > 0);
    CHECK(fleet.instance(1).totals().checks > 0);
    CHECK(fleet.instance(1).in_use_blocks() == 0);
    CHECK(fleet.instance(0).in_use_blocks() == 0);
  }
}

TEST_CASE(
    "fleet: a transfer waits for room on the decode side, so a slow link moves every page and "
    "the decode side computes only the tails") {
  // 19-token prompts (4 full pages and a tail page each) on a decode pool of
  // 20 blocks (19 usable beside vLLM's null block): four transfers at once
  // hold 16; the fifth finds room for less than its prompt and waits for a
  // landing, and every page still moves.
  FleetOptions pd;
  pd.prefill_replicas = 2;
  pd.decode_replicas = 1;
  pd.kv_transfer_gbps = 1e-6;  // 1 kB/s: 512 bytes take 0.512 s, far longer than a step
  pd.kv_transfer_latency_us = 0;
  pd.router.policy = RouterPolicy::kRoundRobin;
  Fleet fleet(tiny_config(20), options_of(EngineKind::kVllm), pd);
  std::vector<Request> trace;
  for (std::uint64_t k = 0; k < 8; ++k) {
    trace.push_back(request(0.001 * static_cast<double>(k), 19, 2, {10 * k + 1, 10 * k + 2}));
  }
  run_fleet(fleet, trace);
  const Fleet::Transfers& moved = fleet.transfers();
  CHECK(moved.requests == 8);
  CHECK(moved.blocks == 8 * 4);
  CHECK(moved.waited > 0);
  CHECK(moved.wait_ms.summary().max > 500.0);  // one waited for a landing
  const SimTotals& d = fleet.instance(2).sim_totals();
  CHECK(d.finished == 8);
  CHECK(d.skipped == 0);
  CHECK(d.hit_tokens == 8 * 16);
  CHECK(d.prompt_tokens_computed == 8 * 3);
  CHECK(fleet.instance(2).in_use_blocks() == 0);
}

TEST_CASE("fleet: a named prefix is shared on the decode side: its pages move once") {
  FleetOptions pd;
  pd.prefill_replicas = 1;
  pd.decode_replicas = 1;
  Fleet fleet(tiny_config(64), options_of(EngineKind::kVllm), pd);
  std::vector<Request> trace;
  for (int k = 0; k < 3; ++k) {
    Request r = request(1.0 * k, 19, 2);
    r.prefix = k < 2 ? "system" : "other";
    r.prefix_tokens = 8;  // pages 0 and 1
    trace.push_back(r);
  }
  run_fleet(fleet, trace);
  // The first moves its 4 pages; the second only pages 2 and 3 (the
  // prefix's are cached there); the third, another prefix, all 4.
  CHECK(fleet.transfers().blocks == 4 + 2 + 4);
  CHECK(fleet.instance(1).sim_totals().hit_tokens == 3 * 16);
}

TEST_CASE(
    "fleet: a request the decode side can never fit is skipped on admission, before its prefill "
    "and transfer, once") {
  // Pools of 12 blocks (4 tokens each; vllm keeps a null block). The prompt
  // (7 pages) fits the prefill side; prompt and output (14 pages) do not fit
  // the decode side. It is skipped at the prefill instance, counted there
  // once: nothing is prefilled, moved or received.
  for (EngineKind engine : {EngineKind::kVllm, EngineKind::kGeneric}) {
    INFO(to_string(engine));
    FleetOptions pd;
    pd.prefill_replicas = 1;
    pd.decode_replicas = 1;
    Fleet fleet(tiny_config(12), options_of(engine), pd);
    Request r = request(0.0, 27, 30, {1, 2, 3, 4, 5, 6, 7});
    r.hash_block_tokens = 4;
    Request fits = request(1.0, 9, 2, {8, 9, 10});
    fits.hash_block_tokens = 4;
    std::uint64_t ended = 0, skipped = 0;
    fleet.on_request_end = [&](const RequestTimes& times, double) {
      ++ended;
      if (times.skipped) {
        ++skipped;
        CHECK(times.output == 30);  // the user's request
      }
    };
    run_fleet(fleet, {r, fits});
    const SimTotals& prefill = fleet.instance(0).sim_totals();
    const SimTotals& decode = fleet.instance(1).sim_totals();
    CHECK(ended == 2);
    CHECK(skipped == 1);
    CHECK(prefill.requests == 2);
    CHECK(prefill.skipped == 1);
    CHECK(prefill.skipped_too_long == 0);        // the pool: 14 blocks of 11
    CHECK(prefill.prompt_tokens_computed == 9);  // only the second prompt
    CHECK(decode.requests == 1);
    CHECK(decode.skipped == 0);
    CHECK(decode.finished == 1);
    CHECK(fleet.transfers().requests == 1);
    CHECK(fleet.transfers().blocks == 2);
    CHECK(fleet.routed()[1].requests == 1);
  }
}

TEST_CASE(
    "fleet: KV a decode instance received and then took no step for is stamped when it landed") {
  // A decode instance receives a request's pages at 0.5 s and they land at
  // 10 s; the only request it is then given can never fit, so it takes no
  // step: its KV events (the stored pages) carry the landing's time, not
  // its clock (0).
  SimOptions options = options_of(EngineKind::kVllm);
  options.kv_events = true;
  Simulator sim(tiny_config(12), options);
  std::vector<double> stamps;
  std::size_t stored = 0;
  sim.on_kv_events = [&](double ts, const KvEventLog& log) {
    stamps.push_back(ts);
    stored += log.gpu.size();
  };
  Request received = request(0.0, 9, 2, {1, 2, 3});
  received.hash_block_tokens = 4;
  received.tag = 1;
  auto kv = sim.receive_kv(received, 0.5);
  REQUIRE(kv);
  CHECK(kv->transferred == 2);
  sim.expect_kv(10.0);
  sim.release_received(kv->held, 10.0, /*landed=*/true);
  sim.submit(request(10.0, 27, 30));  // 14 pages of 11: skipped
  REQUIRE(sim.run_until(std::numeric_limits<double>::infinity()));
  REQUIRE(sim.finish());
  CHECK(sim.sim_totals().skipped == 1);
  CHECK(sim.sim_totals().steps == 0);
  REQUIRE(stamps.size() == 1);
  CHECK(stamps.front() == 10.0);
  CHECK(stored > 0);
}

TEST_CASE(
    "fleet: a named-prefix prompt of more pages than any bit field holds moves each of its pages "
    "once, keyed apart") {
  // 70,001 one-token pages: past 65,536, where keys made of a truncated page
  // index aliased (page k and k + 65,536 took one key, so the decode side
  // "hit" its own earlier page and moved fewer blocks). Every page within
  // prompt - 1 tokens moves, and the decode side computes only the last
  // token; a second request naming the prefix moves only its own pages.
  FleetOptions pd;
  pd.prefill_replicas = 1;
  pd.decode_replicas = 1;
  SimOptions options = options_of(EngineKind::kVllm);
  options.max_batched_tokens = 1 << 20;
  options.check = CheckPolicy{CheckPolicy::Mode::kOff, 1};
  RunConfig config = tiny_config(300000, 1);
  config.kv.max_seq_tokens = 1 << 20;
  Fleet fleet(config, options, pd);
  Request a = request(0.0, 70001, 2);
  a.prefix = "system";
  a.prefix_tokens = 10;
  Request b = request(1e6, 70001, 2);
  b.prefix = "system";
  b.prefix_tokens = 10;
  run_fleet(fleet, {a, b});
  CHECK(fleet.transfers().requests == 2);
  CHECK(fleet.transfers().blocks == 70000 + (70000 - 10));
  const SimTotals& d = fleet.instance(1).sim_totals();
  CHECK(d.finished == 2);
  CHECK(d.hit_tokens == 2 * 70000);
  CHECK(d.prompt_tokens_computed == 2);
}

TEST_CASE(
    "fleet: a transfer waiting on a decode instance whose only work is a KV load from its "
    "offload tier looks again at the landing, and the run ends") {
  // Decode pools of 24 blocks with a slow CPU tier (128 ms a block): prompts
  // of 3-7 pages sharing prefixes, arriving faster than the decode side
  // serves them, so transferred pages are evicted before their requests run
  // and come back from the tier; a transfer then waits while the instance
  // has nothing to run but a load in flight. The retry used to come one ulp
  // after the last (virtual time crept, the run never ended: seed 1 hung).
  // Every request ends on every seed, the invariants checked at every step.
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    FleetOptions pd;
    pd.prefill_replicas = 1;
    pd.decode_replicas = 1;
    pd.kv_transfer_gbps = 1e-3;
    pd.kv_transfer_latency_us = 0;
    SimOptions options = options_of(EngineKind::kVllm);
    options.offload.tiers.push_back({OffloadMedium::kCpu, 64 * 128, 1e-6, 0});
    Fleet fleet(tiny_config(24), options, pd);
    std::vector<Request> trace;
    std::uint64_t x = seed;
    auto next = [&x] {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      return x >> 33;
    };
    for (std::uint32_t i = 0; i < 40; ++i) {
      const std::uint32_t blocks = 3 + static_cast<std::uint32_t>(next() % 5);
      std::vector<std::uint64_t> ids;
      for (std::uint32_t b = 0; b < blocks; ++b) ids.push_back((next() % 3) * 100 + b);
      Request r =
          request(0.0005 * i, blocks * 4 + 1, 1 + static_cast<std::uint32_t>(next() % 6), ids);
      r.hash_block_tokens = 4;
      r.id = std::to_string(i);
      trace.push_back(r);
    }
    run_fleet(fleet, trace);
    const SimTotals& d = fleet.instance(1).sim_totals();
    CHECK(d.finished + d.skipped == 40);
    CHECK(fleet.transfers().requests == 40);
    // The decode side loaded pages back from its tier (the case at issue).
    nlohmann::json figures = {{"prefix_cache", nlohmann::json::object()}};
    fleet.instance(1).scheduler().add_figures(figures);
    CHECK(figures["offload"]["tiers"]["cpu"]["loaded"].get<std::uint64_t>() > 0);
  }
}

TEST_CASE(
    "fleet: a decode instance that can run nothing while a slow transfer holds its blocks "
    "waits for the landing without stepping") {
  // Decode pool of 12 blocks (11 beside vLLM's null block), prompts of 5
  // pages growing to 10, a link of 1 byte/s (4 pages: 512 s). A transfer
  // starts once there is room for its prompt; the request decoding then
  // needs a page none is free for (the transfer holds its blocks), is
  // preempted, and cannot come back until the transfer lands. Its clock
  // moves on to the landing without a step (it used to take an empty 5 ms
  // step after another: about 100,000 of them); that is waiting, not a
  // stall (P1).
  FleetOptions pd;
  pd.prefill_replicas = 1;
  pd.decode_replicas = 1;
  pd.kv_transfer_gbps = 1e-9;
  pd.kv_transfer_latency_us = 0;
  Fleet fleet(tiny_config(12), options_of(EngineKind::kVllm), pd);
  std::vector<Request> trace{request(0.0, 19, 20, {1, 2}), request(0.001, 19, 20, {3, 4}),
                             request(0.002, 19, 20, {5, 6})};
  run_fleet(fleet, trace);
  const SimTotals& d = fleet.instance(1).sim_totals();
  CHECK(d.finished == 3);
  CHECK(d.preemptions > 0);
  // Three prompts and 60 output tokens: a few hundred steps at most.
  CHECK(d.steps < 500);
  CHECK(fleet.transfers().ms.summary().max > 500e3);
  // The clock still covers the transfers (512 s each): the last to land
  // started when an earlier one had landed.
  CHECK(fleet.instance(1).now() > 2 * 512.0);
}
