// The pieces of one simulation's run that `simulate --replicas` (a fleet,
// app/simulation/fleet_simulation.cc) shares with a single instance's
// (app/simulation/simulation.cc): observers, figures, the report's sections, warnings.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

#include "app/simulation/simulation.h"
#include "report/report.h"

namespace kvreplay::sim_detail {

// The figures of a finished run that the report and the summary both give.
struct RunFigures {
  double hit_rate = 0.0;     // of the prompt tokens queried
  double per_request = 0.0;  // the mean of the requests' hit rates
  double mean_in_use = 0.0;  // blocks in use, over the steps
  double seconds = 0.0;      // virtual time
  LatencySummary queue;
  LatencySummary ttft;
  LatencySummary tpot;
  LatencySummary e2e;
  std::uint64_t all_requests = 0;  // the reader's skipped ones included
  OverloadFigures load;
};

// One line per reason some requests were skipped as never fitting.
void skip_warnings(const std::string& path, const Simulator& sim, SimulationResult& out);
// --timeline: the CSV's header and one step's row.
std::string timeline_csv_header(const Simulator& s);
std::string timeline_csv_row(const Simulator& s);
// The HTML sampler's point for the step a simulator just ended.
TimelinePoint timeline_point(const Simulator& s);
// The per-request CSV, the timeline, the HTML sampler, the progress line and
// the tests' fault, each chained onto the simulator's callbacks.
void attach_observers(Simulator& sim, OutputFile* timeline, TimelineSampler* sampler,
                      const SimulateTerminal& terminal, const SimFaults& faults,
                      OutputFile* requests);
RunFigures run_figures(const Simulator& sim, std::uint64_t reader_skipped);
// The report's sections past base_report's.
nlohmann::json simulation_report(const ReportSource& source, const Simulator& sim,
                                 const SimOptions& options, const RunFigures& f,
                                 std::uint64_t reader_skipped);
// The report's "cost_usd": `gpus` GPUs at `gpu_hour_usd` each for the run's
// virtual `seconds`, per million output tokens of the requests that met the
// SLOs (all finished ones without SLOs); null per million when none did.
nlohmann::json cost_usd_json(double gpu_hour_usd, std::uint64_t gpus, double seconds,
                             std::uint64_t slo_output_tokens);
// "warning: PATH: overloaded: ..." when arrivals outpaced service, else empty.
std::string overload_warning(const std::string& path, const OverloadFigures& load);
// The TTFT and TPOT distributions for the HTML page's CDF.
nlohmann::json latency_cdf(const Simulator::Latencies& lat);

}  // namespace kvreplay::sim_detail
