// The `plan` command: a sweep of models, KV memory and page sizes over one
// request trace, run in parallel, and the search for the smallest KV memory
// that serves it without preemption.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "app/simulation/simulation.h"
#include "engine/fleet/fleet.h"

namespace kvreplay {

// One swept deployment: the GPU (none: the pool is given by --kv-memory), TP
// and PP, the fleet (instances of TP x PP GPUs each, and their router), and
// the simulation options the GPU's class sets (vllm serve's batch limits,
// unless given; the GPU's price).
struct PlanDeployment {
  std::optional<std::string> gpu;
  std::uint32_t tp = 1;
  std::uint32_t pp = 1;
  SimOptions options;
  FleetOptions fleet;  // one instance unless --replicas or --pd is swept
  // --gpu-memory-utilization when several are swept (one given applies to
  // every deployment through the plan's overrides).
  std::optional<double> memory_fraction;
  // The options swept besides (offload, batch limits, load): simulate's
  // options for them but the load's (load_args), and the label's words.
  std::string setting_args;
  std::vector<std::string> setting_labels;
  std::uint32_t gpus() const { return tp * pp * fleet.instances(); }
};

// --shard I/N: the I-th (1-based) of N disjoint parts of a sweep.
struct PlanShard {
  std::uint32_t index = 1;
  std::uint32_t count = 1;
};

// A partial report of `plan --shard` (kvreplay_plan_part), as plan-merge read it.
struct PlanPart {
  std::string path;
  nlohmann::json json;
};

// plan --objective: what one answer across every swept cell minimises.
enum class PlanObjective : std::uint8_t { kGpus, kUsdPerHour, kUsdPerMtok };
std::string_view to_string(PlanObjective objective);
std::optional<PlanObjective> parse_plan_objective(std::string_view name);
std::vector<std::string> plan_objective_names();

struct PlanRequest {
  std::string trace_path;
  std::optional<RequestFormat> format;
  std::vector<std::string> models;         // presets (or aliases)
  std::vector<std::string> model_configs;  // config.json paths, swept after the presets
  std::vector<std::string> kv_memories;    // empty: --gpu sizes one pool per model
  std::vector<std::uint32_t> page_tokens;
  ConfigOverrides overrides;  // everything else
  // options.check applies to every simulation, of the sweep and of the search.
  SimOptions options;
  // The deployments swept (--gpu x --tp x --pp x fleets x routers), each with
  // its options; empty: one, request.overrides' own, with `options`.
  std::vector<PlanDeployment> deployments;
  // --replicas or --pd given: a sweep of fleets, answered by the fewest GPUs
  // (then the lowest $) that serve the trace (plan.json's min_fleet).
  bool fleet_sweep = false;
  std::optional<PlanObjective> objective;  // --objective
  std::string report_path;                 // the sweep as JSON
  std::string html_path;                   // the sweep as an HTML page
  unsigned jobs = 0;                       // 0: one per core
  bool search_min = true;                  // find the smallest KV memory with no preemption
  // With --slo-ttft-ms or --slo-tpot-ms: the share of requests that must meet
  // them for a cell to serve the trace (--slo-attainment).
  double slo_attainment = 0.99;
  bool quiet = false;
  // --shard: simulate only this part of the sweep and write it as a partial
  // report to report_path (no table, no HTML).
  std::optional<PlanShard> shard;
  // The options a cell's `kvreplay simulate` line repeats as given (every
  // option the plan does not sweep or keep to itself), shell-quoted.
  std::string passthrough_args;
  std::string offload_passthrough_args;  // the tiers' links and policy: cells with tiers
  // The plan's arguments after `plan`, recorded in a partial report so that
  // plan-merge rebuilds the same sweep.
  std::vector<std::string> command;
  // plan-merge: the parts whose figures stand in for the simulations (checked
  // against the sweep this request resolves to); empty: simulate.
  std::vector<PlanPart> parts;
  bool merge_verify_all = false;  // plan-merge --verify-all
  // Planted faults (tests only): in the simulations of the sweep points at
  // this --kv-memory, or in the search's with "search".
  std::string fault_kv_memory;
  SimFaults faults;
  // Tests only: every probe of the search throws std::bad_alloc (exit 2, no
  // output left behind).
  bool fault_out_of_memory = false;
};

// Memory bounds (README, "Memory bounds (plan)"): one simulation holds at most
// kSimulationBaseBytes (the trace's reader, the exact latency percentiles, the
// report, the requests in flight of a run that keeps up) plus
// kSimulationBytesPerBlock a block of its pool (the pool, the block tables and
// the prefix-cache index with every block in use: docs/SCALE.md's fit, 105
// bytes, with a margin). A plan runs J = min(-j, simulations ready) at once, so it
// needs J x simulation_memory_bound(largest pool); the sweep is refused (exit
// 2) and the search's largest pool is capped by that against memory_limit().
// (The constants are app/simulation/simulation.h's, shared with simulate's own check.)
std::uint64_t simulation_memory_bound(std::uint64_t pool_blocks);

// The search for the smallest pool that serves a trace (SPEC 3.4), apart from
// the simulations it runs (each probe is one).
//
// Why a search found no pool.
enum class SearchUnmet {
  // A probe whose pool never filled (peak used + watermark + 1 below it, no
  // cached block evicted), with no preemption and nothing skipped for the
  // pool's size, still misses the SLOs: every larger pool runs the same
  // simulation, so no memory serves the trace.
  kComputeBound,
  // The largest pool kvreplay simulates (kMaxSupportedPoolBlocks) does not serve.
  kBlockCeiling,
  // The largest pool whose simulations, as many as run at once, fit the memory
  // limit does not serve.
  kMemoryLimit,
};
// "compute_bound", "block_ceiling", "memory_limit": plan.json's min_kv_memory[].unmet.reason.
std::string_view to_string(SearchUnmet unmet);
std::optional<SearchUnmet> parse_search_unmet(std::string_view text);

// What one probe saw.
struct PoolProbe {
  bool serves = false;  // no preemption, nothing skipped for the pool, the SLOs met
  // The pool held the run back: it filled, or preempted, or skipped a request
  // for its size. False: any larger pool runs the same simulation.
  bool pool_mattered = true;
};

struct PoolSearchOutcome {
  std::optional<std::uint32_t> blocks;  // the smallest pool that serves
  std::optional<SearchUnmet> unmet;     // why none (unless stopped)
  std::uint32_t decided_at = 0;         // the pool that showed `unmet`
  // Swept pools at or above an answer that still did not serve: each raised
  // the answer past it, since preemptions need not fall as memory grows.
  std::vector<std::uint32_t> raised_past;
  bool stopped = false;  // a probe failed (no figures): no answer either way
};

// Doubling from `start` to a pool that serves, then bisection; the answer is
// then verified against the swept pools: `largest_failing_swept(answer)` is the
// largest swept pool >= answer that does not serve (0: none), and the search
// resumes above it. Stops, with `unmet`, at a pool where memory no longer
// matters (a probe with !pool_mattered that does not serve: kComputeBound) or
// when `ceiling` does not serve (`at_ceiling`). Never probes above `ceiling`;
// probes `ceiling` itself before giving up. `probe` returns nullopt when the
// simulation failed: the search stops at once.
// REQUIRES: start >= 1.
PoolSearchOutcome search_smallest_pool(
    std::uint32_t start, std::uint32_t ceiling, SearchUnmet at_ceiling,
    const std::function<std::optional<PoolProbe>(std::uint32_t)>& probe,
    const std::function<std::uint32_t(std::uint32_t)>& largest_failing_swept);

// The largest pool the searches may probe when `at_once` of them run at once
// within `memory_bytes` (each simulation_memory_bound of its pool), and why a
// search that reaches it stops: kMemoryLimit when memory caps it below
// kMaxSupportedPoolBlocks, else kBlockCeiling. REQUIRES: at_once >= 1.
struct SearchCeiling {
  std::uint32_t blocks = 0;
  SearchUnmet at_ceiling = SearchUnmet::kBlockCeiling;
};
// A fleet's search (`instances` above 1) probes pools of every instance at
// once: its ceiling is each instance's, within the same memory. Each instance's
// offload tiers (`tier_bytes`, offload_memory: their capacity does not grow with
// the pool) come off the memory first.
SearchCeiling search_ceiling(std::uint64_t memory_bytes, std::uint64_t at_once,
                             std::uint64_t instances = 1, std::uint64_t tier_bytes = 0);

// Exit 1 when an invariant check fails in any simulation (the sweep point or
// search probe is named on stderr, and no report is written).
int run_plan(const PlanRequest& request);

// The format of a partial report (`kvreplay_plan_part`).
inline constexpr int kPlanPartVersion = 1;

// plan-merge: reads the parts, checks that they are the N shards of one sweep
// of one trace written by this version, rebuilds the sweep from their recorded
// command line, and writes what that plan would have (table, report, HTML).
// Exit 2, naming the part, when they are not.
struct PlanMergeRequest {
  std::vector<std::string> part_paths;
  std::string report_path;
  std::string html_path;
  bool quiet = false;
  // --verify-all: every cell simulated again and its whole report compared
  // (the answers' cells are always).
  bool verify_all = false;
};
int run_plan_merge(const PlanMergeRequest& request);

}  // namespace kvreplay
