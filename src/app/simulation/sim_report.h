// A simulation's figures as a value (engine/sim_figures.h), taken from a
// finished Simulator, and the one writer that renders them as the report:
// one instance's, and a fleet's merged total alike.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "engine/sim_figures.h"
#include "engine/simulator.h"
#include "model/run_config.h"
#include "report/report.h"

namespace kvreplay {

// What the report gives beside the figures: the run's trace, configuration
// and outcome.
struct SimReportContext {
  TraceInfo trace;
  bool violated = false;
  const RunConfig* config = nullptr;  // the (first) instance's
  const SimOptions* options = nullptr;
  nlohmann::json cost;  // config.simulation.cost (cost_json)
  double wall_seconds = 0.0;
  std::uint64_t reader_skipped = 0;  // requests the reader skipped, before any instance
  // The engine's own sections ("sglang"): Merge::kPerInstance, so null for a
  // fleet's total.
  const nlohmann::json* engine_sections = nullptr;
};

// One instance's figures after its run (violated or not). `engine_sections`
// gets the engine's own report sections (Scheduler::add_figures), less the
// offload tiers', which become figures.
SimFigures instance_figures(const Simulator& sim, const SimOptions& options,
                            nlohmann::json& engine_sections);

// The report (SPEC 3.3): keys sorted, numbers as their C++ types give them.
nlohmann::json sim_report(const SimFigures& f, const SimReportContext& c);

// The report's sections, as sim_report writes them (plan's cells reuse them).
nlohmann::json latency_section(const SimFigures& f);
nlohmann::json overload_section(const SimFigures& f);
nlohmann::json prefix_cache_section(const SimFigures& f);
nlohmann::json offload_section(const SimFigures& f);  // of a run with tiers
// "slo": null without SLOs.
nlohmann::json slo_section(const SimFigures& f, const SimOptions& options,
                           std::uint64_t reader_skipped);
// "cost_usd": null without a price.
nlohmann::json cost_usd_section(const SimFigures& f, const SimOptions& options);

}  // namespace kvreplay
