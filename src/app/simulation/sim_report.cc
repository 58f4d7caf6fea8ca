#include "app/simulation/sim_report.h"

#include "app/simulation/simulation.h"
#include "app/simulation/simulation_internal.h"

namespace kvreplay {

namespace {

// The offload tiers' figures, from the section the engine writes
// (add_offload_figures, engine/offload/offload_connector.cc): the engine's
// figures reach the shell as its report section (Scheduler::add_figures).
void read_offload(const nlohmann::json& sections, SimFigures& f) {
  if (!sections.contains("offload")) return;
  const nlohmann::json& offload = sections.at("offload");
  f.offload = true;
  f.offload_policy = offload.at("policy").get<std::string>();
  f.offload_block_bytes = offload.at("block_bytes").get<std::uint64_t>();
  const nlohmann::json& by_tier = sections.at("prefix_cache").at("hits_by_tier");
  for (const auto& [name, tier] : offload.at("tiers").items()) {
    OffloadTierSimFigures t;
    t.medium = name;
    t.capacity_blocks = tier.at("capacity_blocks").get<std::uint64_t>();
    t.capacity_bytes = tier.at("capacity_bytes").get<std::uint64_t>();
    t.gbps = tier.at("gbps").get<double>();
    t.latency_us = tier.at("latency_us").get<double>();
    t.stored = tier.at("stored").get<std::uint64_t>();
    t.loaded = tier.at("loaded").get<std::uint64_t>();
    t.evicted = tier.at("evicted").get<std::uint64_t>();
    t.hit_tokens = tier.at("hit_tokens").get<std::uint64_t>();
    t.preempted_hit_tokens = tier.at("preempted_hit_tokens").get<std::uint64_t>();
    t.bytes_in = tier.at("bytes_in").get<std::uint64_t>();
    t.bytes_out = tier.at("bytes_out").get<std::uint64_t>();
    t.store_refused = tier.at("store_refused").get<std::uint64_t>();
    t.resident_blocks = tier.at("resident_blocks").get<std::uint64_t>();
    const nlohmann::json& load = tier.at("load_ms");
    LatencySummary s;
    s.count = load.at("count").get<std::uint64_t>();
    s.mean = load.at("mean").get<double>();
    s.p50 = load.at("p50").get<double>();
    s.p99 = load.at("p99").get<double>();
    s.max = load.at("max").get<double>();
    t.load_ms = LatencyFigures::of(s);
    f.tier_hit_tokens.push_back(by_tier.at(name).get<std::uint64_t>());
    f.tiers.push_back(std::move(t));
  }
}

nlohmann::json violation_json(const InstanceViolation& iv) {
  const Violation& v = iv.violation;
  nlohmann::json out = {{"event", v.event == 0 ? nlohmann::json(nullptr) : nlohmann::json(v.event)},
                        {"line", v.line == 0 ? nlohmann::json(nullptr) : nlohmann::json(v.line)},
                        {"invariant", v.invariant},
                        {"message", v.message}};
  if (iv.instance) out["instance"] = *iv.instance;
  return out;
}

}  // namespace

nlohmann::json offload_section(const SimFigures& f) {
  nlohmann::json tiers = nlohmann::json::object();
  for (const OffloadTierSimFigures& t : f.tiers) {
    tiers[t.medium] = {{"capacity_blocks", t.capacity_blocks},
                       {"capacity_bytes", t.capacity_bytes},
                       {"gbps", t.gbps},
                       {"latency_us", t.latency_us},
                       {"stored", t.stored},
                       {"loaded", t.loaded},
                       {"evicted", t.evicted},
                       {"hit_tokens", t.hit_tokens},
                       {"preempted_hit_tokens", t.preempted_hit_tokens},
                       {"bytes_in", t.bytes_in},
                       {"bytes_out", t.bytes_out},
                       {"store_refused", t.store_refused},
                       {"resident_blocks", t.resident_blocks},
                       {"load_ms",
                        {{"count", t.load_ms.count},
                         {"mean", t.load_ms.mean},
                         {"p50", t.load_ms.p50},
                         {"p99", t.load_ms.p99},
                         {"max", t.load_ms.max}}}};
  }
  return {{"policy", f.offload_policy}, {"block_bytes", f.offload_block_bytes}, {"tiers", tiers}};
}

nlohmann::json prefix_cache_section(const SimFigures& f) {
  nlohmann::json cache = {{"query_tokens", f.query_tokens},
                          {"hit_tokens", f.hit_tokens},
                          {"hit_rate", f.hit_rate()},
                          {"hit_rate_per_request", f.hit_rate_per_request()},
                          {"hit_blocks", f.hit_blocks},
                          {"evictions", f.evictions},
                          {"queries", f.queries},
                          {"hits", f.hits},
                          {"preempted_queries", f.preempted_queries},
                          {"preempted_hits", f.preempted_hits},
                          {"peak_resident_blocks", f.peak_cache_resident}};
  if (f.offload) {
    nlohmann::json by_tier = {{"gpu", f.hit_tokens}};
    for (std::size_t t = 0; t < f.tiers.size() && t < f.tier_hit_tokens.size(); ++t) {
      by_tier[f.tiers[t].medium] = f.tier_hit_tokens[t];
    }
    cache["hits_by_tier"] = std::move(by_tier);
    cache["hit_rate_with_tiers"] = f.hit_rate_with_tiers();
  }
  return cache;
}

SimFigures instance_figures(const Simulator& sim, const SimOptions& options,
                            nlohmann::json& engine_sections) {
  const SimTotals& st = sim.sim_totals();
  const ReplayTotals& t = sim.totals();
  // The baselines reserve regions instead of taking blocks.
  const bool paged = options.allocator == AllocatorKind::kPaged;
  SimFigures f;
  f.instances = 1;
  f.requests = st.requests;
  f.finished = st.finished;
  f.skipped = st.skipped;
  f.skipped_too_long = st.skipped_too_long;
  f.skipped_too_many_samples = st.skipped_too_many_samples;
  f.query_tokens = st.query_tokens;
  f.hit_tokens = st.hit_tokens;
  f.hit_rate_sum = st.hit_rate_sum;
  f.hit_rate_requests = st.hit_rate_requests;
  f.hit_blocks = st.hit_blocks;
  f.evictions = sim.evictions();
  f.queries = st.queries;
  f.hits = st.hits;
  f.preempted_queries = st.preempted_queries;
  f.preempted_hits = st.preempted_hits;
  f.peak_cache_resident = st.peak_cache_resident;
  f.pool_blocks = sim.pool().total();
  f.peak_used = t.peak_used;
  f.final_used = sim.state().used;
  // The null block: no allocation for KV.
  f.allocations = paged ? sim.pool().allocations() - sim.null_blocks() : 0;
  f.frees = paged ? sim.pool().frees() : 0;
  f.peak_in_use = st.peak_in_use;
  f.mean_in_use = st.steps == 0 ? 0.0 : st.in_use_sum / static_cast<double>(st.steps);
  f.peak_in_use_bytes = std::uint64_t{st.peak_in_use} * sim.block_bytes();
  f.tokens_appended = t.tokens_appended;
  f.peak_logical = t.peak_logical;
  f.peak_physical = t.peak_physical;
  f.waste_ratio_at_peak = MeanOverInstances::of(t.waste_ratio_at_peak);
  f.waste_ratio_mean = MeanOverInstances::of(t.waste_ratio_mean());
  f.waste_ratio_max = t.waste_ratio_max;
  f.waste_slots_at_peak = t.waste_slots_at_peak;
  f.runs_per_seq_mean = MeanOverInstances::of(t.runs_per_seq_mean());
  f.runs_per_seq_at_peak = MeanOverInstances::of(t.runs_per_seq_at_peak);
  f.continued_share_mean = MeanOverInstances::of(t.continued_share_mean());
  f.continued_share_at_peak = MeanOverInstances::of(t.continued_share_at_peak);
  f.forks = t.forks;
  f.prefix_installs = t.prefix_installs;
  f.shared_pages_installed = t.shared_pages_installed;
  f.saved_blocks_at_peak = st.saved_blocks_at_peak;
  f.cow_copies = t.cow_copies;
  f.cow_bytes = t.cow_bytes;
  f.checks = t.checks;
  if (const std::optional<Violation>& v = sim.violation()) f.violations.push_back({*v, {}});
  f.oom_events = t.oom_events;
  f.oom_first_event = t.oom_first_event;
  f.steps = st.steps;
  f.preemptions = st.preemptions;
  f.spec_drafts = st.spec_drafts;
  f.spec_draft_tokens = st.spec_draft_tokens;
  f.spec_accepted_tokens = st.spec_accepted_tokens;
  f.max_running = st.max_running;
  f.virtual_seconds = st.virtual_seconds;
  f.output_tokens = st.output_tokens;
  f.prompt_tokens_computed = st.prompt_tokens_computed;
  const Simulator::Latencies& lat = sim.latencies();
  const std::vector<double> extra = report_percentiles(sim.options());
  f.queue_ms = LatencyFigures::of(lat.queue_ms.summary(extra));
  f.ttft_ms = LatencyFigures::of(lat.ttft_ms.summary(extra));
  f.tpot_ms = LatencyFigures::of(lat.tpot_ms.summary(extra));
  f.itl_ms = LatencyFigures::of(lat.itl_ms.summary(extra));
  f.e2e_ms = LatencyFigures::of(lat.e2e_ms.summary(extra));
  f.slo_met = sim.slo_met();
  f.slo_output_tokens = sim.slo_output_tokens();
  const OverloadFigures load = sim.overload();
  f.has_arrivals = true;
  f.first_arrival = load.first_arrival;
  f.last_arrival = load.last_arrival;
  f.end = load.end;
  f.waiting_at_last_arrival = load.waiting_at_last_arrival;
  f.peak_waiting = load.peak_waiting;
  f.service_p99_s = load.service_p99_s;
  f.closed_loop = load.closed_loop;
  f.gpus = std::uint64_t{sim.config().tp} * sim.config().pp;
  nlohmann::json sections = {{"prefix_cache", nlohmann::json::object()}};
  sim.scheduler().add_figures(sections);
  read_offload(sections, f);
  sections.erase("offload");
  sections.erase("prefix_cache");
  engine_sections = std::move(sections);
  return f;
}

nlohmann::json latency_section(const SimFigures& f) {
  return {{"queue_ms", latency_json(f.queue_ms.summary())},
          {"ttft_ms", latency_json(f.ttft_ms.summary())},
          {"tpot_ms", latency_json(f.tpot_ms.summary())},
          {"itl_ms", latency_json(f.itl_ms.summary())},
          {"e2e_ms", latency_json(f.e2e_ms.summary())}};
}

nlohmann::json overload_section(const SimFigures& f) {
  const OverloadFigures load = f.overload();
  return {{"overloaded", load.overloaded()},
          {"ratio", load.ratio() ? nlohmann::json(*load.ratio()) : nullptr},
          {"first_arrival_s", load.first_arrival},
          {"last_arrival_s", load.last_arrival},
          {"end_s", load.end},
          {"waiting_at_last_arrival", load.waiting_at_last_arrival},
          {"service_p99_s", load.service_p99_s},
          {"peak_waiting", load.peak_waiting}};
}

const LatencyFigures& slo_metric_figures(const SimFigures& f, SloMetric metric) {
  switch (metric) {
    case SloMetric::kTtft: return f.ttft_ms;
    case SloMetric::kTpot: return f.tpot_ms;
    case SloMetric::kItl: return f.itl_ms;
    case SloMetric::kE2e: return f.e2e_ms;
  }
  return f.e2e_ms;
}

nlohmann::json slo_section(const SimFigures& f, const SimOptions& options,
                           std::uint64_t reader_skipped) {
  if (!options.slo.any()) return nullptr;
  nlohmann::json slo = nlohmann::json::object();
  bool met = true;
  // Each target over the finished requests' figure (sim_types.h, SloTargets).
  // A figure with no values: TTFT and E2E are not met (nothing finished),
  // TPOT and ITL are when requests finished with one token each.
  nlohmann::json targets = nlohmann::json::array();
  for (const PercentileTarget& t : options.slo.targets) {
    const LatencySummary s = slo_metric_figures(f, t.metric).summary();
    nlohmann::json value;  // null: no values
    bool target_met = false;
    if (const std::optional<double> at = s.at(t.percentile); s.count > 0 && at.has_value()) {
      value = *at;
      target_met = *at <= t.limit_ms;
    } else {
      const bool per_token = t.metric == SloMetric::kTpot || t.metric == SloMetric::kItl;
      target_met = per_token && f.finished > 0;
    }
    met = met && target_met;
    targets.push_back({{"metric", to_string(t.metric)},
                       {"percentile", t.percentile},
                       {"limit_ms", t.limit_ms},
                       {"value_ms", std::move(value)},
                       {"met", target_met}});
  }
  slo["targets"] = std::move(targets);
  if (options.slo.joint()) {
    // Skipped requests never meet the joint rule: attainment is over every request.
    const std::uint64_t all_requests = f.requests + reader_skipped;
    const auto requests_met = static_cast<double>(f.slo_met);
    const double attainment =
        all_requests == 0 ? 0.0 : requests_met / static_cast<double>(all_requests);
    if (options.slo.ttft_ms) slo["ttft_ms"] = *options.slo.ttft_ms;
    if (options.slo.tpot_ms) slo["tpot_ms"] = *options.slo.tpot_ms;
    if (options.slo.e2e_ms) slo["e2e_ms"] = *options.slo.e2e_ms;
    slo["requests_met"] = f.slo_met;
    slo["attainment"] = attainment;
    slo["attainment_target"] = options.slo.attainment;
    slo["goodput_rps"] = f.virtual_seconds > 0 ? requests_met / f.virtual_seconds : 0.0;
    met = met && attainment >= options.slo.attainment;
  }
  slo["met"] = met;
  return slo;
}

nlohmann::json cost_usd_section(const SimFigures& f, const SimOptions& options) {
  if (!options.gpu_hour_usd) return nullptr;
  return sim_detail::cost_usd_json(*options.gpu_hour_usd, f.gpus, f.virtual_seconds,
                                   f.slo_output_tokens);
}

nlohmann::json sim_report(const SimFigures& f, const SimReportContext& c) {
  const SimOptions& options = *c.options;
  const bool paged = options.allocator == AllocatorKind::kPaged;
  nlohmann::json report;
  report["kvreplay_report"] = 1;
  report["trace"] = {{"path", c.trace.path},
                     {"format", c.trace.format},
                     {"events", c.trace.events},
                     {"sha256", c.trace.sha256}};
  report["config"] = c.config->to_json();
  report["config"]["simulation"] = sim_options_json(options);
  report["config"]["simulation"]["cost"] = c.cost;
  report["status"] = std::string(to_string(c.violated ? RunStatus::kViolation : RunStatus::kOk));
  report["requests"] = {
      {"total", f.requests + c.reader_skipped},
      {"finished", f.finished},
      {"skipped", f.skipped + c.reader_skipped},
      {"skipped_pool_too_small", f.skipped - f.skipped_too_long - f.skipped_too_many_samples},
      {"skipped_too_long", f.skipped_too_long},
      {"skipped_too_many_samples", f.skipped_too_many_samples}};
  report["prefix_cache"] = prefix_cache_section(f);
  // In use vs cache residency (SimTotals::peak_in_use).
  report["blocks"] = {
      {"total", f.pool_blocks},       {"peak_used", f.peak_used}, {"final_used", f.final_used},
      {"allocations", f.allocations}, {"frees", f.frees},         {"peak_in_use", f.peak_in_use},
      {"mean_in_use", f.mean_in_use}};
  report["memory"] = {{"peak_in_use_bytes", f.peak_in_use_bytes}};
  report["tokens"] = {{"appended", f.tokens_appended},
                      {"peak_logical", f.peak_logical},
                      {"peak_physical", f.peak_physical}};
  report["fragmentation"] = {{"waste_ratio_at_peak", f.waste_ratio_at_peak.value()},
                             {"waste_ratio_mean", f.waste_ratio_mean.value()},
                             {"waste_ratio_max", f.waste_ratio_max},
                             {"waste_slots_at_peak", f.waste_slots_at_peak}};
  // Sharing measured against the blocks in use, and only where blocks are
  // shared at all; the baselines' regions have no tables to lay out.
  report["sharing"] = {{"forks", f.forks},
                       {"prefix_installs", f.prefix_installs},
                       {"shared_pages_installed", f.shared_pages_installed}};
  if (paged) {
    report["sharing"]["saved_blocks_at_peak"] = f.saved_blocks_at_peak;
    report["layout"] = {{"runs_per_seq_mean", f.runs_per_seq_mean.value()},
                        {"runs_per_seq_at_peak", f.runs_per_seq_at_peak.value()},
                        {"continued_share_mean", f.continued_share_mean.value()},
                        {"continued_share_at_peak", f.continued_share_at_peak.value()}};
  }
  report["cow"] = {{"copies", f.cow_copies}, {"bytes", f.cow_bytes}};
  nlohmann::json violations = nlohmann::json::array();
  for (const InstanceViolation& v : f.violations) violations.push_back(violation_json(v));
  report["invariants"] = {
      {"mode", options.check.name()}, {"checks", f.checks}, {"violations", std::move(violations)}};
  report["oom"] = {{"events", f.oom_events},
                   {"first_event", f.oom_first_event ? nlohmann::json(*f.oom_first_event)
                                                     : nlohmann::json(nullptr)}};
  report["timing"] = {{"wall_seconds", c.wall_seconds}, {"kernels", nlohmann::json::object()}};
  report["scheduler"] = {{"steps", f.steps},
                         {"preemptions", f.preemptions},
                         {"max_running", f.max_running},
                         {"virtual_seconds", f.virtual_seconds},
                         {"output_tokens", f.output_tokens},
                         {"prompt_tokens_computed", f.prompt_tokens_computed},
                         {"output_tokens_per_second", f.output_tokens_per_second()},
                         {"requests_per_second", f.requests_per_second()}};
  if (options.speculative.on()) {
    // As vLLM's spec_decode metrics name them (vllm/v1/spec_decode/metrics.py).
    const auto drafts = static_cast<double>(f.spec_drafts);
    const auto drafted = static_cast<double>(f.spec_draft_tokens);
    const auto accepted = static_cast<double>(f.spec_accepted_tokens);
    report["speculative"] = {{"num_drafts", f.spec_drafts},
                             {"num_draft_tokens", f.spec_draft_tokens},
                             {"num_accepted_tokens", f.spec_accepted_tokens},
                             {"acceptance_rate", drafted > 0 ? accepted / drafted : 0.0},
                             {"mean_acceptance_length", drafts > 0 ? 1 + accepted / drafts : 1.0}};
  }
  if (c.engine_sections != nullptr) {
    for (const auto& [key, value] : c.engine_sections->items()) report[key] = value;
  }
  if (f.offload) report["offload"] = offload_section(f);
  // Latency of the finished requests (SPEC 3.3), the SLOs, overload, cost.
  report["latency"] = latency_section(f);
  if (nlohmann::json slo = slo_section(f, options, c.reader_skipped); !slo.is_null()) {
    report["slo"] = std::move(slo);
  }
  report["overload"] = overload_section(f);
  if (nlohmann::json cost = cost_usd_section(f, options); !cost.is_null()) {
    report["cost_usd"] = std::move(cost);
  }
  return report;
}

}  // namespace kvreplay
