// plan-merge: partial reports read, checked against the plan they claim, and merged.
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

#include <CLI/CLI.hpp>

#include <map>

#include "app/command.h"
#include "app/exit_codes.h"
#include "app/options.h"
#include "app/plan/plan_internal.h"
#include "app/terminal.h"
#include "core/memory_budget.h"
#include "formats/requests/request_reader.h"
#include "io/json_file.h"
#include "io/output.h"
#include "io/sha256.h"
#include "io/standard_output.h"
#include "report/duration_text.h"

namespace kvreplay {

namespace {

constexpr const char* kKvreplayVersion = KVREPLAY_VERSION;
// The size cap of a partial report read by plan-merge, and its reason.
constexpr std::uint64_t kMaxPartBytes = std::uint64_t{1} << 30;
constexpr std::string_view kPartTooLarge = "far more than a partial plan";

// The cost model's kind and every constant of both models: what a sweep's

// plan-merge reads every number of a part against the plan it claims to be
// part of: a forged or corrupt part is refused, "FILE: FIELD: PROBLEM", before
// any of it is used (counts that would wrap or size an allocation, shares
// outside [0, 1], pools past the ceiling, cells of another shard, text with
// control characters for the terminal).

// The most shards `plan --shard I/N` accepts (N of at most nine digits).
constexpr std::uint64_t kMaxShards = 999'999'999;
// The most probes one search makes per start: doubling from 1 block to the
// ceiling (2^28: 29 probes), then bisecting it (28), rounded up.
constexpr std::uint64_t kMaxProbesPerStart = 64;
// The longest text read from a part (a warning, a reason).
constexpr std::size_t kMaxPartText = 4096;

std::string field_problem(const std::string& file, std::string_view field,
                          std::string_view problem) {
  return fmt::format("{}: {}: {}", file, field, problem);
}

// A value as a message quotes it: its JSON, cut short.
std::string shown(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

// The value at a dotted path ("blocks.peak_used") under `json`, or nullptr.
const nlohmann::json* find_dotted(const nlohmann::json& json, std::string_view dotted) {
  const nlohmann::json* at = &json;
  while (!dotted.empty()) {
    const std::size_t dot = dotted.find('.');
    if (!at->is_object()) return nullptr;
    auto it = at->find(std::string(dotted.substr(0, dot)));
    if (it == at->end()) return nullptr;
    at = &*it;
    dotted = dot == std::string_view::npos ? std::string_view() : dotted.substr(dot + 1);
  }
  return at;
}

// What a number or text read from a part must be.
enum class Figure {
  kCount,         // an integer >= 0
  kShare,         // a number in [0, 1]
  kAmount,        // a number >= 0
  kAmountOrNull,  // an amount, or null
  kFlag,          // true or false
  kText,          // a string of printable characters, at most kMaxPartText bytes
  kObject,        // an object
  kNone,          // an empty array
};

// What is wrong with `value` as a `figure`, or nullopt.
std::optional<std::string> figure_problem(const nlohmann::json* value, Figure figure) {
  if (value == nullptr) return std::string("missing");
  const nlohmann::json& v = *value;
  switch (figure) {
    case Figure::kCount:
      if (!v.is_number_unsigned()) return shown(v) + " is not a count (an integer >= 0)";
      break;
    case Figure::kShare:
      if (!v.is_number() || !(v.get<double>() >= 0.0 && v.get<double>() <= 1.0)) {
        return shown(v) + " is not a share between 0 and 1";
      }
      break;
    case Figure::kAmountOrNull:
      if (v.is_null()) break;
      [[fallthrough]];
    case Figure::kAmount:
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0.0) {
        return shown(v) + " is not a number >= 0";
      }
      break;
    case Figure::kFlag:
      if (!v.is_boolean()) return shown(v) + " is not true or false";
      break;
    case Figure::kText: {
      if (!v.is_string()) return shown(v) + " is not a string";
      const std::string& text = v.get_ref<const std::string&>();
      if (text.size() > kMaxPartText) {
        return fmt::format("{} bytes of text, more than the {} a part holds", text.size(),
                           kMaxPartText);
      }
      for (char c : text) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          return shown(v) + " holds a control character";
        }
      }
      break;
    }
    case Figure::kObject:
      if (!v.is_object()) return shown(v) + " is not an object";
      break;
    case Figure::kNone:
      if (!v.is_array() || !v.empty()) return shown(v) + " is not an empty array";
      break;
  }
  return std::nullopt;
}

// The figures plan and plan-merge read of a cell's report, and what each must be.
struct FigureRule {
  const char* path;
  Figure figure;
};
constexpr FigureRule kCellFigures[] = {
    {"trace.format", Figure::kText},
    {"trace.sha256", Figure::kText},
    {"requests.total", Figure::kCount},
    {"requests.finished", Figure::kCount},
    {"requests.skipped", Figure::kCount},
    {"requests.skipped_pool_too_small", Figure::kCount},
    {"blocks.peak_used", Figure::kCount},
    {"blocks.peak_in_use", Figure::kCount},
    {"fragmentation.waste_ratio_mean", Figure::kShare},
    {"fragmentation.waste_ratio_at_peak", Figure::kShare},
    {"scheduler.preemptions", Figure::kCount},
    {"scheduler.output_tokens_per_second", Figure::kAmount},
    {"scheduler.virtual_seconds", Figure::kAmount},
    {"prefix_cache.hit_rate", Figure::kShare},
    {"latency", Figure::kObject},
    {"latency.ttft_ms.p99", Figure::kAmount},
    {"latency.tpot_ms.p99", Figure::kAmount},
    {"overload", Figure::kObject},
    {"overload.ratio", Figure::kAmountOrNull},
    {"overload.overloaded", Figure::kFlag},
    {"invariants.checks", Figure::kCount},
    {"invariants.violations", Figure::kNone},
    {"config.pool_blocks", Figure::kCount},
    {"config.simulation.cost", Figure::kObject},
};

// What is wrong with a fleet's figures in the report a part gives for a cell
// of `deployment`: its instances (as many as the deployment's, each peak a
// count), its fleet (there exactly for a fleet, of the deployment's GPUs)
// and its cost (there exactly when the deployment is priced, at its price
// and GPUs).
std::optional<std::string> fleet_report_problem(const nlohmann::json& r, const std::string& field,
                                                const PlanDeployment& deployment) {
  const std::uint32_t instances = deployment.fleet.instances();
  if (instances > 1) {
    if (!r.contains("instances") || !r["instances"].is_array() ||
        r["instances"].size() != instances) {
      return fmt::format("{}.instances: {}, but the cell's fleet has {} instances", field,
                         r.contains("instances") ? shown(r["instances"]) : "missing", instances);
    }
    for (std::size_t i = 0; i < instances; ++i) {
      if (auto problem =
              figure_problem(find_dotted(r["instances"][i], "blocks.peak_used"), Figure::kCount)) {
        return fmt::format("{}.instances[{}].blocks.peak_used: {}", field, i, *problem);
      }
    }
    if (auto problem = figure_problem(find_dotted(r, "fleet.gpus"), Figure::kCount)) {
      return fmt::format("{}.fleet.gpus: {}", field, *problem);
    }
    if (r["fleet"]["gpus"] != deployment.gpus()) {
      return fmt::format("{}.fleet.gpus: {}, but the cell's fleet has {} GPUs", field,
                         shown(r["fleet"]["gpus"]), deployment.gpus());
    }
  } else if (r.contains("instances") || r.contains("fleet")) {
    return fmt::format("{}.{}: present, but the cell is one instance", field,
                       r.contains("instances") ? "instances" : "fleet");
  }
  const std::optional<double>& price = deployment.options.gpu_hour_usd;
  if (r.contains("cost_usd") != price.has_value()) {
    return fmt::format("{}.cost_usd: {}", field,
                       price ? "missing, but the cell is priced" : "present, but no price given");
  }
  if (price) {
    for (const char* path : {"cost_usd.usd_per_hour", "cost_usd.usd_per_million_output_tokens"}) {
      if (auto problem = figure_problem(find_dotted(r, path), Figure::kAmountOrNull)) {
        return fmt::format("{}.{}: {}", field, path, *problem);
      }
    }
    // As cost_usd_json computes it: the price times the GPUs.
    const double per_hour = *price * static_cast<double>(deployment.gpus());
    if (r["cost_usd"]["usd_per_hour"] != per_hour) {
      return fmt::format("{}.cost_usd.usd_per_hour: {}, but {} GPUs at ${} an hour cost {}", field,
                         shown(r["cost_usd"]["usd_per_hour"]), deployment.gpus(), *price, per_hour);
    }
  }
  return std::nullopt;
}

// What is wrong with the report a part gives for `cell`, as "FIELD: PROBLEM"
// under `field` ("cells[3].report"), or nullopt. `trace_sha256`: the part's
// trace; `slo`: whether the plan has SLOs (then every report has "slo").
std::optional<std::string> cell_report_problem(const nlohmann::json& r, const std::string& field,
                                               const PlanCell& cell,
                                               const PlanDeployment& deployment,
                                               const std::string& trace_sha256, bool slo) {
  if (!r.is_object()) return fmt::format("{}: {} is not an object", field, shown(r));
  for (const FigureRule& rule : kCellFigures) {
    if (auto problem = figure_problem(find_dotted(r, rule.path), rule.figure)) {
      return fmt::format("{}.{}: {}", field, rule.path, *problem);
    }
  }
  if (slo != r.contains("slo")) {
    return fmt::format(
        "{}.slo: {}", field,
        slo ? "missing, but the plan has SLOs" : "present, but the plan has no SLOs");
  }
  if (slo) {
    if (auto problem = figure_problem(find_dotted(r, "slo"), Figure::kObject)) {
      return fmt::format("{}.slo: {}", field, *problem);
    }
    if (auto problem = figure_problem(find_dotted(r, "slo.met"), Figure::kFlag)) {
      return fmt::format("{}.slo.met: {}", field, *problem);
    }
    if (r["slo"].contains("attainment")) {
      if (auto problem = figure_problem(find_dotted(r, "slo.attainment"), Figure::kShare)) {
        return fmt::format("{}.slo.attainment: {}", field, *problem);
      }
    }
  }
  if (auto problem = fleet_report_problem(r, field, deployment)) return problem;
  if (r["trace"]["sha256"] != trace_sha256) {
    return fmt::format("{}.trace.sha256: {}, but the part's trace is {}", field,
                       shown(r["trace"]["sha256"]), trace_sha256);
  }
  const auto total = r["requests"]["total"].get<std::uint64_t>();
  const auto finished = r["requests"]["finished"].get<std::uint64_t>();
  const auto skipped = r["requests"]["skipped"].get<std::uint64_t>();
  if (add_sat(finished, skipped) > total) {
    return fmt::format("{}.requests: {} finished and {} skipped of {} requests", field, finished,
                       skipped, total);
  }
  if (r["requests"]["skipped_pool_too_small"].get<std::uint64_t>() > skipped) {
    return fmt::format("{}.requests.skipped_pool_too_small: more than the {} skipped", field,
                       skipped);
  }
  const std::uint32_t pool = cell.config.kv.pool_blocks;
  if (r["config"]["pool_blocks"].get<std::uint64_t>() != pool) {
    return fmt::format(
        "{}.config.pool_blocks: {}, but the sweep's cell --model {} --page-tokens "
        "{} --kv-memory {} has {} blocks",
        field, r["config"]["pool_blocks"].get<std::uint64_t>(), cell.model, cell.page_tokens,
        cell.kv_memory, pool);
  }
  // A fleet's peak is its instances' peaks summed, each within its own pool.
  const auto peak_used = r["blocks"]["peak_used"].get<std::uint64_t>();
  const std::uint64_t pools = deployment.fleet.instances();
  if (peak_used > pool * pools) {
    return pools == 1 ? fmt::format("{}.blocks.peak_used: {} blocks, more than the pool's {}",
                                    field, peak_used, pool)
                      : fmt::format("{}.blocks.peak_used: {} blocks, more than {} pools of {}",
                                    field, peak_used, pools, pool);
  }
  for (std::size_t i = 0; pools > 1 && i < pools; ++i) {
    const auto instance_peak = r["instances"][i]["blocks"]["peak_used"].get<std::uint64_t>();
    if (instance_peak > pool) {
      return fmt::format("{}.instances[{}].blocks.peak_used: {} blocks, more than the pool's {}",
                         field, i, instance_peak, pool);
    }
  }
  if (r["blocks"]["peak_in_use"].get<std::uint64_t>() > peak_used) {
    return fmt::format("{}.blocks.peak_in_use: {}, more than the {} blocks used at the peak", field,
                       r["blocks"]["peak_in_use"].get<std::uint64_t>(), peak_used);
  }
  return std::nullopt;
}

// plan-merge: every cell and search of the sweep from the parts (checked by
// run_plan_merge to be the shards of one sweep), each exactly once, every
// figure range-checked. Returns the line to print when a part is refused.

// The plan the parts claim to be of, as this plan-merge resolved it.
struct MergedSweep {
  const std::string& sweep_sha256;
  std::size_t units = 0;
  bool search_min = true;
  bool slo = false;
  const std::vector<std::size_t>& cell_group;  // each cell's search (its unit with the search)
  const std::vector<PlanDeployment>& deployments;
};

// One part as fill_parts_into reads it, and what it filled so far.
struct PartReading {
  const nlohmann::json& json;
  const std::string& file;
  const MergedSweep& sweep;
  std::vector<PlanCell>& cells;
  std::vector<MinSearch>& searches;
  std::vector<const std::string*>& cell_from;
  std::vector<const std::string*>& search_from;
  std::uint64_t shard_index = 1;  // run_plan_merge checked 1 <= index <= count
  std::uint64_t shard_count = 1;
  std::string trace_sha256;

  std::optional<std::string> other_shard(std::string_view what, std::size_t i,
                                         std::size_t unit) const {
    if (unit % shard_count == shard_index - 1) return std::nullopt;
    return fmt::format("{} {} is shard {}/{}'s, not this part's {}/{}", what, i,
                       unit % shard_count + 1, shard_count, shard_index, shard_count);
  }
};

// The part's cells[k]: checked, and its figures filled into the sweep's cell.
std::optional<std::string> read_part_cell(PartReading& at, std::size_t k) {
  const std::string& file = at.file;
  const MergedSweep& sweep = at.sweep;
  std::vector<PlanCell>& cells = at.cells;
  std::vector<const std::string*>& cell_from = at.cell_from;
  const nlohmann::json& entry = at.json.at("cells")[k];
  const std::string field = fmt::format("cells[{}]", k);
  if (auto problem = figure_problem(&entry, Figure::kObject)) {
    return field_problem(file, field, *problem);
  }
  if (auto problem = figure_problem(find_dotted(entry, "index"), Figure::kCount)) {
    return field_problem(file, field + ".index", *problem);
  }
  const auto index = entry["index"].get<std::uint64_t>();
  if (index >= cells.size()) {
    return field_problem(
        file, field + ".index",
        fmt::format("cell {} is not in the sweep ({} cells)", index, cells.size()));
  }
  const std::size_t i = static_cast<std::size_t>(index);
  if (auto problem = at.other_shard("cell", i, sweep.search_min ? sweep.cell_group[i] : i)) {
    return field_problem(file, field + ".index", *problem);
  }
  if (cell_from[i] != nullptr) {
    return field_problem(file, field + ".index",
                         fmt::format("cell {} again: {} holds it already", i, cells[i].from));
  }
  cell_from[i] = &file;
  cells[i].from = fmt::format("{}: {}", file, field);
  const PlanDeployment& deployment = sweep.deployments[cells[i].deployment];
  const nlohmann::json& report = entry.contains("report") ? entry["report"] : nullptr;
  if (auto problem = cell_report_problem(report, field + ".report", cells[i], deployment,
                                         at.trace_sha256, sweep.slo)) {
    return fmt::format("{}: {}", file, *problem);
  }
  if (auto problem = cell_identity_problem(report, field + ".report", cells[i], deployment)) {
    return fmt::format("{}: {}", file, *problem);
  }
  const nlohmann::json* warnings = find_dotted(entry, "warnings");
  const nlohmann::json* reasons = find_dotted(entry, "warning_reasons");
  if (warnings == nullptr || !warnings->is_array()) {
    return field_problem(file, field + ".warnings", "not an array");
  }
  if (reasons == nullptr || !reasons->is_array()) {
    return field_problem(file, field + ".warning_reasons", "not an array");
  }
  if (warnings->size() != reasons->size()) {
    return field_problem(
        file, field + ".warning_reasons",
        fmt::format("{} reasons for {} warnings", reasons->size(), warnings->size()));
  }
  SimulationResult result;
  for (std::size_t w = 0; w < warnings->size(); ++w) {
    if (auto problem = figure_problem(&(*warnings)[w], Figure::kText)) {
      return field_problem(file, fmt::format("{}.warnings[{}]", field, w), *problem);
    }
    const nlohmann::json& reason = (*reasons)[w];
    if (!reason.is_number_unsigned() || reason.get<std::uint64_t>() >= kSkipReasons) {
      return field_problem(file, fmt::format("{}.warning_reasons[{}]", field, w),
                           fmt::format("unknown skip reason {}", shown(reason)));
    }
    result.warnings.push_back((*warnings)[w].get<std::string>());
    result.warning_reasons.push_back(static_cast<SkipReason>(reason.get<std::uint64_t>()));
  }
  result.report = entry["report"];
  cells[i].figures = CellFigures::read(result.report, false);
  cells[i].result = std::move(result);
  return std::nullopt;
}

// The part's searches[k]: checked, and its answer filled into the sweep's search.
std::optional<std::string> read_part_search(PartReading& at, std::size_t k) {
  const std::string& file = at.file;
  const std::vector<PlanCell>& cells = at.cells;
  std::vector<MinSearch>& searches = at.searches;
  std::vector<const std::string*>& search_from = at.search_from;
  const nlohmann::json& entry = at.json.at("searches")[k];
  const std::string field = fmt::format("searches[{}]", k);
  if (auto problem = figure_problem(&entry, Figure::kObject)) {
    return field_problem(file, field, *problem);
  }
  for (const char* key : {"index", "probes"}) {
    if (auto problem = figure_problem(find_dotted(entry, key), Figure::kCount)) {
      return field_problem(file, field + "." + key, *problem);
    }
  }
  const auto index = entry["index"].get<std::uint64_t>();
  if (index >= searches.size()) {
    return field_problem(
        file, field + ".index",
        fmt::format("search {} is not in the sweep ({} searches)", index, searches.size()));
  }
  const std::size_t g = static_cast<std::size_t>(index);
  if (auto problem = at.other_shard("search", g, g)) {
    return field_problem(file, field + ".index", *problem);
  }
  if (search_from[g] != nullptr) {
    return field_problem(file, field + ".index",
                         fmt::format("search {} again: {} holds it already", g, searches[g].from));
  }
  search_from[g] = &file;
  MinSearch& search = searches[g];
  search.from = fmt::format("{}: {}", file, field);
  // Raised past: swept pools of this search's cells, each larger than the last.
  const nlohmann::json* raised = find_dotted(entry, "raised_past_pool_blocks");
  if (raised == nullptr || !raised->is_array()) {
    return field_problem(file, field + ".raised_past_pool_blocks", "not an array");
  }
  for (std::size_t r = 0; r < raised->size(); ++r) {
    const std::string raised_field = fmt::format("{}.raised_past_pool_blocks[{}]", field, r);
    const nlohmann::json& value = (*raised)[r];
    if (auto problem = figure_problem(&value, Figure::kCount)) {
      return field_problem(file, raised_field, *problem);
    }
    const auto blocks = value.get<std::uint64_t>();
    const bool swept = std::any_of(cells.begin(), cells.end(), [&](const PlanCell& cell) {
      return cell.model == search.model && cell.page_tokens == search.page_tokens &&
             cell.deployment == search.deployment && cell.config.kv.pool_blocks == blocks;
    });
    if (!swept) {
      return field_problem(file, raised_field,
                           fmt::format("{} blocks is no swept pool of this search", blocks));
    }
    if (!search.raised_past.empty() && blocks <= search.raised_past.back()) {
      return field_problem(file, raised_field, "not above the one before");
    }
    search.raised_past.push_back(static_cast<std::uint32_t>(blocks));
  }
  const auto probes = entry["probes"].get<std::uint64_t>();
  if (probes > kMaxProbesPerStart * (1 + raised->size())) {
    return field_problem(file, field + ".probes",
                         fmt::format("{} probes, more than a search makes ({} a start)", probes,
                                     kMaxProbesPerStart));
  }
  search.probes = static_cast<std::uint32_t>(probes);
  const nlohmann::json* pool = find_dotted(entry, "pool_blocks");
  const nlohmann::json* unmet = find_dotted(entry, "unmet");
  if (pool == nullptr || unmet == nullptr || pool->is_null() == unmet->is_null()) {
    return field_problem(file, field,
                         "not exactly one of \"pool_blocks\" (the answer) and \"unmet\" (why "
                         "none)");
  }
  auto pool_problem = [&](const nlohmann::json& value) -> std::optional<std::string> {
    if (auto problem = figure_problem(&value, Figure::kCount)) return problem;
    const auto blocks = value.get<std::uint64_t>();
    if (blocks < 1 || blocks > kMaxSupportedPoolBlocks) {
      return fmt::format("{} blocks, not within 1 to {} (the largest pool kvreplay simulates)",
                         blocks, kMaxSupportedPoolBlocks);
    }
    return std::nullopt;
  };
  if (!pool->is_null()) {
    if (auto problem = pool_problem(*pool)) {
      return field_problem(file, field + ".pool_blocks", *problem);
    }
    if (!search.raised_past.empty() && pool->get<std::uint64_t>() <= search.raised_past.back()) {
      return field_problem(file, field + ".pool_blocks",
                           "not above the swept pools it was raised past");
    }
    search.blocks = pool->get<std::uint32_t>();
    return std::nullopt;
  }
  if (auto problem = figure_problem(unmet, Figure::kObject)) {
    return field_problem(file, field + ".unmet", *problem);
  }
  if (auto problem = figure_problem(find_dotted(*unmet, "reason"), Figure::kText)) {
    return field_problem(file, field + ".unmet.reason", *problem);
  }
  auto why = parse_search_unmet((*unmet)["reason"].get<std::string>());
  if (!why) {
    return field_problem(file, field + ".unmet.reason",
                         fmt::format("{} is not compute_bound, block_ceiling or memory_limit",
                                     shown((*unmet)["reason"])));
  }
  if (auto problem = figure_problem(find_dotted(*unmet, "message"), Figure::kText)) {
    return field_problem(file, field + ".unmet.message", *problem);
  }
  const nlohmann::json* unmet_pool = find_dotted(*unmet, "pool_blocks");
  if (auto problem = unmet_pool == nullptr ? std::optional<std::string>("missing")
                                           : pool_problem(*unmet_pool)) {
    return field_problem(file, field + ".unmet.pool_blocks", *problem);
  }
  search.unmet = why;
  search.unmet_blocks = unmet_pool->get<std::uint32_t>();
  search.unmet_message = (*unmet)["message"].get<std::string>();
  return std::nullopt;
}

std::optional<std::string> fill_parts_into(const std::vector<PlanPart>& parts,
                                           const MergedSweep& sweep, std::vector<PlanCell>& cells,
                                           std::vector<MinSearch>& searches) {
  std::vector<const std::string*> cell_from(cells.size(), nullptr);
  std::vector<const std::string*> search_from(searches.size(), nullptr);
  auto refuse = [](const std::string& why) { return "kvreplay plan-merge: " + why; };
  for (const PlanPart& part : parts) {
    const nlohmann::json& json = part.json;
    const std::string& file = part.path;
    if (json.at("sweep_sha256").get<std::string>() != sweep.sweep_sha256 ||
        json.at("units").get<std::uint64_t>() != sweep.units) {
      return refuse(fmt::format(
          "{}: its sweep resolves differently here (a model preset, a --model-config file or "
          "this kvreplay changed since the part was written): rerun the shards",
          file));
    }
    PartReading at{json, file, sweep, cells, searches, cell_from, search_from, 1, 1, std::string()};
    at.shard_index = json["shard"]["index"].get<std::uint64_t>();
    at.shard_count = json["shard"]["count"].get<std::uint64_t>();
    at.trace_sha256 = json["trace"]["sha256"].get<std::string>();
    for (std::size_t k = 0; k < json.at("cells").size(); ++k) {
      if (auto problem = read_part_cell(at, k)) return problem;
    }
    for (std::size_t k = 0; k < json.at("searches").size(); ++k) {
      if (auto problem = read_part_search(at, k)) return problem;
    }
  }
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (cell_from[i] == nullptr) {
      return refuse(fmt::format("no part holds the cell --model {} --page-tokens {} --kv-memory {}",
                                cells[i].model, cells[i].page_tokens, cells[i].kv_memory));
    }
  }
  for (std::size_t g = 0; g < searches.size(); ++g) {
    if (search_from[g] == nullptr) {
      return refuse(fmt::format("no part holds the search of --model {} --page-tokens {}",
                                searches[g].model, searches[g].page_tokens));
    }
  }
  // Every cell simulated the one trace: the same requests.
  for (std::size_t i = 1; i < cells.size(); ++i) {
    const nlohmann::json& total = cells[i].result->report["requests"]["total"];
    if (total != cells[0].result->report["requests"]["total"]) {
      return field_problem(
          *cell_from[i], fmt::format("cells[].report.requests.total (cell {})", i),
          fmt::format("{} requests, but the cells of {} have {}", total.dump(), *cell_from[0],
                      cells[0].result->report["requests"]["total"].dump()));
    }
  }
  return std::nullopt;
}

// What is wrong with a part on its own, or nullopt.
std::optional<std::string> part_problem(const PlanPart& part) {
  const nlohmann::json& j = part.json;
  if (!j.is_object() || !j.contains("kvreplay_plan_part")) {
    return fmt::format(
        "{}: not a partial plan (kvreplay plan --shard I/N --report FILE writes them)", part.path);
  }
  if (j["kvreplay_plan_part"] != kPlanPartVersion) {
    return fmt::format("{}: a partial plan of format {}; this kvreplay reads format {}", part.path,
                       j["kvreplay_plan_part"].dump(), kPlanPartVersion);
  }
  if (j.value("kvreplay", std::string()) != kKvreplayVersion) {
    return fmt::format("{}: written by kvreplay {}; this is kvreplay {}: rerun the shards",
                       part.path, j.value("kvreplay", std::string("?")), kKvreplayVersion);
  }
  for (const char* key :
       {"shard", "command", "trace", "sweep_sha256", "units", "cells", "searches"}) {
    if (!j.contains(key)) return fmt::format("{}: a partial plan without \"{}\"", part.path, key);
  }
  const nlohmann::json& shard = j["shard"];
  if (!shard.is_object()) {
    return field_problem(part.path, "shard", shown(shard) + " is not {\"index\": I, \"count\": N}");
  }
  for (const char* key : {"index", "count"}) {
    if (auto problem = figure_problem(find_dotted(shard, key), Figure::kCount)) {
      return field_problem(part.path, fmt::format("shard.{}", key), *problem);
    }
  }
  const auto count = shard["count"].get<std::uint64_t>();
  const auto index = shard["index"].get<std::uint64_t>();
  if (count < 1 || count > kMaxShards) {
    return field_problem(
        part.path, "shard.count",
        fmt::format("{} shards, not within 1 to {} (what --shard I/N takes)", count, kMaxShards));
  }
  if (index < 1 || index > count) {
    return field_problem(part.path, "shard.index",
                         fmt::format("{} is not within 1 to the {} shards", index, count));
  }
  if (auto problem = figure_problem(&j["units"], Figure::kCount)) {
    return field_problem(part.path, "units", *problem);
  }
  if (auto problem = figure_problem(find_dotted(j, "trace.sha256"), Figure::kText)) {
    return field_problem(part.path, "trace.sha256", *problem);
  }
  if (!j["command"].is_array() || !j["trace"].is_object() || !j["trace"].contains("sha256") ||
      !j["sweep_sha256"].is_string() || !j["cells"].is_array() || !j["searches"].is_array()) {
    return fmt::format("{}: a malformed partial plan", part.path);
  }
  for (const nlohmann::json& argument : j["command"]) {
    if (!argument.is_string()) return fmt::format("{}: \"command\" holds a non-string", part.path);
  }
  return std::nullopt;
}

class PlanMergeCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("PARTS", request_.part_paths,
                   "the partial reports of `plan --shard I/N --report FILE`, one per shard")
        ->required();
    app.add_option("--report", request_.report_path,
                   "write the plan as JSON here (- for stdout; the table then goes to stderr)");
    app.add_option("--html", request_.html_path, "write the plan as a self-contained HTML page");
    app.add_flag("-q,--quiet", request_.quiet, "print no table");
    app.add_flag("--verify-all", request_.verify_all,
                 "simulate every cell again and compare its whole report, not only the cells "
                 "that decide the answers (it costs the unsharded sweep's simulations)");
    app.footer(
        "Writes exactly what the unsharded plan would have: the same table, and the same report "
        "and HTML byte for byte. Refuses (exit 2) parts of different traces, sweeps or kvreplay "
        "versions, and a set that misses or repeats a shard. Model config files named by "
        "--model-config must be readable here as they were for the shards.\n"
        "Example:\n"
        "  for i in 1 2 3; do kvreplay plan traces/requests/azure_conv.csv --kv-memory "
        "1GiB,2GiB,4GiB \\\n"
        "      --shard $i/3 --report part-$i.json; done\n"
        "  kvreplay plan-merge part-*.json --report plan.json --html plan.html");
  }
  int run() override { return run_plan_merge(request_); }

 private:
  PlanMergeRequest request_;
};

int merge_parts(const PlanMergeRequest& request) {
  auto refuse = [](const std::string& why) {
    eprint("kvreplay plan-merge: {}\n", why);
    return kExitInput;
  };
  std::vector<PlanPart> parts;
  for (const std::string& path : request.part_paths) {
    auto json = read_json_file(path, kMaxPartBytes, kPartTooLarge);
    if (!json) return refuse(json.error());
    parts.push_back(PlanPart{path, std::move(json).value()});
    if (auto problem = part_problem(parts.back())) {  // "FILE: ..."
      eprint("{}\n", *problem);
      return kExitInput;
    }
  }
  // The N shards of one sweep of one trace, each once.
  const PlanPart& first = parts.front();
  const std::uint64_t count = first.json["shard"]["count"].get<std::uint64_t>();
  // By shard index: a map, as N (checked to be at most kMaxShards) may be far
  // more than the parts given.
  std::map<std::uint64_t, const PlanPart*> by_index;
  for (const PlanPart& part : parts) {
    const nlohmann::json& j = part.json;
    if (j["trace"]["sha256"] != first.json["trace"]["sha256"]) {
      return refuse(fmt::format(
          "{} and {} are parts of plans of different traces (sha256 {} and {})", first.path,
          part.path, first.json["trace"]["sha256"].dump(), j["trace"]["sha256"].dump()));
    }
    // The fingerprint covers everything that decides the figures (the command
    // lines differ in --shard and --report, and may in --jobs).
    if (j["sweep_sha256"] != first.json["sweep_sha256"]) {
      return refuse(fmt::format("{} and {} are parts of different sweeps", first.path, part.path));
    }
    if (j["shard"]["count"].get<std::uint64_t>() != count) {
      return refuse(fmt::format("{} is one of {} shards, {} one of {}", first.path, count,
                                part.path, j["shard"]["count"].get<std::uint64_t>()));
    }
    const std::uint64_t index = j["shard"]["index"].get<std::uint64_t>();
    if (auto [at, fresh] = by_index.emplace(index, &part); !fresh) {
      return refuse(
          fmt::format("{} and {} are both shard {}/{}", at->second->path, part.path, index, count));
    }
  }
  // Each index once, each within 1..count: the first missing one is at most
  // the number of parts given plus one.
  for (std::uint64_t index = 1; index <= count; ++index) {
    if (by_index.count(index) == 0) {
      return refuse(fmt::format("shard {}/{} is missing ({} of {} parts given)", index, count,
                                parts.size(), count));
    }
  }
  // The plan the parts came from, rebuilt from its command line.
  std::vector<std::string> arguments = first.json["command"].get<std::vector<std::string>>();
  const std::string first_path = first.path;
  std::string error;
  try {
    auto code = merge_plan_command(arguments, std::move(parts), request, error);
    if (code) return *code;
  } catch (const nlohmann::json::exception& malformed) {
    return refuse(fmt::format("a part's figures are malformed: {}", malformed.what()));
  }
  return refuse(
      fmt::format("{}: its plan command line does not parse here: {}", first_path, error));
}

}  // namespace

std::optional<std::string> fill_from_parts(const std::vector<PlanPart>& parts, PlanSweep& sweep,
                                           bool search_min, bool slo) {
  const MergedSweep merged{sweep.sweep_sha256, sweep.units,      search_min, slo,
                           sweep.cell_group,   sweep.deployments};
  return fill_parts_into(parts, merged, sweep.cells, sweep.searches);
}

int run_plan_merge(const PlanMergeRequest& request) {
  try {
    return merge_parts(request);
  } catch (const std::bad_alloc&) {
    eprint("kvreplay plan-merge: out of memory reading the parts\n");
    return kExitInput;
  }
}

std::unique_ptr<Command> make_plan_merge_command() {
  return std::make_unique<PlanMergeCommand>();
}

}  // namespace kvreplay
