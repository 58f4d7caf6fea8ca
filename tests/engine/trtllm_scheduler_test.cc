// The trtllm engine and its block tree rule by rule, on micro-traces worked
// by hand (traces/README.md, "The trtllm engine, worked by hand"): blocks of
// 4 tokens (tokens_per_block), hash ids one per block, pools of a few
// blocks, the linear cost model (the figures checked do not depend on time),
// and the invariants checked after every step.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "engine/micro_config.h"
#include "engine/run_to_end.h"
#include "engine/simulator.h"
#include "engine/trtllm/block_tree.h"
#include "engine/trtllm/trtllm_scheduler.h"
#include "model/kv_groups.h"

namespace kvreplay {

// Reaches into the engine to plant faults for check().
struct TrtllmFaults {
  static TrtllmScheduler& of(Simulator& sim) {
    return const_cast<TrtllmScheduler&>(dynamic_cast<const TrtllmScheduler&>(sim.scheduler()));
  }
  // A block taken from the pool that nobody holds.
  static void leak(Simulator& sim) { (void)of(sim).pool_.take_free(); }
  static bool check(Simulator& sim) { return of(sim).check(); }
};

namespace {

SimOptions trtllm_options() {
  SimOptions options;
  options.engine = EngineKind::kTrtllm;
  options.watermark = 0.0;
  options.max_seqs = kTrtllmMaxBatchSize;
  options.max_batched_tokens = kTrtllmMaxNumTokens;
  options.cost.kind = CostKind::kLinear;
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  return options;
}

struct Steps {
  std::vector<std::uint64_t> prompt_computed, output, hits, used;
};

const TrtllmScheduler& engine(const Simulator& sim) {
  return dynamic_cast<const TrtllmScheduler&>(sim.scheduler());
}

Steps run(Simulator& sim, std::vector<Request> requests) {
  Steps steps;
  sim.on_step = [&steps](const Simulator& s) {
    steps.prompt_computed.push_back(s.sim_totals().prompt_tokens_computed);
    steps.output.push_back(s.sim_totals().output_tokens);
    steps.hits.push_back(s.sim_totals().hit_tokens);
    steps.used.push_back(s.pool().used_count());
  };
  run_to_end(sim, std::move(requests));
  return steps;
}

TEST_CASE("trtllm block tree: keys, exact and partial matches, the free queue's order") {
  BlockPool pool(4);
  TrtBlockTree tree(&pool, 4);
  const TokenRuns a{{1, 4}, {2, 8}, {3, 10}};
  const TrtBlockKey k0 = block_key_of(a, 0, 4);
  const TrtBlockKey k1 = block_key_of(a, 4, 8);
  const TrtBlockKey k2 = block_key_of(a, 8, 10);
  CHECK(k2.size() == 2);
  BlockId b0 = *tree.take_free();
  BlockId b1 = *tree.take_free();
  BlockId b2 = *tree.take_free();
  tree.store(TrtBlockTree::kRoot, k0, b0);
  tree.store(b0, k1, b1);
  tree.store(b1, k2, b2);
  // Released tail first, as releaseBlocks does: b2, b1, b0 join the queue's
  // back behind the one block never used.
  for (BlockId b : {b2, b1, b0}) tree.release(b);
  CHECK(tree.free_blocks() == 4);
  CHECK(tree.stored_blocks() == 3);
  // An exact full match; the partial block b2 matched by one token of a key
  // [8, 9) of the same run.
  auto m0 = tree.find(TrtBlockTree::kRoot, k0, true, true);
  REQUIRE(m0);
  CHECK(m0->block == b0);
  CHECK_FALSE(m0->partial);
  const TokenRuns other{{1, 4}, {2, 8}, {3, 9}, {9, 12}};
  auto m2 = tree.find(b1, block_key_of(other, 8, 9), true, true);
  REQUIRE(m2);
  CHECK(m2->block == b2);
  CHECK(m2->tokens == 1);
  CHECK(m2->partial);
  CHECK_FALSE(tree.find(b1, block_key_of(other, 8, 9), false, true));
  // The queue's front is the block never used, then b2 (a leaf), evicted.
  const BlockId first = *tree.take_free();
  CHECK_FALSE(tree.stored(first));
  CHECK(*tree.take_free() == b2);
  CHECK(tree.evicted() == 1);
  CHECK(tree.stored_blocks() == 2);
  std::vector<std::uint32_t> refs(4, 0);
  refs[first] = refs[b2] = 1;
  CHECK_FALSE(tree.check(refs));
}

TEST_CASE("trtllm: a finished request's blocks are reused, a free partial leaf is taken") {
  // A (10 prompt tokens, ids 1,2,3 a block, the last block partial) runs its
  // context (step 1: 3 blocks for the keys [0,4) [4,8) [8,9); the full ones
  // stored) and one generation step (step 2: 11 tokens; finished, its 3
  // blocks stored, the last with tokens [8,11)). B, the same prompt, arrives
  // later: [0,4) and [4,8) match in full, [8,9) shares one token with A's
  // last block, a free leaf: taken, not copied. B reuses 9 tokens, computes 1.
  Simulator sim(micro_config(16), trtllm_options());
  const Steps steps =
      run(sim, {hashed("A", 10, 2, {1, 2, 3}, 0), hashed("B", 10, 2, {1, 2, 3}, 1)});
  CHECK(steps.prompt_computed == std::vector<std::uint64_t>{10, 10, 11, 11});
  CHECK(steps.hits == std::vector<std::uint64_t>{0, 0, 9, 9});
  CHECK(steps.output == std::vector<std::uint64_t>{1, 2, 3, 4});
  CHECK(engine(sim).partial_claims() == 1);
  CHECK(engine(sim).partial_copies() == 0);
  CHECK(sim.totals().cow_copies == 0);
  CHECK(steps.used == std::vector<std::uint64_t>{3, 3, 3, 3});
}

TEST_CASE("trtllm: a partially matched block that has children is copied") {
  // A generates 6 tokens: its 15 tokens of KV are stored as [0,4) [4,8)
  // [8,12) [12,15). B's key [8,9) shares one token with [8,12), which has a
  // child: B copies it into a new block (a copy of one token).
  Simulator sim(micro_config(16), trtllm_options());
  run(sim, {hashed("A", 10, 6, {1, 2, 3}, 0), hashed("B", 10, 2, {1, 2, 3}, 1)});
  CHECK(sim.sim_totals().hit_tokens == 9);
  CHECK(engine(sim).partial_copies() == 1);
  CHECK(sim.totals().cow_copies == 1);
  SECTION("without partial reuse only the full blocks are reused") {
    SimOptions options = trtllm_options();
    options.trtllm.enable_partial_reuse = false;
    Simulator plain(micro_config(16), options);
    run(plain, {hashed("A", 10, 6, {1, 2, 3}, 0), hashed("B", 10, 2, {1, 2, 3}, 1)});
    CHECK(plain.sim_totals().hit_tokens == 8);
    CHECK(plain.sim_totals().prompt_tokens_computed == 12);
    CHECK(engine(plain).partial_copies() == 0);
  }
}

TEST_CASE("trtllm: GUARANTEED_NO_EVICT admits only what can run to completion") {
  // Pool of 8 blocks. A (8 + 9 tokens) reserves ceil(17/4) = 5 blocks; B
  // (8 + 5) needs 4 > 8 - 5: it waits while A runs (the free blocks less A's
  // remaining blocks stay 3), and is admitted at step 10, after A finishes
  // at step 9 (1 token from its context, 8 generation steps). B: context at
  // step 10, 4 generation steps, done at step 14. Nothing evicted: B takes
  // the 4 blocks never used, ahead of A's in the queue.
  Simulator sim(micro_config(8), trtllm_options());
  const Steps steps = run(sim, {hashed("A", 8, 9, {1, 2}, 0), hashed("B", 8, 5, {3, 4}, 0)});
  REQUIRE(steps.prompt_computed.size() == 14);
  CHECK(steps.prompt_computed[8] == 8);
  CHECK(steps.prompt_computed[9] == 16);
  CHECK(sim.sim_totals().max_running == 1);
  CHECK(sim.sim_totals().preemptions == 0);
  CHECK(sim.evictions() == 0);
  CHECK(steps.used.back() == 7);  // A's 4 blocks and B's 3, all stored
}

TEST_CASE("trtllm: MAX_UTILIZATION admits greedily and pauses the newest started request") {
  // Pool of 6. A (8 + 9) and B (8 + 9) start together (2 blocks each). At
  // step 6 both reach 12 tokens and need a block; none is free: B, the last
  // started, is paused (its 3 blocks stored, freed tail first) and A takes
  // B's last block from the queue's front (an eviction). B waits (its new
  // prompt of 13 tokens needs 4 blocks, 2 are free) until A finishes at step
  // 9; at step 10 B reuses its 8 prompt tokens, evicts A's blocks [12,16)
  // and [8,12) for its own, computes 5 tokens, and ends at step 13.
  SimOptions options = trtllm_options();
  options.trtllm.capacity_policy = CapacityPolicy::kMaxUtilization;
  Simulator sim(micro_config(6), options);
  const Steps steps = run(sim, {hashed("A", 8, 9, {1, 2}, 0), hashed("B", 8, 9, {3, 4}, 0)});
  CHECK(steps.prompt_computed.size() == 13);
  CHECK(sim.sim_totals().preemptions == 1);
  CHECK(engine(sim).pauses() == 1);
  CHECK(sim.sim_totals().prompt_tokens_computed == 21);
  CHECK(sim.sim_totals().output_tokens == 18);
  CHECK(sim.sim_totals().preempted_queries == 13);
  CHECK(sim.sim_totals().preempted_hits == 8);
  CHECK(sim.evictions() == 3);
}

TEST_CASE("trtllm: max_num_tokens cuts a context into chunks of whole blocks") {
  // max_num_tokens 8: A's 20-token prompt runs as 8, 8 and 4 tokens, its
  // first token after the third chunk.
  SimOptions options = trtllm_options();
  options.max_batched_tokens = 8;
  options.trtllm.enable_chunked_context = true;
  Simulator sim(micro_config(16), options);
  const Steps steps = run(sim, {hashed("A", 20, 2, {1, 2, 3, 4, 5}, 0)});
  CHECK(steps.prompt_computed == std::vector<std::uint64_t>{8, 16, 20, 20});
  CHECK(steps.output == std::vector<std::uint64_t>{0, 0, 1, 2});
  SECTION("without chunked context such a prompt is skipped") {
    options.trtllm.enable_chunked_context = false;
    Simulator plain(micro_config(16), options);
    run(plain, {hashed("A", 20, 2, {1, 2, 3, 4, 5}, 0)});
    CHECK(plain.sim_totals().skipped_too_long == 1);
  }
}

TEST_CASE("trtllm: a context request waits a step for the block an earlier one computes") {
  // A and B, the same 8-token prompt, arrive together. B's first new block
  // [0,4) is the one A contributes this step (beneficialToSkip): B waits.
  // At step 2 A's [0,4) is stored; B reuses it and computes 4 tokens.
  Simulator sim(micro_config(16), trtllm_options());
  run(sim, {hashed("A", 8, 2, {1, 2}, 0), hashed("B", 8, 2, {1, 2}, 0)});
  CHECK(engine(sim).skipped_for_reuse() == 1);
  CHECK(sim.sim_totals().hit_tokens == 4);
  CHECK(sim.sim_totals().prompt_tokens_computed == 12);
}

TEST_CASE("trtllm host tier: a block taken moves to the host, a match brings it back") {
  // Two GPU blocks, one host slot. A's chain [0,4) -> [4,8) is stored and
  // released tail first (queue: b1, b0).
  BlockPool pool(2);
  TrtBlockTree tree(&pool, 4);
  tree.enable_host(1);
  const TokenRuns a{{1, 4}, {2, 8}};
  const BlockId b0 = *tree.take_free();
  const BlockId b1 = *tree.take_free();
  tree.store(TrtBlockTree::kRoot, block_key_of(a, 0, 4), b0);
  tree.store(b0, block_key_of(a, 4, 8), b1);
  const std::uint64_t h0 = tree.hash(b0);
  const std::uint64_t h1 = tree.hash(b1);
  tree.release(b1);
  tree.release(b0);
  std::vector<std::uint32_t> refs(2, 0);
  REQUIRE_FALSE(tree.check(refs));
  // getFreeBlock with a free host slot: b1's KV moves there, [4,8) stays b0's
  // child (now a host block), and b1's GPU block is the caller's.
  CHECK(*tree.take_free() == b1);
  auto m = tree.find_exact(b0, 4, 8, 2);
  REQUIRE(m);
  const BlockId host = m->block;
  CHECK(tree.on_host(host));
  CHECK(tree.hash(host) == h1);
  CHECK(tree.host_used() == 1);
  CHECK(tree.stored_blocks() == 2);
  CHECK(tree.take_offloaded() == std::vector<std::uint64_t>{h1});
  refs[b1] = 1;
  CHECK_FALSE(tree.check(refs));
  // A request matching [0,4) holds b0; bringing [4,8) back needs a GPU
  // block and none is free: nothing changes.
  tree.hold(b0);
  refs[b0] = 1;
  CHECK_FALSE(tree.onboard(host));
  CHECK(tree.host_used() == 1);
  CHECK(tree.take_onboarded().empty());
  CHECK_FALSE(tree.check(refs));
  // With b1 free again, onboardBlock: [4,8) is b1's again, held by the
  // caller and the tree.
  tree.release(b1);
  refs[b1] = 0;
  const auto back = tree.onboard(host);
  REQUIRE(back);
  CHECK(*back == b1);
  CHECK(tree.find_exact(b0, 4, 8, 2)->block == b1);
  CHECK(tree.host_used() == 0);
  CHECK(tree.take_onboarded() == std::vector<std::uint64_t>{h1});
  CHECK(pool.refcount(b1) == 2);
  refs[b1] = 1;
  CHECK_FALSE(tree.check(refs));
  // Both released (b1, then b0) and taken again: b1 moves to the host; b0
  // finds its own child in the only host slot, which is evicted, and moves
  // there itself.
  tree.release(b1);
  tree.release(b0);
  CHECK(*tree.take_free() == b1);
  CHECK(*tree.take_free() == b0);
  CHECK(tree.host_evicted() == 1);
  auto root = tree.find_exact(TrtBlockTree::kRoot, 0, 4, 1);
  REQUIRE(root);
  CHECK(tree.on_host(root->block));
  CHECK(tree.hash(root->block) == h0);
  CHECK_FALSE(tree.has_children(root->block));
  CHECK(tree.stored_blocks() == 1);
  refs[b0] = refs[b1] = 1;
  CHECK_FALSE(tree.check(refs));
}

TEST_CASE("trtllm: --offload cpu is the host tier, its blocks reused from there") {
  // Pool of 3 blocks; A (ids 1,2) then B (ids 5,6) then C (A's prompt), 8
  // prompt tokens and 1 output each, one at a time. A's blocks are stored
  // [0,4) and [4,8) and released tail first (queue: the block never used,
  // A's [4,8), A's [0,4)). B takes the unused block and A's [4,8): evicted
  // without a host tier, moved to the host with one. C matches [0,4) on the
  // GPU (4 tokens); [4,7) shares 3 tokens with A's [4,8), on the host: a free
  // leaf, claimed and brought back. C computes 1 token instead of 4.
  const RunConfig config = micro_config(3);
  const auto requests = [] {
    return std::vector<Request>{hashed("A", 8, 1, {1, 2}, 0), hashed("B", 8, 1, {5, 6}, 1),
                                hashed("C", 8, 1, {1, 2}, 2)};
  };
  Simulator plain(config, trtllm_options());
  run(plain, requests());
  CHECK(plain.sim_totals().hit_tokens == 4);
  CHECK(plain.sim_totals().prompt_tokens_computed == 20);

  SimOptions options = trtllm_options();
  const std::uint64_t block =
      kv_block_bytes(config.kv, std::vector<KvCacheGroupSpec>{{KvCacheGroupSpec::kFull, 0, 1}});
  options.offload.tiers.push_back({OffloadMedium::kCpu, block, 1.0, 10.0});
  Simulator sim(config, options);
  run(sim, requests());
  CHECK(engine(sim).tree().host_slots() == 1);
  CHECK(sim.sim_totals().hit_tokens == 4);  // the GPU's
  CHECK(sim.sim_totals().prompt_tokens_computed == 17);
  CHECK(engine(sim).partial_claims() == 1);
  nlohmann::json report;
  engine(sim).add_figures(report);
  const nlohmann::json& cpu = report["offload"]["tiers"]["cpu"];
  CHECK(cpu["stored"] == 1);
  CHECK(cpu["loaded"] == 1);
  CHECK(cpu["hit_tokens"] == 3);
  CHECK(cpu["evicted"] == 0);
  CHECK(cpu["load_ms"]["count"] == 1);
}

TEST_CASE("trtllm: check() catches a leaked block") {
  SimOptions options = trtllm_options();
  options.check = CheckPolicy{CheckPolicy::Mode::kOff, 1};
  Simulator sim(micro_config(16), options);
  sim.submit(hashed("A", 8, 10, {1, 2}, 0));
  REQUIRE(sim.run_until(0.02));
  REQUIRE(TrtllmFaults::check(sim));
  TrtllmFaults::leak(sim);
  CHECK_FALSE(TrtllmFaults::check(sim));
  REQUIRE(sim.violation());
  // The block's refcount is 1 with no holder and it is not stored (T3).
  CHECK(sim.violation()->invariant == "T3");
}

}  // namespace
}  // namespace kvreplay
