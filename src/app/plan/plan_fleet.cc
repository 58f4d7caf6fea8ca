// A fleet sweep's answer (SPEC 3.6): the fewest GPUs, then the lowest $, that
// serve the trace with no preemption and the SLOs met, verified by simulating
// exactly that fleet again.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "app/exit_codes.h"
#include "app/options.h"
#include "app/plan/plan_internal.h"
#include "core/memory_budget.h"
#include "io/standard_output.h"
#include "report/duration_text.h"

namespace kvreplay {

// What a re-simulation must reproduce of a cell: every figure the answer and
// the table show.
nlohmann::json answer_figures(const CellFigures& f) {
  return {{"trace", f.trace_sha256},      {"requests", f.requests_total},
          {"finished", f.finished},       {"skipped", f.skipped},
          {"preemptions", f.preemptions}, {"peak_used", f.peak_used},
          {"hit_rate", f.hit_rate},       {"output_tokens_per_second", f.output_tokens_per_second},
          {"latency", f.latency},         {"slo", f.slo},
          {"cost_usd", f.cost_usd},       {"virtual_seconds", f.virtual_seconds}};
}

namespace {

// The order answers are chosen by: GPUs, $ an hour, $ per million output
// tokens, KV memory, then the sweep's own order.
using AnswerKey = std::tuple<std::uint32_t, double, double, std::uint64_t, std::size_t>;

AnswerKey answer_key(const PlanSweep& sweep, std::size_t i) {
  const PlanCell& cell = sweep.cells[i];
  const CellFigures& f = *cell.figures;
  constexpr double kNone = std::numeric_limits<double>::infinity();
  return {sweep.deployments[cell.deployment].gpus(), f.usd_per_hour.value_or(kNone),
          f.usd_per_million_tokens.value_or(kNone),
          std::uint64_t{cell.config.kv.pool_blocks} * cell.config.kv.block_bytes(), i};
}

// The best of the cells `in` admits that serve the trace, or none.
template <typename Admit>
std::optional<std::size_t> best_cell(const PlanRequest& request, const PlanSweep& sweep,
                                     const FleetAnswer& answer, Admit in) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < sweep.cells.size(); ++i) {
    const PlanCell& cell = sweep.cells[i];
    if (cell.model != answer.model || cell.page_tokens != answer.page_tokens || !cell.figures ||
        !in(sweep.deployments[cell.deployment]) || !serves(*cell.figures, request.slo_attainment)) {
      continue;
    }
    if (!best || answer_key(sweep, i) < answer_key(sweep, *best)) best = i;
  }
  return best;
}

// Every cell `in` admits that could have been the best in place of `best`:
// those with no more GPUs and no higher $ an hour (both of the deployment),
// whose other figures decide between them; with no best, every one.
template <typename Admit, typename Choose>
void could_win(const PlanSweep& sweep, const FleetAnswer& answer,
               const std::optional<std::size_t>& best, Admit in, Choose choose) {
  for (std::size_t i = 0; i < sweep.cells.size(); ++i) {
    const PlanCell& cell = sweep.cells[i];
    if (cell.model != answer.model || cell.page_tokens != answer.page_tokens ||
        !in(sweep.deployments[cell.deployment])) {
      continue;
    }
    if (best) {
      const AnswerKey key = answer_key(sweep, i);
      const AnswerKey best_key = answer_key(sweep, *best);
      if (std::tie(std::get<0>(key), std::get<1>(key)) >
          std::tie(std::get<0>(best_key), std::get<1>(best_key))) {
        continue;
      }
    }
    choose(std::optional<std::size_t>(i));
  }
}

std::string gpus_text(std::uint32_t gpus) {
  return fmt::format("{} GPU{}", gpus, gpus == 1 ? "" : "s");
}

std::string usd_text(const std::optional<double>& usd) {
  return usd ? fmt::format("${:.3f}", *usd) : std::string("-");
}

nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// Simulates cell `i` again and requires the figures it has; an exit code when
// not: 2 in a merge (a part altered, or of another build), else 1 (a defect).
std::optional<int> verify_cell(const PlanRequest& request, const PlanSweep& sweep,
                               PlanSimulator& simulator, std::size_t i) {
  const PlanCell& cell = sweep.cells[i];
  const std::string label = deployment_label(sweep.deployments[cell.deployment]);
  auto again = simulator.simulate(cell.config, sweep.deployments[cell.deployment], {});
  if (!again) {
    eprint("{}\n", again.error().to_string());
    return kExitInput;
  }
  const CellFigures figures =
      CellFigures::of(again.value(), sweep.deployments[cell.deployment].options);
  if (figures.trace_sha256 != cell.figures->trace_sha256) {
    eprint("{}: not the trace the plan's cells simulated (its SHA-256 is {}, theirs {})\n",
           request.trace_path, figures.trace_sha256, cell.figures->trace_sha256);
    return kExitInput;
  }
  if (figures.violated || answer_figures(figures) != answer_figures(*cell.figures)) {
    if (sweep.merging) {
      eprint(
          "{}.report: the figures of {} are not what simulating it gives: the part was altered, "
          "or written by another build\n",
          cell.from, label);
      return kExitInput;
    }
    eprint(
        "{}: the fleet answer {} did not verify: simulated again it gave other figures (a "
        "defect: a simulation must be deterministic)\n",
        request.trace_path, label);
    return kExitCheckFailed;
  }
  return std::nullopt;
}

}  // namespace

std::string simulate_args(const PlanRequest& request, const PlanSweep& sweep,
                          const PlanCell& cell) {
  const PlanDeployment& d = sweep.deployments[cell.deployment];
  std::string args = fmt::format("--model {}", cell.model);
  if (d.gpu) args += fmt::format(" --gpu {}", *d.gpu);
  if (d.tp > 1) args += fmt::format(" --tp {}", d.tp);
  if (d.pp > 1) args += fmt::format(" --pp {}", d.pp);
  if (d.memory_fraction) args += fmt::format(" --gpu-memory-utilization {}", *d.memory_fraction);
  args += fmt::format(" --page-tokens {} --kv-memory {}", cell.page_tokens,
                      reproducible_memory(cell.config.kv.pool_blocks, cell.config.kv));
  if (d.fleet.disaggregated()) {
    args += fmt::format(" --prefill-replicas {} --decode-replicas {}", d.fleet.prefill_replicas,
                        d.fleet.decode_replicas);
  } else if (d.fleet.instances() > 1) {
    args += fmt::format(" --replicas {}", d.fleet.instances());
  }
  if (d.fleet.routed()) args += fmt::format(" --router {}", to_string(d.fleet.router.policy));
  // Shortest round-trip decimals: the option parses back to the very value.
  if (d.options.gpu_hour_usd) args += fmt::format(" --gpu-hour-usd {}", *d.options.gpu_hour_usd);
  args += d.setting_args + load_args(d.options.load) + request.passthrough_args;
  if (d.options.offload.any()) args += request.offload_passthrough_args;
  return args;
}

std::optional<int> answer_fleets(const PlanRequest& request, PlanSweep& sweep,
                                 PlanSimulator& simulator, unsigned jobs) {
  std::vector<std::string> routers;
  for (const PlanDeployment& d : sweep.deployments) {
    const std::string name(to_string(d.fleet.router.policy));
    if (d.fleet.routed() && std::find(routers.begin(), routers.end(), name) == routers.end()) {
      routers.push_back(name);
    }
  }
  for (const PlanCell& cell : sweep.cells) {
    const bool known = std::any_of(
        sweep.fleet_answers.begin(), sweep.fleet_answers.end(), [&](const FleetAnswer& a) {
          return a.model == cell.model && a.page_tokens == cell.page_tokens;
        });
    if (!known)
      sweep.fleet_answers.push_back(
          FleetAnswer{cell.model, cell.page_tokens, std::nullopt, {}, false});
  }
  for (FleetAnswer& answer : sweep.fleet_answers) {
    answer.cell = best_cell(request, sweep, answer, [](const PlanDeployment&) { return true; });
    for (const std::string& router : routers) {
      answer.by_router.push_back(
          {router, best_cell(request, sweep, answer, [&](const PlanDeployment& d) {
             return !d.fleet.routed() || to_string(d.fleet.router.policy) == router;
           })});
    }
  }
  // Verified: exactly that fleet, simulated again, gives the same figures;
  // so does each router's fewest (a merge takes their figures from parts).
  // The simulations run as the sweep's do, -j at once.
  std::vector<std::size_t> chosen;
  auto choose = [&chosen](const std::optional<std::size_t>& cell) {
    if (cell && std::find(chosen.begin(), chosen.end(), *cell) == chosen.end()) {
      chosen.push_back(*cell);
    }
  };
  for (const FleetAnswer& answer : sweep.fleet_answers) {
    choose(answer.cell);
    for (const FleetAnswer::RouterBest& best : answer.by_router) choose(best.cell);
  }
  // A merge took every cell's figures from the parts: it simulates again, too,
  // every cell that could have won in its stead, so that a part that forged a
  // better cell's figures worse cannot move an answer.
  if (sweep.merging) {
    for (const FleetAnswer& answer : sweep.fleet_answers) {
      could_win(
          sweep, answer, answer.cell, [](const PlanDeployment&) { return true; }, choose);
      for (const FleetAnswer::RouterBest& best : answer.by_router) {
        could_win(
            sweep, answer, best.cell,
            [&](const PlanDeployment& d) {
              return !d.fleet.routed() || to_string(d.fleet.router.policy) == best.router;
            },
            choose);
      }
    }
  }
  if (chosen.empty()) return std::nullopt;
  if (sweep.merging && needs_spool(request.trace_path)) {
    eprint(
        "kvreplay plan-merge: the fleet answer is verified by simulating it again, which needs "
        "the trace, but the shards read it from standard input or a FIFO: shard a trace file\n");
    return kExitInput;
  }
  // As the sweep's own simulations (a merge ran none): those at once must fit.
  std::uint64_t each = 0;
  for (std::size_t i : chosen) {
    const PlanDeployment& deployment = sweep.deployments[sweep.cells[i].deployment];
    each = std::max(each, run_memory_bytes(sweep.cells[i].config, deployment.options,
                                           deployment.fleet.instances()));
  }
  const std::uint64_t at_once = jobs_at_once(chosen.size(), jobs);
  if (auto problem = check_memory(
          mul_sat(at_once, each),
          fmt::format("verifying {} fleet answers, {} at once", chosen.size(), at_once),
          fmt::format("{} x {}, the largest fleet's bound", at_once, memory_text(each)))) {
    eprint("kvreplay plan: {}: give -j 1 or a larger memory limit\n", *problem);
    return kExitInput;
  }
  std::vector<std::optional<int>> codes(chosen.size());
  parallel_for(chosen.size(), jobs, [&](std::size_t k) {
    codes[k] = verify_cell(request, sweep, simulator, chosen[k]);
  });
  simulator.clear_progress();
  for (const std::optional<int>& code : codes) {
    if (code) return code;
  }
  for (FleetAnswer& answer : sweep.fleet_answers) answer.verified = answer.cell.has_value();
  return std::nullopt;
}

nlohmann::json min_fleet_rows(const PlanRequest& request, const PlanSweep& sweep,
                              const std::string& slo_words, std::string& table) {
  nlohmann::json rows = nlohmann::json::array();
  const bool priced = std::any_of(sweep.deployments.begin(), sweep.deployments.end(),
                                  [](const PlanDeployment& d) { return d.options.gpu_hour_usd; });
  table += fmt::format(
      "\nfewest GPUs with no preemption{}{}, verified by simulating that fleet again:\n", slo_words,
      priced ? " (then the lowest $)" : "");
  auto cell_json = [&](std::size_t i) {
    const PlanCell& cell = sweep.cells[i];
    const CellFigures& f = *cell.figures;
    nlohmann::json out = {
        {"deployment", deployment_json(sweep, cell.deployment)},
        {"gpus", sweep.deployments[cell.deployment].gpus()},
        {"kv_memory", cell.kv_memory},
        {"pool_blocks", cell.config.kv.pool_blocks},
        {"hit_rate", f.hit_rate},
        {"p99_ttft_ms", f.p99_ttft_ms},
        {"p99_tpot_ms", f.p99_tpot_ms},
        {"slo_attainment", optional_json(f.slo_attainment)},
        {"usd_per_hour", optional_json(f.usd_per_hour)},
        {"usd_per_million_output_tokens", optional_json(f.usd_per_million_tokens)}};
    return out;
  };
  for (const FleetAnswer& answer : sweep.fleet_answers) {
    nlohmann::json row = {{"model", answer.model}, {"page_tokens", answer.page_tokens}};
    if (answer.cell) {
      const PlanCell& cell = sweep.cells[*answer.cell];
      const CellFigures& f = *cell.figures;
      row.update(cell_json(*answer.cell));
      row["label"] = model_label(cell.config);
      row["verified"] = answer.verified;
      row["simulate_args"] = simulate_args(request, sweep, cell);
      const std::string cost =
          f.usd_per_hour ? fmt::format(", {} an hour, {} per million output tokens",
                                       usd_text(f.usd_per_hour), usd_text(f.usd_per_million_tokens))
                         : std::string();
      table += fmt::format(
          "  {:<15} page {:>4}: {}: {}{}, hit rate {:.4f}, p99 TTFT {}, p99 TPOT {}\n    kvreplay "
          "simulate {} {}\n",
          model_label(cell.config), answer.page_tokens,
          gpus_text(sweep.deployments[cell.deployment].gpus()),
          deployment_label(sweep.deployments[cell.deployment]), cost, f.hit_rate,
          ms_text(f.p99_ttft_ms), ms_text(f.p99_tpot_ms), request.trace_path,
          simulate_args(request, sweep, cell));
    } else {
      row["deployment"] = nullptr;
      // The searches for the smallest KV memory may have found fleets that do, with more.
      const bool searched =
          std::any_of(sweep.searches.begin(), sweep.searches.end(), [&](const MinSearch& search) {
            return search.model == answer.model && search.page_tokens == answer.page_tokens &&
                   search.blocks.has_value();
          });
      table += fmt::format("  {:<15} page {:>4}: no swept fleet serves it{}\n", answer.model,
                           answer.page_tokens,
                           searched ? " at its swept KV memory (the smallest KV memory below "
                                      "names fleets that do, with more)"
                                    : "");
      const auto nearest = nearest_miss(request, sweep, [&](std::size_t i) {
        return sweep.cells[i].model == answer.model &&
               sweep.cells[i].page_tokens == answer.page_tokens;
      });
      row["nearest_miss"] = nullptr;
      if (nearest) {
        row["nearest_miss"] = nearest_miss_json(request, sweep, nearest->first, nearest->second);
        table += nearest_miss_lines(request, sweep, nearest->first, nearest->second);
      }
    }
    nlohmann::json by_router = nlohmann::json::array();
    std::vector<std::string> words;
    for (const FleetAnswer::RouterBest& best : answer.by_router) {
      nlohmann::json entry = {{"router", best.router}};
      if (best.cell) {
        entry.update(cell_json(*best.cell));
        words.push_back(fmt::format("{} {}", best.router,
                                    sweep.deployments[sweep.cells[*best.cell].deployment].gpus()));
      } else {
        entry["deployment"] = nullptr;
        words.push_back(fmt::format("{} none", best.router));
      }
      by_router.push_back(std::move(entry));
    }
    if (!words.empty()) {
      table += fmt::format("    fewest GPUs by router: {}\n", fmt::join(words, ", "));
    }
    row["by_router"] = std::move(by_router);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace kvreplay
