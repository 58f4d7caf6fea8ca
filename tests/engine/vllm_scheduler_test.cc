// The vllm engine rule by rule, on micro-traces worked by hand (4-token blocks,
// pools of a few blocks). Each case records, after every step, the blocks in
// use (block 0, the null block, never counted: BlockPool.get_usage), preemptions, prompt tokens
// computed and output tokens, and compares them with the figures derived from
// vLLM's rules (traces/README.md, "The vllm engine, worked by hand").
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/events/kv_events.h"
#include "engine/micro_config.h"
#include "engine/offload/offload_connector.h"
#include "engine/paged/paged_scheduler.h"
#include "engine/run_to_end.h"
#include "engine/simulator.h"

namespace kvreplay {
namespace {

SimOptions vllm_options() {
  SimOptions options;
  options.engine = EngineKind::kVllm;
  options.watermark = 0.0;
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  return options;
}

Request request(std::string id, std::uint32_t prompt, std::uint32_t output, std::uint32_t n = 1) {
  Request r;
  r.id = std::move(id);
  r.prompt = prompt;
  r.output = output;
  r.n = n;
  return r;
}

// A request with the trace's hash ids over blocks of `block_tokens`.
Request hashed_request(std::string id, std::uint32_t prompt, std::uint32_t output,
                       std::vector<std::uint64_t> ids, double arrival,
                       std::uint32_t block_tokens = 16) {
  Request r = request(std::move(id), prompt, output);
  r.hash_ids = std::move(ids);
  r.hash_block_tokens = block_tokens;
  r.arrival = arrival;
  return r;
}

struct Steps {
  std::vector<std::uint32_t> in_use;
  std::vector<std::uint64_t> preemptions;
  std::vector<std::uint64_t> prompt_computed;
  std::vector<std::uint64_t> output;
};

// Runs every request (all arriving at 0) to the end, checking the invariants
// after every step; returns the figures after each step.
Steps run(Simulator& sim, std::vector<Request> requests) {
  Steps steps;
  sim.on_step = [&steps](const Simulator& s) {
    steps.in_use.push_back(s.in_use_blocks());
    steps.preemptions.push_back(s.sim_totals().preemptions);
    steps.prompt_computed.push_back(s.sim_totals().prompt_tokens_computed);
    steps.output.push_back(s.sim_totals().output_tokens);
  };
  run_to_end(sim, std::move(requests));
  return steps;
}

using U32s = std::vector<std::uint32_t>;
using U64s = std::vector<std::uint64_t>;

TEST_CASE("vllm: the null block, blocks per step, finished requests freed at the step's end") {
  // Pool 4: block 0 is the null block (BlockPool.__init__), 3 hold KV. A
  // 6-token prompt takes 2 blocks in step 1 (allocate_slots for the tokens
  // scheduled, not for the whole request); decodes fill page 1 in place; the
  // 9th token needs page 2 in step 4, which also finishes the request: its
  // blocks are freed at the end of the step (full pages stay cached).
  Simulator sim(micro_config(4), vllm_options());
  const Steps steps = run(sim, {request("a", 6, 4)});
  CHECK(steps.in_use == U32s{2, 2, 2, 0});
  CHECK(steps.output == U64s{1, 2, 3, 4});
  CHECK(steps.prompt_computed == U64s{6, 6, 6, 6});
  CHECK(steps.preemptions == U64s{0, 0, 0, 0});
  // The null block and the two full pages (prompt page 0, page 1 of tokens
  // 4..7) stay held in the pool: the two pages are cache residency, none is in
  // use, and the null block is neither.
  CHECK(sim.pool().used_count() == 3);
  CHECK(sim.used_blocks() == 2);
  CHECK(sim.cache_resident_blocks() == 2);
  CHECK(sim.in_use_blocks() == 0);
  CHECK(sim.sim_totals().finished == 1);
}

TEST_CASE(
    "vllm: the step that samples the last token allocates the slot of the token it computes") {
  // Scheduler.schedule -> KVCacheManager.allocate_slots: every step takes
  // slots up to num_computed_tokens + num_new_tokens, the step that samples
  // the last output token too (update_from_output -> _free_request frees them
  // at that step's end); the last output token is never computed. A request
  // of prompt P and output O takes ceil((P + O - 1) / 4) blocks in all, one
  // more than the prompt's when its last step crosses a page boundary
  // (4 + 2: token 5 is page 1's; 4 + 6: token 9 is page 2's). The pool's
  // allocations count the null block too.
  struct Case {
    std::uint32_t prompt, output;
    std::uint64_t blocks;
  };
  for (const Case c : {Case{4, 1, 1}, Case{4, 2, 2}, Case{3, 2, 1}, Case{4, 5, 2}, Case{4, 6, 3},
                       Case{8, 1, 2}, Case{8, 2, 3}}) {
    INFO("prompt " << c.prompt << ", output " << c.output);
    Simulator sim(micro_config(8), vllm_options());
    const Steps steps = run(sim, {request("a", c.prompt, c.output)});
    CHECK(steps.output.size() == c.output);  // one step per output token
    CHECK(sim.pool().allocations() == 1 + c.blocks);
  }
}

TEST_CASE("vllm: preemption keeps the generated tokens and admits nothing in that step") {
  // Pool 5 (4 KV blocks), A and B: 4-token prompts, 6 output tokens each.
  // Steps 1-5: both run, 2 blocks each from step 2. Step 6: A needs page 2,
  // nothing is free: the last running request, B, is preempted (its cached
  // pages stay cached and evictable), A takes B's evicted page 1, generates
  // its 6th token and finishes. B is not readmitted in step 6. Step 7: B
  // (num_tokens 4 + 5 = 9) hits its cached page 0, re-prefills 5 tokens, and
  // its 6th token comes out: 12 output tokens in all, none counted twice.
  Simulator sim(micro_config(5), vllm_options());
  const Steps steps = run(sim, {request("a", 4, 6), request("b", 4, 6)});
  CHECK(steps.preemptions == U64s{0, 0, 0, 0, 0, 1, 1});
  CHECK(steps.output == U64s{2, 4, 6, 8, 10, 11, 12});
  CHECK(steps.in_use == U32s{2, 4, 4, 4, 4, 0, 0});
  CHECK(steps.prompt_computed == U64s{8, 8, 8, 8, 8, 8, 13});
  const SimTotals& t = sim.sim_totals();
  // PrefixCacheStats: the first admissions' 8 tokens, no hits; B's readmission
  // apart: num_tokens 9, 4 of them hits.
  CHECK(t.queries == 8);
  CHECK(t.hits == 0);
  CHECK(t.preempted_queries == 9);
  CHECK(t.preempted_hits == 4);
  CHECK(t.finished == 2);
}

TEST_CASE("vllm: a hit stops one token short, and n > 1 fans out into requests that share") {
  // Two requests with the same 8-token prompt (hash blocks of 4 tokens): the
  // second hits at most num_tokens - 1 = 7 tokens, so only page 0, and
  // computes the last block again (get_computed_blocks).
  Request a = request("a", 8, 1);
  a.hash_ids = {11, 12};
  a.hash_block_tokens = 4;
  Request b = request("b", 8, 1);
  b.hash_ids = a.hash_ids;
  b.hash_block_tokens = 4;
  {
    Simulator sim(micro_config(16), vllm_options());
    const Steps steps = run(sim, {a, b});
    CHECK(sim.sim_totals().queries == 16);
    CHECK(sim.sim_totals().hits == 4);
    // Both in step 1: a computes 8 tokens, b 4 (its page 0 a hit of a's,
    // cached when a's blocks were allocated in the same step).
    CHECK(steps.prompt_computed == U64s{12});
    CHECK(sim.totals().prefix_installs == 1);
  }
  // n = 3: three child requests (ParentRequest), no fork, no copy; the second
  // and third hit the first's prompt page 0 (8 tokens, at most 7 hit).
  Simulator sim(micro_config(32), vllm_options());
  const Steps steps = run(sim, {request("p", 8, 2, 3)});
  CHECK(sim.totals().forks == 0);
  CHECK(sim.totals().cow_copies == 0);
  CHECK(sim.sim_totals().hits == 8);
  CHECK(sim.sim_totals().output_tokens == 6);
  CHECK(sim.sim_totals().finished == 1);  // one request, its three children done
  CHECK(steps.prompt_computed.front() == 8 + 4 + 4);
}

TEST_CASE("vllm: a waiting request that cannot get its blocks stops admission (head of line)") {
  // Pool 4 (3 KV blocks). A (prompt 8) takes 2 blocks; B (prompt 8) needs 2,
  // 1 is free: B waits, and so does C (prompt 1, 1 block) behind it, though
  // C alone would fit.
  Simulator sim(micro_config(4), vllm_options());
  const Steps steps = run(sim, {request("a", 8, 2), request("b", 8, 1), request("c", 1, 1)});
  // Step 1: only A runs (2 blocks). A finishes in step 2; B and C are
  // admitted in step 3 (A's freed blocks are free from then).
  CHECK(steps.in_use.size() >= 3);
  CHECK(steps.in_use[0] == 2);
  CHECK(steps.prompt_computed[0] == 8);
  CHECK(steps.prompt_computed[1] == 8);
  CHECK(steps.prompt_computed[2] == 8 + 8 + 1);
  CHECK(sim.sim_totals().finished == 3);
}

TEST_CASE("vllm: the null block is neither used, in use nor wasted in any figure") {
  // BlockPool.get_usage: usage = 1 - free / (num_gpu_blocks - 1), the null
  // block left out. Pool 4, no prefix cache, prompt 6 output 4 (as "the null
  // block, blocks per step" above): step 1 holds 2 blocks for 6 tokens (2 of
  // 8 slots unfilled: 0.25), step 2 7 tokens, step 3 8, step 4 takes page 2
  // and finishes, its blocks freed at the step's end: nothing used then, so
  // no waste either (the old figures: peak 3 with the null block, and a
  // waste ratio of 1.0 whenever only the null block was held).
  SimOptions options = vllm_options();
  options.prefix_cache = false;
  Simulator sim(micro_config(4), options);
  std::vector<std::uint32_t> used;
  std::vector<double> waste;
  sim.on_step = [&](const Simulator& s) {
    used.push_back(s.state().used);
    waste.push_back(s.state().waste_ratio);
  };
  run_to_end(sim, {request("a", 6, 4)});
  CHECK(used == U32s{2, 2, 2, 0});
  CHECK(waste == std::vector<double>{0.25, 0.125, 0.0, 0.0});
  CHECK(sim.totals().peak_used == 2);
  CHECK(sim.sim_totals().peak_in_use == 2);
  CHECK(sim.state().used == 0);  // final_used
  CHECK(sim.totals().waste_ratio_max == 0.25);
  CHECK(sim.totals().waste_ratio_at_peak == 0.25);
  CHECK(sim.totals().waste_slots_at_peak == 2);
  // The mean is over the steps that used a block: (0.25 + 0.125 + 0) / 3.
  CHECK(sim.totals().waste_ratio_mean() == Approx(0.125));
  CHECK(sim.sim_totals().in_use_sum == 6.0);
  // The pool still holds block 0 (the invariant checks, run after every step
  // by run_to_end's policy, count it held, not free).
  CHECK(sim.pool().used_count() == 1);
  CHECK(sim.pool().free_count() == 3);
  CHECK(sim.used_blocks() == 0);
  CHECK(sim.usable_blocks() == 3);
}

TEST_CASE("vllm: max_model_len as vllm serve applies it") {
  // --max-seq-tokens 8 is max_model_len. InputProcessor._validate_prompt_len
  // rejects a prompt of 8 tokens or more; TokenizeParams._token_len_check a
  // prompt + max_tokens (the trace's output) above 8. The old rule skipped
  // only prompt + output - 1 > 8 and ran both "a" and "b".
  Simulator sim(micro_config(32, 8), vllm_options());
  const Steps steps =
      run(sim, {request("a", 8, 1), request("b", 5, 4), request("c", 5, 3), request("d", 7, 1)});
  const SimTotals& t = sim.sim_totals();
  CHECK(t.requests == 4);
  CHECK(t.skipped == 2);
  CHECK(t.skipped_too_long == 2);
  REQUIRE(sim.first_skipped(SkipReason::kTooLong));
  CHECK(sim.first_skipped(SkipReason::kTooLong)->id == "a");
  CHECK(sim.first_skipped(SkipReason::kTooLong)->need == 9);  // prompt + output
  // c (5 + 3 = 8 tokens) and d (7 + 1) run: check_stop ends c when its
  // num_tokens reaches 8, max_tokens and max_model_len at once.
  CHECK(t.finished == 2);
  CHECK(t.output_tokens == 3 + 1);
  CHECK(steps.prompt_computed.front() == 5 + 7);
}

TEST_CASE("vllm: a one-token recompute after a full prefix hit is prompt computation") {
  // Pool 6 (null + 5). A: prompt 6, output 7; B: prompt 4, output 6.
  // Step 1: A computes 6 (pages 0-1), B 4 (page 0): 3 blocks. Step 2: B
  // takes page 1. Step 4: A takes page 2, the last free block. Step 5: B's
  // page 1 fills (cached). Step 6: B (num_tokens 9, computed 8) needs page 2,
  // nothing free or evictable: B, the last running, preempts itself; its
  // pages 0-1 stay cached. Step 7: A finishes; B hits both pages but needs 1
  // new + 2 evictable blocks with 2 evictable: waits. Step 8: B's hit is 8
  // tokens, all but its last (get_computed_blocks caps it at num_tokens - 1),
  // so it recomputes 1 token: the rest of its re-prefill, counted in
  // prompt_tokens_computed (the old code counted it as a decode: 10 at the end).
  Simulator sim(micro_config(6), vllm_options());
  const Steps steps = run(sim, {request("a", 6, 7), request("b", 4, 6)});
  CHECK(steps.preemptions == U64s{0, 0, 0, 0, 0, 1, 1, 1});
  CHECK(steps.output == U64s{2, 4, 6, 8, 10, 11, 12, 13});
  CHECK(steps.in_use == U32s{3, 4, 4, 5, 5, 3, 0, 0});
  CHECK(steps.prompt_computed == U64s{10, 10, 10, 10, 10, 10, 10, 11});
  const SimTotals& t = sim.sim_totals();
  CHECK(t.preempted_queries == 9);
  CHECK(t.preempted_hits == 8);
  CHECK(t.finished == 2);
}

TEST_CASE("vllm: block ids and eviction order of vLLM's test_prefix_caching test_prefill") {
  // Ported from vLLM's tests/v1/core/test_prefix_caching.py, test_prefill:
  // 16-token blocks, 11 blocks (block 0 the null block). The expected ids are
  // vLLM's. Each request here outputs 2 tokens, so it is still running after
  // the step that admits it (when its table is read) and finishes in the next
  // without a new block.
  RunConfig config = micro_config(11);
  config.kv.page_tokens = 16;
  config.alloc_order = AllocOrder::kLifo;
  const std::vector<std::uint64_t> common = {100, 101, 102};  // 3 full blocks of 16
  auto with_hashes = [&](std::string id, std::uint32_t prompt, std::uint64_t tail) {
    Request r = request(std::move(id), prompt, 2);
    r.hash_ids = common;
    r.hash_ids.push_back(tail);
    r.hash_block_tokens = 16;
    return r;
  };
  Request req0 = with_hashes("0", 48 + 7, 200);
  Request req1 = with_hashes("1", 48 + 5, 201);
  Request req2 = with_hashes("2", 48 + 6, 202);
  req2.arrival = 1.0;
  // vLLM's req3 has 160 tokens; 159 and 2 outputs take the same 10 blocks and
  // keep it running (its table readable) after the step that admits it.
  Request req3 = request("3", 16 * 10 - 1, 2);
  req3.hash_ids = {300, 301, 302, 303, 304, 305, 306, 307, 308, 309};
  req3.hash_block_tokens = 16;
  req3.arrival = 2.0;

  Simulator sim(config, vllm_options());
  std::vector<std::vector<std::vector<BlockId>>> tables;  // after each step
  std::vector<std::uint32_t> free_blocks;
  sim.on_step = [&](const Simulator& s) {
    tables.push_back(s.running_block_tables());
    free_blocks.push_back(s.pool().free_count());
  };
  run_to_end(sim, {req0, req1, req2, req3});
  for (std::size_t i = 0; i < tables.size(); ++i) {
    std::string text;
    for (const auto& t : tables[i]) {
      text += "[";
      for (BlockId b : t) text += std::to_string(b) + " ";
      text += "]";
    }
    UNSCOPED_INFO("step " << i + 1 << ": " << text << " free " << free_blocks[i]);
  }
  REQUIRE(tables.size() >= 5);
  using Table = std::vector<BlockId>;
  // Step 1: req0 misses and gets [1, 2, 3, 4]; req1 hits [1, 2, 3] (cached
  // when req0's blocks were allocated) and gets [5]; 5 blocks stay free.
  CHECK(tables[0] == std::vector<Table>{{1, 2, 3, 4}, {1, 2, 3, 5}});
  CHECK(free_blocks[0] == 5);
  CHECK(sim.sim_totals().hits >= 48);
  // Step 2 frees both (req0, then req1, each tail first): the free queue is
  // then [5, 4, 6, 7, 8, 9, 10] uncached, then 3, 2, 1 cached.
  CHECK(tables[1].empty());
  // Step 3: req2 hits [1, 2, 3] although they are free, and reuses block 5.
  CHECK(tables[2] == std::vector<Table>{{1, 2, 3, 5}});
  // Step 5: req3 misses and takes every block in the free queue's order,
  // evicting the cached ones last: 5, 4, 6, 7, 8, 9, 10, 3, 2, 1.
  CHECK(tables[4] == std::vector<Table>{{5, 4, 6, 7, 8, 9, 10, 3, 2, 1}});
  CHECK(free_blocks[4] == 0);
}

TEST_CASE("vllm: the free queue and hits of vLLM's test_prefix_caching test_evict") {
  // Ported from vLLM's tests/v1/core/test_prefix_caching.py, test_evict: 16-token
  // blocks, 11 blocks. req0 (5 full blocks + 7 tokens) gets 1..6 and req1 (3
  // blocks) 7..9; freeing req0 then req1 leaves the queue [6, 10] uncached
  // (partial blocks at the head) then 5, 4, 3, 2, 1, 9, 8, 7 cached; req2
  // hits [1, 2] and takes 6 for its 3 new tokens, leaving 7 free blocks. Each
  // request outputs 2 tokens (vLLM's test computes no output), so req1 has 47
  // prompt tokens: its decode token completes its 3rd block, as vLLM's 48 do.
  RunConfig config = micro_config(11);
  config.kv.page_tokens = 16;
  Request req0 = hashed_request("0", 5 * 16 + 7, 2, {10, 11, 12, 13, 14, 15}, 0.0);
  Request req1 = hashed_request("1", 3 * 16 - 1, 2, {20, 21, 22}, 0.0);
  Request req2 = hashed_request("2", 2 * 16 + 3, 2, {10, 11, 30}, 1.0);

  Simulator sim(config, vllm_options());
  std::vector<std::vector<std::vector<BlockId>>> tables;
  std::vector<std::uint32_t> free_blocks;  // free, plus cached blocks no request holds
  sim.on_step = [&](const Simulator& s) {
    tables.push_back(s.running_block_tables());
    free_blocks.push_back(s.pool().free_count() + s.cache_resident_blocks());
  };
  run_to_end(sim, {req0, req1, req2});
  REQUIRE(tables.size() >= 3);
  using Table = std::vector<BlockId>;
  CHECK(tables[0] == std::vector<Table>{{1, 2, 3, 4, 5, 6}, {7, 8, 9}});
  CHECK(free_blocks[0] == 1);  // 10 - (6 + 3)
  CHECK(tables[1].empty());
  CHECK(free_blocks[1] == 10);
  CHECK(tables[2] == std::vector<Table>{{1, 2, 6}});
  CHECK(free_blocks[2] == 7);
}

// What a case reads after every step (on_step runs after the step's frees).
struct Observed {
  std::vector<std::vector<std::vector<BlockId>>> tables;
  std::vector<std::uint32_t> free_blocks;
  std::vector<std::uint32_t> in_use;
};

Observed run_observed(Simulator& sim, std::vector<Request> requests,
                      const std::function<void(const Simulator&)>& extra = {}) {
  Observed seen;
  sim.on_step = [&seen, &extra](const Simulator& s) {
    seen.tables.push_back(s.running_block_tables());
    seen.free_blocks.push_back(s.pool().free_count());
    seen.in_use.push_back(s.in_use_blocks());
    if (extra) extra(s);
  };
  run_to_end(sim, std::move(requests));
  return seen;
}

using Tables = std::vector<std::vector<BlockId>>;

TEST_CASE(
    "vllm: a hit keeps its block and the new block evicts another, as in "
    "test_computed_blocks_not_evicted") {
  // vLLM's tests/v1/core/test_prefix_caching.py, test_computed_blocks_not_evicted:
  // 16-token blocks, 3 blocks (block 0 the null block). req0 and req1 each
  // fill one block (1 and 2), both cached, both freed (req0 first). req2's
  // first block is req0's: it hits block 1 (BlockPool.touch takes it off the
  // free queue), so its new block is 2, evicting req1's cached block rather
  // than the block it hits. Here req0 and req1 fill their block with the
  // prompt's 16 tokens and finish (1 output token); req2 has 31 prompt tokens
  // and 2 outputs (32 tokens, 2 blocks) so it is still running after the step
  // that admits it.
  RunConfig config = micro_config(3);
  config.kv.page_tokens = 16;
  Simulator sim(config, vllm_options());
  Observed seen = run_observed(
      sim, {hashed_request("0", 16, 1, {10}, 0.0), hashed_request("1", 16, 1, {20}, 0.0),
            hashed_request("2", 31, 2, {10, 30}, 1.0)});
  REQUIRE(seen.tables.size() == 3);
  // Step 1: both computed, cached, finished and freed; 2 blocks stay resident.
  CHECK(seen.tables[0].empty());
  CHECK(seen.in_use[0] == 0);  // only the null block is held: never in use
  // Step 2: req2 hits block 1 (16 tokens) and takes block 2 for tokens 16..30.
  CHECK(seen.tables[1] == Tables{{1, 2}});
  CHECK(sim.evictions() == 1);
  CHECK(sim.sim_totals().queries == 16 + 16 + 31);
  CHECK(sim.sim_totals().hits == 16);
}

TEST_CASE("vllm: no hit without the prefix cache, as in test_basic_prefix_caching_disabled") {
  // vLLM's test_basic_prefix_caching_disabled: 4-token blocks, 5 blocks,
  // caching off. req1 (10 tokens) takes 3 blocks and is freed; req2, whose
  // 16 tokens share req1's prefix, finds nothing and takes all 4 free blocks;
  // req3 (4 tokens) then gets none (allocate_slots returns None) until req2
  // ends. Here req2 has 15 prompt tokens and 2 outputs (16 tokens, 4 blocks)
  // so the step that admits it can be read while it runs.
  RunConfig config = micro_config(5);
  SimOptions options = vllm_options();
  options.prefix_cache = false;
  Simulator sim(config, options);
  auto plain = [](std::string id, std::uint32_t prompt, std::uint32_t output, double arrival) {
    Request r = request(std::move(id), prompt, output);
    r.hash_ids = {1, 2, 3, 4};
    r.hash_block_tokens = 4;
    r.arrival = arrival;
    return r;
  };
  Observed seen =
      run_observed(sim, {plain("1", 10, 2, 0.0), plain("2", 15, 2, 1.0), plain("3", 4, 1, 1.0)});
  REQUIRE(seen.tables.size() >= 4);
  CHECK(seen.tables[0].size() == 1);
  CHECK(seen.tables[0][0].size() == 3);  // req1: 10 tokens, 3 blocks
  CHECK(seen.tables[1].empty());         // req1 finished and freed
  // req2 takes the 4 free blocks; req3 is not admitted beside it.
  CHECK(seen.tables[2].size() == 1);
  CHECK(seen.tables[2][0].size() == 4);
  CHECK(seen.free_blocks[2] == 0);
  CHECK(sim.sim_totals().hits == 0);
  CHECK(sim.sim_totals().queries == 0);  // stats record lookups only with caching on
  CHECK(sim.sim_totals().finished == 3);
}

TEST_CASE(
    "vllm: a request whose hits leave too few blocks is refused untouched, as in "
    "test_prefill_not_enough_free_blocks_with_computed_blocks") {
  // vLLM's test_prefill_not_enough_free_blocks_with_computed_blocks: 16-token
  // blocks, 11 blocks. req3's 144 tokens hit 6 cached blocks (req0's 3 and
  // req1's 3) but need 3 more, and the free queue holds only 2 besides its
  // own hits: allocate_slots returns None and the hits' reference counts are
  // unchanged. Here it happens in steps:
  //   step 1: req0 (48 tokens) gets 1..3; req1 (96) hits them and gets 4..6,
  //           finishes and is freed (4..6 cached, evictable); req2 (32) gets
  //           7..8; req3 hits 1..6 but only 2 blocks are free: refused.
  //   step 2: req0 and req2 decode a token into new blocks 9 and 10 and
  //           finish; req3 again: 0 free + 3 evictable, all 3 its own hits:
  //           refused, 4..6 still held by the cache alone.
  //   step 3: everything freed; req3 hits 1..6 and takes 10, 9 (uncached,
  //           the last freed first), then evicts 8 (the oldest cached block
  //           it does not hit).
  RunConfig config = micro_config(11);
  config.kv.page_tokens = 16;
  Simulator sim(config, vllm_options());
  std::vector<std::vector<std::uint32_t>> hit_refs;  // refcounts of 4, 5, 6 after each step
  Observed seen = run_observed(
      sim,
      {hashed_request("0", 48, 2, {1, 2, 3}, 0.0),
       hashed_request("1", 96, 1, {1, 2, 3, 4, 5, 6}, 0.0), hashed_request("2", 32, 2, {7, 8}, 0.0),
       hashed_request("3", 144, 2, {1, 2, 3, 4, 5, 6, 9, 10, 11}, 0.0)},
      [&hit_refs](const Simulator& s) {
        hit_refs.push_back({s.pool().refcount(4), s.pool().refcount(5), s.pool().refcount(6)});
      });
  REQUIRE(seen.tables.size() >= 3);
  CHECK(seen.tables[0] == Tables{{1, 2, 3}, {7, 8}});
  CHECK(seen.free_blocks[0] == 2);
  CHECK(hit_refs[0] == std::vector<std::uint32_t>{1, 1, 1});  // the cache's hold only
  CHECK(seen.tables[1].empty());                              // req3 refused again
  CHECK(hit_refs[1] == std::vector<std::uint32_t>{1, 1, 1});
  CHECK(seen.tables[2] == Tables{{1, 2, 3, 4, 5, 6, 10, 9, 8}});
  CHECK(hit_refs[2] == std::vector<std::uint32_t>{2, 2, 2});  // req3 and the cache
  // PrefixCacheStats: one lookup per admission, in tokens.
  CHECK(sim.sim_totals().queries == 48 + 96 + 32 + 144);
  CHECK(sim.sim_totals().hits == 48 + 96);
}

TEST_CASE("vllm: a reused block loses its hash, as in test_hash_block_correct_reuse") {
  // vLLM's test_hash_block_correct_reuse: 16-token blocks, 2 blocks (one
  // holds KV). req0 fills and caches block 1 and is freed; req1's 15 tokens
  // (a prefix of req0's, not a full block) hit nothing and take block 1,
  // evicting it: its hash is cleared. Here a third request with req0's prompt
  // then finds no hit.
  RunConfig config = micro_config(2);
  config.kv.page_tokens = 16;
  Simulator sim(config, vllm_options());
  std::vector<std::uint32_t> resident;
  std::vector<bool> cached;  // req0's full block (hash 5, tokens 0..15) after each step
  Observed seen =
      run_observed(sim,
                   {hashed_request("0", 16, 1, {5}, 0.0), hashed_request("1", 15, 1, {5}, 1.0),
                    hashed_request("2", 16, 1, {5}, 2.0)},
                   [&](const Simulator& s) {
                     resident.push_back(s.cache_resident_blocks());
                     cached.push_back(dynamic_cast<const kvreplay::PagedScheduler&>(s.scheduler())
                                          .prefix_cache()
                                          .find(PageKey{5, 16})
                                          .has_value());
                   });
  REQUIRE(seen.tables.size() == 3);
  CHECK(resident == std::vector<std::uint32_t>{1, 0, 1});
  CHECK(cached == std::vector<bool>{true, false, true});  // req2 computes and caches it again
  CHECK(sim.evictions() == 1);
  // req0 and req2 look up 16 tokens each, req1 15; nothing is hit.
  CHECK(sim.sim_totals().queries == 16 + 15 + 16);
  CHECK(sim.sim_totals().hits == 0);
}

TEST_CASE("vllm: a recomputed full block is cached again beside the first (duplicates kept)") {
  // BlockHashToBlockMap keeps every block cached under a hash (block_pool.py:
  // "we don't de-duplicate the blocks in the cache"). 4-token blocks, pool 6.
  //   step 1: A (8 tokens, hash ids 11 12) gets 1, 2, both cached; A ends.
  //   step 2: B, A's prompt again, hits page 0 only (at most 7 of 8 tokens),
  //           recomputes page 1 into block 3 (never used, before the cached
  //           ones in the free queue), cached under A's key beside block 2.
  //   step 3: B decodes into block 4 and ends: 1, 2 and 3 stay cached (4 is
  //           partial). Without duplicates block 3 would be freed uncached.
  //   step 4: C (12 tokens, hash ids 11 12 13) hits pages 0 and 1: the
  //           earliest block of each key, 1 and 2, and takes 4 for page 2.
  RunConfig config = micro_config(6);
  auto prompt = [](std::string id, std::uint32_t tokens, std::uint32_t output,
                   std::vector<std::uint64_t> ids, double arrival) {
    return hashed_request(std::move(id), tokens, output, std::move(ids), arrival, 4);
  };
  Simulator sim(config, vllm_options());
  std::vector<std::uint32_t> resident;
  Observed seen = run_observed(
      sim,
      {prompt("A", 8, 1, {11, 12}, 0.0), prompt("B", 8, 2, {11, 12}, 1.0),
       prompt("C", 12, 2, {11, 12, 13}, 2.0)},
      [&resident](const Simulator& s) { resident.push_back(s.cache_resident_blocks()); });
  REQUIRE(seen.tables.size() == 5);
  CHECK(seen.tables[1] == Tables{{1, 3}});
  CHECK(resident[2] == 3);  // blocks 1, 2, 3
  CHECK(seen.tables[3] == Tables{{1, 2, 4}});
  CHECK(sim.sim_totals().hits == 4 + 8);
}

TEST_CASE("vllm: waiting requests' hits stay exact through preemption, n > 1 and prefixes") {
  // Requests that wait at the head with hits, get admitted, are preempted and
  // wait again, beside n = 2 fan-outs sharing a prefix: under --check every
  // the engine recounts a waiting request's evictable hits at each admission
  // attempt (and every invariant each step), for both engines and several pools.
  std::vector<Request> requests;
  for (std::uint32_t i = 0; i < 60; ++i) {
    Request r =
        request(std::to_string(i), 100 + i * 37 % 400, 20 + i * 13 % 60, i % 3 == 0 ? 2 : 1);
    r.arrival = static_cast<double>(i / 20) + static_cast<double>(i % 20) * 0.05;
    if (i % 2 == 0) {
      r.prefix = "sys";
      r.prefix_tokens = 64;
    }
    requests.push_back(r);
  }
  for (EngineKind engine : {EngineKind::kVllm, EngineKind::kGeneric}) {
    for (std::uint32_t pool_blocks : {40u, 64u, 128u}) {
      for (std::uint32_t page_tokens : {16u, 32u}) {
        INFO(to_string(engine) << ", pool " << pool_blocks << ", page " << page_tokens);
        RunConfig config = micro_config(pool_blocks);
        config.kv.page_tokens = page_tokens;
        config.kv.max_seq_tokens = 4096;
        SimOptions options = vllm_options();
        options.engine = engine;
        options.max_seqs = 8;
        Simulator sim(config, options);
        run_to_end(sim, requests);
        CHECK(sim.sim_totals().finished + sim.sim_totals().skipped == 60);
        if (pool_blocks == 40) CHECK(sim.sim_totals().preemptions > 0);
      }
    }
  }
}

// Hybrid models (traces/README.md §3, "Hybrid KV-cache groups"): two KV-cache
// groups of one layer each, group 0 full attention, group 1 a sliding window
// of 4 tokens, sharing one pool of 4-token blocks.
RunConfig hybrid_config(std::uint32_t pool_blocks) {
  RunConfig config = micro_config(pool_blocks);
  config.kv.layers = 2;
  return config;
}

SimOptions hybrid_options() {
  SimOptions options = vllm_options();
  options.kv_groups = {KvCacheGroupSpec{KvCacheGroupSpec::kFull, 0, 1},
                       KvCacheGroupSpec{KvCacheGroupSpec::kSliding, 4, 1}};
  return options;
}

using GroupTables = std::vector<std::vector<std::vector<BlockId>>>;

TEST_CASE("vllm hybrid: one block per group per page, pages leaving the window freed") {
  // Pool 9 (null + 8: A could need 4 + 4 blocks if preempted late and
  // re-prefilled in one step, see never_fits_vllm). A: prompt 10, 4 output tokens. Step 1 allocates
  // 3 pages in each group (blocks 1-3 full, 4-6 sliding). Step 2 (num_computed 10):
  // get_num_skipped_tokens = 10 - 4 + 1 = 7, page 0 of the sliding group leaves (block 4, cached:
  // evictable). Step 3 (11): 8 skipped, page 1 leaves (block 5). Step 4 (12): nothing more; page 3
  // takes the free blocks 7 (full) and 8 (sliding); A finishes.
  Simulator sim(hybrid_config(9), hybrid_options());
  GroupTables after_step3;
  Steps steps;
  sim.on_step = [&](const Simulator& s) {
    steps.in_use.push_back(s.in_use_blocks());
    if (s.sim_totals().steps == 3) after_step3 = s.running_group_tables();
  };
  Request a = hashed_request("a", 10, 4, {1, 2, 3}, 0.0, 4);
  run_to_end(sim, {a});
  CHECK(steps.in_use == U32s{6, 5, 4, 0});
  CHECK(after_step3 == GroupTables{{{1, 2, 3}, {0, 0, 6}}});
  CHECK(sim.sim_totals().window_freed_blocks == 2);
  CHECK(sim.sim_totals().output_tokens == 4);

  // B: the same prompt. Full group: pages 0-1 hit (blocks 1, 2; at most 9
  // tokens). Sliding group: ceil((4 - 1) / 4) = 1 cached page before the hit
  // length is needed, found from the right: page 1 (block 5), page 0 the null
  // block. 8 tokens hit. get_num_blocks_to_allocate: full 1 new + 2 evictable
  // hits, sliding 1 new + 1 evictable hit (page 0 skipped) = 5 of 2 free + 6
  // evictable. Page 2 takes the free blocks 8 (full) and 7 (sliding).
  GroupTables b_tables;
  steps.in_use.clear();
  sim.on_step = [&](const Simulator& s) {
    steps.in_use.push_back(s.in_use_blocks());
    if (b_tables.empty()) b_tables = s.running_group_tables();
  };
  Request b = hashed_request("b", 10, 2, {1, 2, 3}, sim.now(), 4);
  run_to_end(sim, {b});
  CHECK(b_tables == GroupTables{{{1, 2, 8}, {0, 5, 7}}});
  CHECK(steps.in_use == U32s{5, 0});
  CHECK(sim.sim_totals().hits == 8);
  CHECK(sim.sim_totals().queries == 20);
}

TEST_CASE("vllm hybrid: preemption frees every group, the hit needs every group") {
  // Pool 7 (null + 6). A and B: 4-token prompts, 6 output tokens. Step 1: 2
  // blocks each. Step 2: A takes page 1 in both groups (the last 2 free);
  // B cannot, and is preempted: its 2 cached blocks become evictable. Steps
  // 3-6: B's lookup hits page 0 in both groups, but needs 2 new + 2 evictable
  // blocks with at most 3 evictable. Step 5: A's sliding page 0 leaves the
  // window (7 - 4 + 1 = 4 skipped tokens). Step 6: A's page 2 evicts B's
  // blocks 3 and 4; A finishes. Step 7: B (5 tokens, no hit now) re-prefills;
  // step 10 frees its sliding page 0; step 11 it finishes.
  Simulator sim(hybrid_config(7), hybrid_options());
  const Steps steps = run(sim, {request("a", 4, 6), request("b", 4, 6)});
  CHECK(steps.preemptions == U64s{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(steps.output == U64s{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  CHECK(steps.prompt_computed == U64s{8, 8, 8, 8, 8, 8, 13, 13, 13, 13, 13});
  CHECK(steps.in_use == U32s{4, 4, 4, 4, 3, 0, 4, 4, 4, 3, 0});
  const SimTotals& t = sim.sim_totals();
  CHECK(t.queries == 8);
  CHECK(t.hits == 0);
  CHECK(t.preempted_queries == 5);
  CHECK(t.preempted_hits == 0);
  CHECK(t.window_freed_blocks == 2);
  CHECK(t.finished == 2);
}

TEST_CASE("vllm hybrid: one full group given explicitly is today's run") {
  // Requests that hit, preempt and fan out: the same figures step by step,
  // the same tables, whether kv_groups is empty or one full group of every layer.
  auto requests = [] {
    return std::vector<Request>{hashed_request("a", 9, 5, {7, 8, 9}, 0.0, 4),
                                hashed_request("b", 9, 6, {7, 8, 9}, 0.0, 4),
                                request("c", 6, 4, 2)};
  };
  SimOptions grouped = vllm_options();
  grouped.kv_groups = {KvCacheGroupSpec{KvCacheGroupSpec::kFull, 0, 1}};
  Simulator plain_sim(micro_config(8), vllm_options());
  Simulator grouped_sim(micro_config(8), grouped);
  std::vector<std::vector<std::vector<BlockId>>> plain_tables, grouped_tables;
  plain_sim.on_step = [&](const Simulator& s) { plain_tables.push_back(s.running_block_tables()); };
  grouped_sim.on_step = [&](const Simulator& s) {
    grouped_tables.push_back(s.running_block_tables());
  };
  run_to_end(plain_sim, requests());
  run_to_end(grouped_sim, requests());
  CHECK(plain_tables == grouped_tables);
  const SimTotals& p = plain_sim.sim_totals();
  const SimTotals& g = grouped_sim.sim_totals();
  CHECK(p.steps == g.steps);
  CHECK(p.preemptions == g.preemptions);
  CHECK(p.preemptions > 0);
  CHECK(p.hits == g.hits);
  CHECK(p.hits > 0);
  CHECK(p.peak_in_use == g.peak_in_use);
  CHECK(p.in_use_sum == g.in_use_sum);
  CHECK(plain_sim.block_bytes() == grouped_sim.block_bytes());
}

TEST_CASE("vllm hybrid: a request that can never get its blocks in every group is skipped") {
  // Pool 4: 3 KV blocks. A 10-token prompt scheduled in one step needs 3
  // pages in each group (the window frees nothing before the step): 6 > 3,
  // skipped. A 4-token prompt with 1 output token needs 1 + 1: runs.
  Simulator sim(hybrid_config(4), hybrid_options());
  run_to_end(sim, {request("big", 10, 1), request("small", 4, 1)});
  CHECK(sim.sim_totals().skipped == 1);
  REQUIRE(sim.first_skipped(SkipReason::kPoolTooSmall));
  CHECK(sim.first_skipped(SkipReason::kPoolTooSmall)->need == 6);
  CHECK(sim.sim_totals().finished == 1);
}

TEST_CASE("vllm hybrid: the generic engine refuses groups") {
  SimOptions options = hybrid_options();
  options.engine = EngineKind::kGeneric;
  CHECK(sim_options_error(hybrid_config(8), options));
  Simulator sim(hybrid_config(8), options);
  CHECK_FALSE(sim.run_until(std::numeric_limits<double>::infinity()));
  REQUIRE(sim.violation());
  CHECK(sim.violation()->invariant == "config");
  CHECK(sim_options_error(micro_config(8), hybrid_options()));  // 2 group layers, 1 model layer
  CHECK_FALSE(sim_options_error(hybrid_config(8), hybrid_options()));
}

TEST_CASE("kv groups: vLLM's grouping of gpt-oss and Gemma 3, and the bytes per block") {
  using A = KvCacheGroupSpec;
  std::vector<LayerAttention> oss;
  for (int i = 0; i < 24; ++i)
    oss.push_back({i % 2 == 0 ? A::kSliding : A::kFull, i % 2 == 0 ? 128u : 0u});
  CHECK(form_kv_cache_groups(oss) == std::vector<A>{A{A::kSliding, 128, 12}, A{A::kFull, 0, 12}});
  // Gemma 3 27B: 62 layers, every 6th full. 52 sliding, 10 full: group_size
  // 10, 6 sliding groups of layers[i::6] (9, 9, 9, 9, 8, 8), then the full one.
  std::vector<LayerAttention> gemma;
  for (int i = 0; i < 62; ++i) {
    gemma.push_back({i % 6 == 5 ? A::kFull : A::kSliding, i % 6 == 5 ? 0u : 1024u});
  }
  const auto groups = form_kv_cache_groups(gemma);
  CHECK(groups == std::vector<A>{A{A::kSliding, 1024, 9}, A{A::kSliding, 1024, 9},
                                 A{A::kSliding, 1024, 9}, A{A::kSliding, 1024, 9},
                                 A{A::kSliding, 1024, 8}, A{A::kSliding, 1024, 8},
                                 A{A::kFull, 0, 10}});
  CHECK(kv_group_size(groups) == 10);
  CHECK_FALSE(kv_groups_error(groups, 62));
  // 12 sliding + 13 full (within 25%): groups of 13.
  std::vector<LayerAttention> near;
  for (int i = 0; i < 25; ++i) near.push_back({i < 12 ? A::kSliding : A::kFull, i < 12 ? 64u : 0u});
  CHECK(form_kv_cache_groups(near) == std::vector<A>{A{A::kSliding, 64, 12}, A{A::kFull, 0, 13}});
  // One spec: one group of every layer.
  std::vector<LayerAttention> dense(32, LayerAttention{A::kFull, 0});
  CHECK(form_kv_cache_groups(dense) == std::vector<A>{A{A::kFull, 0, 32}});
  // Bytes per block: page_tokens * group_size * bytes per token per layer.
  PagedKvConfig kv;
  kv.layers = 62;
  kv.kv_heads = 16;
  kv.head_dim = 128;
  kv.dtype = Dtype::kBf16;
  kv.page_tokens = 16;
  kv.pool_blocks = 100;
  CHECK(kv_block_bytes(kv, groups) == 16ull * 10 * 2 * 16 * 128 * 2);
  CHECK(kv_block_bytes(kv, {}) == kv.block_bytes());
}

}  // namespace
}  // namespace kvreplay

namespace kvreplay {
namespace {

// The GPU events of every batch --kv-events writes, as [type, hashes, parent]
// (parent "-" for none, "" for a BlockRemoved).
struct EventRow {
  std::string type;
  std::vector<std::string> hashes;
  std::string parent;
  bool operator==(const EventRow&) const = default;
};

std::vector<EventRow> gpu_event_rows(Simulator& sim, std::vector<Request> requests) {
  std::vector<EventRow> rows;
  sim.on_kv_events = [&rows, &sim](double ts, const KvEventLog& log) {
    const auto batch = nlohmann::json::parse(
        kv_event_batch_line(ts, log, sim.config().kv.page_tokens, std::nullopt));
    for (const auto& event : batch.at("events")) {
      if (event.at("medium") != "GPU") continue;
      EventRow row{event.at("type"), event.at("block_hashes").get<std::vector<std::string>>(), ""};
      if (row.type == "BlockStored") {
        row.parent = event.at("parent_block_hash").is_null()
                         ? "-"
                         : event.at("parent_block_hash").get<std::string>();
        CHECK(event.at("block_size") == 4);
        CHECK(event.at("token_ids").empty());
        CHECK(event.at("lora_id").is_null());
      }
      rows.push_back(std::move(row));
    }
  };
  run_to_end(sim, std::move(requests));
  return rows;
}

TEST_CASE("vllm kv events: a hash cached twice is stored twice and removed twice") {
  // BlockPool.cache_full_blocks sends one BlockStored per call listing the
  // blocks it newly caches, a block whose hash another block holds included
  // (BlockHashToBlockMap keeps both); _maybe_evict_cached_block one
  // BlockRemoved per block it evicts (vllm/v1/core/block_pool.py). The case
  // of "a recomputed full block is cached again beside the first", then D:
  //   step 1: A (ids 11 12) caches blocks 1, 2 in one call:
  //           BlockStored [k11, k12], parent none;
  //   step 2: B (A's prompt) hits page 0, recomputes page 1 into block 3:
  //           BlockStored [k12], parent k11 (the duplicate);
  //   step 4: C (ids 11 12 13) hits pages 0, 1, caches page 2:
  //           BlockStored [k13], parent k12;
  //   then D (ids 21..25, 20 tokens) needs all 5 blocks: every cached block is
  //   evicted, k12 twice (blocks 2 and 3), one BlockRemoved each, and D's
  //   pages are one call, BlockStored [k21 .. k25], parent none.
  auto prompt = [](std::string id, std::uint32_t tokens, std::uint32_t output,
                   std::vector<std::uint64_t> ids, double arrival) {
    return hashed_request(std::move(id), tokens, output, std::move(ids), arrival, 4);
  };
  auto k = [](std::uint64_t id) { return std::to_string(block_key(PageKey{id, 4, 0})); };
  SimOptions options = vllm_options();
  options.kv_events = true;
  Simulator sim(micro_config(6), options);
  const std::vector<EventRow> rows = gpu_event_rows(
      sim, {prompt("A", 8, 1, {11, 12}, 0.0), prompt("B", 8, 2, {11, 12}, 1.0),
            prompt("C", 12, 2, {11, 12, 13}, 2.0), prompt("D", 20, 1, {21, 22, 23, 24, 25}, 3.0)});
  std::vector<EventRow> stores, removals;
  for (const EventRow& row : rows) (row.type == "BlockStored" ? stores : removals).push_back(row);
  CHECK(stores == std::vector<EventRow>{{"BlockStored", {k(11), k(12)}, "-"},
                                        {"BlockStored", {k(12)}, k(11)},
                                        {"BlockStored", {k(13)}, k(12)},
                                        {"BlockStored", {k(21), k(22), k(23), k(24), k(25)}, "-"}});
  std::map<std::string, int> removed;
  for (const EventRow& row : removals) {
    CHECK(row.hashes.size() == 1);  // one a block
    for (const std::string& hash : row.hashes) ++removed[hash];
  }
  CHECK(removed == std::map<std::string, int>{{k(11), 1}, {k(12), 2}, {k(13), 1}});
  // Every removal follows all of C's stores and precedes D's.
  CHECK(rows.size() == 8);
  CHECK(rows[3].type == "BlockRemoved");
  CHECK(rows.back() == stores.back());
}

}  // namespace
}  // namespace kvreplay
