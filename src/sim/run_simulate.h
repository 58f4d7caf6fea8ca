// The `simulate` and `plan` subcommands: request trace -> Simulator -> reports.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "io/output.h"
#include "replay/run_config.h"
#include "report/html.h"
#include "report/terminal.h"
#include "sim/request.h"
#include "sim/simulator.h"
#include "trace/input_error.h"

namespace kvreplay {

struct SimulateRequest {
  std::string trace_path;
  std::optional<RequestFormat> format;
  ConfigOverrides overrides;
  SimOptions options;
  std::string report_path;
  std::string timeline_path;
  std::string html_path;  // empty: none
  bool quiet = false;     // no summary (table), no progress line on stderr
};

// One finished simulation: its report and summary.
struct SimulationResult {
  bool violated = false;
  nlohmann::json report;
  std::string summary;
  // Requests skipped because they can never fit, one line per reason naming
  // the option that decides it; printed on stderr even with --quiet.
  std::vector<std::string> warnings;
  std::vector<SkipReason> warning_reasons;  // parallel to warnings
};

// Terminal extras of an interactive run: a progress line (report/terminal.h)
// and ANSI colour in the summary.
struct SimulateTerminal {
  ProgressLine* progress = nullptr;
  bool color = false;
};

// Faults planted in a simulation: tests only, never the CLI (the way a test
// sees a violation reach the exit code and the message).
struct SimFaults {
  // After this step (1 = the first; 0 = never), one more reference to a live
  // block that no table or cache holds: invariant I1 fails at the next check.
  std::uint64_t leak_block_at_step = 0;
};

// Reads the whole trace through a Simulator. `timeline`, when given, gets one
// CSV row per step (a streamed output of the caller's OutputSet); should it
// fail, the run stops at the next request and the result is incomplete: the
// caller reports the output's error. `sampler`, when given, sees every step
// (for the HTML report). `faults`: tests only.
InputResult<SimulationResult> simulate_file(const std::string& path,
                                            std::optional<RequestFormat> format,
                                            const RunConfig& config, const SimOptions& options,
                                            OutputFile* timeline,
                                            TimelineSampler* sampler = nullptr,
                                            const SimulateTerminal& terminal = {},
                                            const SimFaults& faults = {});

// Resolves the configuration of a request-trace run: command-line options
// only, llama-3-8b when no geometry is given; a pool size is required.
InputResult<RunConfig> resolve_sim_config(const ConfigOverrides& overrides);

int run_simulate(const SimulateRequest& request);

struct PlanRequest {
  std::string trace_path;
  std::optional<RequestFormat> format;
  std::vector<std::string> models;
  std::vector<std::string> kv_memories;
  std::vector<std::uint32_t> page_tokens;
  ConfigOverrides overrides;  // everything else
  // options.check applies to every simulation, of the sweep and of the search.
  SimOptions options;
  std::string report_path;  // the sweep as JSON
  std::string html_path;    // the sweep as an HTML page
  unsigned jobs = 0;        // 0: one per core
  bool search_min = true;   // find the smallest KV memory with no preemption
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
