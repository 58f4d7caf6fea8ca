// The sglang engine's HiCache (--offload cpu:SIZE under --engine sglang): the
// radix tree's host copies rule by rule (engine/sglang/radix_cache.h, SGLang's
// HiRadixCache), then the engine loading a prefix back from the host, its
// KV events and its refusals. One-token pages unless a case says otherwise.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
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
namespace {

std::vector<BlockId> take_pages(BlockPool& pool, std::uint32_t n) {
  std::vector<BlockId> out;
  for (std::uint32_t i = 0; i < n; ++i) out.push_back(pool.take_free());
  return out;
}

// Lands every write the tree issued (writing_check).
void land_writes(RadixCache& cache) {
  for (const RadixCache::HostWrite& write : cache.take_host_writes()) {
    cache.write_done(write.node, write.host);
  }
}

std::optional<RadixCache::Problem> check(const RadixCache& cache,
                                         std::vector<const RadixCache::Node*> locked = {}) {
  return cache.check(locked);
}

TEST_CASE("hicache: a node is copied to the host as it enters the tree, locked until it lands") {
  BlockPool pool(64);
  RadixCache cache(&pool, 1);
  cache.enable_host(32);
  const TokenRuns a{{1, 8}, {2, 16}};
  const std::vector<BlockId> pages = take_pages(pool, 16);
  REQUIRE(cache.insert(a, 16, pages) == 0);
  std::vector<RadixCache::HostWrite> writes = cache.take_host_writes();
  REQUIRE(writes.size() == 1);
  CHECK(writes[0].pages == pages);
  CHECK(writes[0].host.size() == 16);
  CHECK(cache.host_used() == 16);
  // The write locks the node: nothing to evict, and check() counts the write
  // as its holder.
  CHECK(cache.protected_size() == 16);
  CHECK(cache.evict(16) == 0);
  CHECK_FALSE(check(cache, {writes[0].node}));
  REQUIRE(check(cache));  // without the write as holder, R3 fails
  cache.write_done(writes[0].node, writes[0].host);
  CHECK(cache.evictable_size() == 16);

  // _evict_backuped: the device pages go, the node stays on the host.
  CHECK(cache.evict(16) == 16);
  CHECK(pool.used_count() == 0);
  CHECK(cache.nodes() == 1);
  CHECK(cache.total_size() == 0);
  CHECK(cache.host_used() == 16);
  CHECK(cache.evicted_pages() == 16);
  CHECK_FALSE(check(cache));

  // match_prefix: nothing on the device; with the host asked, 15 tokens
  // there (input_len - 1), the node split at 15.
  RadixCache::Node* last = nullptr;
  CHECK(cache.match_prefix(a, 15, nullptr, last) == 0);
  CHECK(last == cache.root());
  RadixCache::HostMatch host;
  CHECK(cache.match_prefix(a, 15, nullptr, last, &host) == 0);
  CHECK(host.tokens == 15);
  REQUIRE(host.node != nullptr);
  CHECK(host.node->end == 15);
  CHECK(host.node->evicted);
  CHECK(cache.nodes() == 2);
  CHECK(cache.take_host_writes().empty());  // the host copy is there: no write

  // load_back: the 15 tokens come back into fresh device pages, locked until
  // the load lands; the host keeps its copy.
  std::vector<std::uint64_t> read;
  std::vector<BlockId> loaded;
  CHECK(cache.load_back(host.node, read, loaded) == 15);
  CHECK(read == std::vector<std::uint64_t>(writes[0].host.begin(), writes[0].host.begin() + 15));
  CHECK(loaded.size() == 15);
  CHECK(pool.used_count() == 15);
  CHECK(cache.protected_size() == 15);
  CHECK(cache.host_used() == 16);
  CHECK_FALSE(check(cache, {host.node}));
  std::vector<BlockId> got;
  CHECK(cache.match_prefix(a, 15, &got, last) == 15);
  CHECK(got == loaded);
  cache.load_done(host.node);
  CHECK(cache.evictable_size() == 15);
  CHECK_FALSE(check(cache));
}

TEST_CASE("hicache: load_back is all or nothing, and not under 10 tokens") {
  BlockPool pool(24);
  RadixCache cache(&pool, 1);
  cache.enable_host(64);
  const TokenRuns shortp{{1, 8}};
  const TokenRuns longp{{2, 16}};
  REQUIRE(cache.insert(shortp, 8, take_pages(pool, 8)) == 0);
  REQUIRE(cache.insert(longp, 16, take_pages(pool, 16)) == 0);
  land_writes(cache);
  CHECK(cache.evict(24) == 24);
  RadixCache::Node* last = nullptr;
  RadixCache::HostMatch host;
  std::vector<std::uint64_t> read;
  std::vector<BlockId> loaded;
  // Eight tokens on the host: under load_back_threshold, recomputed.
  cache.match_prefix(shortp, 8, nullptr, last, &host);
  CHECK(host.tokens == 8);
  CHECK(cache.load_back(host.node, read, loaded) == 0);
  CHECK(pool.used_count() == 0);
  // Sixteen tokens, but the device holds 10 that cannot be evicted: nothing
  // is loaded, nothing changes.
  const TokenRuns other{{3, 10}};
  REQUIRE(cache.insert(other, 10, take_pages(pool, 10)) == 0);
  const std::vector<RadixCache::HostWrite> writes = cache.take_host_writes();
  REQUIRE(writes.size() == 1);  // its write keeps it locked
  cache.match_prefix(longp, 16, nullptr, last, &host);
  CHECK(host.tokens == 16);
  CHECK(cache.load_back(host.node, read, loaded) == 0);
  CHECK(pool.used_count() == 10);
  CHECK(host.node->evicted);
  CHECK_FALSE(check(cache, {writes[0].node}));
  // Once its write lands it is evicted for the load (evict in load_back).
  cache.write_done(writes[0].node, writes[0].host);
  CHECK(cache.load_back(host.node, read, loaded) == 16);
  CHECK(pool.used_count() == 16);
  CHECK(cache.total_size() == 16);
  CHECK_FALSE(check(cache, {host.node}));
}

TEST_CASE("hicache: a full host evicts its host-only leaves least recently used first") {
  BlockPool pool(64);
  RadixCache cache(&pool, 1);
  cache.enable_host(12);
  std::vector<std::uint64_t> drops;
  cache.log_host_drops(&drops);
  const TokenRuns a{{1, 4}};
  const TokenRuns b{{2, 4}};
  const TokenRuns c{{3, 8}};
  const TokenRuns d{{4, 8}};
  REQUIRE(cache.insert(a, 4, take_pages(pool, 4)) == 0);
  REQUIRE(cache.insert(b, 4, take_pages(pool, 4)) == 0);
  land_writes(cache);
  CHECK(cache.evict(8) == 8);  // a, then b: both on the host alone
  std::vector<std::uint64_t> b_host;
  for (const auto& [id, child] : cache.root()->children) {
    if (child->key[0].id == 2) b_host = child->host;
  }
  // Touch a: b is now the least recently used.
  RadixCache::Node* last = nullptr;
  RadixCache::HostMatch host;
  cache.match_prefix(a, 4, nullptr, last, &host);
  CHECK(host.tokens == 4);
  // c needs 8 host pages, 4 are free: evict_host(8) frees b first, then a.
  REQUIRE(cache.insert(c, 8, take_pages(pool, 8)) == 0);
  const std::vector<RadixCache::HostWrite> c_write = cache.take_host_writes();
  CHECK(c_write.size() == 1);
  CHECK(cache.host_used() == 8);
  CHECK(cache.host_evicted() == 8);
  REQUIRE(drops.size() == 8);
  CHECK(std::vector<std::uint64_t>(drops.begin(), drops.begin() + 4) == b_host);
  CHECK(cache.nodes() == 1);
  // d finds no host-only leaf to evict (c is on the device): no copy, no write.
  REQUIRE(cache.insert(d, 8, take_pages(pool, 8)) == 0);
  CHECK(cache.take_host_writes().empty());
  CHECK(cache.host_used() == 8);
  // A later match retries the write (inc_hit_count), again without room.
  cache.match_prefix(d, 8, nullptr, last);
  CHECK(cache.take_host_writes().empty());
  REQUIRE(c_write.size() == 1);
  CHECK_FALSE(check(cache, {c_write[0].node}));
}

TEST_CASE("hicache: an insert gives a host-only node device pages again") {
  BlockPool pool(64);
  RadixCache cache(&pool, 1);
  cache.enable_host(64);
  const TokenRuns a{{1, 4}, {2, 8}};
  const TokenRuns ab{{1, 4}, {2, 8}, {3, 12}};
  REQUIRE(cache.insert(a, 8, take_pages(pool, 8)) == 0);
  land_writes(cache);
  CHECK(cache.evict(8) == 8);
  // The request recomputed the 8 tokens: the tree takes all 12 of its pages
  // (none present on the device), the first 8 under the host-only node.
  const std::vector<BlockId> pages = take_pages(pool, 12);
  CHECK(cache.insert(ab, 12, pages) == 0);
  CHECK(cache.total_size() == 12);
  CHECK(pool.used_count() == 12);
  const std::vector<RadixCache::HostWrite> writes = cache.take_host_writes();
  REQUIRE(writes.size() == 1);  // the new leaf's; the node has its copy
  CHECK(writes[0].pages == std::vector<BlockId>(pages.begin() + 8, pages.end()));
  CHECK(cache.host_used() == 12);
  CHECK_FALSE(check(cache, {writes[0].node}));
}

TEST_CASE("hicache: a node evicted without a host copy frees its host-only children's") {
  // x fills 8 of 12 host pages; p's write is refused (no host-only leaf to
  // evict); q, under p, gets the last 4. Evicting x, then q (to the host),
  // then p (no copy: deleted) frees q's host pages with p.
  BlockPool pool(64);
  RadixCache cache(&pool, 1);
  cache.enable_host(12);
  const TokenRuns x{{9, 8}};
  const TokenRuns p{{1, 8}};
  const TokenRuns pq{{1, 8}, {2, 12}};
  REQUIRE(cache.insert(x, 8, take_pages(pool, 8)) == 0);
  land_writes(cache);
  REQUIRE(cache.insert(p, 8, take_pages(pool, 8)) == 0);
  CHECK(cache.take_host_writes().empty());
  std::vector<BlockId> pages = take_pages(pool, 12);
  CHECK(cache.insert(pq, 12, pages) == 8);
  for (std::size_t i = 0; i < 8; ++i) REQUIRE(pool.release(pages[i]));
  const std::vector<RadixCache::HostWrite> writes = cache.take_host_writes();
  REQUIRE(writes.size() == 1);
  CHECK(writes[0].node->start == 8);
  cache.write_done(writes[0].node, writes[0].host);
  CHECK(cache.host_used() == 12);
  CHECK(cache.evict(1) == 8);    // x, the least recently used: to the host
  CHECK(cache.evict(12) == 12);  // q to the host, then p deleted with q
  CHECK(cache.host_used() == 8);
  CHECK(cache.host_evicted() == 4);
  CHECK(cache.nodes() == 1);
  CHECK(pool.used_count() == 0);
  CHECK_FALSE(check(cache));
}

TEST_CASE("hicache: check() catches each planted fault of the host (R5)") {
  for (int fault = 0; fault < 4; ++fault) {
    INFO("fault " << fault);
    BlockPool pool(64);
    RadixCache cache(&pool, 1);
    cache.enable_host(32);
    REQUIRE(cache.insert(TokenRuns{{1, 8}}, 8, take_pages(pool, 8)) == 0);
    REQUIRE(cache.insert(TokenRuns{{2, 8}}, 8, take_pages(pool, 8)) == 0);
    land_writes(cache);
    CHECK(cache.evict(8) == 8);
    REQUIRE_FALSE(check(cache));
    RadixCache::Node* on_host = nullptr;
    RadixCache::Node* on_device = nullptr;
    for (auto& [id, child] : cache.root()->children) {
      (child->evicted ? on_host : on_device) = child.get();
    }
    REQUIRE(on_host != nullptr);
    REQUIRE(on_device != nullptr);
    switch (fault) {
      case 0: on_device->host[1] = on_host->host[0]; break;  // one host page held twice
      case 1: on_host->host.pop_back(); break;               // 7 host pages for 8 tokens
      case 2: on_host->pages.push_back(0); break;            // a device page on the host alone
      default: on_device->host.clear(); break;               // 8 host pages counted, none held
    }
    const auto problem = check(cache);
    REQUIRE(problem);
    CHECK(problem->invariant == "R5");
  }
}

TEST_CASE("hicache: random inserts, matches, loads, writes and evictions keep R1-R5") {
  for (const std::uint32_t page : {1u, 2u}) {
    BlockPool pool(160);
    RadixCache cache(&pool, page);
    cache.enable_host(100);
    test::Lcg next{777 + page};
    const std::vector<TokenRuns> seqs = test::random_token_runs(next, 12, 3, 8);
    std::vector<RadixCache::Node*> held;  // requests' locks and loads in flight
    std::vector<RadixCache::HostWrite> writing;
    std::uint64_t loads = 0, host_only = 0, tried = 0, short_chain = 0;
    for (int op = 0; op < 600; ++op) {
      for (RadixCache::HostWrite& w : cache.take_host_writes()) writing.push_back(std::move(w));
      const TokenRuns& seq = seqs[next(seqs.size())];
      const std::uint32_t length = seq.back().end / page * page;
      switch (next(6)) {
        case 0: {
          if (pool.free_count() < length / page) cache.evict(length);
          if (pool.free_count() < length / page) break;
          std::vector<BlockId> pages = take_pages(pool, length / page);
          const std::uint32_t present = cache.insert(seq, length, pages);
          for (std::uint32_t p = 0; p < present / page; ++p) REQUIRE(pool.release(pages[p]));
          break;
        }
        case 1: {  // match (into the host), lock, maybe load back
          RadixCache::Node* last = nullptr;
          RadixCache::HostMatch host;
          const auto cap = next(2) == 0 ? length : static_cast<std::uint32_t>(next(length + 1));
          const std::uint32_t got = cache.match_prefix(seq, cap, nullptr, last, &host);
          REQUIRE(got + host.tokens <= cap);
          REQUIRE(last->end == got);
          host_only += host.tokens > 0 ? 1 : 0;
          if (host.tokens > 0 && next(2) == 0) {
            ++tried;
            short_chain += host.tokens < RadixCache::kLoadBackThreshold ? 1 : 0;
            std::vector<std::uint64_t> read;
            std::vector<BlockId> loaded;
            const std::uint32_t tokens = cache.load_back(host.node, read, loaded);
            if (tokens > 0) {
              REQUIRE(tokens == host.tokens);
              REQUIRE(loaded.size() == tokens / page);
              REQUIRE(read.size() == loaded.size());
              held.push_back(host.node);
              ++loads;
              break;
            }
          }
          if (last != cache.root()) {
            cache.inc_lock_ref(last);
            held.push_back(last);
          }
          break;
        }
        case 2:
          if (!held.empty()) {
            const std::size_t k = next(held.size());
            cache.dec_lock_ref(held[k]);
            held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
          }
          break;
        case 3:  // some writes land
          while (!writing.empty() && next(3) != 0) {
            cache.write_done(writing.front().node, writing.front().host);
            writing.erase(writing.begin());
          }
          break;
        case 4: {
          const std::uint64_t before = cache.evictable_size();
          const std::uint32_t freed = cache.evict(static_cast<std::uint32_t>(next(40)));
          REQUIRE(cache.evictable_size() == before - freed);
          break;
        }
        default: {
          const std::uint32_t before = cache.host_used();
          const std::uint32_t freed = cache.evict_host(static_cast<std::uint32_t>(next(12)));
          REQUIRE(cache.host_used() == before - freed);
          break;
        }
      }
      for (RadixCache::HostWrite& w : cache.take_host_writes()) writing.push_back(std::move(w));
      std::vector<const RadixCache::Node*> holders(held.begin(), held.end());
      for (const RadixCache::HostWrite& w : writing) holders.push_back(w.node);
      auto problem = cache.check(holders);
      INFO("op " << op << " page " << page << ": " << (problem ? problem->message : ""));
      REQUIRE_FALSE(problem);
      REQUIRE(std::uint64_t{pool.used_count()} * page == cache.total_size());
      REQUIRE(cache.host_used() <= cache.host_capacity());
    }
    INFO("tried " << tried << " short " << short_chain);
    CHECK(loads > 0);
    CHECK(host_only > 0);
    CHECK(cache.host_evicted() > 0);
  }
}

// --- the engine ---

SimOptions hicache_options(double latency_us = 0) {
  SimOptions options;
  options.engine = EngineKind::kSglang;
  options.watermark = 0.0;
  options.cost.kind = CostKind::kLinear;
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  // 2 KiB of host: 64 pages of the micro geometry's 32 bytes a token (K and V).
  options.offload.tiers.push_back({OffloadMedium::kCpu, 2048, 1.0, latency_us});
  return options;
}

RunConfig token_pool(std::uint32_t tokens) {
  RunConfig config = micro_config(tokens);
  config.kv.page_tokens = 1;
  return config;
}

struct Served {
  std::map<std::string, RequestTimes> times;
  SimTotals sim;
  nlohmann::json figures;
};

Served serve(const SimOptions& options, std::vector<Request> requests) {
  Simulator sim(token_pool(40), options);
  Served out;
  sim.on_request = [&out](const RequestTimes& t) { out.times[t.id] = t; };
  run_to_end(sim, std::move(requests));
  out.sim = sim.sim_totals();
  out.figures = {{"prefix_cache", nlohmann::json::object()}};
  sim.scheduler().add_figures(out.figures);
  return out;
}

// a's prompt is evicted from the 40-token pool by x's; b shares a's prompt
// and brings its own 4 tokens.
std::vector<Request> evicted_then_shared() {
  return {hashed("a", 24, 2, {1, 2, 3, 4, 5, 6}, 0),
          hashed("x", 24, 2, {11, 12, 13, 14, 15, 16}, 10),
          hashed("b", 28, 2, {1, 2, 3, 4, 5, 6}, 20)};
}

TEST_CASE("hicache: a prompt evicted from the GPU is loaded back from the host when admitted") {
  // x's prefill evicts a's 25 tokens to the host (all copied when they
  // entered the tree); b matches none of them on the device and 24 on the
  // host (its own tokens follow), loads them back (evicting x's to the host)
  // and computes its 4.
  const Served with = serve(hicache_options(), evicted_then_shared());
  SimOptions plain = hicache_options();
  plain.offload.tiers.clear();
  const Served without = serve(plain, evicted_then_shared());
  CHECK(without.sim.prompt_tokens_computed == 24 + 24 + 28);
  CHECK(with.sim.prompt_tokens_computed == 24 + 24 + 4);
  CHECK(with.sim.hit_tokens == 0);  // the device's hits
  const nlohmann::json& cpu = with.figures["offload"]["tiers"]["cpu"];
  CHECK(cpu["loaded"] == 24);
  CHECK(cpu["hit_tokens"] == 24);
  CHECK(cpu["capacity_blocks"] == 64);
  CHECK(cpu["stored"].get<std::uint64_t>() >= 25 + 25);
  CHECK(with.figures["prefix_cache"]["hits_by_tier"]["cpu"] == 24);
  CHECK(with.figures["offload"]["policy"] == "lru");
  CHECK(with.times.at("b").cached_tokens == 24);
}

TEST_CASE("hicache: a load landing in the run's last step is counted as loaded") {
  // evicted_then_shared with b's output 1: b loads a's 24 tokens back
  // (HiRadixCache.init_load_back), computes its 4 and finishes in that same
  // step, the run's last. Its load lands there (the step waits for it) and
  // is counted at the run's end (end_run: loading_check): loaded pages are
  // the host hit tokens (one-token pages), and the load's time is counted.
  for (const double latency_us : {0.0, 500000.0}) {
    INFO("latency " << latency_us);
    std::vector<Request> requests = evicted_then_shared();
    requests[2].output = 1;
    const Served run = serve(hicache_options(latency_us), std::move(requests));
    const nlohmann::json& cpu = run.figures["offload"]["tiers"]["cpu"];
    CHECK(run.sim.prompt_tokens_computed == 24 + 24 + 4);
    CHECK(cpu["hit_tokens"] == 24);
    CHECK(cpu["loaded"] == 24);
    CHECK(cpu["load_ms"]["count"] == 1);
    CHECK(run.times.at("b").cached_tokens == 24);
  }
}

TEST_CASE("hicache: a prefix loaded back for a request then refused counts at its admission") {
  // Pool 48, chunks of 12 tokens. a (16, hash ids 1-4, output 1) runs in
  // chunks of 12 and 4 and ends; x (40 of its own) evicts a's 16 to the host
  // for its third chunk. z (24 of its own) and b (a's 16 and 4 of its own)
  // then arrive together. Step 1: z's first chunk takes the chunk budget.
  // Step 2: z's last 12 take it again; b fits the memory budget (22 < 48 -
  // 12 - 12 of z's chunks - 13 reserved), so it is loaded back
  // (PrefillAdder.add_one_req: init_load_back, 16 pages, evicting x's) and
  // then refused: no chunk budget left (OTHER). Step 3: b matches the
  // loaded 16 on the device, is admitted and computes 4. Its 16 came from
  // the host: they are the cpu tier's hit tokens, as many as the pages
  // loaded, not the device's.
  SimOptions options = hicache_options();
  options.sglang.chunked_prefill_size = 12;
  Simulator sim(token_pool(48), options);
  Served out;
  sim.on_request = [&out](const RequestTimes& t) { out.times[t.id] = t; };
  run_to_end(sim, {hashed("a", 16, 1, {1, 2, 3, 4}, 0), hashed("x", 40, 1, {}, 1),
                   hashed("z", 24, 1, {}, 2), hashed("b", 20, 1, {1, 2, 3, 4}, 2)});
  nlohmann::json figures = {{"prefix_cache", nlohmann::json::object()}};
  sim.scheduler().add_figures(figures);
  const nlohmann::json& cpu = figures["offload"]["tiers"]["cpu"];
  CHECK(sim.sim_totals().prompt_tokens_computed == 16 + 40 + 24 + 4);
  CHECK(cpu["loaded"] == 16);
  CHECK(cpu["hit_tokens"] == 16);
  CHECK(sim.sim_totals().hit_tokens == 0);  // the device's
  CHECK(out.times.at("b").cached_tokens == 16);
  CHECK(figures["sglang"]["prefill_batches"] == 2 + 4 + 2 + 1);
  CHECK(figures["sglang"]["hicache"]["loaded_unused"] == 0);
}

TEST_CASE("hicache: the batch that loads a prefix back ends no earlier than the load lands") {
  // The same runs with a link of 0.5 s latency: b's first token comes at
  // least 0.5 s after its admission. a loads nothing and is as fast as on a
  // link without latency; x waits for a's writes to land (they lock a's
  // pages) before it can evict them.
  const Served fast = serve(hicache_options(0), evicted_then_shared());
  const Served slow = serve(hicache_options(500000), evicted_then_shared());
  CHECK(slow.times.at("a").ttft_ms() == Approx(fast.times.at("a").ttft_ms()));
  CHECK(fast.times.at("x").ttft_ms() < 100.0);
  CHECK(slow.times.at("x").ttft_ms() >= 500.0);
  CHECK(slow.times.at("b").ttft_ms() >= 500.0);
  CHECK(slow.times.at("b").ttft_ms() - fast.times.at("b").ttft_ms() >= 499.0);
  const nlohmann::json& cpu = slow.figures["offload"]["tiers"]["cpu"];
  CHECK(cpu["load_ms"]["count"] == 1);
  CHECK(cpu["load_ms"]["max"].get<double>() >= 500.0);
}

TEST_CASE("hicache: batch_is_full, set only when a request can be served, outlives a write") {
  // A link of 50 ms latency; pool 64. Step 1 prefills r (4, out 30) and a
  // (16, out 1), which finishes: its 16 tokens stay locked until their host
  // write lands (writing_check). x (26, out 1) then finds them not
  // evictable: NO_TOKEN. With r running, batch_is_full is set
  // (get_new_batch_prefill, HiCache: "after making sure there are requests
  // that can be served") and nothing clears it when the write lands: x waits
  // for r to leave the running batch (update_running_batch). y (26, out 1)
  // alone finds the same locked pages with nothing running or admitted: the
  // flag stays clear, y waits for the write and is served, not skipped as
  // stalled.
  SimOptions options = hicache_options(50000);
  Served out;
  {
    Simulator sim(token_pool(64), options);
    sim.on_request = [&out](const RequestTimes& t) { out.times[t.id] = t; };
    run_to_end(sim, {hashed("r", 4, 30, {}, 0), hashed("a", 16, 1, {1, 2, 3, 4}, 0),
                     hashed("x", 26, 1, {}, 0.001)});
    CHECK(sim.sim_totals().finished == 3);
  }
  CHECK(out.times.at("x").first_token > out.times.at("r").finished);
  Simulator alone(token_pool(40), options);
  alone.on_request = [&out](const RequestTimes& t) { out.times[t.id] = t; };
  run_to_end(alone, {hashed("a", 24, 1, {1, 2, 3, 4, 5, 6}, 0), hashed("y", 24, 1, {}, 0.001)});
  CHECK(alone.sim_totals().finished == 2);
  CHECK(alone.sim_totals().skipped == 0);
  CHECK(out.times.at("y").ttft_ms() >= 50.0);
}

TEST_CASE("hicache kv events: replayed in order, GPU and CPU events are the tree's pages") {
  for (const std::uint32_t page : {1u, 4u}) {
    INFO("page " << page);
    RunConfig config = token_pool(96);
    config.kv.page_tokens = page;
    config.kv.pool_blocks = 96 / page;
    SimOptions options = hicache_options(2000);
    options.offload.tiers[0].bytes = 32 * 160;  // 160 tokens of host
    options.kv_events = true;
    Simulator sim(config, options);
    std::map<bool, std::set<std::uint64_t>> held;  // by host
    std::uint64_t host_stored = 0, host_removed = 0, mismatches = 0;
    std::string first_problem;
    sim.on_kv_events = [&](double, const KvEventLog& log) {
      for (const PageChange& change : log.pages) {
        std::set<std::uint64_t>& set = held[change.host];
        if (change.host) (change.stored ? host_stored : host_removed) += 1;
        if (change.stored ? !set.insert(change.hash).second : set.erase(change.hash) == 0) {
          if (first_problem.empty()) first_problem = change.stored ? "stored twice" : "unknown";
        }
        if (change.host && change.parent && first_problem.empty()) first_problem = "a host parent";
      }
    };
    sim.on_step = [&](const Simulator& s) {
      const RadixCache& tree = dynamic_cast<const SglangScheduler&>(s.scheduler()).tree();
      std::vector<std::uint64_t> gpu, cpu;
      tree.page_hashes(gpu);
      tree.host_page_hashes(cpu);
      if (std::set<std::uint64_t>(gpu.begin(), gpu.end()) != held[false] ||
          std::set<std::uint64_t>(cpu.begin(), cpu.end()) != held[true]) {
        ++mismatches;
      }
    };
    test::Lcg next{5 + page};
    std::vector<Request> requests;
    for (int i = 0; i < 150; ++i) {
      const std::uint64_t family = next(8);
      const auto blocks = static_cast<std::uint32_t>(3 + next(5));
      std::vector<std::uint64_t> ids;
      for (std::uint32_t k = 0; k < blocks; ++k) ids.push_back(family * 100 + k + 1);
      requests.push_back(hashed(std::to_string(i), blocks * 4 + static_cast<std::uint32_t>(next(4)),
                                static_cast<std::uint32_t>(1 + next(9)), ids, i * 0.004));
    }
    run_to_end(sim, std::move(requests));
    INFO(first_problem);
    CHECK(first_problem.empty());
    CHECK(mismatches == 0);
    CHECK(host_removed > 0);
    CHECK(host_stored > host_removed);
    nlohmann::json figures = {{"prefix_cache", nlohmann::json::object()}};
    sim.scheduler().add_figures(figures);
    const nlohmann::json& cpu = figures["offload"]["tiers"]["cpu"];
    CHECK(cpu["loaded"].get<std::uint64_t>() > 0);
    // Every page loaded is a host hit, unless loaded for a request then
    // refused and evicted again before it was admitted.
    const auto unused = figures["sglang"]["hicache"]["loaded_unused"].get<std::uint64_t>();
    CHECK(cpu["loaded"].get<std::uint64_t>() * page ==
          cpu["hit_tokens"].get<std::uint64_t>() +
              cpu["preempted_hit_tokens"].get<std::uint64_t>() + unused * page);
  }
}

TEST_CASE("hicache: the sglang engine refuses a disk tier and the arc policy") {
  const RunConfig config = token_pool(40);
  SimOptions disk = hicache_options();
  disk.offload.tiers.push_back({OffloadMedium::kDisk, 4096, 1.0, 0});
  auto error = sim_options_error(config, disk);
  REQUIRE(error);
  CHECK(error->option == "--offload");
  CHECK(error->problem.find("one cpu tier") != std::string::npos);
  SimOptions arc = hicache_options();
  arc.offload.policy = OffloadPolicy::kArc;
  error = sim_options_error(config, arc);
  REQUIRE(error);
  CHECK(error->option == "--offload-policy");
  CHECK_FALSE(sim_options_error(config, hicache_options()));
}

}  // namespace
}  // namespace kvreplay
