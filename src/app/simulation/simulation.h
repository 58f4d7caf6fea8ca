// One simulation of a request trace: reader -> Simulator -> report, summary and
// warnings. `simulate` runs one; `plan` runs many, in parallel.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "app/terminal.h"
#include "engine/fleet/fleet.h"
#include "engine/sim_figures.h"
#include "engine/simulator.h"
#include "formats/requests/request.h"
#include "io/input_error.h"
#include "io/output.h"
#include "io/spool.h"
#include "model/run_config.h"
#include "report/html.h"
#include "report/report.h"

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
  // The report's figures as a value (engine/sim_figures.h): a fleet's merged
  // total, with each instance's in `instance_figures` (empty for one instance).
  SimFigures figures;
  std::vector<SimFigures> instance_figures;
  // Beside the figures, what the report says of the run: its trace, the
  // requests the reader skipped, and the cost model (config.simulation.cost).
  TraceInfo trace;
  std::uint64_t reader_skipped = 0;
  nlohmann::json cost_model;
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
    OutputFile* requests = nullptr, OutputFile* kv_events = nullptr, OutputFile* trace = nullptr,
    const std::string& shown_as = {});

// `simulate --replicas N` (N > 1): a fleet of N instances behind a router
// (engine/fleet/fleet.h). The report keeps the fleet's totals at the top level
// (counts summed, peaks summed over the instances' own peaks, ratios and
// latencies recomputed from the fleet's requests) and adds "fleet" and
// "instances". Outputs get an `instance` column: the timeline's first, the
// request times' last; `router_log` one row per routing decision.
struct FleetOutputs {
  OutputFile* timeline = nullptr;
  OutputFile* requests = nullptr;
  OutputFile* router_log = nullptr;
  // --html: one sampler per instance, made here (TimelineSampler::kFleetBuckets
  // each), filled by the run.
  std::vector<TimelineSampler>* samplers = nullptr;
  // --kv-events: each instance's batches, with an `instance` key.
  OutputFile* kv_events = nullptr;
  // --emit-trace: the instances' schedules as one kvtrace (engine/replay/trace_emitter.h).
  OutputFile* trace = nullptr;
};
InputResult<SimulationResult> simulate_fleet_file(
    const std::string& path, std::optional<RequestFormat> format, const RunConfig& config,
    const SimOptions& options, const FleetOptions& fleet_options, const FleetOutputs& outputs,
    const SimulateTerminal& terminal = {}, const std::string& shown_as = {});
// The text summary of a fleet's report.
std::string fleet_summary(const nlohmann::json& report, bool color);
// --router-log's header: line, id, arrival, the instance chosen, then (for
// prefix-aware) each instance's cached blocks, and each instance's cost.
std::string router_log_header(std::uint32_t replicas, bool prefix_aware);

// --requests: the CSV's header, and one request's row (RequestTimes): times in
// ms, empty where they do not apply (a skipped request's, a TPOT of one token).
// `speculative`: two more columns, the draft tokens proposed for the request
// and those accepted (--speculative).
std::string requests_csv_header(bool speculative = false);
std::string requests_csv_row(const RequestTimes& times, bool speculative = false);

// The report's "config.simulation" object: the options a simulation ran with
// (its "cost" is the run's, cost_json: the options alone do not resolve auto).
nlohmann::json sim_options_json(const SimOptions& options);
// The "cost" object: the cost model a Simulator ran (`roofline`: the one it
// made; none: linear) and its constants.
nlohmann::json cost_json(const CostModel& cost, const std::optional<Roofline>& roofline,
                         EngineKind engine);
// {count, mean, p50, p90, p95, p99, max, exact} of one latency (exact: false when
// its percentiles come from the bounded histogram, within 0.1%: engine/latency.h).
// Percentiles asked for beyond those (LatencySummary::extra) add "pNN" keys.
nlohmann::json latency_json(const LatencySummary& summary);
// "p50", "p99.9": a percentile's key in the report's latency objects.
std::string percentile_key(double percentile);
// The summary's line of a report's latency object: `percentiles` (--percentiles)
// when given, else p50, p90, p95 and p99; and the mean.
std::string latency_line(const nlohmann::json& latency, const std::vector<double>& percentiles);
// The summary's lines of a report's "slo" (label, text).
std::vector<std::pair<std::string, std::string>> slo_lines(const nlohmann::json& slo);

// The model of simulate and plan when none is named.
inline constexpr std::string_view kDefaultSimModel = "llama-3.1-8b";

// Resolves the configuration of a request-trace run: command-line options
// only, kDefaultSimModel when no model or geometry is given; a pool size
// (--pool-blocks, --kv-memory or --gpu) is required. `overrides` should have
// context_default set and the batch limits (set_activation_limits).
// plan's trace when it cannot be read twice (standard input, a FIFO, a
// device, a /proc descriptor): copied into an unnamed spool file while every
// record is read and checked, so that a bad (or endless) input stops at its
// first error, not after filling the disk. Error: the line to print (exit 2).
Result<SpooledInput, std::string> spool_input(const std::string& path,
                                              std::optional<RequestFormat> format);
// Whether `path` must be spooled before it is read twice: "-", or anything
// but a regular file (a path that cannot be stat'ed is read, and refused, as is).
bool needs_spool(const std::string& path);

// Refuses a pool whose simulation would not fit this machine's memory
// (simulation_memory_bytes against core/memory_budget.h's limit).
InputResult<RunConfig> resolve_sim_config(const ConfigOverrides& overrides);

// The memory one simulation needs, bounded (docs/SCALE.md fits 12 MiB + 105
// bytes a block on the Mooncake trace; the bound leaves room for the request
// records and the exact percentiles' buffers of a large trace):
//   kSimulationBaseBytes + kSimulationBytesPerBlock x pool blocks.
// An overloaded run also keeps its waiting queue, which grows with the trace,
// not with the pool; the bound is checked before the run, per simulation
// (plan multiplies it by its parallel jobs).
inline constexpr std::uint64_t kSimulationBaseBytes = std::uint64_t{32} << 20;
inline constexpr std::uint64_t kSimulationBytesPerBlock = 128;
std::uint64_t simulation_memory_bytes(std::uint64_t pool_blocks);
// A fleet's simulation: every instance's pool, and each instance's own
// structures beyond the first (its engine, scheduler, cache index and
// figures: about 38 KiB measured on 4096 instances of small pools).
inline constexpr std::uint64_t kFleetInstanceBytes = std::uint64_t{64} << 10;
std::uint64_t fleet_memory_bytes(std::uint64_t pool_blocks, std::uint64_t instances);

// The offload tiers' residency (--offload), per instance: each tier's
// capacity in blocks (its bytes over a GPU block, at most 2^32 - 1) x what a
// resident block costs, measured with the tiers full (README, "Memory
// bounds"): the tier's slot, key index and recency list, and with
// --emit-trace the trace's name for its key. arc also keeps evicted keys as
// ghosts, up to twice the capacity. An engine may cost its slots its own way
// (EngineEntry::offload_slot_bytes: the sglang engine's host pages).
inline constexpr std::uint64_t kTierBytesPerBlock = 160;
inline constexpr std::uint64_t kArcTierBytesPerBlock = 360;
inline constexpr std::uint64_t kTraceTierBytesPerBlock = 48;
struct OffloadMemory {
  std::uint64_t bytes = 0;  // one instance's tiers
  std::string tiers;        // "a cpu tier of N blocks, a disk tier of M blocks"
  std::string formula;      // "160 bytes a tier block"
};
// Nothing (bytes 0) without --offload.
OffloadMemory offload_memory(const RunConfig& config, const SimOptions& options);
// What a simulation (`instances` > 1: a fleet's) needs: its pools
// (fleet_memory_bytes) and each instance's tiers.
std::uint64_t run_memory_bytes(const RunConfig& config, const SimOptions& options,
                               std::uint64_t instances);
// That need against the memory limit:
// nullopt when it fits the memory limit, else the problem (check_memory's
// words) naming the pool and the tiers.
std::optional<std::string> check_simulation_memory(const RunConfig& config,
                                                   const SimOptions& options,
                                                   std::uint64_t instances);

}  // namespace kvreplay
