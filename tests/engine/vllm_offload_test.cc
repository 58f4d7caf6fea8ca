// KV offloading (--offload, engine/paged/paged_offload.cc) under the vllm and
// generic engines, on micro-traces worked by hand: 4-token pages of 128 bytes (a K and a V of 4
// fp32 values a token), links slow enough that a transfer's time shows (1 MB/s
// and 1 ms a transfer: 128 us a block).
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/micro_config.h"
#include "engine/run_to_end.h"
#include "engine/simulator.h"
#include "engine/vllm/vllm_scheduler.h"

namespace kvreplay {
namespace {

constexpr double kLatencyS = 1e-3;
constexpr double kBlockBytes = 128;
constexpr double kBlockS = kBlockBytes / 1e6;  // at 1 MB/s

SimOptions offload_options(std::uint64_t cpu_blocks, std::uint64_t disk_blocks = 0,
                           OffloadPolicy policy = OffloadPolicy::kLru,
                           EngineKind engine = EngineKind::kVllm) {
  SimOptions options;
  options.engine = engine;
  options.watermark = 0.0;
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  options.offload.policy = policy;
  if (cpu_blocks > 0) {
    options.offload.tiers.push_back({OffloadMedium::kCpu, cpu_blocks * 128, 1e-3, 1000});
  }
  if (disk_blocks > 0) {
    options.offload.tiers.push_back({OffloadMedium::kDisk, disk_blocks * 128, 1e-3, 1000});
  }
  return options;
}

struct Run {
  std::map<std::string, RequestTimes> times;
  nlohmann::json figures;
};

Run run(Simulator& sim, std::vector<Request> requests) {
  Run out;
  sim.on_request = [&out](const RequestTimes& t) { out.times[t.id] = t; };
  run_to_end(sim, std::move(requests));
  out.figures = {{"prefix_cache", nlohmann::json::object()}};
  sim.scheduler().add_figures(out.figures);
  return out;
}

// a's four prompt pages are stored to the CPU tier as its prefill fills them;
// b (other content) then takes every GPU block, evicting a's cached pages; c
// repeats a's prompt: no GPU hit, its prefix continues in the CPU tier.
std::vector<Request> evicted_then_repeated() {
  return {hashed("a", 16, 2, {1, 2, 3, 4}, 0.0), hashed("b", 16, 2, {9, 10, 11, 12}, 1.0),
          hashed("c", 16, 2, {1, 2, 3, 4}, 2.0)};
}

TEST_CASE("vllm offload: a prefix evicted from the GPU is loaded back from the CPU tier",
          "[offload]") {
  // Pool 6: the null block and 5, one request's 5 pages (16 + 2 - 1 tokens).
  Simulator sim(micro_config(6), offload_options(100));
  const Run with = run(sim, evicted_then_repeated());
  const nlohmann::json& cpu = with.figures["offload"]["tiers"]["cpu"];
  // c's 16 tokens fill 4 pages, all in the tier: get_num_new_matched_tokens
  // matches every full block of the request (its block hashes), the last too.
  CHECK(cpu["hit_tokens"] == 16);
  CHECK(cpu["loaded"] == 4);
  CHECK(cpu["bytes_out"] == 4 * 128);
  CHECK(with.figures["prefix_cache"]["hits_by_tier"]["gpu"] == 0);
  CHECK(with.figures["prefix_cache"]["hits_by_tier"]["cpu"] == 16);
  // Stored: a's and b's four full prompt pages each; c's are there already.
  CHECK(cpu["stored"] == 8);
  CHECK(cpu["evicted"] == 0);
  // c waits for its load, issued at its arrival: 1 ms + 4 blocks at 1 MB/s;
  // it is scheduled at the step that starts when the load lands.
  const RequestTimes& c = with.times.at("c");
  CHECK(c.scheduled == Approx(2.0 + kLatencyS + 4 * kBlockS).epsilon(1e-12));
  // _update_waiting_for_remote_kv: num_computed_tokens 16 is all its tokens,
  // so 15 (num_cached_tokens 15), and the last token is computed again.
  CHECK(c.cached_tokens == 15);
  CHECK(cpu["load_ms"]["count"] == 1);
  CHECK(cpu["load_ms"]["max"].get<double>() ==
        Approx((kLatencyS + 4 * kBlockS) * 1e3).epsilon(1e-9));
  CHECK(sim.sim_totals().prompt_tokens_computed == 16 + 16 + 1);

  // Without the tier, c recomputes its whole prompt.
  SimOptions none = offload_options(100);
  none.offload.tiers.clear();
  Simulator plain(micro_config(6), none);
  const Run without = run(plain, evicted_then_repeated());
  CHECK(plain.sim_totals().prompt_tokens_computed == 16 + 16 + 16);
  CHECK(without.times.at("c").scheduled == 2.0);
  CHECK_FALSE(without.figures.contains("offload"));
}

TEST_CASE("generic offload: a prefix evicted from the GPU is loaded back from the CPU tier",
          "[offload]") {
  // The generic engine has no null block: a pool of 5 is one request's 5
  // pages. It caches and stores prompt pages only (its cache's rule): a's
  // and b's four each. c's prefix continues in the CPU tier, one page short
  // of its prompt's end, as under vllm.
  Simulator sim(micro_config(5),
                offload_options(100, 0, OffloadPolicy::kLru, EngineKind::kGeneric));
  const Run with = run(sim, evicted_then_repeated());
  const nlohmann::json& cpu = with.figures["offload"]["tiers"]["cpu"];
  CHECK(cpu["stored"] == 8);
  CHECK(cpu["hit_tokens"] == 12);
  CHECK(cpu["loaded"] == 3);
  CHECK(with.figures["prefix_cache"]["hits_by_tier"]["gpu"] == 0);
  CHECK(with.figures["prefix_cache"]["hits_by_tier"]["cpu"] == 12);
  // c waits for its load (1 ms + 3 blocks at 1 MB/s), then computes its last page.
  const RequestTimes& c = with.times.at("c");
  CHECK(c.scheduled == Approx(2.0 + kLatencyS + 3 * kBlockS).epsilon(1e-12));
  CHECK(c.cached_tokens == 12);
  CHECK(sim.sim_totals().prompt_tokens_computed == 16 + 16 + 4);
  CHECK(sim.sim_totals().finished == 3);

  // n = 3: the loaded prefix is forked to every sample once the prefill ends.
  Simulator fan(micro_config(9),
                offload_options(100, 0, OffloadPolicy::kLru, EngineKind::kGeneric));
  std::vector<Request> requests = evicted_then_repeated();
  requests[1] = hashed("b", 32, 2, {9, 10, 11, 12, 13, 14, 15, 16}, 1.0);
  requests[2].n = 3;
  const Run forked = run(fan, requests);
  CHECK(forked.figures["offload"]["tiers"]["cpu"]["hit_tokens"] == 12);
  CHECK(fan.sim_totals().finished == 3);
  CHECK(fan.sim_totals().output_tokens == 2 + 2 + 3 * 2);
}

TEST_CASE("vllm offload: a request whose tier hit another request is loading waits for it",
          "[offload]") {
  // c and d repeat a's prompt at once: c loads the 3 pages, d waits at the
  // head of the queue, and finds them in the GPU once c's load landed.
  Simulator sim(micro_config(11), offload_options(100));
  std::vector<Request> requests = evicted_then_repeated();
  // b fills the GPU with 10 pages this time: two prompts of other content.
  requests[1] = hashed("b", 16, 2, {9, 10, 11, 12}, 1.0);
  requests.insert(requests.begin() + 2, hashed("b2", 16, 2, {13, 14, 15, 16}, 1.0));
  requests.push_back(hashed("d", 16, 2, {1, 2, 3, 4}, 2.0));
  const Run out = run(sim, requests);
  const nlohmann::json& cpu = out.figures["offload"]["tiers"]["cpu"];
  // c loads its 4 pages. d waits for that load, then hits c's pages 0-2 in
  // the GPU (get_computed_blocks: at most num_tokens - 1 tokens) and the
  // connector continues its hit with page 3 from the tier, loaded again
  // (vLLM's rules: the GPU hit's cap, then get_num_new_matched_tokens).
  CHECK(cpu["loaded"] == 4 + 1);
  CHECK(cpu["hit_tokens"] == 16 + 4);
  CHECK(out.figures["prefix_cache"]["hits_by_tier"]["gpu"] == 12);
  CHECK(out.times.at("d").cached_tokens == 15);
  CHECK(out.times.at("d").scheduled >= out.times.at("c").scheduled);
}

TEST_CASE("vllm offload: a tier hit takes the full pages, the last token's page short of them",
          "[offload]") {
  // get_num_new_matched_tokens matches num_tokens // block_size blocks: a
  // 14-token prompt (3 full pages and 2 tokens) loads pages 0-2 and computes
  // its last 2 tokens; the -1 of _update_waiting_for_remote_kv does not apply
  // (12 computed tokens are not all 14).
  Simulator sim(micro_config(6), offload_options(100));
  std::vector<Request> requests = evicted_then_repeated();
  requests[2] = hashed("c", 14, 2, {1, 2, 3, 4}, 2.0);
  const Run out = run(sim, requests);
  const nlohmann::json& cpu = out.figures["offload"]["tiers"]["cpu"];
  CHECK(cpu["hit_tokens"] == 12);
  CHECK(cpu["loaded"] == 3);
  CHECK(out.times.at("c").cached_tokens == 12);
  CHECK(out.times.at("c").scheduled == Approx(2.0 + kLatencyS + 3 * kBlockS).epsilon(1e-12));
  CHECK(sim.sim_totals().prompt_tokens_computed == 16 + 16 + 2);
}

TEST_CASE("vllm offload: a request stores from the end of what it loaded", "[offload]") {
  // update_state_after_alloc: _next_stored_block_idx = the blocks its GPU hit
  // and its load cover, so they are not stored again. A CPU tier that keeps
  // every page and a disk tier of 4 blocks (lru): b's store to the disk evicts
  // a's 4 pages; c loads a's 4 from the CPU tier and stores none of them to
  // the disk, which keeps b's.
  Simulator sim(micro_config(6), offload_options(100, 4));
  const Run out = run(sim, evicted_then_repeated());
  const nlohmann::json& tiers = out.figures["offload"]["tiers"];
  CHECK(tiers["cpu"]["loaded"] == 4);
  CHECK(tiers["disk"]["stored"] == 8);
  CHECK(tiers["disk"]["evicted"] == 4);
  CHECK(tiers["disk"]["resident_blocks"] == 4);
}

TEST_CASE("vllm offload: the disk tier continues a prefix the CPU tier lost", "[offload]") {
  // A CPU tier of 4 blocks keeps only b's pages once b is stored (lru,
  // evicting a's 4); the disk tier keeps both prompts: c's prefix is loaded
  // from the disk. c stores from the end of its load on (every tier: vLLM's
  // one _next_stored_block_idx), so the CPU tier keeps b's pages.
  Simulator sim(micro_config(6), offload_options(4, 100));
  const Run out = run(sim, evicted_then_repeated());
  const nlohmann::json& tiers = out.figures["offload"]["tiers"];
  CHECK(tiers["cpu"]["evicted"] == 4);
  CHECK(tiers["cpu"]["hit_tokens"] == 0);
  CHECK(tiers["disk"]["hit_tokens"] == 16);
  CHECK(tiers["disk"]["loaded"] == 4);
  CHECK(out.figures["prefix_cache"]["hits_by_tier"]["disk"] == 16);
}

TEST_CASE("vllm and generic offload: random traces keep every invariant under --check every",
          "[offload]") {
  // Prompts drawn from a few shared prefixes, a pool that forces GPU
  // evictions and preemptions, tiers that force tier evictions; both
  // policies, one and two tiers. run_to_end requires no violation.
  for (EngineKind engine : {EngineKind::kVllm, EngineKind::kGeneric}) {
    for (OffloadPolicy policy : {OffloadPolicy::kLru, OffloadPolicy::kArc}) {
      for (std::uint64_t disk : {0ull, 24ull}) {
        std::mt19937_64 rng(7 + disk + static_cast<std::uint64_t>(policy));
        std::vector<Request> requests;
        double t = 0;
        for (int i = 0; i < 120; ++i) {
          t += std::uniform_real_distribution<double>(0.0, 0.01)(rng);
          const std::uint64_t family = rng() % 5;
          const auto pages = static_cast<std::uint32_t>(1 + rng() % 6);
          std::vector<std::uint64_t> ids;
          for (std::uint32_t p = 0; p < pages; ++p) ids.push_back(family * 100 + p + 1);
          const auto extra = static_cast<std::uint32_t>(rng() % 4);
          // Some of two samples (n > 1: vllm fans them out, generic forks them).
          const auto n = static_cast<std::uint32_t>(i % 7 == 0 ? 2 : 1);
          requests.push_back(hashed(std::to_string(i), pages * 4 + extra,
                                    static_cast<std::uint32_t>(1 + rng() % 6), ids, t, n));
        }
        Simulator sim(micro_config(14), offload_options(10, disk, policy, engine));
        const Run out = run(sim, requests);
        INFO(to_string(engine) << ", policy " << to_string(policy) << ", disk " << disk);
        CHECK(sim.sim_totals().finished == 120);
        const nlohmann::json& cpu = out.figures["offload"]["tiers"]["cpu"];
        CHECK(cpu["resident_blocks"].get<std::uint64_t>() <= 10);
        CHECK(cpu["hit_tokens"].get<std::uint64_t>() > 0);
        CHECK(cpu["evicted"].get<std::uint64_t>() > 0);
        CHECK(cpu["loaded"].get<std::uint64_t>() > 0);
      }
    }
  }
}

// 150 requests of six prompt families (each a chain of up to six pages),
// arriving faster than a 14-block pool serves them: the GPU cache evicts,
// the tiers store and load.
std::vector<Request> family_requests(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Request> requests;
  double t = 0;
  for (int i = 0; i < 150; ++i) {
    t += std::uniform_real_distribution<double>(0.0, 0.01)(rng);
    const std::uint64_t family = rng() % 6;
    const auto pages = static_cast<std::uint32_t>(1 + rng() % 6);
    std::vector<std::uint64_t> ids;
    for (std::uint32_t p = 0; p < pages; ++p) ids.push_back(family * 100 + p + 1);
    requests.push_back(hashed(std::to_string(i), pages * 4 + static_cast<std::uint32_t>(rng() % 4),
                              static_cast<std::uint32_t>(1 + rng() % 9), ids, t));
  }
  return requests;
}

TEST_CASE("vllm offload: the timeline's tier gauges hold every step and end at the report's",
          "[offload]") {
  // After every step: a tier holds at most its capacity; what it holds is
  // what landed less what it evicted, plus the stores on its link; the
  // cumulative figures never go back; requests loading are among the waiting.
  SimOptions options = offload_options(10, 24, OffloadPolicy::kLru);
  Simulator sim(micro_config(14), options);
  REQUIRE(sim.offload_tiers() == 2);
  std::uint64_t steps = 0, loading_steps = 0, storing_steps = 0, problems = 0;
  std::array<TierGauge, 2> last{};
  std::string first_problem;
  sim.on_step = [&](const Simulator& s) {
    ++steps;
    if (s.loading_requests() > 0) ++loading_steps;
    auto problem = [&](const std::string& what) {
      if (problems++ == 0) first_problem = fmt::format("step {}: {}", steps, what);
    };
    if (s.loading_requests() > s.waiting_requests()) problem("more loading than waiting");
    const auto& engine = dynamic_cast<const VllmScheduler&>(s.scheduler());
    for (std::size_t t = 0; t < 2; ++t) {
      const TierGauge g = s.offload_gauge(t);
      if (g.medium != (t == 0 ? OffloadMedium::kCpu : OffloadMedium::kDisk)) problem("medium");
      if (g.resident_blocks > g.capacity_blocks) problem("over capacity");
      if (g.stored < last[t].stored || g.loaded < last[t].loaded || g.evicted < last[t].evicted) {
        problem("a cumulative figure went back");
      }
      // A store counts as stored once issued (its slot taken): what the
      // tier holds, its stores in flight included, is stored - evicted.
      std::uint64_t storing = 0;
      for (const OffloadConnector::Job& job : engine.offload()->jobs()) {
        if (job.tier == t && !job.load) storing += job.keys.size();
      }
      if (storing > 0) ++storing_steps;
      if (g.resident_blocks != g.stored - g.evicted) {
        problem(fmt::format("tier {} holds {}, not {} stored - {} evicted ({} storing)", t,
                            g.resident_blocks, g.stored, g.evicted, storing));
      }
      last[t] = g;
    }
  };
  Run out = run(sim, family_requests(5));
  INFO(first_problem);
  CHECK(problems == 0);
  CHECK(loading_steps > 0);
  CHECK(storing_steps > 0);  // the identity held with stores in flight
  const nlohmann::json& tiers = out.figures["offload"]["tiers"];
  CHECK(last[0].capacity_blocks == 10);
  CHECK(last[1].capacity_blocks == 24);
  for (std::size_t t = 0; t < 2; ++t) {
    const nlohmann::json& f = tiers[t == 0 ? "cpu" : "disk"];
    CHECK(last[t].stored == f["stored"].get<std::uint64_t>());
    CHECK(last[t].loaded == f["loaded"].get<std::uint64_t>());
    CHECK(last[t].evicted == f["evicted"].get<std::uint64_t>());
    CHECK(last[t].resident_blocks == f["resident_blocks"].get<std::uint64_t>());
  }
  CHECK(last[0].loaded > 0);
  CHECK(last[0].evicted > 0);
}

TEST_CASE("generic kv events: replayed in order, the events are the prefix cache's keys",
          "[events]") {
  // The generic engine shares the prefix cache: every stored key's parent is
  // cached when it is stored (or none: a chain's first page), no key is
  // stored twice or removed unknown, and after every step the set is the
  // cache's keys.
  for (std::uint64_t seed : {3ull, 4ull}) {
    SimOptions options;
    options.engine = EngineKind::kGeneric;
    options.watermark = 0.0;
    options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
    options.kv_events = true;
    Simulator sim(micro_config(14), options);
    std::set<std::uint64_t> gpu;
    std::uint64_t stored = 0, chained = 0, removed = 0, mismatches = 0;
    std::string first_problem;
    auto problem = [&](std::string what) {
      if (first_problem.empty()) first_problem = std::move(what);
    };
    sim.on_kv_events = [&](double, const KvEventLog& log) {
      CHECK(log.tiers.empty());
      for (const auto& change : log.gpu) {
        const std::uint64_t key = block_key(change.key);
        if (!change.stored) {
          ++removed;
          if (gpu.erase(key) == 0) problem("an unknown key removed");
          continue;
        }
        ++stored;
        if (change.parent) {
          ++chained;
          if (gpu.count(block_key(*change.parent)) == 0) problem("a parent not cached");
        }
        if (!gpu.insert(key).second) problem("a key stored twice");
      }
    };
    sim.on_step = [&](const Simulator& s) {
      const auto& engine = dynamic_cast<const PagedScheduler&>(s.scheduler());
      std::vector<PageKey> keys;
      engine.prefix_cache().cached_keys(keys);
      std::set<std::uint64_t> cached;
      for (const PageKey& key : keys) cached.insert(block_key(key));
      if (cached != gpu) ++mismatches;
    };
    run_to_end(sim, family_requests(seed));
    INFO("seed " << seed << ": " << first_problem);
    CHECK(first_problem.empty());
    CHECK(mismatches == 0);
    CHECK(chained > 0);
    CHECK(removed > 0);
    CHECK(stored > chained);
  }
}

TEST_CASE(
    "vllm and generic kv events: replayed in order, the events are the caches' blocks at every "
    "step",
    "[offload][events]") {
  // Every batch applied in order: the GPU's events to a multiset of keys (one
  // a cached block: BlockPool.cache_full_blocks stores, and
  // _maybe_evict_cached_block removes, each block, a key cached in two blocks
  // twice), each tier's to a set; a removal of a key not there fails; after
  // every step the GPU multiset is the prefix cache's key per cached block and
  // each tier's set its readable keys.
  for (EngineKind engine : {EngineKind::kVllm, EngineKind::kGeneric}) {
    for (std::uint64_t disk : {0ull, 24ull}) {
      std::vector<Request> requests = family_requests(11 + disk);
      SimOptions options = offload_options(10, disk, OffloadPolicy::kArc, engine);
      options.kv_events = true;
      Simulator sim(micro_config(14), options);
      std::map<std::string, std::set<std::uint64_t>> sets;  // by tier medium
      std::multiset<std::uint64_t> gpu_blocks;
      std::uint64_t batches = 0, events = 0, mismatches = 0;
      std::string first_problem;
      auto problem = [&](std::string what) {
        if (first_problem.empty()) first_problem = std::move(what);
      };
      auto apply = [&](const std::string& medium, std::uint64_t key, bool stored) {
        ++events;
        std::set<std::uint64_t>& set = sets[medium];
        if (stored && !set.insert(key).second) problem(medium + ": a key stored twice");
        if (!stored && set.erase(key) == 0) problem(medium + ": an unknown key removed");
      };
      sim.on_kv_events = [&](double, const KvEventLog& log) {
        ++batches;
        for (const auto& change : log.gpu) {
          ++events;
          const std::uint64_t key = block_key(change.key);
          if (change.stored) {
            gpu_blocks.insert(key);
          } else if (auto it = gpu_blocks.find(key); it != gpu_blocks.end()) {
            gpu_blocks.erase(it);
          } else {
            problem("GPU: a block removed that was not stored");
          }
        }
        for (const auto& change : log.tiers) {
          for (std::uint64_t key : change.event.keys) {
            apply(std::string(event_medium(change.medium)), key, !change.event.removed);
          }
        }
      };
      sim.on_step = [&](const Simulator& s) {
        const auto& paged = dynamic_cast<const PagedScheduler&>(s.scheduler());
        std::vector<PageKey> keys;
        paged.prefix_cache().cached_keys(keys, true);
        std::multiset<std::uint64_t> gpu;
        for (const PageKey& key : keys) gpu.insert(block_key(key));
        if (gpu != gpu_blocks) ++mismatches;
        const OffloadConnector& offload = *paged.offload();
        for (std::size_t i = 0; i < offload.num_tiers(); ++i) {
          const std::vector<std::uint64_t> ready = offload.tier(i).ready_keys();
          const std::set<std::uint64_t> tier(ready.begin(), ready.end());
          if (tier != sets[std::string(event_medium(offload.tier_options(i).medium))]) ++mismatches;
        }
      };
      run_to_end(sim, requests);
      INFO(to_string(engine) << ", disk " << disk << ": " << first_problem);
      CHECK(first_problem.empty());
      CHECK(mismatches == 0);
      CHECK(batches > 0);
      CHECK(gpu_blocks.size() > 0);
      CHECK(sets["CPU"].size() > 0);
      CHECK(events > gpu_blocks.size() + sets["CPU"].size());  // removals happened too
    }
  }
}

}  // namespace
}  // namespace kvreplay
