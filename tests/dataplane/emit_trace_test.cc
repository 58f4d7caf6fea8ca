// simulate --emit-trace (engine/replay/trace_emitter.h): a simulation's schedule,
// written as a kvtrace, replays on the cpu data plane with every table, cached
// page and tier copy verified at every event, and with the simulation's own
// figures: tokens, cache hits, evictions, forks, copies, tier traffic.
#include <catch2/catch.hpp>

#include <cstdint>
#include <deque>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataplane/support.h"
#include "engine/fleet/fleet.h"
#include "engine/micro_config.h"
#include "engine/paged/paged_scheduler.h"
#include "engine/replay/trace_emitter.h"
#include "engine/sglang/sglang_scheduler.h"
#include "engine/simulator.h"

namespace kvreplay {
namespace {

// Prompts from a few shared prefixes (hash blocks of one page), some of n > 1,
// arriving fast enough that a small pool evicts and preempts.
std::vector<Request> random_requests(std::uint64_t seed, int count, bool samples,
                                     std::uint32_t max_output = 9) {
  std::mt19937_64 rng(seed);
  std::vector<Request> requests;
  double t = 0;
  for (int i = 0; i < count; ++i) {
    t += std::uniform_real_distribution<double>(0.0, 0.01)(rng);
    const std::uint64_t family = rng() % 5;
    const auto pages = static_cast<std::uint32_t>(1 + rng() % 6);
    std::vector<std::uint64_t> ids;
    for (std::uint32_t p = 0; p < pages; ++p) ids.push_back(family * 100 + p + 1);
    const auto extra = static_cast<std::uint32_t>(rng() % 4);
    const std::uint32_t n =
        samples && rng() % 4 == 0 ? 2 + static_cast<std::uint32_t>(rng() % 2) : 1;
    requests.push_back(hashed(std::to_string(i), pages * 4 + extra,
                              static_cast<std::uint32_t>(1 + rng() % max_output), ids, t, n));
  }
  return requests;
}

struct Emitted {
  std::string trace;
  std::uint64_t events = 0;
  SimTotals sim;
  ReplayTotals totals;
  std::uint64_t evictions = 0;
  std::uint32_t final_used = 0;
  std::uint64_t moved_pages = 0;   // sglang: SglangScheduler::trace_moved_pages
  std::size_t transfers_left = 0;  // vllm, generic: offload transfers in flight after finish
  nlohmann::json figures;
};

Emitted simulate(const RunConfig& config, const SimOptions& options,
                 std::vector<Request> requests) {
  Emitted out;
  Simulator sim(config, options);
  TraceSink sink([&out](std::string_view line) { out.trace.append(line); });
  REQUIRE(sink.header(config.kv, sim.usable_blocks(), config.alloc_order).empty());
  TraceEmitter emitter(sink, 0);
  REQUIRE(sim.emit_trace(emitter));
  for (Request& r : requests) {
    REQUIRE(sim.run_until(r.arrival));
    sim.submit(std::move(r));
  }
  REQUIRE(sim.run_until(std::numeric_limits<double>::infinity()));
  REQUIRE(sim.finish());
  REQUIRE_FALSE(sim.violation());
  out.events = sink.events();
  out.sim = sim.sim_totals();
  out.totals = sim.totals();
  out.evictions = sim.scheduler().stats().evictions;
  out.final_used = sim.used_blocks();
  if (const auto* sglang = dynamic_cast<const SglangScheduler*>(&sim.scheduler())) {
    out.moved_pages = sglang->trace_moved_pages();
  }
  if (const auto* paged = dynamic_cast<const PagedScheduler*>(&sim.scheduler());
      paged != nullptr && paged->offload() != nullptr) {
    out.transfers_left = paged->offload()->jobs().size();
  }
  out.figures = {{"prefix_cache", nlohmann::json::object()}};
  sim.scheduler().add_figures(out.figures);
  return out;
}

test::DataReplay replay_every_event(const std::string& trace, DataPlaneFaults faults = {}) {
  DataPlaneOptions verify;
  verify.verify = true;
  return test::replay_text(trace, BackendKind::kCpu, verify, faults,
                           CheckPolicy{CheckPolicy::Mode::kEvery, 1});
}

// The emitted trace replayed with every event verified: no input error, no
// violation, no block the simulation did not have.
test::DataReplay replay_clean(const Emitted& run) {
  test::DataReplay replay = replay_every_event(run.trace);
  INFO(replay.input_message);
  REQUIRE_FALSE(replay.input_error);
  REQUIRE_FALSE(replay.violated);
  CHECK(replay.totals.oom_events == 0);
  return replay;
}

SimOptions vllm_options() {
  SimOptions options;
  options.engine = EngineKind::kVllm;
  options.watermark = 0.0;
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  options.emit_trace = true;
  return options;
}

TEST_CASE("emit trace: a vllm run replays verified at every event, with its own figures",
          "[emit]") {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    INFO("seed " << seed);
    const Emitted run = simulate(micro_config(16), vllm_options(), random_requests(seed, 80, true));
    REQUIRE(run.sim.finished == 80);
    REQUIRE(run.sim.preemptions > 0);  // the pool is small enough to matter
    REQUIRE(run.evictions > 0);
    const test::DataReplay replay = replay_clean(run);
    CHECK(replay.totals.events == run.events);
    CHECK(replay.totals.tokens_appended == run.totals.tokens_appended);
    // Every hit, a preempted request's again on its return, is a shared page.
    CHECK(replay.totals.hit_pages == run.sim.hit_blocks + run.sim.preempted_hits / 4);
    CHECK(replay.totals.cache_drops == run.evictions);
    CHECK(replay.totals.cache_holds - replay.totals.cache_drops == run.final_used);
    CHECK(replay.totals.peak_cached <= 15);
    CHECK(replay.verify.checkpoints >= replay.totals.events);
    CHECK(replay.verify.tables > 0);
    CHECK(replay.verify.cached > 0);
  }
}

TEST_CASE("emit trace: offload stores, loads and tier evictions replay byte for byte", "[emit]") {
  // Under vllm, and under generic with n > 1 (a loaded prefix forked).
  for (EngineKind engine : {EngineKind::kVllm, EngineKind::kGeneric}) {
    INFO(to_string(engine));
    SimOptions options = vllm_options();
    options.engine = engine;
    options.offload.tiers.push_back({OffloadMedium::kCpu, 6 * 128, 1e-3, 1000});
    options.offload.tiers.push_back({OffloadMedium::kDisk, 20 * 128, 1e-3, 1000});
    const bool samples = engine == EngineKind::kGeneric;
    const Emitted run = simulate(micro_config(14), options, random_requests(7, 120, samples));
    REQUIRE(run.sim.finished == 120);
    if (samples) CHECK(run.totals.forks > 0);
    const nlohmann::json& tiers = run.figures["offload"]["tiers"];
    const test::DataReplay replay = replay_clean(run);
    CHECK(replay.verify.copies > 0);
    std::uint64_t loaded = 0;
    for (std::size_t t = 0; t < 2; ++t) {
      const nlohmann::json& tier = tiers[t == 0 ? "cpu" : "disk"];
      INFO("tier " << t);
      CHECK(tier["loaded"].get<std::uint64_t>() > 0);
      CHECK(replay.totals.tier_stores[t] == tier["stored"].get<std::uint64_t>());
      CHECK(replay.totals.tier_loads[t] == tier["loaded"].get<std::uint64_t>());
      CHECK(replay.totals.tier_drops[t] == tier["evicted"].get<std::uint64_t>());
      loaded += tier["loaded"].get<std::uint64_t>();
    }
    // A loaded page is written by the load, not appended; the admit on it
    // counts it as a hit.
    CHECK(replay.totals.tokens_appended == run.totals.tokens_appended - loaded * 4);
    CHECK(replay.totals.hit_pages == run.sim.hit_blocks + run.sim.preempted_hits / 4 + loaded);

    // A load that leaves its block unwritten is caught, in the same schedule.
    DataPlaneFaults faults;
    faults.skip_load = 1;
    const test::DataReplay broken = replay_every_event(run.trace, faults);
    CHECK(broken.violated);
    REQUIRE(broken.violation);
    CHECK(broken.violation->invariant == "D1");
  }
}

TEST_CASE("emit trace: stores in flight at the run's end land, as the trace has them", "[emit]") {
  // One output token each, so a request's last step queues its stores; a
  // disk link of 1000 s, so none of the disk's stores lands within the run.
  for (EngineKind engine : {EngineKind::kGeneric, EngineKind::kVllm}) {
    INFO(to_string(engine));
    SimOptions options = vllm_options();
    options.engine = engine;
    options.offload.tiers.push_back({OffloadMedium::kCpu, 6 * 128, 1e-3, 1000});
    options.offload.tiers.push_back({OffloadMedium::kDisk, 20 * 128, 1e-3, 1e9});
    const Emitted run = simulate(micro_config(14), options, random_requests(5, 60, false, 1));
    REQUIRE(run.sim.finished == 60);
    const nlohmann::json& tiers = run.figures["offload"]["tiers"];
    CHECK(tiers["disk"]["stored"].get<std::uint64_t>() > 0);
    const test::DataReplay replay = replay_clean(run);
    for (std::size_t t = 0; t < 2; ++t) {
      const nlohmann::json& tier = tiers[t == 0 ? "cpu" : "disk"];
      INFO("tier " << t);
      CHECK(replay.totals.tier_stores[t] == tier["stored"].get<std::uint64_t>());
      CHECK(replay.totals.tier_loads[t] == tier["loaded"].get<std::uint64_t>());
      CHECK(replay.totals.tier_drops[t] == tier["evicted"].get<std::uint64_t>());
      CHECK(tier["stored"].get<std::uint64_t>() ==
            tier["resident_blocks"].get<std::uint64_t>() + tier["evicted"].get<std::uint64_t>());
      CHECK(tier["bytes_in"].get<std::uint64_t>() ==
            tier["stored"].get<std::uint64_t>() *
                run.figures["offload"]["block_bytes"].get<std::uint64_t>());
    }
    // No transfer is left in flight, so no GPU block held for one.
    CHECK(run.transfers_left == 0);
  }
}

TEST_CASE("emit trace: a disaggregated fleet's KV crosses the link tier, verified", "[emit]") {
  // Two prefill instances stage each finished prompt's pages in the link
  // tier; the decode instance loads those it receives into its own blocks,
  // and its request is admitted on them as hits.
  for (EngineKind engine : {EngineKind::kVllm, EngineKind::kGeneric}) {
    INFO(to_string(engine));
    SimOptions options = vllm_options();
    options.engine = engine;
    FleetOptions pd;
    pd.prefill_replicas = 2;
    pd.decode_replicas = 1;
    Fleet fleet(micro_config(24), options, pd);
    std::string trace;
    TraceSink sink([&trace](std::string_view line) { trace.append(line); });
    std::uint64_t blocks = 0;
    std::uint32_t final_used = 0;
    for (std::size_t i = 0; i < fleet.size(); ++i) blocks += fleet.instance(i).usable_blocks();
    REQUIRE(sink.header(micro_config(24).kv, blocks, AllocOrder::kLifo).empty());
    std::deque<TraceEmitter> emitters;
    for (std::size_t i = 0; i < fleet.size(); ++i) {
      TraceEmitter& emitter = emitters.emplace_back(sink, static_cast<std::uint32_t>(i));
      if (fleet.role(i) == InstanceRole::kPrefill) emitter.hand_off_prompts();
      REQUIRE(fleet.instance(i).emit_trace(emitter));
    }
    for (Request& r : random_requests(11, 60, true)) {
      REQUIRE(fleet.run_until(r.arrival));
      fleet.submit(std::move(r));
    }
    REQUIRE(fleet.run_until(std::numeric_limits<double>::infinity()));
    REQUIRE(fleet.finish());
    REQUIRE_FALSE(fleet.violated_instance());
    for (std::size_t i = 0; i < fleet.size(); ++i) final_used += fleet.instance(i).used_blocks();

    Emitted run;
    run.trace = trace;
    const test::DataReplay replay = replay_clean(run);
    CHECK(replay.totals.events == sink.events());
    const std::uint64_t moved = fleet.transfers().blocks;
    CHECK(moved > 0);
    CHECK(replay.totals.tier_loads[kLinkTier] == moved);
    CHECK(replay.totals.tier_stores[kLinkTier] >= moved);
    CHECK(replay.totals.tier_drops[kLinkTier] == replay.totals.tier_stores[kLinkTier]);
    CHECK(replay.totals.hit_pages >= moved);  // the decode side's admits share them
    CHECK(replay.totals.cache_holds + replay.totals.tier_loads[kLinkTier] -
              replay.totals.cache_drops ==
          final_used);
    CHECK(replay.verify.copies > 0);

    // A link load that leaves its block unwritten is caught.
    DataPlaneFaults faults;
    faults.skip_load = 1;
    const test::DataReplay broken = replay_every_event(trace, faults);
    REQUIRE(broken.violation);
    CHECK(broken.violation->invariant == "D1");
  }
}

TEST_CASE("emit trace: the generic engine's forks and copy-on-writes replay as run", "[emit]") {
  SimOptions options;
  options.engine = EngineKind::kGeneric;
  options.watermark = 0.0;
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  options.emit_trace = true;
  const Emitted run = simulate(micro_config(24), options, random_requests(11, 60, true));
  REQUIRE(run.sim.finished == 60);
  REQUIRE(run.totals.forks > 0);
  REQUIRE(run.totals.cow_copies > 0);
  const test::DataReplay replay = replay_clean(run);
  CHECK(replay.totals.forks == run.totals.forks);
  CHECK(replay.totals.cow_copies == run.totals.cow_copies);
  CHECK(replay.totals.tokens_appended == run.totals.tokens_appended);
  CHECK(replay.totals.cache_drops == run.evictions);
}

TEST_CASE("emit trace: one-token appends batch into a decode, an eviction is uncached first",
          "[emit]") {
  std::string text;
  TraceSink sink([&text](std::string_view line) { text.append(line); });
  TraceEmitter emitter(sink, 1);
  emitter.at(0.5);
  const std::uint64_t a = emitter.admit(4, {});
  const std::uint64_t b = emitter.admit(3, {});
  emitter.cache(a, 0, 7);
  CHECK(emitter.named(7));
  emitter.at(1.0);
  emitter.append(a, 1);
  emitter.append(b, 1);
  emitter.evictions().push_back(7);  // the prefix cache evicted block 7
  emitter.append(b, 1);              // b again, after the eviction
  emitter.append(a, 2);
  emitter.flush();
  const std::uint64_t name = TraceEmitter::kInstanceNames + 7;
  CHECK(text == fmt::format("{{\"t\":0.5,\"op\":\"admit\",\"seq\":0,\"prompt\":4}}\n"
                            "{{\"t\":0.5,\"op\":\"admit\",\"seq\":1,\"prompt\":3}}\n"
                            "{{\"t\":0.5,\"op\":\"cache\",\"seq\":0,\"page\":0,\"block\":{0}}}\n"
                            "{{\"t\":1,\"op\":\"decode\",\"seqs\":[0,1]}}\n"
                            "{{\"t\":1,\"op\":\"uncache\",\"block\":{0}}}\n"
                            "{{\"t\":1,\"op\":\"decode\",\"seqs\":[1]}}\n"
                            "{{\"t\":1,\"op\":\"append\",\"seq\":0,\"tokens\":2}}\n",
                            name));
  CHECK_FALSE(emitter.named(7));
  CHECK(sink.events() == 7);
}

SimOptions sglang_options() {
  SimOptions options = vllm_options();
  options.engine = EngineKind::kSglang;
  return options;
}

TEST_CASE("emit trace: an sglang run replays verified at every event", "[emit]") {
  // The radix tree's pages as the trace's cache, retractions as frees, n > 1
  // as requests sharing their prompt; chunked or not, 4-token pages or 1.
  struct Case {
    std::uint32_t page;
    std::uint32_t pool;
    std::uint32_t chunk;
  };
  for (const Case c : {Case{4, 20, 0}, Case{4, 20, 8}, Case{1, 80, 0}}) {
    for (std::uint64_t seed : {1u, 2u}) {
      INFO("page " << c.page << ", chunk " << c.chunk << ", seed " << seed);
      SimOptions options = sglang_options();
      options.sglang.chunked_prefill_size = c.chunk;
      options.sglang.schedule_conservativeness = 0.1;  // a low reservation: retractions
      const Emitted run =
          simulate(tiny_config(c.pool, c.page), options, random_requests(seed, 80, true, 40));
      REQUIRE(run.sim.finished + run.sim.skipped == 80);
      REQUIRE(run.sim.finished >= 75);
      REQUIRE(run.sim.preemptions > 0);  // retractions: the pool is small enough to matter
      REQUIRE(run.evictions > 0);
      const test::DataReplay replay = replay_clean(run);
      CHECK(replay.totals.events == run.events);
      // Every page the tree evicted was the trace cache's, and what the
      // tree holds at the end is what the trace's cache holds.
      CHECK(replay.totals.cache_drops == run.evictions);
      CHECK(replay.totals.cache_holds - replay.totals.cache_drops == run.final_used);
      // Each admission's match is shared, not written; a request moved onto
      // the tree's copy of its pages shares them again.
      CHECK(replay.totals.hit_pages ==
            run.sim.hit_blocks + run.sim.preempted_hits / c.page + run.moved_pages);
      CHECK(replay.verify.tables > 0);
      CHECK(replay.verify.cached > 0);
    }
  }
}

TEST_CASE("emit trace: an sglang request whose pages the tree already took moves onto them",
          "[emit]") {
  // a and b, one prompt of 10 tokens, are prefilled in one batch: a's 8
  // tokens of whole pages enter the tree first, so b frees its own copies
  // and continues on a's (cache_unfinished): in the trace, b's sequence is
  // freed and a new one admitted on the tree's pages, its partial page
  // written again.
  const Emitted run =
      simulate(micro_config(16), sglang_options(),
               {hashed("a", 10, 3, {1, 2, 3}, 0.0), hashed("b", 10, 3, {1, 2, 3}, 0.0)});
  REQUIRE(run.sim.finished == 2);
  const std::string a0 = fmt::format("{}", TraceEmitter::kInstanceNames * 0);
  CHECK(run.trace.find("{\"t\":0,\"op\":\"admit\",\"seq\":0,\"prompt\":10}\n"
                       "{\"t\":0,\"op\":\"admit\",\"seq\":1,\"prompt\":10}\n"
                       "{\"t\":0,\"op\":\"cache\",\"seq\":0,\"page\":0,") != std::string::npos);
  CHECK(run.trace.find("\"op\":\"free\",\"seq\":1}\n{\"t\":0,\"op\":\"admit\",\"seq\":2,"
                       "\"prompt\":10,\"hits\":[") != std::string::npos);
  const test::DataReplay replay = replay_clean(run);
  CHECK(replay.totals.hit_pages == 2);  // b's two pages, now the tree's
  // b's partial page, written again on its new sequence.
  // 10 prompt tokens and 2 decoded a request, and b's partial page again.
  CHECK(replay.totals.tokens_appended == 2 * 12 + 2);
  CHECK(replay.verify.tables > 0);
}

TEST_CASE("emit trace: sglang's host copies, loads and host evictions replay byte for byte",
          "[emit]") {
  // HiCache: each page the tree takes is copied to the host (a short
  // sequence on the node's path storing it), a prefix evicted from the GPU
  // loads back into fresh blocks, and a full host drops its least recently
  // used copies. Pages of 1 and of 4 tokens.
  struct Case {
    std::uint32_t page;
    std::uint32_t pool;
  };
  for (const Case c : {Case{4, 20}, Case{1, 80}}) {
    INFO("page " << c.page);
    SimOptions options = sglang_options();
    // 160 tokens of host (32 bytes a token), a link slow enough to wait on.
    options.offload.tiers.push_back({OffloadMedium::kCpu, 160 * 32, 1e-3, 1000});
    const Emitted run =
        simulate(tiny_config(c.pool, c.page), options, random_requests(11, 120, true, 20));
    REQUIRE(run.sim.finished + run.sim.skipped == 120);
    const nlohmann::json& cpu = run.figures["offload"]["tiers"]["cpu"];
    const auto loaded = cpu["loaded"].get<std::uint64_t>();
    const auto evicted = cpu["evicted"].get<std::uint64_t>();
    CHECK(loaded > 0);
    CHECK(evicted > 0);
    const test::DataReplay replay = replay_clean(run);
    CHECK(replay.totals.events == run.events);
    CHECK(replay.verify.copies > 0);
    // A host page is taken, and counted as stored, when its write is issued:
    // each is held or dropped, writes still in flight at the end included.
    CHECK(replay.totals.tier_stores[0] == cpu["resident_blocks"].get<std::uint64_t>() + evicted);
    CHECK(replay.totals.tier_stores[0] == cpu["stored"].get<std::uint64_t>());
    CHECK(replay.totals.tier_loads[0] == loaded);
    CHECK(replay.totals.tier_drops[0] == evicted);
    // The admits' hits: the device's, the loaded pages, and the stores'
    // sequences on the tree's pages.
    const auto loaded_hits =
        cpu["hit_tokens"].get<std::uint64_t>() + cpu["preempted_hit_tokens"].get<std::uint64_t>();
    CHECK(loaded_hits == loaded * c.page);
    CHECK(replay.totals.hit_pages ==
          run.sim.hit_blocks + run.sim.preempted_hits / c.page + run.moved_pages + loaded);
    CHECK(replay.totals.cache_drops == run.evictions);

    // A load that leaves its block unwritten is caught, in the same schedule.
    DataPlaneFaults faults;
    faults.skip_load = 1;
    const test::DataReplay broken = replay_every_event(run.trace, faults);
    REQUIRE(broken.violation);
    CHECK(broken.violation->invariant == "D1");
  }
}

TEST_CASE("emit trace: the engines and pools a kvtrace cannot hold are refused", "[emit]") {
  const RunConfig config = micro_config(16);
  SimOptions options = vllm_options();
  CHECK_FALSE(sim_options_error(config, options));
  options.engine = EngineKind::kSglang;
  CHECK_FALSE(sim_options_error(config, options));
  options.allocator = AllocatorKind::kContiguousMax;
  REQUIRE(sim_options_error(config, options));
  options.allocator = AllocatorKind::kPaged;
  options.engine = EngineKind::kGeneric;
  options.allocator = AllocatorKind::kContiguousMax;
  REQUIRE(sim_options_error(config, options));
  CHECK(sim_options_error(config, options)->problem.find("paged allocator") != std::string::npos);
  // A sequence's one table cannot hold a full and a sliding-window group.
  RunConfig two_layers = config;
  two_layers.kv.layers = 2;
  SimOptions hybrid = vllm_options();
  hybrid.kv_groups = {KvCacheGroupSpec{KvCacheGroupSpec::kFull, 0, 1},
                      KvCacheGroupSpec{KvCacheGroupSpec::kSliding, 4, 1}};
  const auto refused = sim_options_error(two_layers, hybrid);
  REQUIRE(refused);
  CHECK(refused->option == "--emit-trace");
  CHECK(refused->problem ==
        "needs one full-attention KV-cache group; this model has several "
        "groups, or a sliding window");
  std::string text;
  TraceSink sink([&text](std::string_view line) { text.append(line); });
  CHECK(sink.header(config.kv, 0, AllocOrder::kLifo).find("pool of 0 blocks") != std::string::npos);
  PagedKvConfig latent = config.kv;
  latent.kv_tensors = 1;
  latent.head_dim = 576;
  CHECK(sink.header(latent, 4, AllocOrder::kVllm).empty());
  CHECK(text.find("\"head_dim\":288") != std::string::npos);  // the same bytes a token
  // vllm's order is lifo with the null block held: the header's pool leaves it out.
  CHECK(text.find("\"alloc_order\":\"lifo\"") != std::string::npos);
  text.clear();
  CHECK(sink.header(config.kv, 4, AllocOrder::kFifo).empty());
  CHECK(text.find("\"alloc_order\":\"fifo\"") != std::string::npos);
}

}  // namespace
}  // namespace kvreplay
