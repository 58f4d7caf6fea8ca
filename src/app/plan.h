// The `plan` command: a sweep of models, KV memory and page sizes over one
// request trace, run in parallel, and the search for the smallest KV memory
// that serves it without preemption.
#pragma once

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
  // Planted faults (tests only): in the simulations of the sweep points at
  // this --kv-memory, or in the search's with "search".
  std::string fault_kv_memory;
  SimFaults faults;
};

// Exit 1 when an invariant check fails in any simulation (the sweep point or
// search probe is named on stderr, and no report is written).
int run_plan(const PlanRequest& request);

}  // namespace kvreplay
