// plan --objective: one answer across every swept cell (GPU kinds, fleets,
// offload settings, batch limits, load), the best by the objective among the
// cells that serve the trace; and, when none serves, the nearest miss with
// the reason that binds it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <tuple>

#include "app/plan/plan_internal.h"
#include "core/enum_names.h"
#include "report/duration_text.h"

namespace kvreplay {

namespace {

constexpr EnumName<PlanObjective> kObjectiveNames[] = {
    {PlanObjective::kGpus, "gpus"},
    {PlanObjective::kUsdPerHour, "usd-per-hour"},
    {PlanObjective::kUsdPerMtok, "usd-per-mtok"},
};
static_assert(enum_names_unique(kObjectiveNames));

constexpr double kNever = std::numeric_limits<double>::infinity();

// The objective's value of a serving cell (lower is better); nullopt when the
// cell has none (no price, or no token within the SLOs).
std::optional<double> objective_value(PlanObjective objective, const PlanSweep& sweep,
                                      const PlanCell& cell) {
  const CellFigures& f = *cell.figures;
  switch (objective) {
    case PlanObjective::kGpus: return sweep.deployments[cell.deployment].gpus();
    case PlanObjective::kUsdPerHour: return f.usd_per_hour;
    case PlanObjective::kUsdPerMtok: return f.usd_per_million_tokens;
  }
  return std::nullopt;
}

// The order among cells of equal value: GPUs, $ an hour, $ per million
// tokens, KV memory, then the sweep's own order.
using TieKey = std::tuple<double, std::uint32_t, double, double, std::uint64_t, std::size_t>;

TieKey tie_key(double value, const PlanSweep& sweep, std::size_t i) {
  const PlanCell& cell = sweep.cells[i];
  const CellFigures& f = *cell.figures;
  return {value,
          sweep.deployments[cell.deployment].gpus(),
          f.usd_per_hour.value_or(kNever),
          f.usd_per_million_tokens.value_or(kNever),
          cell.config.kv_memory.value_or(0),
          i};
}

double ratio(double value, double limit) {
  if (limit <= 0) return value <= 0 ? 1.0 : kNever;
  return value / limit;
}

// A percentile of one latency in the cell's report (0 when absent).
double latency_at(const CellFigures& f, const char* metric, const std::string& key) {
  if (!f.latency.contains(metric)) return 0.0;
  return f.latency.at(metric).value(key, 0.0);
}

}  // namespace

std::string_view to_string(PlanObjective objective) {
  return enum_name(kObjectiveNames, objective);
}

std::optional<PlanObjective> parse_plan_objective(std::string_view name) {
  return enum_parse(kObjectiveNames, name);
}

std::vector<std::string> plan_objective_names() {
  return enum_names(kObjectiveNames);
}

std::vector<std::string> missed_target_words(const nlohmann::json& slo) {
  std::vector<std::string> out;
  for (const nlohmann::json& t : slo.at("targets")) {
    if (t.at("met").get<bool>()) continue;
    const nlohmann::json& value = t.at("value_ms");
    out.push_back(
        fmt::format("{} p{} {} over {:g} ms", t.at("metric").get<std::string>(),
                    t.at("percentile").get<double>(),
                    value.is_null() ? std::string("(none)") : ms_text(value.get<double>()),
                    t.at("limit_ms").get<double>()));
  }
  return out;
}

MissDiagnosis diagnose_miss(const CellFigures& f, const PlanDeployment& deployment,
                            double slo_attainment) {
  MissDiagnosis out;
  std::vector<std::string> words;
  // How far each unmet requirement is, as a ratio over its limit (1: just met).
  const bool memory = f.preemptions > 0 || f.skipped_pool_too_small > 0;
  if (memory) {
    const double served = static_cast<double>(std::max<std::uint64_t>(f.finished, 1));
    out.score = std::max(
        out.score, 1.0 + static_cast<double>(f.preemptions + f.skipped_pool_too_small) / served);
    words.push_back(fmt::format("{} preemptions and {} requests skipped for the pool's size",
                                f.preemptions, f.skipped_pool_too_small));
  }
  // Arrivals outpacing service bind first: more memory does not fix that.
  if (f.overloaded) {
    out.reason = "queueing";
    words.push_back(fmt::format("arrivals outpace service ({:.2f}x the arrival span)",
                                f.overload_ratio.value_or(0.0)));
  } else if (memory) {
    out.reason = "memory";
  }
  std::string worst_metric;
  double worst = 0.0;
  std::string worst_key;
  if (!f.slo.is_null()) {
    const std::vector<std::string> missed = missed_target_words(f.slo);
    words.insert(words.end(), missed.begin(), missed.end());
    for (const nlohmann::json& t : f.slo.at("targets")) {
      if (t.at("met").get<bool>()) continue;
      const double limit = t.at("limit_ms").get<double>();
      const nlohmann::json& value = t.at("value_ms");
      const double r = value.is_null() ? kNever : ratio(value.get<double>(), limit);
      const std::string metric = t.at("metric").get<std::string>();
      if (r > worst) {
        worst = r;
        worst_metric = metric;
        worst_key = fmt::format("p{}", t.at("percentile").get<double>());
      }
    }
    if (f.slo_attainment && *f.slo_attainment < slo_attainment) {
      const double r = *f.slo_attainment <= 0 ? kNever : slo_attainment / *f.slo_attainment;
      words.push_back(fmt::format("{:.1f}% of requests meet the joint rule, under {:g}%",
                                  *f.slo_attainment * 100, slo_attainment * 100));
      if (r > worst) {
        worst = r;
        worst_metric = f.slo_ttft_ms ? "ttft" : "tpot";
        worst_key = "p99";
      }
    }
  }
  out.score = std::max(out.score, worst);
  if (out.reason.empty() && !worst_metric.empty()) {
    // Which part of the request's time the missed latency is made of.
    const double queue = latency_at(f, "queue_ms", worst_key);
    const double ttft = latency_at(f, "ttft_ms", worst_key);
    double transfer = 0.0;
    if (deployment.fleet.disaggregated() && f.fleet.contains("kv_transfer")) {
      transfer = f.fleet.at("kv_transfer").at("ms").value(worst_key, 0.0);
    }
    const bool first_token = worst_metric != "tpot" && worst_metric != "itl";
    // A disaggregated fleet's queueing counts the KV's crossing: that first.
    if (first_token && transfer > 0.5 * ttft) {
      out.reason = "transfer";
      words.push_back(
          fmt::format("KV transfer {} {} of TTFT {}", worst_key, ms_text(transfer), ms_text(ttft)));
    } else if (first_token && queue > 0.5 * ttft) {
      out.reason = "queueing";
      words.push_back(
          fmt::format("queueing {} {} of TTFT {}", worst_key, ms_text(queue), ms_text(ttft)));
    } else if (worst_metric == "ttft" || worst_metric == "e2e") {
      out.reason = "compute-bound prefill";
      words.push_back(fmt::format("TTFT {} {} with queueing {}: the prefill itself is too long",
                                  worst_key, ms_text(ttft), ms_text(queue)));
    } else {
      out.reason = "compute-bound decode";
      words.push_back("each decode step is too long for the batch it runs");
    }
  }
  out.words = fmt::format("{}", fmt::join(words, "; "));
  return out;
}

std::optional<std::pair<std::size_t, MissDiagnosis>> nearest_miss(
    const PlanRequest& request, const PlanSweep& sweep,
    const std::function<bool(std::size_t)>& among) {
  std::optional<std::pair<std::size_t, MissDiagnosis>> nearest;
  double nearest_value = kNever;
  for (std::size_t i = 0; i < sweep.cells.size(); ++i) {
    const PlanCell& cell = sweep.cells[i];
    if (!cell.figures || !among(i) || serves(*cell.figures, request.slo_attainment)) continue;
    MissDiagnosis miss =
        diagnose_miss(*cell.figures, sweep.deployments[cell.deployment], request.slo_attainment);
    const double v = request.objective
                         ? objective_value(*request.objective, sweep, cell).value_or(kNever)
                         : sweep.deployments[cell.deployment].gpus();
    if (!nearest || std::tie(miss.score, v) < std::tie(nearest->second.score, nearest_value)) {
      nearest = std::pair{i, std::move(miss)};
      nearest_value = v;
    }
  }
  return nearest;
}

nlohmann::json cell_answer_json(const PlanRequest& request, const PlanSweep& sweep, std::size_t i) {
  const PlanCell& cell = sweep.cells[i];
  const CellFigures& f = *cell.figures;
  auto optional = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json();
  };
  return {{"cell", i},
          {"model", cell.model},
          {"page_tokens", cell.page_tokens},
          {"kv_memory", cell.kv_memory},
          {"deployment", deployment_json(sweep, cell.deployment)},
          {"gpus", sweep.deployments[cell.deployment].gpus()},
          {"usd_per_hour", optional(f.usd_per_hour)},
          {"usd_per_million_output_tokens", optional(f.usd_per_million_tokens)},
          {"simulate_args", simulate_args(request, sweep, cell)}};
}

nlohmann::json nearest_miss_json(const PlanRequest& request, const PlanSweep& sweep, std::size_t i,
                                 const MissDiagnosis& miss) {
  nlohmann::json out = cell_answer_json(request, sweep, i);
  out["reason"] = miss.reason;
  out["shortfall"] = miss.words;
  out["score"] = std::isfinite(miss.score) ? nlohmann::json(miss.score) : nlohmann::json();
  return out;
}

std::string nearest_miss_lines(const PlanRequest& request, const PlanSweep& sweep, std::size_t i,
                               const MissDiagnosis& miss) {
  const PlanCell& cell = sweep.cells[i];
  return fmt::format(
      "    nearest miss, bound by {}: {} {} page {} kv {}: {}\n      kvreplay simulate {} {}\n",
      miss.reason, deployment_label(sweep.deployments[cell.deployment]), model_label(cell.config),
      cell.page_tokens, cell.kv_memory, miss.words, request.trace_path,
      simulate_args(request, sweep, cell));
}

nlohmann::json objective_answer(const PlanRequest& request, const PlanSweep& sweep,
                                std::string& table) {
  const PlanObjective objective = *request.objective;
  std::optional<std::size_t> best;
  TieKey best_key{};
  std::size_t serving = 0;
  for (std::size_t i = 0; i < sweep.cells.size(); ++i) {
    const PlanCell& cell = sweep.cells[i];
    if (!cell.figures || !serves(*cell.figures, request.slo_attainment)) continue;
    ++serving;
    const std::optional<double> value = objective_value(objective, sweep, cell);
    if (!value) continue;
    const TieKey key = tie_key(*value, sweep, i);
    if (!best || key < best_key) {
      best = i;
      best_key = key;
    }
  }
  nlohmann::json out = {{"objective", std::string(to_string(objective))},
                        {"serving_cells", serving},
                        {"cells", sweep.cells.size()},
                        {"answer", nullptr},
                        {"nearest_miss", nullptr}};
  auto money = [](const std::optional<double>& usd, const char* unit) {
    return usd ? fmt::format("${:.3f} {}", *usd, unit) : std::string("no price");
  };
  if (best) {
    const PlanCell& cell = sweep.cells[*best];
    const CellFigures& f = *cell.figures;
    const PlanDeployment& d = sweep.deployments[cell.deployment];
    out["answer"] = cell_answer_json(request, sweep, *best);
    out["answer"]["value"] = std::get<0>(best_key);
    const std::string args = out["answer"]["simulate_args"].get<std::string>();
    table += fmt::format(
        "\nbest by {} of the {} cells that serve (of {}):\n  {} {} page {} kv {}: {} GPU{}, {}, "
        "{}\n    kvreplay simulate {} {}\n",
        to_string(objective), serving, sweep.cells.size(), deployment_label(d),
        model_label(cell.config), cell.page_tokens, cell.kv_memory, d.gpus(),
        d.gpus() == 1 ? "" : "s", money(f.usd_per_hour, "an hour"),
        money(f.usd_per_million_tokens, "per million tokens"), request.trace_path, args);
    return out;
  }
  if (serving > 0) {
    // Cells serve, but none has the objective's value (no token within the SLOs).
    table += fmt::format("\nbest by {}: none of the {} serving cells has a value for it\n",
                         to_string(objective), serving);
    return out;
  }
  const auto nearest = nearest_miss(request, sweep, [](std::size_t) { return true; });
  if (!nearest) {
    table += fmt::format("\nbest by {}: no cell was simulated\n", to_string(objective));
    return out;
  }
  out["nearest_miss"] = nearest_miss_json(request, sweep, nearest->first, nearest->second);
  table += fmt::format("\nbest by {}: no swept cell serves the trace\n", to_string(objective)) +
           nearest_miss_lines(request, sweep, nearest->first, nearest->second);
  return out;
}

}  // namespace kvreplay
