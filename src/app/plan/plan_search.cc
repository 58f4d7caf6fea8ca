// The search for the smallest pool that serves a trace (SPEC 3.4).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "app/exit_codes.h"
#include "app/options.h"
#include "app/plan/plan_internal.h"
#include "app/terminal.h"
#include "core/memory_budget.h"
#include "formats/requests/request_reader.h"
#include "io/output.h"
#include "io/sha256.h"
#include "io/standard_output.h"
#include "report/duration_text.h"

namespace kvreplay {

namespace {

// Why a simulation does not serve the trace, in words ("3 preemptions, 84.1%
// of requests meet TTFT <= 50 ms (p99 TTFT 147.4 ms), under the 99% required");
// empty when it serves.
std::string shortfall_words(const CellFigures& f, double slo_attainment) {
  std::vector<std::string> words;
  if (f.preemptions > 0) {
    words.push_back(fmt::format("{} preemption{}", f.preemptions, f.preemptions == 1 ? "" : "s"));
  }
  const std::uint64_t skipped = f.skipped_pool_too_small;
  if (skipped > 0) {
    words.push_back(
        fmt::format("{} request{} skipped for the pool's size", skipped, skipped == 1 ? "" : "s"));
  }
  if (f.slo_attainment && *f.slo_attainment < slo_attainment) {
    std::vector<std::string> slos;
    std::vector<std::string> p99s;
    if (f.slo_ttft_ms) {
      slos.push_back(fmt::format("TTFT <= {:g} ms", *f.slo_ttft_ms));
      p99s.push_back("p99 TTFT " + ms_text(f.p99_ttft_ms));
    }
    if (f.slo_tpot_ms) {
      slos.push_back(fmt::format("TPOT <= {:g} ms", *f.slo_tpot_ms));
      p99s.push_back("p99 TPOT " + ms_text(f.p99_tpot_ms));
    }
    words.push_back(fmt::format("{:.1f}% of requests meet {} ({}), under the {:g}% required",
                                *f.slo_attainment * 100, fmt::join(slos, ", "),
                                fmt::join(p99s, ", "), slo_attainment * 100));
  }
  if (f.slo_met && !*f.slo_met) {
    const std::vector<std::string> missed = missed_target_words(f.slo);
    words.insert(words.end(), missed.begin(), missed.end());
  }
  return fmt::format("{}", fmt::join(words, ", "));
}

}  // namespace

// Whether the pool of `blocks` held a simulation back: it preempted, skipped a
// request for the pool's size, evicted a cached block, or filled (its peak use,
// the watermark and one block of margin, for vLLM's null block, reach it).
// When not, any larger pool runs the very same simulation. A fleet's pool is
// each instance's: the fullest instance's peak decides.
bool pool_mattered(const CellFigures& f, std::uint32_t blocks, double watermark) {
  const auto watermark_blocks =
      static_cast<std::uint64_t>(std::floor(watermark * static_cast<double>(blocks)));
  return f.preemptions > 0 || f.skipped_pool_too_small > 0 || f.evictions > 0 ||
         f.instance_peak_used + watermark_blocks + 1 >= blocks;
}

std::uint64_t simulation_memory_bound(std::uint64_t pool_blocks) {
  return add_sat(kSimulationBaseBytes, mul_sat(kSimulationBytesPerBlock, pool_blocks));
}

std::string_view to_string(SearchUnmet unmet) {
  switch (unmet) {
    case SearchUnmet::kComputeBound: return "compute_bound";
    case SearchUnmet::kBlockCeiling: return "block_ceiling";
    case SearchUnmet::kMemoryLimit: return "memory_limit";
  }
  return "?";
}

std::optional<SearchUnmet> parse_search_unmet(std::string_view text) {
  for (SearchUnmet unmet :
       {SearchUnmet::kComputeBound, SearchUnmet::kBlockCeiling, SearchUnmet::kMemoryLimit}) {
    if (to_string(unmet) == text) return unmet;
  }
  return std::nullopt;
}

SearchCeiling search_ceiling(std::uint64_t memory_bytes, std::uint64_t at_once,
                             std::uint64_t instances, std::uint64_t tier_bytes) {
  const std::uint64_t share = memory_bytes / at_once;
  const std::uint64_t fixed =
      add_sat(add_sat(kSimulationBaseBytes, mul_sat(instances - 1, kFleetInstanceBytes)),
              mul_sat(instances, tier_bytes));
  const std::uint64_t fitting_blocks =
      share <= fixed ? 0 : (share - fixed) / kSimulationBytesPerBlock / instances;
  return SearchCeiling{
      static_cast<std::uint32_t>(std::min<std::uint64_t>(kMaxSupportedPoolBlocks, fitting_blocks)),
      fitting_blocks < kMaxSupportedPoolBlocks ? SearchUnmet::kMemoryLimit
                                               : SearchUnmet::kBlockCeiling};
}

PoolSearchOutcome search_smallest_pool(
    std::uint32_t start, std::uint32_t ceiling, SearchUnmet at_ceiling,
    const std::function<std::optional<PoolProbe>(std::uint32_t)>& probe,
    const std::function<std::uint32_t(std::uint32_t)>& largest_failing_swept) {
  PoolSearchOutcome outcome;
  auto give_up = [&](SearchUnmet why, std::uint64_t blocks) {
    outcome.unmet = why;
    outcome.decided_at = static_cast<std::uint32_t>(blocks);
    return std::nullopt;
  };
  // The smallest pool that serves above `low` (which does not, or is 0):
  // doubling from `first` (capped at the ceiling) to one that serves, then
  // bisection. nullopt: stopped, or none (outcome.unmet says why).
  auto smallest_above = [&](std::uint64_t low,
                            std::uint64_t first) -> std::optional<std::uint64_t> {
    std::uint64_t high = std::max<std::uint64_t>(first, low + 1);
    for (;;) {
      if (high > ceiling) return give_up(at_ceiling, ceiling);
      auto seen = probe(static_cast<std::uint32_t>(high));
      if (!seen) {
        outcome.stopped = true;
        return std::nullopt;
      }
      if (seen->serves) break;
      // A pool that held nothing back runs as any larger one: no memory serves.
      if (!seen->pool_mattered) return give_up(SearchUnmet::kComputeBound, high);
      if (high == ceiling) return give_up(at_ceiling, ceiling);
      low = high;
      high = std::min<std::uint64_t>(high * 2, ceiling);
    }
    while (high - low > 1) {
      const std::uint64_t mid = low + (high - low) / 2;
      auto seen = probe(static_cast<std::uint32_t>(mid));
      if (!seen) {
        outcome.stopped = true;
        return std::nullopt;
      }
      (seen->serves ? high : low) = mid;
    }
    return high;
  };
  auto found = smallest_above(0, start);
  // The answer must hold at every swept size above it too: a swept pool at or
  // above it that does not serve raises the search past it.
  while (found) {
    const std::uint32_t failing = largest_failing_swept(static_cast<std::uint32_t>(*found));
    if (failing == 0) break;
    outcome.raised_past.push_back(failing);
    found = smallest_above(failing, std::uint64_t{failing} + 1);
  }
  if (found) outcome.blocks = static_cast<std::uint32_t>(*found);
  return outcome;
}

namespace {

// The pools the searches probe: never past the largest pool kvreplay
// simulates, nor past what the searches run at once fit in memory.
struct SearchBounds {
  std::uint64_t at_once = 1;
  MemoryLimit limit;
  std::uint32_t ceiling = 0;
  SearchUnmet at_ceiling = SearchUnmet::kBlockCeiling;
};

SearchBounds search_bounds(std::size_t searches, unsigned jobs) {
  SearchBounds bounds;
  bounds.at_once = jobs_at_once(searches, jobs);
  bounds.limit = memory_limit();
  const SearchCeiling ceiling = search_ceiling(bounds.limit.bytes, bounds.at_once);
  bounds.ceiling = ceiling.blocks;
  bounds.at_ceiling = ceiling.at_ceiling;
  return bounds;
}

// The table's words for why a search found no pool (plan.json's unmet.message).
std::string unmet_message(const MinSearch& search, const PoolSearchOutcome& outcome,
                          const SearchBounds& bounds) {
  const std::string at_last =
      search.last_probe_blocks == outcome.decided_at && !search.last_shortfall.empty()
          ? " (" + search.last_shortfall + ")"
          : std::string();
  switch (*outcome.unmet) {
    case SearchUnmet::kComputeBound:
      return fmt::format(
          "compute-bound: at any KV memory, {} (the pool of {} blocks never filled, and "
          "nothing was preempted or skipped for its size)",
          search.last_shortfall, outcome.decided_at);
    case SearchUnmet::kBlockCeiling:
      return fmt::format(
          "block ceiling: {} blocks, the largest pool kvreplay simulates, do not serve the "
          "trace{}",
          outcome.decided_at, at_last);
    case SearchUnmet::kMemoryLimit:
      return fmt::format(
          "memory limit: {} blocks do not serve the trace{}, and no larger pool fits: {} "
          "simulation{} at once, each {} + {} bytes a block, within the memory limit of {} "
          "({})",
          outcome.decided_at, at_last, bounds.at_once, bounds.at_once == 1 ? "" : "s",
          memory_text(kSimulationBaseBytes), kSimulationBytesPerBlock,
          memory_text(bounds.limit.bytes), bounds.limit.source);
  }
  return std::string();
}

// One search: its probes simulated, verified against the swept cells of its group.
void run_search(const PlanRequest& request, const PlanSweep& sweep, MinSearch& search,
                PlanSimulator& simulator, const SearchBounds& bounds) {
  const PlanDeployment& deployment = sweep.deployments[search.deployment];
  const SimOptions& sim_options = deployment.options;
  auto probe = [&](std::uint32_t blocks) -> std::optional<PoolProbe> {
    if (request.fault_out_of_memory) throw std::bad_alloc();
    RunConfig config = search.config;
    config.kv.pool_blocks = blocks;
    config.kv_memory.reset();
    ++search.probes;
    auto result = simulator.simulate(
        config, deployment, request.fault_kv_memory == "search" ? request.faults : SimFaults{});
    if (!result) {
      search.error = result.error();
      return std::nullopt;
    }
    if (result.value().violated) {
      search.violated_blocks = blocks;
      search.violation = first_violation(result.value());
      return std::nullopt;
    }
    search.last_probe_blocks = blocks;
    const CellFigures figures = CellFigures::of(result.value(), sim_options);
    search.last_shortfall = shortfall_words(figures, request.slo_attainment);
    return PoolProbe{serves(figures, request.slo_attainment),
                     pool_mattered(figures, blocks, sim_options.watermark)};
  };
  auto largest_failing_swept = [&](std::uint32_t answer) {
    std::uint32_t failing = 0;
    for (const PlanCell& cell : sweep.cells) {
      if (cell.model != search.model || cell.page_tokens != search.page_tokens ||
          cell.deployment != search.deployment || cell.config.kv.pool_blocks < answer) {
        continue;
      }
      if (!serves(*cell.figures, request.slo_attainment)) {
        failing = std::max(failing, cell.config.kv.pool_blocks);
      }
    }
    return failing;
  };
  // A fleet's probe holds its pool once per instance, and every probe its tiers.
  const std::uint64_t tier_bytes = offload_memory(search.config, sim_options).bytes;
  const SearchCeiling ceiling = deployment.fleet.instances() == 1 && tier_bytes == 0
                                    ? SearchCeiling{bounds.ceiling, bounds.at_ceiling}
                                    : search_ceiling(bounds.limit.bytes, bounds.at_once,
                                                     deployment.fleet.instances(), tier_bytes);
  PoolSearchOutcome outcome =
      search_smallest_pool(search.config.kv.pool_blocks, ceiling.blocks, ceiling.at_ceiling, probe,
                           largest_failing_swept);
  search.blocks = outcome.blocks;
  search.raised_past = outcome.raised_past;
  if (outcome.stopped || !outcome.unmet) return;
  search.unmet = outcome.unmet;
  search.unmet_blocks = outcome.decided_at;
  search.unmet_message = unmet_message(search, outcome, bounds);
}

}  // namespace

std::optional<int> run_searches(const PlanRequest& request, PlanSweep& sweep,
                                PlanSimulator& simulator, unsigned jobs) {
  std::vector<std::size_t> run;
  for (std::size_t g = 0; g < sweep.searches.size(); ++g) {
    if (sweep.unit_runs_here(g)) run.push_back(g);
  }
  const SearchBounds bounds = search_bounds(run.size(), jobs);
  parallel_for(run.size(), jobs, [&](std::size_t k) {
    run_search(request, sweep, sweep.searches[run[k]], simulator, bounds);
  });
  simulator.clear_progress();
  for (const MinSearch& search : sweep.searches) {
    if (search.error) {
      eprint("{}\n", search.error->to_string());
      return kExitInput;
    }
  }
  bool violated = false;
  for (const MinSearch& search : sweep.searches) {
    if (!search.violated_blocks) continue;
    violated = true;
    eprint(
        "{}: {} while searching the smallest KV memory, at --model {} --page-tokens {} "
        "--pool-blocks {}: {}\n",
        request.trace_path, search.violation.invariant, search.model, search.page_tokens,
        *search.violated_blocks, search.violation.message);
  }
  if (violated) return kExitCheckFailed;
  return std::nullopt;
}

}  // namespace kvreplay
