// What the plan command's units share (app/plan/plan.cc drives them): the sweep's
// cells and searches (plan_sweep.cc), the search for the smallest pool
// (plan_search.cc), the table and reports (plan_report.cc), and plan-merge's
// reading of partial reports (plan_merge.cc). Internal to the plan command.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "app/plan/plan.h"
#include "app/simulation/simulation.h"
#include "app/terminal.h"
#include "core/parallel.h"

namespace kvreplay {

// The figures plan reads of one simulation (a cell of the sweep, or a probe of
// a search), read once from its report (or a part's copy of it): what the
// table, plan.json and the searches are made of.
struct CellFigures {
  std::string trace_format;
  std::string trace_sha256;
  std::uint64_t requests_total = 0;
  std::uint64_t finished = 0;
  std::uint64_t skipped = 0;
  std::uint64_t skipped_pool_too_small = 0;
  std::uint64_t peak_used = 0;           // blocks (a fleet's: the sum of its instances' peaks)
  std::uint64_t instance_peak_used = 0;  // the fullest instance's peak (a lone one's: peak_used)
  std::uint64_t peak_in_use = 0;
  double waste_ratio_mean = 0.0;
  double waste_ratio_at_peak = 0.0;
  std::uint64_t preemptions = 0;
  std::uint64_t evictions = 0;  // of cached blocks
  double output_tokens_per_second = 0.0;
  double virtual_seconds = 0.0;
  double hit_rate = 0.0;
  // With offload tiers: the hit rate counting the tiers' hits too.
  std::optional<double> hit_rate_with_tiers;
  nlohmann::json prefix_cache;  // the report's, whole
  nlohmann::json offload;       // likewise; null without tiers
  double p95_ttft_ms = 0.0, p99_ttft_ms = 0.0;
  double p95_tpot_ms = 0.0, p99_tpot_ms = 0.0;
  nlohmann::json latency;   // the report's latency, whole (plan.json's cells[].latency)
  nlohmann::json overload;  // likewise
  std::optional<double> overload_ratio;
  bool overloaded = false;
  std::uint64_t invariant_checks = 0;
  nlohmann::json slo;                    // null without SLOs
  std::optional<bool> slo_met;           // the report's slo.met
  std::optional<double> slo_attainment;  // the joint rule's, when given
  std::optional<double> slo_ttft_ms;
  std::optional<double> slo_tpot_ms;
  nlohmann::json cost;  // config.simulation.cost
  // With a price (--gpu-hour-usd, --gpu-prices): the report's cost_usd, and
  // its $ an hour and $ per million output tokens within the SLOs (none when
  // no token met them). Null without.
  nlohmann::json cost_usd;
  std::optional<double> usd_per_hour;
  std::optional<double> usd_per_million_tokens;
  nlohmann::json fleet;  // the report's fleet (null for one instance)
  bool violated = false;

  // REQUIRES: `report` holds plan_merge's kCellFigures (a simulation's report does).
  static CellFigures read(const nlohmann::json& report, bool violated);
  // The same figures of a simulation run here, from its values (SimFigures),
  // not its report: `options` are the ones it ran.
  static CellFigures of(const SimulationResult& result, const SimOptions& options);
};

struct PlanCell {
  std::string model;
  std::size_t deployment = 0;  // index into the swept deployments
  std::string kv_memory;
  std::uint32_t page_tokens = 0;
  RunConfig config;
  std::optional<SimulationResult> result;
  std::optional<CellFigures> figures;  // read once from `result`
  std::optional<InputError> error;
  // plan-merge: where the figures came from, "FILE: cells[K]".
  std::string from;
};

struct ViolationText {
  std::string invariant;  // "invariant I1 violated"
  std::string message;
};

struct MinSearch {
  std::string model;
  std::size_t deployment = 0;
  std::uint32_t page_tokens = 0;
  RunConfig config;                     // geometry; pool_blocks is searched
  std::optional<std::uint32_t> blocks;  // smallest pool with no preemption and nothing skipped
  std::uint32_t probes = 0;
  std::optional<InputError> error;
  std::optional<std::uint32_t> violated_blocks;  // a probe whose invariant check failed
  ViolationText violation;
  // Swept pools at or above an answer that still preempted (or skipped): each
  // raised the answer past it, since preemptions need not fall as memory grows.
  std::vector<std::uint32_t> raised_past;
  // Why no pool serves (blocks is empty): the reason, the pool that showed it,
  // and the table's words (`unmet_message`, plan.json's unmet.message).
  std::optional<SearchUnmet> unmet;
  std::uint32_t unmet_blocks = 0;
  std::string unmet_message;
  // The last probe's pool and, when it did not serve, why (for the message).
  std::uint32_t last_probe_blocks = 0;
  std::string last_shortfall;
  // plan-merge: where the answer came from, "FILE: searches[K]".
  std::string from;
};

// A swept deployment the model cannot run on (its weights do not fit, or its
// heads do not split): a row of the sweep with no simulation.
struct UnfitCell {
  std::string model;
  std::size_t deployment = 0;
  std::uint32_t page_tokens = 0;
  std::string problem;
};

// A fleet sweep's answer for one model and page size (SPEC 3.6): the cell
// with the fewest GPUs that serves the trace, then the lowest $ an hour, then
// the lowest $ per million output tokens, then the least KV memory, then the
// first swept; and each router's own fewest (its fleets, and the swept
// single instances, which route nothing).
struct FleetAnswer {
  std::string model;
  std::uint32_t page_tokens = 0;
  std::optional<std::size_t> cell;  // none: no swept fleet serves the trace
  struct RouterBest {
    std::string router;
    std::optional<std::size_t> cell;
  };
  std::vector<RouterBest> by_router;
  // The answer simulated again, exactly that fleet, gave the same figures.
  bool verified = false;
};

// kvreplay's version, recorded in a partial report: parts of another version
// are refused, since figures may differ between versions.
inline constexpr const char* kKvreplayVersion = KVREPLAY_VERSION;

// The swept cells and searches, as one plan (or one shard of it) resolved them.
struct PlanSweep {
  std::vector<PlanDeployment> deployments;
  // Deployment columns and answers when a GPU is named or more than one is swept.
  bool show_deployments = false;
  std::vector<PlanCell> cells;
  std::vector<UnfitCell> unfit;
  // The smallest pool with no preemption is searched per (model, deployment,
  // page size): one search per group of cells, in the order the groups appear.
  std::vector<MinSearch> searches;
  std::vector<std::size_t> cell_group;  // each cell's search
  // --shard splits the sweep into units dealt round-robin: with the search, a
  // group (its cells and its search, which is verified against them); without,
  // a cell. A merge simulates no unit: its parts hold every unit's figures
  // (it simulates again only what decides the answers: plan_merge_verify.cc).
  std::size_t units = 0;
  std::string sweep_sha256;
  std::vector<std::size_t> run_cells;  // the cells this run simulates
  bool merging = false;
  bool fleet_sweep = false;      // --replicas or --pd: answered by fleet_answers
  std::size_t label_width = 26;  // the table's deployment column
  std::vector<FleetAnswer> fleet_answers;
  std::optional<PlanShard> shard;

  bool unit_runs_here(std::size_t unit) const {
    if (merging) return false;
    return !shard || unit % shard->count == shard->index - 1;
  }
};

// Runs a plan's simulations on its trace and counts them on the progress line.
class PlanSimulator {
 public:
  PlanSimulator(const PlanRequest& request, std::string trace_file, const PlanSweep& sweep);
  // One simulation of `config` on `deployment` (its options and fleet).
  InputResult<SimulationResult> simulate(const RunConfig& config, const PlanDeployment& deployment,
                                         const SimFaults& faults);
  void clear_progress();

 private:
  const PlanRequest& request_;
  std::string trace_file_;
  const PlanSweep& sweep_;
  std::unique_ptr<ProgressLine> progress_;
  std::mutex mutex_;
  std::uint64_t done_ = 0;
};

// plan_sweep.cc
ViolationText first_violation(const SimulationResult& result);
std::string reproducible_memory(std::uint32_t blocks, const PagedKvConfig& kv);
std::string model_label(const RunConfig& config);
std::string deployment_label(const PlanDeployment& d);
// plan.json's deployment.fleet: the instances, their split and router.
nlohmann::json fleet_json(const FleetOptions& fleet);
bool serves(const CellFigures& figures, double slo_attainment);
// Whether the pool of `blocks` held a simulation back (plan_search.cc): when
// not, any larger pool runs the very same simulation.
bool pool_mattered(const CellFigures& figures, std::uint32_t blocks, double watermark);
// What a simulation again must reproduce of a cell (plan_fleet.cc): every
// figure the answers and the table show.
nlohmann::json answer_figures(const CellFigures& figures);
InputResult<std::string> trace_identity(const std::string& file, const std::string& shown,
                                        std::optional<RequestFormat> format);
// The cells, unfit deployments and searches of `request`, and what this run
// simulates; an exit code when a cell does not resolve (said on stderr).
std::optional<int> resolve_sweep(const PlanRequest& request, PlanSweep& sweep);
// The memory check of the sweep's simulations at once; an exit code when refused.
std::optional<int> check_sweep_memory(const PlanSweep& sweep, unsigned jobs);
// Simulates this run's cells; an exit code when one fails to read.
std::optional<int> simulate_cells(const PlanRequest& request, PlanSweep& sweep,
                                  PlanSimulator& simulator, unsigned jobs);
// Warnings (each once) and failed checks of the cells: exit code when a check failed.
std::optional<int> report_cell_problems(const PlanRequest& request, const PlanSweep& sweep,
                                        std::vector<std::string>& warned);

// plan_search.cc: runs this run's searches; an exit code when one fails.
std::optional<int> run_searches(const PlanRequest& request, PlanSweep& sweep,
                                PlanSimulator& simulator, unsigned jobs);

// plan_report.cc
nlohmann::json unmet_json(const MinSearch& search);
// A shard's partial report.
nlohmann::json part_json(const PlanRequest& request, const PlanSweep& sweep,
                         const std::string& trace_sha256);
// The plan's report and its table.
struct PlanOutput {
  nlohmann::json report;
  std::string table;
};
PlanOutput plan_output(const PlanRequest& request, const PlanSweep& sweep, bool any_warned);

// plan_fleet.cc: a fleet sweep's answers (fleet_answers), each simulated
// again to verify it; an exit code when that fails. Then its rows of
// plan.json (min_fleet) and of the table.
std::optional<int> answer_fleets(const PlanRequest& request, PlanSweep& sweep,
                                 PlanSimulator& simulator, unsigned jobs);
nlohmann::json min_fleet_rows(const PlanRequest& request, const PlanSweep& sweep,
                              const std::string& slo_words, std::string& table);
// `kvreplay simulate` options that reproduce exactly this cell: its model,
// deployment, pool, fleet, swept settings and load, then the plan's other
// options (PlanRequest::passthrough_args; the tiers' links with tiers).
std::string simulate_args(const PlanRequest& request, const PlanSweep& sweep, const PlanCell& cell);

// plan_objective.cc: "ttft p95 2.4 s over 2000 ms", one a missed target of a
// cell's report's "slo".
std::vector<std::string> missed_target_words(const nlohmann::json& slo);
// plan_objective.cc: why a cell does not serve, and how far it is from it.
struct MissDiagnosis {
  // The worst unmet requirement as a ratio of its limit (1: just met); the
  // nearest miss has the smallest.
  double score = 0.0;
  // What binds it: "memory" (preemptions, requests skipped for the pool),
  // "queueing" (overload, or a TTFT mostly spent waiting), "transfer" (a
  // disaggregated fleet's KV crossing), "compute-bound prefill" or
  // "compute-bound decode" (the steps themselves are too long).
  std::string reason;
  std::string words;  // the shortfall and its parts, for the table
};
MissDiagnosis diagnose_miss(const CellFigures& figures, const PlanDeployment& deployment,
                            double slo_attainment);
// The cell nearest to serving among those `among` accepts that do not
// serve (ties: the objective's value, else fewer GPUs); nullopt when none.
std::optional<std::pair<std::size_t, MissDiagnosis>> nearest_miss(
    const PlanRequest& request, const PlanSweep& sweep,
    const std::function<bool(std::size_t)>& among);
// plan.json's and the table's words for a nearest miss.
nlohmann::json nearest_miss_json(const PlanRequest& request, const PlanSweep& sweep,
                                 std::size_t cell, const MissDiagnosis& miss);
std::string nearest_miss_lines(const PlanRequest& request, const PlanSweep& sweep, std::size_t cell,
                               const MissDiagnosis& miss);
// plan.json's "objective" (--objective): the best serving cell by it, or the
// nearest miss; its lines appended to `table`.
nlohmann::json objective_answer(const PlanRequest& request, const PlanSweep& sweep,
                                std::string& table);
// plan.json's deployment (plan_report.cc).
nlohmann::json deployment_json(const PlanSweep& sweep, std::size_t d);

// plan_merge.cc: every cell and search of the sweep from the parts (checked by
// run_plan_merge to be the shards of one sweep), each exactly once, every
// figure range-checked. Returns the line to print when a part is refused.
std::optional<std::string> fill_from_parts(const std::vector<PlanPart>& parts, PlanSweep& sweep,
                                           bool search_min, bool slo);
// plan_merge_verify.cc: what in a part's cell report contradicts the sweep
// cell it claims to be (its configuration, deployment, fleet, router, GPUs,
// SLOs and price) or the figures derived from its own counts (hit rate,
// throughput, SLO attainment, $), as "FIELD: PROBLEM" under `field`. Run
// after plan_merge.cc's range checks.
std::optional<std::string> cell_identity_problem(const nlohmann::json& report,
                                                 const std::string& field, const PlanCell& cell,
                                                 const PlanDeployment& deployment);
// plan_merge_verify.cc: a merge's answers simulated again, and every cell
// whose figures decide them (README, "Plans on a cluster"): the smallest KV
// memory each search found (its pool serves, one block less does not, every
// swept pool above it serves) or why none (compute-bound: the pool held
// nothing back), and the smallest deployment per GPU kind. An exit code (2,
// one line naming the part and field) when a part's figures are not what
// simulating gives. The fleet answers are answer_fleets'.
std::optional<int> verify_merged_answers(const PlanRequest& request, const PlanSweep& sweep,
                                         PlanSimulator& simulator, unsigned jobs);

// plan.cc: the plan of a part's command line, assembled from `parts`; nullopt
// and `error` when the command line does not parse.
std::optional<int> merge_plan_command(const std::vector<std::string>& command,
                                      std::vector<PlanPart> parts, const PlanMergeRequest& request,
                                      std::string& error);

}  // namespace kvreplay
