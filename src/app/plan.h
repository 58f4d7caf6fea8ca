// The `plan` command: a sweep of models, KV memory and page sizes over one
// request trace, run in parallel, and the search for the smallest KV memory
// that serves it without preemption.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "app/simulation.h"

namespace kvreplay {

// One swept deployment: the GPU (none: the pool is given by --kv-memory), TP
// and PP, and the simulation options the GPU's class sets (vllm serve's batch
// limits, unless given).
struct PlanDeployment {
  std::optional<std::string> gpu;
  std::uint32_t tp = 1;
  std::uint32_t pp = 1;
  SimOptions options;
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
  // The deployments swept (--gpu x --tp x --pp), each with its options; empty:
  // one, request.overrides' own, with `options`.
  std::vector<PlanDeployment> deployments;
  std::string report_path;  // the sweep as JSON
  std::string html_path;    // the sweep as an HTML page
  unsigned jobs = 0;        // 0: one per core
  bool search_min = true;   // find the smallest KV memory with no preemption
  // With --slo-ttft-ms or --slo-tpot-ms: the share of requests that must meet
  // them for a cell to serve the trace (--slo-attainment).
  double slo_attainment = 0.99;
  bool quiet = false;
  // --shard: simulate only this part of the sweep and write it as a partial
  // report to report_path (no table, no HTML).
  std::optional<PlanShard> shard;
  // The plan's arguments after `plan`, recorded in a partial report so that
  // plan-merge rebuilds the same sweep.
  std::vector<std::string> command;
  // plan-merge: the parts whose figures stand in for the simulations (checked
  // against the sweep this request resolves to); empty: simulate.
  std::vector<PlanPart> parts;
  // Planted faults (tests only): in the simulations of the sweep points at
  // this --kv-memory, or in the search's with "search".
  std::string fault_kv_memory;
  SimFaults faults;
};

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
};
int run_plan_merge(const PlanMergeRequest& request);

}  // namespace kvreplay
