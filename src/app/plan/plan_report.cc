// The plan's table, its report (plan.json, and the HTML page of it), and a shard's partial report.
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

// plan.json's min_kv_memory[].unmet (and a part's searches[].unmet): null
// when the search found a pool, else why not.
nlohmann::json unmet_json(const MinSearch& search) {
  if (!search.unmet) return nullptr;
  return {{"reason", std::string(to_string(*search.unmet))},
          {"pool_blocks", search.unmet_blocks},
          {"message", search.unmet_message}};
}

namespace {

// One cell of a partial report: the figures run_plan reads of a simulation.
nlohmann::json cell_part_json(std::size_t index, const SimulationResult& result) {
  nlohmann::json reasons = nlohmann::json::array();
  for (SkipReason reason : result.warning_reasons) reasons.push_back(static_cast<int>(reason));
  return {{"index", index},
          {"report", result.report},
          {"warnings", result.warnings},
          {"warning_reasons", reasons}};
}

}  // namespace

nlohmann::json part_json(const PlanRequest& request, const PlanSweep& sweep,
                         const std::string& trace_sha256) {
  const std::vector<PlanCell>& cells = sweep.cells;
  const std::vector<MinSearch>& searches = sweep.searches;
  nlohmann::json part = {
      {"kvreplay_plan_part", kPlanPartVersion},
      {"kvreplay", kKvreplayVersion},
      {"shard", {{"index", request.shard->index}, {"count", request.shard->count}}},
      {"command", request.command},
      {"trace", {{"path", request.trace_path}, {"sha256", trace_sha256}}},
      {"sweep_sha256", sweep.sweep_sha256},
      {"units", sweep.units}};
  nlohmann::json part_cells = nlohmann::json::array();
  for (std::size_t i : sweep.run_cells) part_cells.push_back(cell_part_json(i, *cells[i].result));
  part["cells"] = std::move(part_cells);
  nlohmann::json part_searches = nlohmann::json::array();
  for (std::size_t g = 0; g < searches.size(); ++g) {
    if (!sweep.unit_runs_here(g)) continue;
    const MinSearch& search = searches[g];
    part_searches.push_back(
        {{"index", g},
         {"pool_blocks", search.blocks ? nlohmann::json(*search.blocks) : nlohmann::json(nullptr)},
         {"probes", search.probes},
         {"raised_past_pool_blocks", search.raised_past},
         {"unmet", unmet_json(search)}});
  }
  part["searches"] = std::move(part_searches);
  return part;
}

nlohmann::json deployment_json(const PlanSweep& sweep, std::size_t d) {
  const PlanDeployment& deployment = sweep.deployments[d];
  nlohmann::json out{
      {"gpu", deployment.gpu ? nlohmann::json(*deployment.gpu) : nlohmann::json(nullptr)},
      {"tp", deployment.tp},
      {"pp", deployment.pp},
      {"gpus", deployment.gpus()},
      {"label", deployment_label(deployment)}};
  if (deployment.memory_fraction) out["gpu_memory_utilization"] = *deployment.memory_fraction;
  if (!deployment.setting_labels.empty()) out["swept"] = deployment.setting_labels;
  if (sweep.fleet_sweep) out["fleet"] = fleet_json(deployment.fleet);
  if (deployment.options.gpu_hour_usd) out["gpu_hour_usd"] = *deployment.options.gpu_hour_usd;
  return out;
}

namespace {

// With deployments, each row starts with its deployment ("h100-80gb x4 (tp 4)").
std::string deployment_column(const PlanSweep& sweep, std::size_t d) {
  return sweep.show_deployments
             ? fmt::format("{:<{}} ", deployment_label(sweep.deployments[d]), sweep.label_width)
             : std::string();
}

// plan.json's trace, simulation and config: what every cell shares.
nlohmann::json plan_header(const PlanRequest& request, const PlanSweep& sweep) {
  const std::vector<PlanCell>& cells = sweep.cells;
  const SimOptions& options = request.options;
  const bool slo = options.slo.any();
  nlohmann::json plan;
  plan["kvreplay_plan"] = 1;
  plan["trace"] = {{"path", request.trace_path}};
  if (!cells.empty()) {
    plan["trace"]["format"] = cells[0].figures->trace_format;
    plan["trace"]["requests"] = cells[0].figures->requests_total;
    plan["trace"]["sha256"] = cells[0].figures->trace_sha256;
  }
  plan["simulation"] = sim_options_json(options);
  plan["simulation"]["check"] = options.check.name();
  if (slo) plan["simulation"]["slo_attainment"] = request.slo_attainment;
  if (!cells.empty()) {
    // The cost model as the simulations resolved it (its GPU is each cell's deployment's).
    nlohmann::json cost = cells[0].figures->cost;
    cost.erase("gpu");
    plan["simulation"]["cost"] = std::move(cost);
  }
  // Every setting that changes a figure, as the sweep resolved it (the swept
  // model, page size and pool vary per cell: cells[].config).
  if (!cells.empty()) {
    // Keys of the model or the sweep point always vary per cell; any other key
    // is common when every cell agrees on it (max_seq_tokens follows the model's
    // context length unless --max-seq-tokens is given).
    nlohmann::json common = cells[0].config.to_json();
    for (const char* swept :
         {"model", "model_source", "parameters", "layers", "kv_heads", "head_dim", "kv_tensors",
          "kv_cache_groups", "page_tokens", "pool_blocks", "kv_memory", "bytes_per_token",
          "block_bytes", "pool_bytes", "weights_bytes_per_gpu", "activation_reserve_bytes"}) {
      common.erase(swept);
    }
    for (const PlanCell& cell : cells) {
      const nlohmann::json config = cell.config.to_json();
      std::vector<std::string> differing;
      for (auto it = common.begin(); it != common.end(); ++it) {
        if (!config.contains(it.key()) || config[it.key()] != it.value()) {
          differing.push_back(it.key());
        }
      }
      for (const std::string& key : differing) common.erase(key);
    }
    plan["config"] = std::move(common);
  }
  return plan;
}

// The table's SLO column: the joint rule's attainment (with a * when a
// percentile target is missed), or met / miss for targets alone; empty
// without SLOs.
std::string slo_column(const CellFigures& f) {
  if (!f.slo_met) return std::string();
  const bool targets_met =
      std::all_of(f.slo.at("targets").begin(), f.slo.at("targets").end(),
                  [](const nlohmann::json& t) { return t.at("met").get<bool>(); });
  if (f.slo_attainment) {
    return fmt::format(" {:>7}",
                       fmt::format("{:.2f}%{}", *f.slo_attainment * 100, targets_met ? "" : "*"));
  }
  return fmt::format(" {:>7}", targets_met ? "met" : "miss");
}

// The table's rows of the cells (after its header), and plan.json's cells.
nlohmann::json cell_rows(const PlanRequest& request, const PlanSweep& sweep, std::string& table,
                         bool& any_skipped) {
  const std::vector<PlanCell>& cells = sweep.cells;
  const bool show_deployments = sweep.show_deployments;
  nlohmann::json rows = nlohmann::json::array();
  table =
      (show_deployments ? fmt::format("{:<{}} ", "deployment", sweep.label_width) : std::string()) +
      fmt::format(
          "{:<15} {:>6} {:>10} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8} {:>10} "
          "{:>10} {:>10} {:>8} {:>8} {:>6}{}\n",
          "model", "page", "kv_memory", "blocks", "peak", "in_use", "waste", "preempt", "hit_rate",
          "finished", "skipped", "out_tok/s", "p95_ttft", "p99_ttft", "p95_tpot", "p99_tpot",
          "load", request.options.slo.any() ? fmt::format(" {:>7}", "slo") : std::string());
  // With prices: $ per million output tokens within the SLOs, a column of its own.
  const bool priced = std::any_of(cells.begin(), cells.end(), [](const PlanCell& cell) {
    return cell.figures && cell.figures->usd_per_hour.has_value();
  });
  if (priced) table.insert(table.size() - 1, fmt::format(" {:>9}", "usd/Mtok"));
  // With tiers: the hit rate counting their hits, a column of its own.
  const bool tiered = std::any_of(cells.begin(), cells.end(), [](const PlanCell& cell) {
    return cell.figures && cell.figures->hit_rate_with_tiers.has_value();
  });
  if (tiered) table.insert(table.size() - 1, fmt::format(" {:>9}", "tier_hit"));
  for (const PlanCell& cell : cells) {
    const CellFigures& f = *cell.figures;
    any_skipped = any_skipped || f.skipped > f.skipped_pool_too_small;
    nlohmann::json row = {{"model", cell.model},
                          {"label", model_label(cell.config)},
                          {"config", cell.config.to_json()},
                          {"peak_in_use", f.peak_in_use},
                          {"page_tokens", cell.page_tokens},
                          {"kv_memory", cell.kv_memory},
                          {"kv_memory_bytes", cell.config.kv_memory.value_or(0)},
                          {"pool_blocks", cell.config.kv.pool_blocks},
                          {"peak_used", f.peak_used},
                          {"waste_ratio_mean", f.waste_ratio_mean},
                          {"waste_ratio_at_peak", f.waste_ratio_at_peak},
                          {"preemptions", f.preemptions},
                          {"hit_rate", f.hit_rate},
                          {"finished", f.finished},
                          {"skipped", f.skipped},
                          {"output_tokens_per_second", f.output_tokens_per_second},
                          {"virtual_seconds", f.virtual_seconds},
                          {"latency", f.latency},
                          {"overload", f.overload},
                          {"invariant_checks", f.invariant_checks}};
    if (f.slo_met) row["slo"] = f.slo;
    row["prefix_cache"] = f.prefix_cache;
    if (!f.offload.is_null()) row["offload"] = f.offload;
    if (!f.cost_usd.is_null()) row["cost_usd"] = f.cost_usd;
    // A fleet's peaks are its instances' summed: beside them, every instance's pool.
    const std::uint64_t pools = sweep.deployments[cell.deployment].fleet.instances();
    const std::uint64_t blocks = std::uint64_t{cell.config.kv.pool_blocks} * pools;
    if (sweep.fleet_sweep) row["fleet_pool_blocks"] = blocks;
    if (!f.fleet.is_null()) row["fleet"] = f.fleet;
    if (show_deployments) row["deployment"] = deployment_json(sweep, cell.deployment);
    table +=
        deployment_column(sweep, cell.deployment) +
        fmt::format(
            "{:<15} {:>6} {:>10} {:>9} {:>9} {:>9} {:>7.2f}% {:>8} {:>8.4f} {:>9} {:>8} {:>10.1f} "
            "{:>10} {:>10} {:>8} {:>8} {:>6}{}\n",
            model_label(cell.config), cell.page_tokens, cell.kv_memory, blocks, f.peak_used,
            f.peak_in_use, f.waste_ratio_mean * 100.0, f.preemptions, f.hit_rate, f.finished,
            f.skipped, f.output_tokens_per_second, ms_text(f.p95_ttft_ms), ms_text(f.p99_ttft_ms),
            ms_text(f.p95_tpot_ms), ms_text(f.p99_tpot_ms),
            !f.overload_ratio ? std::string("-")
                              : fmt::format("{:.2f}{}", *f.overload_ratio, f.overloaded ? "!" : ""),
            slo_column(f));
    if (priced) {
      table.insert(table.size() - 1, f.usd_per_million_tokens
                                         ? fmt::format(" {:>9.3f}", *f.usd_per_million_tokens)
                                         : fmt::format(" {:>9}", "-"));
    }
    if (tiered) {
      table.insert(table.size() - 1, f.hit_rate_with_tiers
                                         ? fmt::format(" {:>9.4f}", *f.hit_rate_with_tiers)
                                         : fmt::format(" {:>9}", "-"));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// The smallest deployment per GPU kind that serves the trace with no
// preemption and nothing skipped, its pool sized by the GPU (no --kv-memory):
// the fewest GPUs (then the smaller tp) such that every swept deployment of
// that kind with at least as many GPUs serves too (deployments, like memory,
// are not assumed monotone: a larger one that preempts raises the answer).
nlohmann::json min_deployment_rows(const PlanRequest& request, const PlanSweep& sweep,
                                   const std::string& slo_words, std::string& table) {
  const std::vector<PlanCell>& cells = sweep.cells;
  const std::vector<PlanDeployment>& deployments = sweep.deployments;
  const bool show_deployments = sweep.show_deployments;
  auto serves_trace = [&](const CellFigures& figures) {
    return serves(figures, request.slo_attainment);
  };
  nlohmann::json min_deployments = nlohmann::json::array();
  if (show_deployments && request.kv_memories.empty() && !sweep.fleet_sweep) {
    std::string answers;
    std::vector<std::tuple<std::string, std::uint32_t, std::string>> groups;  // model, page, gpu
    for (const PlanCell& cell : cells) {
      if (!deployments[cell.deployment].gpu) continue;
      auto key = std::tuple{cell.model, cell.page_tokens, *deployments[cell.deployment].gpu};
      if (std::find(groups.begin(), groups.end(), key) == groups.end()) groups.push_back(key);
    }
    for (const auto& [model, page, gpu] : groups) {
      std::vector<const PlanCell*> members;
      for (const PlanCell& cell : cells) {
        if (cell.model == model && cell.page_tokens == page &&
            deployments[cell.deployment].gpu == gpu) {
          members.push_back(&cell);
        }
      }
      auto gpus_of = [&](const PlanCell* cell) { return deployments[cell->deployment].gpus(); };
      std::sort(members.begin(), members.end(), [&](const PlanCell* a, const PlanCell* b) {
        return std::pair{gpus_of(a), deployments[a->deployment].tp} <
               std::pair{gpus_of(b), deployments[b->deployment].tp};
      });
      const PlanCell* answer = nullptr;
      std::vector<std::string> raised;
      for (const PlanCell* candidate : members) {
        if (!serves_trace(*candidate->figures)) continue;
        const PlanCell* failing = nullptr;
        for (const PlanCell* other : members) {
          if (gpus_of(other) >= gpus_of(candidate) && !serves_trace(*other->figures)) {
            failing = other;
          }
        }
        if (failing == nullptr) {
          answer = candidate;
          break;
        }
        raised.push_back(deployment_label(deployments[failing->deployment]));
      }
      nlohmann::json entry = {
          {"model", model}, {"page_tokens", page}, {"gpu", gpu}, {"raised_past", raised}};
      if (answer != nullptr) {
        entry["deployment"] = deployment_json(sweep, answer->deployment);
        entry["kv_memory_bytes"] = answer->config.kv_memory.value_or(0);
        entry["pool_blocks"] = answer->config.kv.pool_blocks;
        answers += fmt::format(
            "  {:<15} page {:>4}: {} GPUs of {}: {}, {} of KV a GPU ({} blocks)\n", model, page,
            gpus_of(answer), gpu, deployment_label(deployments[answer->deployment]),
            reproducible_memory(answer->config.kv.pool_blocks, answer->config.kv),
            answer->config.kv.pool_blocks);
      } else {
        entry["deployment"] = nullptr;
        answers += fmt::format("  {:<15} page {:>4}: no swept deployment of {} serves it\n", model,
                               page, gpu);
      }
      min_deployments.push_back(std::move(entry));
    }
    if (!answers.empty()) {
      table += fmt::format(
                   "\nsmallest deployment per GPU kind with no preemption{} (its pool sized "
                   "by the GPU), verified at every swept deployment with more GPUs:\n",
                   slo_words) +
               answers;
    }
  }
  return min_deployments;
}

// The smallest KV memory each search found (or why none), as rows of the table.
nlohmann::json min_kv_memory(const PlanRequest& request, const PlanSweep& sweep,
                             const std::string& slo_words, bool any_skipped, std::string& table) {
  const std::vector<MinSearch>& searches = sweep.searches;
  const bool show_deployments = sweep.show_deployments;
  nlohmann::json minimum = nlohmann::json::array();
  if (request.search_min) {
    table += !any_skipped ? fmt::format(
                                "\nsmallest KV memory with no preemption{} (every request served), "
                                "verified at every swept size above it:\n",
                                slo_words)
                          : fmt::format(
                                "\nsmallest KV memory with no preemption{} (every request that can "
                                "fit served; some were skipped: see the warnings), verified at "
                                "every swept size above it:\n",
                                slo_words);
    for (const MinSearch& search : searches) {
      std::uint64_t bytes = search.blocks ? *search.blocks * search.config.kv.block_bytes() : 0;
      const std::string memory =
          search.blocks ? reproducible_memory(*search.blocks, search.config.kv) : std::string();
      minimum.push_back(
          {{"model", search.model},
           {"label", model_label(search.config)},
           {"page_tokens", search.page_tokens},
           {"pool_blocks",
            search.blocks ? nlohmann::json(*search.blocks) : nlohmann::json(nullptr)},
           {"kv_memory_bytes", search.blocks ? nlohmann::json(bytes) : nlohmann::json(nullptr)},
           {"kv_memory", search.blocks ? nlohmann::json(memory) : nlohmann::json(nullptr)},
           {"raised_past_pool_blocks", search.raised_past},
           {"probes", search.probes},
           {"unmet", unmet_json(search)}});
      if (show_deployments)
        minimum.back()["deployment"] = deployment_json(sweep, search.deployment);
      std::string raised;
      for (std::uint32_t failing : search.raised_past) {
        raised += fmt::format("; raised past the swept {} blocks, which preempt", failing);
      }
      table +=
          search.blocks
              ? fmt::format(
                    "  {}{:<15} page {:>4}: --kv-memory {} = {} blocks ({} simulations{})\n",
                    deployment_column(sweep, search.deployment), model_label(search.config),
                    search.page_tokens, memory, *search.blocks, search.probes, raised)
              : fmt::format("  {}{:<15} page {:>4}: not found: {}\n",
                            deployment_column(sweep, search.deployment), model_label(search.config),
                            search.page_tokens, search.unmet_message);
    }
  }
  return minimum;
}

}  // namespace

PlanOutput plan_output(const PlanRequest& request, const PlanSweep& sweep, bool any_warned) {
  PlanOutput out;
  nlohmann::json& plan = out.report;
  std::string& table = out.table;
  const bool show_deployments = sweep.show_deployments;
  const SimOptions& options = request.options;
  const bool slo = options.slo.any();
  plan = plan_header(request, sweep);
  bool any_skipped = any_warned;
  plan["cells"] = cell_rows(request, sweep, table, any_skipped);
  // Deployments that cannot run the model at all, said as rows of their own.
  nlohmann::json unfit_rows = nlohmann::json::array();
  for (const UnfitCell& cell : sweep.unfit) {
    unfit_rows.push_back({{"model", cell.model},
                          {"page_tokens", cell.page_tokens},
                          {"deployment", deployment_json(sweep, cell.deployment)},
                          {"problem", cell.problem}});
    table +=
        deployment_column(sweep, cell.deployment) +
        fmt::format("{:<15} {:>6} does not run: {}\n", cell.model, cell.page_tokens, cell.problem);
  }
  if (show_deployments) plan["unfit"] = std::move(unfit_rows);
  // The SLOs the answers meet, in words (empty without SLOs).
  std::string slo_words;
  if (slo) {
    std::vector<std::string> targets;
    for (const PercentileTarget& t : options.slo.targets) {
      targets.push_back(
          fmt::format("{} p{} <= {:g} ms", to_string(t.metric), t.percentile, t.limit_ms));
    }
    if (!targets.empty()) slo_words += fmt::format(", {}", fmt::join(targets, ", "));
    if (options.slo.joint()) {
      std::vector<std::string> parts;
      if (options.slo.ttft_ms)
        parts.push_back(fmt::format("TTFT <= {:g} ms", *options.slo.ttft_ms));
      if (options.slo.tpot_ms)
        parts.push_back(fmt::format("TPOT <= {:g} ms", *options.slo.tpot_ms));
      if (options.slo.e2e_ms) parts.push_back(fmt::format("E2E <= {:g} ms", *options.slo.e2e_ms));
      slo_words += fmt::format(" and {:g}% of requests meeting {}", request.slo_attainment * 100,
                               fmt::join(parts, ", "));
    }
  }
  nlohmann::json min_deployments = min_deployment_rows(request, sweep, slo_words, table);
  if (sweep.fleet_sweep) {
    plan["min_fleet"] = min_fleet_rows(request, sweep, slo_words, table);
  } else if (show_deployments) {
    plan["min_deployment"] = std::move(min_deployments);
  }
  plan["min_kv_memory"] = min_kv_memory(request, sweep, slo_words, any_skipped, table);
  if (request.objective) plan["objective"] = objective_answer(request, sweep, table);
  return out;
}

}  // namespace kvreplay
