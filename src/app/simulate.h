// The `simulate` command: one request trace through the Simulator, its summary,
// JSON report, timeline and HTML page.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>
#include "engine/fleet/fleet.h"

#include "app/simulation/simulation.h"

namespace kvreplay {

struct SimulateRequest {
  std::string trace_path;
  std::optional<RequestFormat> format;
  ConfigOverrides overrides;
  SimOptions options;
  std::string report_path;
  std::string timeline_path;
  std::string html_path;        // empty: none
  std::string requests_path;    // --requests: one CSV row per request
  bool quiet = false;           // no summary (table), no progress line on stderr
  FleetOptions fleet;           // --replicas, --router...: a fleet when replicas > 1
  std::string router_log_path;  // --router-log: one CSV row per routing decision
  std::string kv_events_path;   // --kv-events: one KVEventBatch JSON line per step
  std::string
      emit_trace_path;  // --emit-trace: the run as a kvtrace (engine/replay/trace_emitter.h)
  // Further files the run reads (option, path), which no output may replace:
  // --gpu-prices, --cost-profile.
  std::vector<std::pair<std::string, std::string>> inputs;
};

int run_simulate(const SimulateRequest& request);

}  // namespace kvreplay
