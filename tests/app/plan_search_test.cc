// The search for the smallest pool that serves a trace (app/plan/plan.h), on fake
// probes: where it stops, what it probes, and why it found nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "app/plan/plan.h"
#include "model/run_config.h"

using namespace kvreplay;

namespace {

// A fake simulation: serves at `serves_from` blocks and above; the pool holds
// the run back below `pool_matters_below` (it fills, or preempts). Records
// every pool probed.
struct FakeTrace {
  std::uint64_t serves_from = 0;  // 0: never
  std::uint64_t pool_matters_below = UINT64_MAX;
  std::vector<std::uint32_t> probed;

  std::optional<PoolProbe> operator()(std::uint32_t blocks) {
    probed.push_back(blocks);
    return PoolProbe{serves_from != 0 && blocks >= serves_from, blocks < pool_matters_below};
  }
  std::uint32_t largest() const { return *std::max_element(probed.begin(), probed.end()); }
};

auto no_swept_failures = [](std::uint32_t) { return std::uint32_t{0}; };

PoolSearchOutcome search(FakeTrace& trace, std::uint32_t start, std::uint32_t ceiling,
                         SearchUnmet at_ceiling = SearchUnmet::kBlockCeiling) {
  return search_smallest_pool(
      start, ceiling, at_ceiling, [&](std::uint32_t blocks) { return trace(blocks); },
      no_swept_failures);
}

}  // namespace

TEST_CASE("the search finds the smallest pool that serves, doubling then bisecting",
          "[plan-search]") {
  for (std::uint32_t start : {1u, 64u, 999u, 1000u, 5000u}) {
    FakeTrace trace;
    trace.serves_from = 1000;
    PoolSearchOutcome outcome = search(trace, start, kMaxSupportedPoolBlocks);
    INFO("start " << start);
    REQUIRE(outcome.blocks);
    CHECK(*outcome.blocks == 1000u);
    CHECK_FALSE(outcome.unmet);
    CHECK_FALSE(outcome.stopped);
    // Doubling never goes past twice the answer (or the start); bisection is logarithmic.
    CHECK(trace.largest() <= std::max<std::uint32_t>(start, 2000));
    CHECK(trace.probed.size() <= 2 * 12);
  }
}

TEST_CASE("an SLO no memory meets stops as soon as memory stops mattering, as compute-bound",
          "[plan-search]") {
  // Never serves; from 5,000 blocks up the pool holds nothing back.
  FakeTrace trace;
  trace.pool_matters_below = 5000;
  PoolSearchOutcome outcome = search(trace, 64, kMaxSupportedPoolBlocks);
  CHECK_FALSE(outcome.blocks);
  CHECK_FALSE(outcome.stopped);
  REQUIRE(outcome.unmet);
  CHECK(*outcome.unmet == SearchUnmet::kComputeBound);
  // 64, 128, ..., 8192: the first pool that did not matter decides.
  CHECK(outcome.decided_at == 8192);
  CHECK(trace.largest() == 8192);
  CHECK(trace.probed.size() == 8);
  CHECK(to_string(*outcome.unmet) == "compute_bound");
}

TEST_CASE("a pool that still matters at the ceiling is probed at the ceiling, never above it",
          "[plan-search]") {
  for (SearchUnmet at_ceiling : {SearchUnmet::kBlockCeiling, SearchUnmet::kMemoryLimit}) {
    FakeTrace trace;  // never serves, the pool always matters (it preempts)
    PoolSearchOutcome outcome = search(trace, 100, 3000, at_ceiling);
    CHECK_FALSE(outcome.blocks);
    REQUIRE(outcome.unmet);
    CHECK(*outcome.unmet == at_ceiling);
    CHECK(outcome.decided_at == 3000);
    CHECK(trace.largest() == 3000);  // 100, 200, ..., 1600, then the ceiling itself
    CHECK(trace.probed == std::vector<std::uint32_t>{100, 200, 400, 800, 1600, 3000});
  }
  // A start above the ceiling probes nothing.
  FakeTrace trace;
  PoolSearchOutcome outcome = search(trace, 4000, 3000, SearchUnmet::kMemoryLimit);
  CHECK(trace.probed.empty());
  REQUIRE(outcome.unmet);
  CHECK(*outcome.unmet == SearchUnmet::kMemoryLimit);
}

TEST_CASE(
    "the answer is raised past a swept pool above it that does not serve, within the "
    "ceiling",
    "[plan-search]") {
  FakeTrace trace;
  trace.serves_from = 1000;
  // The swept pool of 2,000 blocks preempts (preemptions need not fall as memory grows).
  auto swept = [](std::uint32_t answer) { return answer <= 2000 ? 2000u : 0u; };
  PoolSearchOutcome outcome = search_smallest_pool(
      64, kMaxSupportedPoolBlocks, SearchUnmet::kBlockCeiling,
      [&](std::uint32_t blocks) { return trace(blocks); }, swept);
  REQUIRE(outcome.blocks);
  CHECK(*outcome.blocks == 2001);
  CHECK(outcome.raised_past == std::vector<std::uint32_t>{2000});

  // Raised past a swept pool at the ceiling: nothing above it may be probed.
  FakeTrace capped;
  capped.serves_from = 1000;
  auto at_ceiling = [](std::uint32_t) { return 3000u; };
  PoolSearchOutcome none = search_smallest_pool(
      64, 3000, SearchUnmet::kBlockCeiling, [&](std::uint32_t blocks) { return capped(blocks); },
      at_ceiling);
  CHECK_FALSE(none.blocks);
  REQUIRE(none.unmet);
  CHECK(*none.unmet == SearchUnmet::kBlockCeiling);
  CHECK(capped.largest() <= 3000);
}

TEST_CASE("a probe that fails stops the search with no answer", "[plan-search]") {
  int probes = 0;
  PoolSearchOutcome outcome = search_smallest_pool(
      64, kMaxSupportedPoolBlocks, SearchUnmet::kBlockCeiling,
      [&](std::uint32_t blocks) -> std::optional<PoolProbe> {
        ++probes;
        if (blocks >= 256) return std::nullopt;
        return PoolProbe{false, true};
      },
      no_swept_failures);
  CHECK(outcome.stopped);
  CHECK_FALSE(outcome.blocks);
  CHECK_FALSE(outcome.unmet);
  CHECK(probes == 3);
}

TEST_CASE("the reasons a search finds no pool parse back from their names", "[plan-search]") {
  for (SearchUnmet unmet :
       {SearchUnmet::kComputeBound, SearchUnmet::kBlockCeiling, SearchUnmet::kMemoryLimit}) {
    auto parsed = parse_search_unmet(to_string(unmet));
    REQUIRE(parsed);
    CHECK(*parsed == unmet);
  }
  CHECK_FALSE(parse_search_unmet("compute-bound"));
  CHECK_FALSE(parse_search_unmet(""));
}

TEST_CASE("a simulation's memory bound grows with its pool and saturates", "[plan-search]") {
  CHECK(simulation_memory_bound(0) == kSimulationBaseBytes);
  CHECK(simulation_memory_bound(1000) == kSimulationBaseBytes + 1000 * kSimulationBytesPerBlock);
  CHECK(simulation_memory_bound(UINT64_MAX) == UINT64_MAX);
}

TEST_CASE("probes that serve, then stop serving, then serve again: the swept pools decide",
          "[plan-search]") {
  // Not monotone: serves in [1000, 1200) and from 5000 on; the pool always matters.
  auto window = [](std::vector<std::uint32_t>& probed) {
    return [&probed](std::uint32_t blocks) -> std::optional<PoolProbe> {
      probed.push_back(blocks);
      return PoolProbe{(blocks >= 1000 && blocks < 1200) || blocks >= 5000, true};
    };
  };
  // Nothing swept above the window's answer fails: the search takes it.
  std::vector<std::uint32_t> alone;
  PoolSearchOutcome first = search_smallest_pool(
      64, kMaxSupportedPoolBlocks, SearchUnmet::kBlockCeiling, window(alone), no_swept_failures);
  REQUIRE(first.blocks);
  CHECK(*first.blocks == 1000);
  CHECK(first.raised_past.empty());
  CHECK(std::vector<std::uint32_t>(alone.begin(), alone.begin() + 5) ==
        std::vector<std::uint32_t>{64, 128, 256, 512, 1024});
  // A swept pool of 3,000 blocks fails: the search resumes above it and finds 5,000.
  std::vector<std::uint32_t> probed;
  auto swept = [](std::uint32_t answer) { return answer <= 3000 ? 3000u : 0u; };
  PoolSearchOutcome raised = search_smallest_pool(
      64, kMaxSupportedPoolBlocks, SearchUnmet::kBlockCeiling, window(probed), swept);
  REQUIRE(raised.blocks);
  CHECK(*raised.blocks == 5000);
  CHECK(raised.raised_past == std::vector<std::uint32_t>{3000});
  CHECK(std::find(probed.begin(), probed.end(), 3001u) != probed.end());
  CHECK(std::find(probed.begin(), probed.end(), 6002u) != probed.end());
  for (std::uint32_t blocks : probed) CHECK(blocks <= 6002);
}

TEST_CASE("the memory budget caps the search's pools, and a search that needs more says so",
          "[plan-search]") {
  // Ample memory: the block ceiling.
  const SearchCeiling ample = search_ceiling(UINT64_MAX, 1);
  CHECK(ample.blocks == kMaxSupportedPoolBlocks);
  CHECK(ample.at_ceiling == SearchUnmet::kBlockCeiling);
  // 1,000 blocks' worth each for two searches at once: the memory limit at 1,000.
  const std::uint64_t two = 2 * simulation_memory_bound(1000);
  const SearchCeiling capped = search_ceiling(two, 2);
  CHECK(capped.blocks == 1000);
  CHECK(capped.at_ceiling == SearchUnmet::kMemoryLimit);
  CHECK(search_ceiling(two, 3).blocks < 1000);  // a third search at once shrinks every share
  // Below one simulation's base: no pool at all.
  CHECK(search_ceiling(kSimulationBaseBytes, 1).blocks == 0);
  // A trace served from 1,500 blocks hits that budget: unmet at the memory limit,
  // the ceiling itself probed, nothing above it.
  FakeTrace trace;
  trace.serves_from = 1500;
  PoolSearchOutcome outcome = search(trace, 100, capped.blocks, capped.at_ceiling);
  CHECK_FALSE(outcome.blocks);
  REQUIRE(outcome.unmet);
  CHECK(*outcome.unmet == SearchUnmet::kMemoryLimit);
  CHECK(outcome.decided_at == 1000);
  CHECK(trace.largest() == 1000);
  // With a budget that fits, the same trace is served at exactly 1,500.
  FakeTrace roomy;
  roomy.serves_from = 1500;
  const SearchCeiling enough = search_ceiling(simulation_memory_bound(4000), 1);
  PoolSearchOutcome served = search(roomy, 100, enough.blocks, enough.at_ceiling);
  REQUIRE(served.blocks);
  CHECK(*served.blocks == 1500);
}
