// `simulate --replicas N`: a fleet (engine/fleet/fleet.h) over one request trace,
// and its report: fleet totals at the top level, "fleet" and "instances".
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <set>

#include "app/simulation/sim_report.h"
#include "app/simulation/simulation.h"
#include "app/simulation/simulation_internal.h"
#include "app/terminal.h"
#include "engine/engine_registry.h"
#include "engine/events/kv_events.h"
#include "engine/fleet/fleet.h"
#include "engine/load_generator.h"
#include "engine/replay/trace_emitter.h"
#include "formats/requests/request_reader.h"
#include "report/paint.h"

namespace kvreplay {

using namespace sim_detail;

namespace {

double max_over_mean(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  double sum = 0;
  double top = 0;
  for (double v : values) {
    sum += v;
    top = std::max(top, v);
  }
  return sum > 0 ? top / (sum / static_cast<double>(values.size())) : 0.0;
}

// The policy and the options it reads (router_reads): the seed where it
// draws (with a temperature, above 0 only), the approximate view's options
// under that view.
nlohmann::json router_json(const RouterOptions& router) {
  nlohmann::json out = {{"policy", std::string(to_string(router.policy))}};
  const std::uint32_t reads = router_reads(router.policy);
  if ((reads & kReadsOverlapWeight) != 0) out["overlap_weight"] = router.overlap_weight;
  if ((reads & kReadsTemperature) != 0) out["temperature"] = router.temperature;
  if ((reads & kReadsView) != 0) out["view"] = std::string(to_string(router.view));
  if ((reads & kReadsSeed) != 0 && ((reads & kReadsTemperature) == 0 || router.temperature > 0)) {
    out["seed"] = router.seed;
  }
  if ((reads & kReadsApprox) != 0 && router.view == RouterView::kApproximate) {
    out["approx_blocks"] = router.approx_blocks;  // 0: the instance's pool
    out["approx_ttl_s"] = router.approx_ttl_s;
  }
  return out;
}

// The fleet's request times, as each instance reports them.
struct FleetCollector {
  Simulator::Latencies latencies;
  std::uint64_t slo_met = 0;
  std::uint64_t slo_output_tokens = 0;
};

// --requests, --timeline, the HTML samplers, the progress line and
// --router-log, each chained onto the fleet's instances and router.
void attach_fleet_observers(Fleet& fleet, const SimOptions& options, const FleetOutputs& outputs,
                            const SimulateTerminal& terminal, FleetCollector& collected) {
  const auto n = static_cast<std::uint32_t>(fleet.size());
  const FleetOptions& fleet_options = fleet.options();
  if (outputs.samplers != nullptr) {
    outputs.samplers->assign(n, TimelineSampler(TimelineSampler::kFleetBuckets, /*simulate=*/true,
                                                options.offload.tiers.size()));
  }
  if (outputs.timeline != nullptr) {
    outputs.timeline->write("instance," + timeline_csv_header(fleet.instance(0)));
  }
  if (outputs.requests != nullptr) {
    std::string header = requests_csv_header(options.speculative.on());
    header.insert(header.size() - 1, ",instance");
    outputs.requests->write(header);
  }
  // The instances requests enter (the router's) and those that answer them.
  auto entry = [&fleet](std::uint32_t i) { return fleet.role(i) != InstanceRole::kDecode; };
  auto facing = [&fleet](std::uint32_t i) { return fleet.role(i) != InstanceRole::kPrefill; };
  for (std::uint32_t i = 0; i < n; ++i) {
    Simulator& sim = fleet.instance(i);
    // A prefill instance's single tokens have no gaps; a decode instance's do.
    sim.itl_sink = &collected.latencies.itl_ms;
    sim.on_request = [&collected, &options, &fleet, requests = outputs.requests, i,
                      role = fleet.role(i)](const RequestTimes& times) {
      // Disaggregated: a request as the user sees it is its decode
      // instance's, timed from its own arrival; a prefill instance reports
      // only those it skips.
      if (role == InstanceRole::kPrefill && !times.skipped) return;
      RequestTimes t = times;
      if (role != InstanceRole::kMixed) {
        if (const Request* user = fleet.user_request(t.tag)) {
          t.arrival = user->arrival;
          t.output = user->output;
          t.n = user->n;
        }
      }
      if (requests != nullptr) {
        std::string row = requests_csv_row(t, options.speculative.on());
        row.insert(row.size() - 1, fmt::format(",{}", i));
        requests->write(row);
      }
      if (t.skipped) return;
      collected.latencies.add(t);
      if (meets_slo(options.slo, t)) {
        ++collected.slo_met;
        collected.slo_output_tokens += std::uint64_t{t.output} * t.n;
      }
    };
    if (outputs.kv_events != nullptr) {
      sim.on_kv_events = [out = outputs.kv_events, pt = sim.config().kv.page_tokens, i](
                             double ts, const KvEventLog& log) {
        out->write(kv_event_batch_line(ts, log, pt, i));
      };
    }
    if (outputs.timeline != nullptr) {
      sim.on_step = [timeline = outputs.timeline, i](const Simulator& s) {
        timeline->write(fmt::format("{},", i) + timeline_csv_row(s));
      };
    }
    if (outputs.samplers != nullptr) {
      sim.on_step = [sampler = &(*outputs.samplers)[i],
                     previous = std::move(sim.on_step)](const Simulator& s) {
        if (previous) previous(s);
        sampler->add(timeline_point(s));
      };
    }
    // The progress line follows the instance that finishes requests last
    // (disaggregated: a decode one) and counts each request once.
    if (terminal.progress != nullptr && i + 1 == n) {
      sim.on_step = [progress = terminal.progress, &fleet, entry, facing,
                     previous = std::move(sim.on_step)](const Simulator& s) {
        if (previous) previous(s);
        if (!progress->due()) return;
        std::uint64_t requests = 0;
        std::uint64_t finished = 0;
        for (std::uint32_t k = 0; k < fleet.size(); ++k) {
          if (entry(k)) requests += fleet.instance(k).sim_totals().requests;
          if (facing(k)) finished += fleet.instance(k).sim_totals().finished;
        }
        progress->draw(
            fmt::format("simulate: {} instances, {} requests, {} finished, virtual "
                        "time {:.1f} s",
                        fleet.size(), grouped(requests), grouped(finished), s.now()));
      };
    }
  }
  const bool prefix_aware = router_sees_caches(fleet_options.router.policy);
  if (outputs.router_log != nullptr) {
    // The router chooses among the entry instances (disaggregated: the
    // prefill ones).
    const std::uint32_t routed_n =
        fleet_options.disaggregated() ? fleet_options.prefill_replicas : n;
    outputs.router_log->write(router_log_header(routed_n, prefix_aware));
    fleet.on_route = [log = outputs.router_log, prefix_aware, routed_n](const Request& r,
                                                                        const RouteChoice& choice) {
      // The id as CSV: quoted, quotes doubled (as --requests writes it).
      std::string id;
      for (char c : r.id) {
        if (c == '"') id += '"';
        id += c;
      }
      std::string row = fmt::format("{},\"{}\",{:.6f},{}", r.line, id, r.arrival, choice.instance);
      if (prefix_aware) {
        for (std::uint32_t blocks : choice.cached_blocks) row += fmt::format(",{}", blocks);
      }
      for (double cost : choice.cost) row += fmt::format(",{:.6g}", cost);
      // Policies without a score (round-robin, session) leave the costs empty.
      if (choice.cost.empty()) row.append(routed_n, ',');
      log->write(row + "\n");
    };
  }
}

// Each instance's figures and report, as a lone simulation's; its skip
// warnings, each naming the instance, go to result.
std::vector<nlohmann::json> instance_reports(const Fleet& fleet, const std::string& path,
                                             const TraceInfo& trace, const SimOptions& options,
                                             double wall, SimulationResult& result) {
  const auto n = static_cast<std::uint32_t>(fleet.size());
  std::vector<nlohmann::json> reports;
  reports.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    const Simulator& sim = fleet.instance(i);
    nlohmann::json engine_sections;
    SimFigures figures = instance_figures(sim, options, engine_sections);
    const SimReportContext context{trace,
                                   fleet.violated_instance() == i,
                                   &sim.config(),
                                   &options,
                                   cost_json(options.cost, sim.roofline(), options.engine),
                                   wall,
                                   0,
                                   &engine_sections};
    reports.push_back(sim_report(figures, context));
    result.instance_figures.push_back(std::move(figures));
    SimulationResult instance_warnings;
    skip_warnings(path, sim, instance_warnings);
    for (std::size_t w = 0; w < instance_warnings.warnings.size(); ++w) {
      // "warning: PATH: instance I: ..."
      std::string text = instance_warnings.warnings[w];
      const std::string lead = fmt::format("warning: {}: ", path);
      if (text.rfind(lead, 0) == 0) text.insert(lead.size(), fmt::format("instance {}: ", i));
      result.warnings.push_back(std::move(text));
      result.warning_reasons.push_back(instance_warnings.warning_reasons[w]);
    }
  }
  return reports;
}

// An instance's figures as its fleet counts them. Entry instances take the
// trace's requests (all, or the prefill ones) and hold the prefix cache that
// routing decides (a decode instance's hits are the KV it received) and the
// user's arrivals (a decode instance's are when the KV landed); facing ones
// finish them (all, or the decode ones). An instance given no request adds
// nothing to overload. Its violations name it.
SimFigures fleet_part(SimFigures f, InstanceRole role, std::uint64_t routed,
                      std::uint32_t instance) {
  for (InstanceViolation& v : f.violations) v.instance = instance;
  if (role == InstanceRole::kDecode) {
    f.requests = 0;
    for (std::uint64_t* count :
         {&f.query_tokens, &f.hit_tokens, &f.hit_rate_requests, &f.hit_blocks, &f.evictions,
          &f.queries, &f.hits, &f.preempted_queries, &f.preempted_hits, &f.peak_cache_resident}) {
      *count = 0;
    }
    f.hit_rate_sum = 0.0;
    for (std::uint64_t& hits : f.tier_hit_tokens) hits = 0;
    f.has_arrivals = false;
    f.waiting_at_last_arrival = 0;
  }
  if (role == InstanceRole::kPrefill) {
    f.finished = 0;
    f.output_tokens = 0;
  }
  if (routed == 0) {
    f.has_arrivals = false;
    f.end = 0.0;
    f.waiting_at_last_arrival = 0;
    f.peak_waiting = 0;
  }
  return f;
}

// The fleet's figures: its instances' merged (fleet_part), then the requests
// as the user sees them (disaggregated: timed from the user's arrival) from
// the fleet's own collection.
SimFigures fleet_figures(const Fleet& fleet, const std::vector<SimFigures>& instances,
                         const FleetCollector& collected, const SimOptions& options) {
  SimFigures total;
  for (std::uint32_t i = 0; i < instances.size(); ++i) {
    total.merge(fleet_part(instances[i], fleet.role(i), fleet.routed()[i].requests, i));
  }
  const Simulator::Latencies& lat = collected.latencies;
  const std::vector<double> extra = report_percentiles(options);
  total.queue_ms = LatencyFigures::of(lat.queue_ms.summary(extra));
  total.ttft_ms = LatencyFigures::of(lat.ttft_ms.summary(extra));
  total.tpot_ms = LatencyFigures::of(lat.tpot_ms.summary(extra));
  total.itl_ms = LatencyFigures::of(lat.itl_ms.summary(extra));
  total.e2e_ms = LatencyFigures::of(lat.e2e_ms.summary(extra));
  total.slo_met = collected.slo_met;
  total.slo_output_tokens = collected.slo_output_tokens;
  total.service_p99_s = lat.service_s.quantile(0.99);
  total.closed_loop = options.load.concurrency.has_value();
  total.virtual_seconds = fleet.now();
  return total;
}

// The report's fleet section and each instance's.
void add_fleet_sections(nlohmann::json& report, const Fleet& fleet,
                        const std::vector<nlohmann::json>& reports, const RunConfig& config) {
  const auto n = static_cast<std::uint32_t>(fleet.size());
  const FleetOptions& fleet_options = fleet.options();
  const std::uint64_t gpus_each = std::uint64_t{config.tp} * config.pp;
  auto entry = [&fleet](std::uint32_t i) { return fleet.role(i) != InstanceRole::kDecode; };
  std::vector<double> routed_requests, routed_tokens;
  nlohmann::json instances = nlohmann::json::array();
  // Each instance's sections, the engine's own (its entry's) among them.
  const std::vector<std::string> keys = {
      "status",     "requests",
      "blocks",     "prefix_cache",
      "scheduler",  "latency",
      "slo",        "overload",
      "invariants", std::string(engine_entry(fleet.instance(0).options().engine).report_section),
      "cost_usd",   "offload"};
  for (std::uint32_t i = 0; i < n; ++i) {
    const Fleet::Routed& routed = fleet.routed()[i];
    if (entry(i)) {  // the router's instances (disaggregated: the prefill ones)
      routed_requests.push_back(static_cast<double>(routed.requests));
      routed_tokens.push_back(static_cast<double>(routed.prompt_tokens + routed.output_tokens));
    }
    nlohmann::json item = {{"instance", i},
                           {"role", std::string(to_string(fleet.role(i)))},
                           {"routed",
                            {{"requests", routed.requests},
                             {"prompt_tokens", routed.prompt_tokens},
                             {"output_tokens", routed.output_tokens}}}};
    for (const std::string& key : keys) {
      if (!key.empty() && reports[i].contains(key)) item[key] = reports[i][key];
    }
    instances.push_back(std::move(item));
  }
  report["fleet"] = {
      {"replicas", n},
      {"router", router_json(fleet_options.router)},
      {"gpus", gpus_each * n},
      {"imbalance",
       {{"requests", max_over_mean(routed_requests)}, {"tokens", max_over_mean(routed_tokens)}}}};
  if (fleet_options.disaggregated()) {
    const Fleet::Transfers& moved = fleet.transfers();
    report["fleet"]["prefill"] = fleet_options.prefill_replicas;
    report["fleet"]["decode"] = fleet_options.decode_replicas;
    report["fleet"]["kv_transfer"] = {{"gbps", fleet_options.kv_transfer_gbps},
                                      {"latency_us", fleet_options.kv_transfer_latency_us},
                                      {"requests", moved.requests},
                                      {"blocks", moved.blocks},
                                      {"bytes", moved.bytes},
                                      {"block_bytes", fleet.instance(0).block_bytes()},
                                      {"ms", latency_json(moved.ms.summary())},
                                      {"waited", moved.waited},
                                      {"wait_ms", latency_json(moved.wait_ms.summary())}};
  }
  report["instances"] = std::move(instances);
}

}  // namespace

std::string router_log_header(std::uint32_t replicas, bool prefix_aware) {
  std::string out = "line,id,arrival_s,instance";
  if (prefix_aware) {
    for (std::uint32_t i = 0; i < replicas; ++i) out += fmt::format(",cached_blocks_{}", i);
  }
  for (std::uint32_t i = 0; i < replicas; ++i) out += fmt::format(",cost_{}", i);
  return out + "\n";
}

InputResult<SimulationResult> simulate_fleet_file(
    const std::string& path, std::optional<RequestFormat> format, const RunConfig& config,
    const SimOptions& options, const FleetOptions& fleet_options, const FleetOutputs& outputs,
    const SimulateTerminal& terminal, const std::string& shown_as) {
  auto start = std::chrono::steady_clock::now();
  const std::string& shown = shown_as.empty() ? path : shown_as;
  auto opened = RequestReader::open(path, format, shown);
  if (!opened) return Unexpected{opened.error()};
  RequestReader& reader = *opened.value();
  if (auto problem = sim_options_error(config, options)) {
    return Unexpected{InputError{"command line", 0, problem->option, problem->problem}};
  }
  if (fleet_options.disaggregated()) {
    const std::vector<KvCacheGroupSpec>& groups =
        options.kv_groups.empty() ? config.kv_groups : options.kv_groups;
    if (groups.size() > 1 ||
        (groups.size() == 1 && groups[0].attention == KvCacheGroupSpec::kSliding)) {
      return Unexpected{
          InputError{"command line", 0, "--prefill-replicas",
                     "disaggregated serving needs one full-attention KV-cache group; this model's "
                     "sliding-window or hybrid groups cannot receive KV yet"}};
    }
  }
  Fleet fleet(config, options, fleet_options);
  const auto n = static_cast<std::uint32_t>(fleet.size());
  FleetCollector collected;
  attach_fleet_observers(fleet, options, outputs, terminal, collected);
  // --emit-trace: one trace of the instances' schedules side by side (their
  // sequences, names and keys disjoint) over the sum of their pools. Under
  // disaggregated serving the prefill instances stage each finished prompt's
  // KV in the trace's link tier, and the decode instances load it from there
  // (TraceEmitter::stage).
  std::optional<TraceSink> trace_sink;
  std::deque<TraceEmitter> emitters;
  if (outputs.trace != nullptr) {
    trace_sink.emplace([out = outputs.trace](std::string_view line) { out->write(line); });
    std::uint64_t blocks = 0;
    for (std::uint32_t i = 0; i < n; ++i) blocks += fleet.instance(i).usable_blocks();
    if (auto problem = trace_sink->header(config.kv, blocks, config.alloc_order);
        !problem.empty()) {
      return Unexpected{InputError{"command line", 0, "--emit-trace", problem}};
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      TraceEmitter& emitter = emitters.emplace_back(*trace_sink, i);
      if (fleet.role(i) == InstanceRole::kPrefill) emitter.hand_off_prompts();
      if (!fleet.instance(i).emit_trace(emitter)) {
        return Unexpected{InputError{"command line", 0, "--emit-trace",
                                     "this engine's schedule cannot be written as a kvtrace"}};
      }
    }
  }
  auto outputs_failed = [&outputs] {
    for (OutputFile* out : {outputs.timeline, outputs.requests, outputs.router_log,
                            outputs.kv_events, outputs.trace}) {
      if (out != nullptr && out->failed()) return true;
    }
    return false;
  };

  // A load generator (--request-rate, --concurrency) sets each arrival, as
  // for one instance, over the fleet's requests as the user sent them.
  auto load_options = load_for(options.load, path, format, shown);
  if (!load_options) return Unexpected{load_options.error()};
  LoadGenerator load_generator(load_options.value(), fleet);
  auto ran = drive(reader, fleet, load_generator, outputs_failed);
  if (!ran) return Unexpected{ran.error()};
  if (ran.value().output_failed) return SimulationResult{};
  const bool violated = ran.value().violated;
  auto sha256 = reader.content_sha256();
  if (!sha256) return Unexpected{sha256.error()};
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Each instance's report, as a lone simulation's.
  // Entry instances take the trace's requests (all of them, or the prefill
  // ones); facing ones finish them (all, or the decode ones).
  auto entry = [&fleet](std::uint32_t i) { return fleet.role(i) != InstanceRole::kDecode; };
  std::uint64_t all_requests = reader.skipped();
  for (std::uint32_t i = 0; i < n; ++i) {
    if (entry(i)) all_requests += fleet.routed()[i].requests;
  }
  const TraceInfo trace{shown, std::string(to_string(reader.format())), all_requests,
                        std::move(sha256).value()};
  SimulationResult result;
  const std::vector<nlohmann::json> reports =
      instance_reports(fleet, shown, trace, options, wall, result);
  result.figures = fleet_figures(fleet, result.instance_figures, collected, options);
  const SimReportContext context{
      trace,
      violated,
      &fleet.instance(0).config(),
      &options,
      cost_json(options.cost, fleet.instance(0).roofline(), options.engine),
      wall,
      reader.skipped(),
      nullptr};
  nlohmann::json report = sim_report(result.figures, context);
  result.trace = context.trace;
  result.reader_skipped = context.reader_skipped;
  result.cost_model = context.cost;
  add_fleet_sections(report, fleet, reports, config);

  result.violated = violated;
  result.overload_warning = overload_warning(shown, result.figures.overload());
  result.latency_cdf = latency_cdf(collected.latencies);
  if (options.load.any()) report["load"] = load_generator.figures();
  result.summary = fleet_summary(report, terminal.color);
  if (options.load.any()) result.summary += load_generator.summary_line();
  result.report = std::move(report);
  return result;
}

std::string fleet_summary(const nlohmann::json& report, bool color) {
  std::string out;
  auto line = [&out](std::string_view label, const std::string& value) {
    out += fmt::format("  {:<26} {}\n", label, value);
  };
  const nlohmann::json& fleet = report["fleet"];
  const nlohmann::json& sim = report["config"]["simulation"];
  out +=
      fmt::format("{} ({} x {} engine, router {}, {} GPUs)\n", Paint{color}.bold("fleet"),
                  fleet["replicas"].get<std::uint64_t>(), sim["engine"].get<std::string>(),
                  fleet["router"]["policy"].get<std::string>(), fleet["gpus"].get<std::uint64_t>());
  line("trace", report["trace"]["path"].get<std::string>());
  const nlohmann::json& requests = report["requests"];
  line("requests",
       fmt::format("{} total, {} finished, {} skipped", requests["total"].get<std::uint64_t>(),
                   requests["finished"].get<std::uint64_t>(),
                   requests["skipped"].get<std::uint64_t>()));
  line("prefix-cache hit rate",
       fmt::format("{:.4f} of prompt tokens ({:.4f} per request)",
                   report["prefix_cache"]["hit_rate"].get<double>(),
                   report["prefix_cache"]["hit_rate_per_request"].get<double>()));
  line("imbalance (max / mean)",
       fmt::format("{:.3f} requests, {:.3f} tokens", fleet["imbalance"]["requests"].get<double>(),
                   fleet["imbalance"]["tokens"].get<double>()));
  const nlohmann::json& scheduler = report["scheduler"];
  line("virtual time",
       fmt::format("{:.1f} s ({:.1f} output tokens/s)", scheduler["virtual_seconds"].get<double>(),
                   scheduler["output_tokens_per_second"].get<double>()));
  line("steps / preemptions", fmt::format("{} / {}", scheduler["steps"].get<std::uint64_t>(),
                                          scheduler["preemptions"].get<std::uint64_t>()));
  const std::vector<double> shown = sim.contains("percentiles")
                                        ? sim["percentiles"].get<std::vector<double>>()
                                        : std::vector<double>{};
  line("TTFT", latency_line(report["latency"]["ttft_ms"], shown));
  line("TPOT", latency_line(report["latency"]["tpot_ms"], shown));
  line("ITL", latency_line(report["latency"]["itl_ms"], shown));
  if (report.contains("slo")) {
    for (const auto& [label, text] : slo_lines(report["slo"])) line(label, text);
  }
  if (report.contains("cost_usd")) {
    const nlohmann::json& cost = report["cost_usd"];
    const nlohmann::json& per_m = cost["usd_per_million_output_tokens"];
    line("cost", fmt::format("${:.2f}/hour; {} per million output tokens within SLO",
                             cost["usd_per_hour"].get<double>(),
                             per_m.is_null() ? std::string("n/a (none within SLO)")
                                             : fmt::format("${:.4f}", per_m.get<double>())));
  }
  out += fmt::format("  {:<8} {:>9} {:>10} {:>10} {:>12} {:>12}\n", "instance", "requests",
                     "hit rate", "peak use", "TTFT p99", "TPOT p99");
  for (const nlohmann::json& instance : report["instances"]) {
    out += fmt::format("  {:<8} {:>9} {:>10.4f} {:>10} {:>12} {:>12}\n",
                       instance["instance"].get<std::uint64_t>(),
                       instance["routed"]["requests"].get<std::uint64_t>(),
                       instance["prefix_cache"]["hit_rate"].get<double>(),
                       instance["blocks"]["peak_in_use"].get<std::uint64_t>(),
                       ms_text(instance["latency"]["ttft_ms"]["p99"].get<double>()),
                       ms_text(instance["latency"]["tpot_ms"]["p99"].get<double>()));
  }
  return out;
}

}  // namespace kvreplay
