// The pieces of one simulation's run that `simulate --replicas` (a fleet,
// app/simulation/fleet_simulation.cc) shares with a single instance's
// (app/simulation/simulation.cc): observers, figures, the report's sections, warnings.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <limits>
#include <string>
#include <string_view>

#include "app/simulation/sim_report.h"
#include "app/simulation/simulation.h"
#include "engine/load_generator.h"
#include "formats/requests/request_reader.h"
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
// The writer's context (app/simulation/sim_report.h) of a run `source`
// describes; `engine_sections`: the instance's own (null for a fleet's total).
SimReportContext report_context(const ReportSource& source, const SimOptions& options,
                                std::uint64_t reader_skipped, const Simulator& sim,
                                const nlohmann::json* engine_sections);
// The report's "cost_usd": `gpus` GPUs at `gpu_hour_usd` each for the run's
// virtual `seconds`, per million output tokens of the requests that met the
// SLOs (all finished ones without SLOs); null per million when none did.
nlohmann::json cost_usd_json(double gpu_hour_usd, std::uint64_t gpus, double seconds,
                             std::uint64_t slo_output_tokens);
// "warning: PATH: overloaded: ..." when arrivals outpaced service, else empty.
// The load options of a run over `path`: `load` with a ramp's request count
// (LoadOptions::ramp_requests), read by a first pass over the trace when
// --ramp-up-strategy asks for it.
InputResult<LoadOptions> load_for(const LoadOptions& load, const std::string& path,
                                  std::optional<RequestFormat> format, const std::string& shown);

std::string overload_warning(const std::string& path, const OverloadFigures& load);
// The TTFT and TPOT distributions for the HTML page's CDF.
nlohmann::json latency_cdf(const Simulator::Latencies& lat);

// How the run's loop ended: an invariant failed (or the load generator gave
// up, which is one); an output failed, the run stopped and incomplete (the
// caller reports the output's error).
struct DriveOutcome {
  bool violated = false;
  bool output_failed = false;
};

// The one loop of a simulation, over one instance (Simulator) or a fleet
// (Fleet): the trace is read as the run goes, so memory is bounded by the
// requests in flight and the cache, not by the trace's length; the readers
// refuse a request whose arrival goes backwards (naming its line). A load
// generator (--request-rate, --concurrency) sets each arrival instead. Then
// the run to its end and the final checks. Error: the reader's or the load
// generator's.
template <typename Shells, typename OutputsFailed>
InputResult<DriveOutcome> drive(RequestReader& reader, Shells& shells, LoadGenerator& load,
                                const OutputsFailed& outputs_failed) {
  DriveOutcome out;
  Request request;
  for (;;) {
    if (outputs_failed()) {
      out.output_failed = true;
      return out;
    }
    auto more = reader.next(request);
    if (!more) return Unexpected{more.error()};
    if (!more.value()) break;
    if (!load.set_arrival(request)) {
      if (load.error()) return Unexpected{*load.error()};
      out.violated = true;
      break;
    }
    if (!shells.run_until(request.arrival)) {
      out.violated = true;
      break;
    }
    shells.submit(std::move(request));
    request = Request{};
  }
  if (!out.violated && !shells.run_until(std::numeric_limits<double>::infinity())) {
    out.violated = true;
  }
  if (!out.violated && !shells.finish()) out.violated = true;
  out.output_failed = outputs_failed();
  return out;
}

}  // namespace kvreplay::sim_detail
