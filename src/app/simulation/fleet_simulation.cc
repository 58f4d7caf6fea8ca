// `simulate --replicas N`: a fleet (engine/fleet/fleet.h) over one request trace,
// and its report: fleet totals at the top level, "fleet" and "instances".
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <set>

#include "app/simulation/simulation.h"
#include "app/simulation/simulation_internal.h"
#include "app/terminal.h"
#include "engine/events/kv_events.h"
#include "engine/fleet/fleet.h"
#include "engine/load_generator.h"
#include "engine/replay/trace_emitter.h"
#include "formats/requests/request_reader.h"
#include "report/paint.h"

namespace kvreplay {

using namespace sim_detail;

namespace {

// How a fleet total is made of the instances' values of one key.
enum class Combine : std::uint8_t { kSum, kMax, kMin, kMean };

Combine combine_of(const std::string& key) {
  static const std::set<std::string> max_keys = {"virtual_seconds", "end_s", "last_arrival_s",
                                                 "waste_ratio_max"};
  static const std::set<std::string> mean_keys = {
      "waste_ratio_at_peak",  "waste_ratio_mean",     "runs_per_seq_mean",
      "runs_per_seq_at_peak", "continued_share_mean", "continued_share_at_peak"};
  if (max_keys.count(key) != 0) return Combine::kMax;
  if (key == "first_arrival_s") return Combine::kMin;
  if (mean_keys.count(key) != 0) return Combine::kMean;
  return Combine::kSum;
}

// The fleet's offload section, from the instances' sums: each tier's link and
// the block size as one instance has them; load_ms's count summed, its mean
// weighted by the counts, its quantiles and max the largest instance's (an
// upper bound); hit_rate_with_tiers over the fleet's prompt tokens.
void fleet_offload(nlohmann::json& report, const std::vector<nlohmann::json>& reports) {
  nlohmann::json& offload = report["offload"];
  const nlohmann::json& one = reports.front()["offload"];
  offload["block_bytes"] = one["block_bytes"];
  for (auto& [name, tier] : offload["tiers"].items()) {
    tier["gbps"] = one["tiers"][name]["gbps"];
    tier["latency_us"] = one["tiers"][name]["latency_us"];
    double weighted = 0;
    std::uint64_t count = 0;
    nlohmann::json& load = tier["load_ms"];
    for (const char* q : {"p50", "p99", "max"}) load[q] = 0.0;
    for (const nlohmann::json& r : reports) {
      const nlohmann::json& l = r["offload"]["tiers"][name]["load_ms"];
      count += l["count"].get<std::uint64_t>();
      weighted += l["mean"].get<double>() * l["count"].get<double>();
      for (const char* q : {"p50", "p99", "max"})
        load[q] = std::max(load[q].get<double>(), l[q].get<double>());
    }
    load["mean"] = count == 0 ? 0.0 : weighted / static_cast<double>(count);
  }
  nlohmann::json& cache = report["prefix_cache"];
  if (!cache.contains("hits_by_tier")) return;
  std::uint64_t hits = 0;
  for (const auto& [name, value] : cache["hits_by_tier"].items()) {
    (void)name;
    hits += value.get<std::uint64_t>();
  }
  const auto query = cache["query_tokens"].get<std::uint64_t>();
  cache["hit_rate_with_tiers"] =
      query == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(query);
}

// The instances' values of one key, combined: numbers by combine_of (a
// count summed stays an integer), objects key by key, equal values kept;
// a null among numbers is left out (oom.first_event: the earliest).
nlohmann::json combine(const std::vector<const nlohmann::json*>& values, const std::string& key) {
  const nlohmann::json& first = *values.front();
  if (first.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : first.items()) {
      (void)v;
      std::vector<const nlohmann::json*> parts;
      for (const nlohmann::json* value : values) {
        if (value->contains(k)) parts.push_back(&(*value)[k]);
      }
      out[k] = combine(parts, k);
    }
    return out;
  }
  std::vector<const nlohmann::json*> numbers;
  for (const nlohmann::json* value : values) {
    if (value->is_number()) numbers.push_back(value);
  }
  if (numbers.empty()) {
    // Strings, booleans, nulls: the first (equal across instances, but for
    // what the caller sets afterwards).
    if (first.is_boolean()) {
      bool any = false;
      for (const nlohmann::json* value : values)
        any = any || (value->is_boolean() && value->get<bool>());
      return any;
    }
    return first;
  }
  if (key == "first_event") {  // oom.first_event: each instance's own event count
    std::uint64_t earliest = std::numeric_limits<std::uint64_t>::max();
    for (const nlohmann::json* value : numbers)
      earliest = std::min(earliest, value->get<std::uint64_t>());
    return earliest;
  }
  const Combine how = combine_of(key);
  const bool integral = std::all_of(numbers.begin(), numbers.end(),
                                    [](const nlohmann::json* v) { return v->is_number_integer(); });
  if (integral && (how == Combine::kSum || how == Combine::kMax || how == Combine::kMin)) {
    if (std::all_of(numbers.begin(), numbers.end(),
                    [](const nlohmann::json* v) { return v->is_number_unsigned(); })) {
      std::uint64_t out = how == Combine::kMin ? std::numeric_limits<std::uint64_t>::max() : 0;
      for (const nlohmann::json* v : numbers) {
        const auto x = v->get<std::uint64_t>();
        out = how == Combine::kSum   ? out + x
              : how == Combine::kMax ? std::max(out, x)
                                     : std::min(out, x);
      }
      return out;
    }
    std::int64_t out = how == Combine::kMin   ? std::numeric_limits<std::int64_t>::max()
                       : how == Combine::kMax ? std::numeric_limits<std::int64_t>::min()
                                              : 0;
    for (const nlohmann::json* v : numbers) {
      const auto x = v->get<std::int64_t>();
      out = how == Combine::kSum   ? out + x
            : how == Combine::kMax ? std::max(out, x)
                                   : std::min(out, x);
    }
    return out;
  }
  double out = how == Combine::kMin   ? std::numeric_limits<double>::infinity()
               : how == Combine::kMax ? -std::numeric_limits<double>::infinity()
                                      : 0.0;
  for (const nlohmann::json* v : numbers) {
    const auto x = v->get<double>();
    if (how == Combine::kMax)
      out = std::max(out, x);
    else if (how == Combine::kMin)
      out = std::min(out, x);
    else
      out += x;
  }
  if (how == Combine::kMean) out /= static_cast<double>(numbers.size());
  return out;
}

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

nlohmann::json router_json(const RouterOptions& router) {
  nlohmann::json out = {{"policy", std::string(to_string(router.policy))}};
  switch (router.policy) {
    case RouterPolicy::kPowerOfTwo: out["seed"] = router.seed; break;
    case RouterPolicy::kPrefixAware:
      out["overlap_weight"] = router.overlap_weight;
      out["temperature"] = router.temperature;
      out["view"] = std::string(to_string(router.view));
      if (router.temperature > 0) out["seed"] = router.seed;
      if (router.view == RouterView::kApproximate) {
        out["approx_blocks"] = router.approx_blocks;  // 0: the instance's pool
        out["approx_ttl_s"] = router.approx_ttl_s;
      }
      break;
    default: break;
  }
  return out;
}

// The fleet's request times, as each instance reports them.
struct FleetCollector {
  Simulator::Latencies latencies;
  std::uint64_t slo_met = 0;
  std::uint64_t slo_output_tokens = 0;
};

// What fleet_totals takes of the run beside the fleet.
struct RunTotals {
  bool violated = false;
  double wall = 0;
  std::uint64_t all_requests = 0;  // the trace's: routed, and skipped by the reader
  std::uint64_t reader_skipped = 0;
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
    std::string header = requests_csv_header();
    header.insert(header.size() - 1, ",instance");
    outputs.requests->write(header);
  }
  // The instances requests enter (the router's) and those that answer them.
  auto entry = [&fleet](std::uint32_t i) { return fleet.role(i) != InstanceRole::kDecode; };
  auto facing = [&fleet](std::uint32_t i) { return fleet.role(i) != InstanceRole::kPrefill; };
  for (std::uint32_t i = 0; i < n; ++i) {
    Simulator& sim = fleet.instance(i);
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
        std::string row = requests_csv_row(t);
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
  const bool prefix_aware = fleet_options.router.policy == RouterPolicy::kPrefixAware;
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

// Each instance's report, as a lone simulation's; its skip warnings, each
// naming the instance, go to result.
std::vector<nlohmann::json> instance_reports(const Fleet& fleet, const std::string& path,
                                             const TraceInfo& trace, const SimOptions& options,
                                             double wall, SimulationResult& result) {
  const auto n = static_cast<std::uint32_t>(fleet.size());
  std::vector<nlohmann::json> reports;
  reports.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    const Simulator& sim = fleet.instance(i);
    const bool bad = fleet.violated_instance() == i;
    ReportSource source{trace,
                        bad ? RunStatus::kViolation : RunStatus::kOk,
                        &sim.config(),
                        &sim.totals(),
                        &sim.state(),
                        sim.pool().total(),
                        sim.pool().allocations() - sim.null_blocks(),
                        sim.pool().frees(),
                        options.check.name(),
                        &sim.violation(),
                        wall};
    source.null_blocks = sim.null_blocks();
    if (options.allocator != AllocatorKind::kPaged) {
      source.allocations = 0;
      source.frees = 0;
    }
    reports.push_back(simulation_report(source, sim, options, run_figures(sim, 0), 0));
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

// The fleet's totals: the instances' reports combined, then the ratios,
// latencies, SLOs, overload and cost recomputed from the fleet's own sums.
// `load` gets the fleet's overload figures.
nlohmann::json fleet_totals(const Fleet& fleet, const std::vector<nlohmann::json>& reports,
                            const FleetCollector& collected, const SimOptions& options,
                            const RunConfig& config, const RunTotals& run, OverloadFigures& load) {
  const auto n = static_cast<std::uint32_t>(fleet.size());
  const bool violated = run.violated;
  const double wall = run.wall;
  const std::uint64_t all_requests = run.all_requests;
  auto entry = [&fleet](std::uint32_t i) { return fleet.role(i) != InstanceRole::kDecode; };
  auto facing = [&fleet](std::uint32_t i) { return fleet.role(i) != InstanceRole::kPrefill; };
  nlohmann::json report = nlohmann::json::object();
  for (const auto& [key, value] : reports.front().items()) {
    (void)value;
    if (key == "config" || key == "trace" || key == "kvreplay_report" || key == "sglang" ||
        key == "trtllm" || key == "cost_usd") {
      if (key != "sglang" && key != "trtllm" && key != "cost_usd") report[key] = value;
      continue;
    }
    std::vector<const nlohmann::json*> same;
    for (std::uint32_t i = 0; i < n; ++i) {
      // The prefix cache that routing decides is the entry instances' (a
      // decode instance's hits are the KV it received).
      if (key == "prefix_cache" && !entry(i)) continue;
      same.push_back(&reports[i][key]);
    }
    report[key] = combine(same, key);
  }
  report["status"] = violated ? "violation" : "ok";
  nlohmann::json violations = nlohmann::json::array();
  for (std::uint32_t i = 0; i < n; ++i) {
    for (nlohmann::json v : reports[i]["invariants"]["violations"]) {
      v["instance"] = i;
      violations.push_back(std::move(v));
    }
  }
  report["invariants"]["violations"] = std::move(violations);
  report["timing"] = {{"wall_seconds", wall}, {"kernels", nlohmann::json::object()}};
  // Each request of the trace once, whichever side it ended on: the trace's
  // (those routed, and those the reader skipped); finished where it finished
  // (below); skipped where it was skipped (by the reader, or by the one
  // instance that gave up on it: under P/D the prefill side, on admission,
  // for a request either side can never run).
  std::uint64_t skipped[4] = {run.reader_skipped, 0, 0, 0};
  for (std::uint32_t i = 0; i < n; ++i) {
    const SimTotals& st = fleet.instance(i).sim_totals();
    skipped[0] += st.skipped;
    skipped[1] += st.skipped - st.skipped_too_long - st.skipped_too_many_samples;
    skipped[2] += st.skipped_too_long;
    skipped[3] += st.skipped_too_many_samples;
  }
  report["requests"] = {{"total", all_requests},          {"finished", 0},
                        {"skipped", skipped[0]},          {"skipped_pool_too_small", skipped[1]},
                        {"skipped_too_long", skipped[2]}, {"skipped_too_many_samples", skipped[3]}};

  // Ratios and distributions, from the fleet's own sums.
  std::uint64_t query_tokens = 0, hit_tokens = 0, hit_rate_requests = 0, output_tokens = 0,
                finished = 0, slo_met = 0;
  double hit_rate_sum = 0;
  bool any_arrival = false;
  for (std::uint32_t i = 0; i < n; ++i) {
    const Simulator& sim = fleet.instance(i);
    const SimTotals& st = sim.sim_totals();
    if (entry(i)) {
      query_tokens += st.query_tokens;
      hit_tokens += st.hit_tokens;
      hit_rate_sum += st.hit_rate_sum;
      hit_rate_requests += st.hit_rate_requests;
    }
    if (facing(i)) {
      output_tokens += st.output_tokens;
      finished += st.finished;
    }
    const OverloadFigures o = sim.overload();
    if (fleet.routed()[i].requests == 0) continue;
    load.end = std::max(load.end, o.end);
    load.peak_waiting += o.peak_waiting;
    // The user's arrivals: a decode instance's are when the KV landed.
    if (!entry(i)) continue;
    if (!any_arrival) {
      load.first_arrival = o.first_arrival;
      load.last_arrival = o.last_arrival;
    }
    any_arrival = true;
    load.first_arrival = std::min(load.first_arrival, o.first_arrival);
    load.last_arrival = std::max(load.last_arrival, o.last_arrival);
    load.waiting_at_last_arrival += o.waiting_at_last_arrival;
  }
  load.service_p99_s = collected.latencies.service_s.quantile(0.99);
  load.closed_loop = options.load.concurrency.has_value();
  slo_met = collected.slo_met;
  report["requests"]["finished"] = finished;
  report["scheduler"]["output_tokens"] = output_tokens;
  const double seconds = fleet.now();
  report["prefix_cache"]["hit_rate"] =
      query_tokens == 0 ? 0.0 : static_cast<double>(hit_tokens) / static_cast<double>(query_tokens);
  report["prefix_cache"]["hit_rate_per_request"] =
      hit_rate_requests == 0 ? 0.0 : hit_rate_sum / static_cast<double>(hit_rate_requests);
  if (report.contains("offload")) fleet_offload(report, reports);
  report["scheduler"]["virtual_seconds"] = seconds;
  report["scheduler"]["output_tokens_per_second"] =
      seconds > 0 ? static_cast<double>(output_tokens) / seconds : 0.0;
  report["scheduler"]["requests_per_second"] =
      seconds > 0 ? static_cast<double>(finished) / seconds : 0.0;
  const Simulator::Latencies& lat = collected.latencies;
  report["latency"] = {{"queue_ms", latency_json(lat.queue_ms.summary())},
                       {"ttft_ms", latency_json(lat.ttft_ms.summary())},
                       {"tpot_ms", latency_json(lat.tpot_ms.summary())},
                       {"e2e_ms", latency_json(lat.e2e_ms.summary())}};
  if (options.slo.any()) {
    report["slo"]["met"] = slo_met;
    report["slo"]["attainment"] =
        all_requests == 0 ? 0.0 : static_cast<double>(slo_met) / static_cast<double>(all_requests);
    report["slo"]["goodput_rps"] = seconds > 0 ? static_cast<double>(slo_met) / seconds : 0.0;
    if (options.slo.ttft_ms) report["slo"]["ttft_ms"] = *options.slo.ttft_ms;
    if (options.slo.tpot_ms) report["slo"]["tpot_ms"] = *options.slo.tpot_ms;
  }
  report["overload"] = {{"overloaded", load.overloaded()},
                        {"ratio", load.ratio() ? nlohmann::json(*load.ratio()) : nullptr},
                        {"first_arrival_s", load.first_arrival},
                        {"last_arrival_s", load.last_arrival},
                        {"end_s", load.end},
                        {"waiting_at_last_arrival", load.waiting_at_last_arrival},
                        {"service_p99_s", load.service_p99_s},
                        {"peak_waiting", load.peak_waiting}};
  const std::uint64_t gpus_each = std::uint64_t{config.tp} * config.pp;
  if (options.gpu_hour_usd) {
    report["cost_usd"] =
        cost_usd_json(*options.gpu_hour_usd, gpus_each * n, seconds, collected.slo_output_tokens);
  }

  return report;
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
    for (const char* key :
         {"status", "requests", "blocks", "prefix_cache", "scheduler", "latency", "slo", "overload",
          "invariants", "sglang", "trtllm", "cost_usd", "offload"}) {
      if (reports[i].contains(key)) item[key] = reports[i][key];
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
  LoadGenerator load_generator(options.load, fleet);
  Request request;
  bool violated = false;
  for (;;) {
    if (outputs_failed()) return SimulationResult{};
    auto more = reader.next(request);
    if (!more) return Unexpected{more.error()};
    if (!more.value()) break;
    if (!load_generator.set_arrival(request)) {
      if (load_generator.error()) return Unexpected{*load_generator.error()};
      violated = true;
      break;
    }
    if (!fleet.run_until(request.arrival)) {
      violated = true;
      break;
    }
    fleet.submit(std::move(request));
    request = Request{};
  }
  if (!violated && !fleet.run_until(std::numeric_limits<double>::infinity())) violated = true;
  if (!violated && !fleet.finish()) violated = true;
  if (outputs_failed()) return SimulationResult{};
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
  OverloadFigures load;
  nlohmann::json report =
      fleet_totals(fleet, reports, collected, options, config,
                   RunTotals{violated, wall, all_requests, reader.skipped()}, load);
  add_fleet_sections(report, fleet, reports, config);

  result.violated = violated;
  result.overload_warning = overload_warning(shown, load);
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
  auto percentiles = [](const nlohmann::json& l) {
    return fmt::format("p50 {}, p90 {}, p99 {}, mean {}", ms_text(l["p50"].get<double>()),
                       ms_text(l["p90"].get<double>()), ms_text(l["p99"].get<double>()),
                       ms_text(l["mean"].get<double>()));
  };
  line("TTFT", percentiles(report["latency"]["ttft_ms"]));
  line("TPOT", percentiles(report["latency"]["tpot_ms"]));
  if (report.contains("slo")) {
    line("SLO attainment", fmt::format("{:.4f} ({} met; goodput {:.2f} requests/s)",
                                       report["slo"]["attainment"].get<double>(),
                                       report["slo"]["met"].get<std::uint64_t>(),
                                       report["slo"]["goodput_rps"].get<double>()));
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
