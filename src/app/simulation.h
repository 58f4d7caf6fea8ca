// One simulation of a request trace: reader -> Simulator -> report, summary and
// warnings. `simulate` runs one; `plan` runs many, in parallel.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "app/terminal.h"
#include "engine/simulator.h"
#include "formats/requests/request.h"
#include "io/input_error.h"
#include "io/output.h"
#include "model/run_config.h"
#include "report/html.h"

namespace kvreplay {

// One finished simulation: its report and summary.
struct SimulationResult {
  bool violated = false;
  nlohmann::json report;
  std::string summary;
  // Requests skipped because they can never fit, one line per reason naming
  // the option that decides it; printed on stderr even with --quiet.
  std::vector<std::string> warnings;
  std::vector<SkipReason> warning_reasons;  // parallel to warnings
  // "overloaded: ..." when arrivals outpaced service (OverloadFigures), for
  // stderr even with --quiet; empty otherwise.
  std::string overload_warning;
  // The latency distributions for the HTML page's CDF: {"ttft_ms": [...],
  // "tpot_ms": [...]}, each kCdfPoints quantiles from 0 to 1.
  nlohmann::json latency_cdf;
};
inline constexpr std::size_t kCdfPoints = 101;

// Terminal extras of an interactive run: a progress line (app/terminal.h)
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
// (for the HTML report). `faults`: tests only. `shown_as`: the trace's name in
// messages and the report, when `path` is a copy of it (plan's of stdin).
InputResult<SimulationResult> simulate_file(
    const std::string& path, std::optional<RequestFormat> format, const RunConfig& config,
    const SimOptions& options, OutputFile* timeline, TimelineSampler* sampler = nullptr,
    const SimulateTerminal& terminal = {}, const SimFaults& faults = {},
    OutputFile* requests = nullptr, const std::string& shown_as = {});

// --requests: the CSV's header, and one request's row (RequestTimes): times in
// ms, empty where they do not apply (a skipped request's, a TPOT of one token).
std::string requests_csv_header();
std::string requests_csv_row(const RequestTimes& times);

// The report's "config.simulation" object: the options a simulation ran with
// (its "cost" is the run's, cost_json: the options alone do not resolve auto).
nlohmann::json sim_options_json(const SimOptions& options);
// The "cost" object: the cost model a Simulator ran (`roofline`: the one it
// made; none: linear) and its constants.
nlohmann::json cost_json(const CostModel& cost, const std::optional<Roofline>& roofline);
// {count, mean, p50, p90, p99, max} of one latency.
nlohmann::json latency_json(const LatencySummary& summary);

// The model of simulate and plan when none is named.
inline constexpr std::string_view kDefaultSimModel = "llama-3.1-8b";

// Resolves the configuration of a request-trace run: command-line options
// only, kDefaultSimModel when no model or geometry is given; a pool size
// (--pool-blocks, --kv-memory or --gpu) is required. `overrides` should have
// context_default set and the batch limits (set_activation_limits).
InputResult<RunConfig> resolve_sim_config(const ConfigOverrides& overrides);

}  // namespace kvreplay
