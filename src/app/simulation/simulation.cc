#include "app/simulation/simulation.h"
#include "engine/events/kv_events.h"

#include "app/simulation/sim_report.h"
#include "app/simulation/simulation_internal.h"
#include "engine/engine_registry.h"
#include "engine/load_generator.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "core/memory_budget.h"
#include "engine/replay/trace_emitter.h"
#include "formats/requests/request_reader.h"
#include "io/byte_source.h"
#include "report/report.h"

namespace kvreplay {

namespace sim_detail {

// Why requests were skipped for `reason`, in the shell's words (an engine
// may have its own: Scheduler::skip_rule).
std::string shell_skip_rule(SkipReason reason, const Simulator& sim, const SkippedRequest& first) {
  const RunConfig& config = sim.config();
  switch (reason) {
    case SkipReason::kTooLong:
      return fmt::format("longer than --max-seq-tokens {} (first: line {}, {} tokens)",
                         config.kv.max_seq_tokens, first.line, first.need);
    case SkipReason::kTooManySamples:
      return fmt::format("n above --max-seqs {} (first: line {}, n {})", sim.options().max_seqs,
                         first.line, first.need);
    case SkipReason::kPoolTooSmall: break;
  }
  return sim.options().allocator == AllocatorKind::kPaged
             ? fmt::format(
                   "more blocks than the pool of {} less {} (first: line {}, "
                   "{} blocks; give a larger --kv-memory or --pool-blocks)",
                   config.kv.pool_blocks,
                   !sim.null_block()               ? "the --watermark"
                   : sim.options().watermark > 0.0 ? "the null block and the --watermark"
                                                   : "the null block",
                   first.line, first.need)
             : fmt::format(
                   "larger than the pool of {} slots (first: line {}, {} slots; give a "
                   "larger --kv-memory or --pool-blocks)",
                   std::uint64_t{config.kv.pool_blocks} * config.kv.page_tokens, first.line,
                   first.need);
}

// One line per reason some requests were skipped as never fitting.
void skip_warnings(const std::string& path, const Simulator& sim, SimulationResult& out) {
  const SimTotals& st = sim.sim_totals();
  const std::uint64_t counts[kSkipReasons] = {
      st.skipped_too_long, st.skipped_too_many_samples,
      st.skipped - st.skipped_too_long - st.skipped_too_many_samples};
  for (std::size_t i = 0; i < kSkipReasons; ++i) {
    const auto reason = static_cast<SkipReason>(i);
    const auto& first = sim.first_skipped(reason);
    if (counts[i] == 0 || !first) continue;
    std::string why = sim.scheduler().skip_rule(reason, *first).value_or("");
    if (why.empty()) why = shell_skip_rule(reason, sim, *first);
    if (reason == SkipReason::kPoolTooSmall && st.skipped_stalled > 0) {
      why += fmt::format(
          "; {} of them stalled at admission: with the prefix-cache hit they found, their first "
          "chunk needs more blocks than the pool even with nothing else running, so vLLM would "
          "retry them forever",
          st.skipped_stalled);
    }
    out.warnings.push_back(fmt::format("warning: {}: {} request{} skipped: {}", path, counts[i],
                                       counts[i] == 1 ? "" : "s", why));
    out.warning_reasons.push_back(reason);
  }
}

InputResult<LoadOptions> load_for(const LoadOptions& load, const std::string& path,
                                  std::optional<RequestFormat> format, const std::string& shown) {
  LoadOptions out = load;
  if (load.ramp_up == RampUp::kNone) return out;
  auto opened = RequestReader::open(path, format, shown);
  if (!opened) return Unexpected{opened.error()};
  Request request;
  for (;;) {
    auto more = opened.value()->next(request);
    if (!more) return Unexpected{more.error()};
    if (!more.value()) break;
    ++out.ramp_requests;
  }
  return out;
}

}  // namespace sim_detail

using namespace sim_detail;

nlohmann::json sim_options_json(const SimOptions& options) {
  nlohmann::json out = {
      {"engine", std::string(to_string(options.engine))},
      {"allocator", std::string(to_string(options.allocator))},
      {"prefix_cache", options.prefix_cache && options.allocator == AllocatorKind::kPaged},
      {"evict", std::string(to_string(options.evict))},
      {"max_seqs", options.max_seqs},
      {"max_batched_tokens", options.max_batched_tokens},
      {"watermark", options.watermark}};
  // The engine's own keys (its entry's).
  if (const auto engine_json = engine_entry(options.engine).config_json) engine_json(options, out);
  if (options.slo.ttft_ms) out["slo_ttft_ms"] = *options.slo.ttft_ms;
  if (options.slo.tpot_ms) out["slo_tpot_ms"] = *options.slo.tpot_ms;
  if (options.slo.e2e_ms) out["slo_e2e_ms"] = *options.slo.e2e_ms;
  if (options.slo.joint()) out["slo_attainment"] = options.slo.attainment;
  if (!options.slo.targets.empty()) {
    out["slo_targets"] = nlohmann::json::array();
    for (const PercentileTarget& t : options.slo.targets) {
      out["slo_targets"].push_back(
          fmt::format("{}:p{}:{}", to_string(t.metric), t.percentile, t.limit_ms));
    }
  }
  if (!options.percentiles.empty()) out["percentiles"] = options.percentiles;
  if (options.load.request_rate) {
    out["request_rate"] = *options.load.request_rate;
    out["load_seed"] = options.load.seed;
  }
  if (options.load.concurrency) out["concurrency"] = *options.load.concurrency;
  if (options.load.time_scale != 1.0) out["time_scale"] = options.load.time_scale;
  if (options.load.warmup > 0) out["warmup_requests"] = options.load.warmup;
  // The clients' options, under their names (load_args prints them back).
  const LoadOptions& load = options.load;
  if (load.ramp_up != RampUp::kNone) {
    out["ramp_up_strategy"] = load.ramp_up == RampUp::kLinear ? "linear" : "exponential";
    out["ramp_up_start_rps"] = load.ramp_start_rps;
    out["ramp_up_end_rps"] = load.ramp_end_rps;
    out["load_seed"] = load.seed;
  }
  if (load.burstiness != 1.0) out["burstiness"] = load.burstiness;
  if (load.range_ratio) {
    out["random_range_ratio"] = *load.range_ratio;
    out["range_ratio_style"] = load.range_style == RangeStyle::kVllm ? "vllm" : "sglang";
    out["load_seed"] = load.seed;
  }
  if (load.measure_after > 0) out["measure_after"] = load.measure_after;
  if (const SpecDecode& spec = options.speculative; spec.on()) {
    out["speculative"] = {{"method", std::string(to_string(spec.method))},
                          {"num_speculative_tokens", spec.k},
                          {"acceptance", spec.accepted},
                          {"mean_acceptance_length", spec.mean_length()},
                          {"seed", spec.seed}};
  }
  if (options.offload.any()) {
    nlohmann::json tiers = nlohmann::json::object();
    for (const OffloadTierOptions& tier : options.offload.tiers) {
      tiers[std::string(to_string(tier.medium))] = {
          {"bytes", tier.bytes}, {"gbps", tier.gbps}, {"latency_us", tier.latency_us}};
    }
    out["offload"] = {{"policy", std::string(to_string(options.offload.policy))}, {"tiers", tiers}};
  }
  return out;
}

nlohmann::json cost_json(const CostModel& cost, const std::optional<Roofline>& roofline,
                         EngineKind engine) {
  if (roofline) {
    const RooflineConstants& c = roofline->constants();
    nlohmann::json out = {
        {"model", "roofline"}, {"gpu", roofline->gpu()}, {"profile", cost.cost_profile().name()}};
    // Where each constant came from: the command line, or the profile's
    // entry (a file's over the shipped one's: CostProfile::sources_for).
    const auto& infos = roofline_constant_infos();
    const std::vector<std::string> sources =
        cost.cost_profile().sources_for(roofline->gpu(), to_string(engine));
    nlohmann::json from = nlohmann::json::object();
    for (std::size_t i = 0; i < infos.size(); ++i) {
      out[infos[i].name] = c.*infos[i].field;
      from[infos[i].name] = cost.given_mask & (1u << i)
                                ? fmt::format("command line ({})", infos[i].option)
                                : sources[i];
    }
    out["sources"] = std::move(from);
    return out;
  }
  return {{"model", "linear"},
          {"step_ms", cost.linear.step_ms},
          {"prefill_token_ms", cost.linear.prefill_token_ms},
          {"decode_seq_ms", cost.linear.decode_seq_ms},
          {"kv_bandwidth_gbps", cost.linear.kv_bandwidth_gbps}};
}

nlohmann::json latency_json(const LatencySummary& summary) {
  nlohmann::json out = {{"count", summary.count}, {"mean", summary.mean},  {"p50", summary.p50},
                        {"p90", summary.p90},     {"p95", summary.p95},    {"p99", summary.p99},
                        {"max", summary.max},     {"exact", summary.exact}};
  for (const auto& [p, value] : summary.extra) out[percentile_key(p)] = value;
  return out;
}

std::string percentile_key(double percentile) {
  return fmt::format("p{}", percentile);  // the shortest text that reads back as it
}

std::string latency_line(const nlohmann::json& latency, const std::vector<double>& percentiles) {
  const std::vector<double> shown =
      percentiles.empty() ? std::vector<double>{50, 90, 95, 99} : percentiles;
  std::string out;
  for (double p : shown) {
    const std::string key = percentile_key(p);
    const nlohmann::json& value = p == 100 ? latency.at("max") : latency.at(key);
    out += fmt::format("{} {}, ", key, ms_text(value.get<double>()));
  }
  return out + fmt::format("mean {}", ms_text(latency.at("mean").get<double>()));
}

std::vector<std::pair<std::string, std::string>> slo_lines(const nlohmann::json& slo) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const nlohmann::json& t : slo.at("targets")) {
    const nlohmann::json& value = t.at("value_ms");
    out.emplace_back(
        fmt::format("SLO {} {}", t.at("metric").get<std::string>(),
                    percentile_key(t.at("percentile").get<double>())),
        fmt::format("{} against {} ms: {}",
                    value.is_null() ? std::string("none") : ms_text(value.get<double>()),
                    fmt::format("{:g}", t.at("limit_ms").get<double>()),
                    t.at("met").get<bool>() ? "met" : "MISSED"));
  }
  if (slo.contains("attainment")) {
    std::vector<std::string> limits;
    for (const char* key : {"ttft_ms", "tpot_ms", "e2e_ms"}) {
      if (slo.contains(key)) {
        limits.push_back(fmt::format("{} <= {:g} ms", std::string_view(key, std::strlen(key) - 3),
                                     slo.at(key).get<double>()));
      }
    }
    out.emplace_back(
        "SLO joint attainment",
        fmt::format("{:.4f} of requests meet {} (target {:g}; goodput {:.2f} requests/s)",
                    slo.at("attainment").get<double>(), fmt::join(limits, " and "),
                    slo.at("attainment_target").get<double>(),
                    slo.at("goodput_rps").get<double>()));
  }
  out.emplace_back("SLO met", slo.at("met").get<bool>() ? "yes" : "no");
  return out;
}

std::string requests_csv_header(bool speculative) {
  return std::string(
             "line,id,prompt,output,n,arrival_s,status,preemptions,queue_ms,ttft_ms,tpot_ms,"
             "e2e_ms,cached_tokens") +
         (speculative ? ",drafted,accepted\n" : "\n");
}

std::string requests_csv_row(const RequestTimes& t, bool speculative) {
  const std::string spec =
      speculative ? fmt::format(",{},{}", t.drafted, t.accepted) : std::string();
  // The id as CSV: quoted, quotes doubled (a native id is JSON text).
  std::string id = "\"";
  for (char c : t.id) {
    if (c == '"') id += '"';
    id += c;
  }
  id += '"';
  if (t.skipped) {
    return fmt::format("{},{},{},{},{},{:.6f},skipped,0,,,,,{}\n", t.line, id, t.prompt, t.output,
                       t.n, t.arrival, speculative ? ",," : "");
  }
  const std::optional<double> tpot = t.tpot_ms();
  return fmt::format("{},{},{},{},{},{:.6f},finished,{},{:.3f},{:.3f},{},{:.3f},{}{}\n", t.line, id,
                     t.prompt, t.output, t.n, t.arrival, t.preemptions, t.queue_ms(), t.ttft_ms(),
                     tpot ? fmt::format("{:.3f}", *tpot) : std::string(), t.e2e_ms(),
                     t.cached_tokens, spec);
}

InputResult<RunConfig> resolve_sim_config(const ConfigOverrides& overrides) {
  nlohmann::json header = nlohmann::json::object();
  if (!overrides.model && !overrides.model_config && !overrides.layers && !overrides.kv_heads &&
      !overrides.head_dim) {
    header["model"] = std::string(kDefaultSimModel);
  }
  if (!overrides.pool_blocks && !overrides.kv_memory && !overrides.gpu) {
    return Unexpected{
        InputError{"command line", 0, "--kv-memory",
                   "missing: give --kv-memory (e.g. 40GiB), --pool-blocks or --gpu (e.g. "
                   "h100-80gb)"}};
  }
  auto config = resolve_run_config(header, overrides, "command line", 0);
  if (!config) return config;
  const std::uint64_t blocks = config.value().kv.pool_blocks;
  if (auto problem =
          check_memory(simulation_memory_bytes(blocks),
                       fmt::format("a simulation of a pool of {} blocks", blocks),
                       fmt::format("{} MiB + {} bytes a block", kSimulationBaseBytes >> 20,
                                   kSimulationBytesPerBlock))) {
    return Unexpected{InputError{"command line", 0,
                                 overrides.pool_blocks ? "--pool-blocks"
                                 : overrides.kv_memory ? "--kv-memory"
                                                       : "--gpu",
                                 *problem}};
  }
  return config;
}

bool needs_spool(const std::string& path) {
  if (path == "-") return true;
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode);
}

Result<SpooledInput, std::string> spool_input(const std::string& path,
                                              std::optional<RequestFormat> format) {
  auto made = SpooledInput::create();
  if (!made) return Unexpected{(path == "-" ? "<stdin>" : path) + ": " + made.error()};
  SpooledInput spool = std::move(made).value();
  ByteSource::tee_next_source(spool.fd());
  auto reader = RequestReader::open(path, format);
  ByteSource::tee_next_source(-1);  // in case open() failed before taking it
  if (!reader) return Unexpected{reader.error().to_string()};
  Request request;
  for (;;) {
    auto more = reader.value()->next(request);
    if (!more) return Unexpected{more.error().to_string()};
    if (!more.value()) break;
  }
  // What the reader did not consume (nothing, for a well-formed trace) is
  // still copied, and the copy's own failure reported.
  if (auto rest = reader.value()->content_sha256(); !rest) {
    return Unexpected{rest.error().to_string()};
  }
  return spool;
}

std::uint64_t simulation_memory_bytes(std::uint64_t pool_blocks) {
  return add_sat(kSimulationBaseBytes, mul_sat(pool_blocks, kSimulationBytesPerBlock));
}

std::uint64_t fleet_memory_bytes(std::uint64_t pool_blocks, std::uint64_t instances) {
  return add_sat(simulation_memory_bytes(mul_sat(pool_blocks, instances)),
                 mul_sat(instances - 1, kFleetInstanceBytes));
}

OffloadMemory offload_memory(const RunConfig& config, const SimOptions& options) {
  OffloadMemory out;
  if (!options.offload.any()) return out;
  const std::vector<KvCacheGroupSpec>& groups =
      options.kv_groups.empty() ? config.kv_groups : options.kv_groups;
  const std::uint64_t block = std::max<std::uint64_t>(kv_block_bytes(config.kv, groups), 1);
  // A tier slot's cost: the engine's own (its entry's), else the connector's.
  const EngineEntry& engine = engine_entry(options.engine);
  std::uint64_t each =
      options.offload.policy == OffloadPolicy::kArc ? kArcTierBytesPerBlock : kTierBytesPerBlock;
  if (engine.offload_slot_bytes != 0) each = engine.offload_slot_bytes;
  if (options.emit_trace) each += kTraceTierBytesPerBlock;
  for (const OffloadTierOptions& tier : options.offload.tiers) {
    const std::uint64_t blocks =
        std::min<std::uint64_t>(tier.bytes / block, std::numeric_limits<std::uint32_t>::max());
    out.bytes = add_sat(out.bytes, mul_sat(blocks, each));
    if (!out.tiers.empty()) out.tiers += ", ";
    out.tiers +=
        fmt::format("a {} tier of {} {}s", to_string(tier.medium), blocks, engine.offload_slot);
  }
  out.formula = fmt::format("{} bytes a tier {}", each, engine.offload_slot);
  return out;
}

std::uint64_t run_memory_bytes(const RunConfig& config, const SimOptions& options,
                               std::uint64_t instances) {
  const std::uint64_t blocks = config.kv.pool_blocks;
  const std::uint64_t pools =
      instances > 1 ? fleet_memory_bytes(blocks, instances) : simulation_memory_bytes(blocks);
  return add_sat(pools, mul_sat(instances, offload_memory(config, options).bytes));
}

std::optional<std::string> check_simulation_memory(const RunConfig& config,
                                                   const SimOptions& options,
                                                   std::uint64_t instances) {
  // Options the run refuses (a tier past 2^32 - 1 blocks) are refused with
  // their own words when the simulator is made.
  if (options.offload.any() && sim_options_error(config, options)) return std::nullopt;
  const std::uint64_t blocks = config.kv.pool_blocks;
  const OffloadMemory tiers = offload_memory(config, options);
  const std::uint64_t need = run_memory_bytes(config, options, instances);
  std::string what = instances > 1
                         ? fmt::format("a fleet of {} instances of {} blocks", instances, blocks)
                         : fmt::format("a simulation of a pool of {} blocks", blocks);
  std::string formula = fmt::format("{} MiB + {} bytes a block", kSimulationBaseBytes >> 20,
                                    kSimulationBytesPerBlock);
  if (instances > 1) {
    formula += fmt::format(" + {} KiB an instance after the first", kFleetInstanceBytes >> 10);
  }
  if (tiers.bytes != 0) {
    what += fmt::format(" with {}{}", tiers.tiers, instances > 1 ? " each" : "");
    formula += " + " + tiers.formula;
    if (instances > 1) formula += " x instances";
  }
  return check_memory(need, what, formula);
}

namespace sim_detail {

std::string timeline_csv_header(const Simulator& s) {
  std::string header =
      "step,t,used_blocks,free_blocks,waste_slots,waste_ratio,logical_tokens,"
      "physical_tokens,running_seqs,cow_copies,preemptions,evictions,finished,"
      "in_use_blocks,cached_blocks,waiting_requests,running_requests,first_tokens,"
      "ttft_ms_mean";
  // --offload: the requests waiting for a tier load (of waiting_requests),
  // then each tier's blocks and its cumulative stores, loads and evictions.
  if (s.offload_tiers() > 0) header += ",loading_requests";
  for (std::size_t t = 0; t < s.offload_tiers(); ++t) {
    const std::string_view m = to_string(s.offload_gauge(t).medium);
    header += fmt::format(
        ",{0}_capacity_blocks,{0}_resident_blocks,{0}_stored,{0}_loaded,{0}_evicted", m);
  }
  header += '\n';
  return header;
}

std::string timeline_csv_row(const Simulator& s) {
  const ReplayState& st = s.state();
  const std::optional<double> ttft = s.step_ttft_mean_ms();
  std::string row = fmt::format(
      "{},{:.6f},{},{},{},{:.6f},{},{},{},{},{},{},{},{},{},{},{},{},{}", s.sim_totals().steps,
      s.now(), st.used, s.config().kv.pool_blocks - s.null_blocks() - st.used, st.waste_slots,
      st.waste_ratio, st.logical_tokens, st.physical_tokens, st.live_sequences,
      s.totals().cow_copies, s.sim_totals().preemptions, s.evictions(), s.sim_totals().finished,
      s.in_use_blocks(), s.cache_resident_blocks(), s.waiting_requests(), s.running_requests(),
      s.step_first_tokens(), ttft ? fmt::format("{:.3f}", *ttft) : std::string());
  if (s.offload_tiers() > 0) row += fmt::format(",{}", s.loading_requests());
  for (std::size_t t = 0; t < s.offload_tiers(); ++t) {
    const TierGauge g = s.offload_gauge(t);
    row += fmt::format(",{},{},{},{},{}", g.capacity_blocks, g.resident_blocks, g.stored, g.loaded,
                       g.evicted);
  }
  row += '\n';
  return row;
}

// The simulation's observers, each chained onto those before it: the
// per-request CSV, the timeline CSV, the sampler of the HTML page's timeline,
// the progress line and the fault injected for the tests.
TimelinePoint timeline_point(const Simulator& s) {
  TimelinePoint p =
      kvreplay::timeline_point(s.sim_totals().steps, s.state(), s.totals().cow_copies);
  p.in_use_blocks = s.in_use_blocks();
  p.t = s.now();
  p.cached_blocks = s.cache_resident_blocks();
  p.running = static_cast<double>(s.running_requests());
  p.waiting = static_cast<double>(s.waiting_requests());
  p.preemptions = static_cast<double>(s.sim_totals().preemptions);
  p.loading = static_cast<double>(s.loading_requests());
  for (std::size_t t = 0; t < std::min(s.offload_tiers(), TimelinePoint::kTiers); ++t) {
    const TierGauge g = s.offload_gauge(t);
    p.tier_resident[t] = g.resident_blocks;
    p.tier_stored[t] = static_cast<double>(g.stored);
    p.tier_loaded[t] = static_cast<double>(g.loaded);
  }
  return p;
}

void attach_observers(Simulator& sim, OutputFile* timeline, TimelineSampler* sampler,
                      const SimulateTerminal& terminal, const SimFaults& faults,
                      OutputFile* requests) {
  if (requests != nullptr) {
    const bool spec = sim.options().speculative.on();
    requests->write(requests_csv_header(spec));
    sim.on_request = [requests, spec](const RequestTimes& times) {
      requests->write(requests_csv_row(times, spec));
    };
  }

  if (timeline != nullptr) {
    timeline->write(timeline_csv_header(sim));
    sim.on_step = [timeline](const Simulator& s) { timeline->write(timeline_csv_row(s)); };
  }
  if (sampler != nullptr) {
    sim.on_step = [sampler, timeline_row = std::move(sim.on_step)](const Simulator& s) {
      if (timeline_row) timeline_row(s);
      sampler->add(timeline_point(s));
    };
  }
  if (terminal.progress != nullptr) {
    sim.on_step = [progress = terminal.progress,
                   previous = std::move(sim.on_step)](const Simulator& s) {
      if (previous) previous(s);
      if (!progress->due()) return;
      const SimTotals& totals = s.sim_totals();
      progress->draw(fmt::format("simulate: {} requests, {} finished, virtual time {:.1f} s",
                                 grouped(totals.requests), grouped(totals.finished), s.now()));
    };
  }
  if (faults.leak_block_at_step != 0) {
    sim.on_step = [at = faults.leak_block_at_step,
                   previous = std::move(sim.on_step)](const Simulator& s) {
      if (previous) previous(s);
      if (s.sim_totals().steps != at) return;
      // The pool is the Simulator's own (never const); observers see it const.
      auto& pool = const_cast<BlockPool&>(s.pool());
      for (BlockId b = 0; b < pool.total(); ++b) {
        if (pool.is_live(b)) {
          (void)pool.retain(b);
          return;
        }
      }
    };
  }
}

RunFigures run_figures(const Simulator& sim, std::uint64_t reader_skipped) {
  const SimTotals& st = sim.sim_totals();
  RunFigures f;
  f.hit_rate = st.query_tokens == 0
                   ? 0.0
                   : static_cast<double>(st.hit_tokens) / static_cast<double>(st.query_tokens);
  f.per_request =
      st.hit_rate_requests == 0 ? 0.0 : st.hit_rate_sum / static_cast<double>(st.hit_rate_requests);
  f.mean_in_use = st.steps == 0 ? 0.0 : st.in_use_sum / static_cast<double>(st.steps);
  f.seconds = st.virtual_seconds;
  const Simulator::Latencies& lat = sim.latencies();
  f.queue = lat.queue_ms.summary();
  f.ttft = lat.ttft_ms.summary();
  f.tpot = lat.tpot_ms.summary();
  f.e2e = lat.e2e_ms.summary();
  f.all_requests = st.requests + reader_skipped;
  f.load = sim.overload();
  return f;
}

SimReportContext report_context(const ReportSource& source, const SimOptions& options,
                                std::uint64_t reader_skipped, const Simulator& sim,
                                const nlohmann::json* engine_sections) {
  return SimReportContext{source.trace,
                          source.status == RunStatus::kViolation,
                          source.config,
                          &options,
                          cost_json(options.cost, sim.roofline(), options.engine),
                          source.wall_seconds,
                          reader_skipped,
                          engine_sections};
}

nlohmann::json cost_usd_json(double gpu_hour_usd, std::uint64_t gpus, double seconds,
                             std::uint64_t slo_output_tokens) {
  const double per_hour = gpu_hour_usd * static_cast<double>(gpus);
  const double run = per_hour * seconds / 3600.0;
  return {{"gpu_hour_usd", gpu_hour_usd},
          {"gpus", gpus},
          {"usd_per_hour", per_hour},
          {"usd_run", run},
          {"output_tokens_within_slo", slo_output_tokens},
          {"usd_per_million_output_tokens",
           slo_output_tokens == 0
               ? nlohmann::json(nullptr)
               : nlohmann::json(run / (static_cast<double>(slo_output_tokens) / 1e6))}};
}

// "warning: PATH: overloaded: ..." when arrivals outpaced service, else empty.
std::string overload_warning(const std::string& path, const OverloadFigures& load) {
  if (!load.overloaded()) return {};
  return fmt::format(
      "warning: {}: overloaded: arrivals outpace service {:.2f}x: the run took {:.1f} s of "
      "virtual time for {:.1f} s of arrivals, with {} requests waiting at the last arrival "
      "(latencies grow with the trace; give more GPUs or fewer requests per second)",
      path, *load.ratio(), load.end - load.first_arrival, load.arrival_span(),
      grouped(load.waiting_at_last_arrival));
}

// The TTFT and TPOT distributions for the HTML page's CDF, kCdfPoints
// quantiles each.
nlohmann::json latency_cdf(const Simulator::Latencies& lat) {
  nlohmann::json cdf;
  for (auto [name, values] :
       {std::pair<const char*, const LatencyDistribution*>{"ttft_ms", &lat.ttft_ms},
        {"tpot_ms", &lat.tpot_ms}}) {
    nlohmann::json points = nlohmann::json::array();
    if (!values->empty()) {
      for (std::size_t i = 0; i < kCdfPoints; ++i) {
        points.push_back(
            values->quantile(static_cast<double>(i) / static_cast<double>(kCdfPoints - 1)));
      }
    }
    cdf[name] = std::move(points);
  }
  return cdf;
}

// The summary printed after the run: base_summary's, then the simulation's.
std::string simulation_summary(const ReportSource& source, const Simulator& sim,
                               const SimOptions& options, const RunFigures& f,
                               std::uint64_t reader_skipped, bool color, nlohmann::json& report) {
  const SimTotals& st = sim.sim_totals();
  std::string summary = base_summary(source, color);
  auto line = [&summary](std::string_view label, const std::string& value) {
    summary += fmt::format("  {:<26} {}\n", label, value);
  };
  summary += fmt::format("{} ({} engine, {}, prefix cache {})\n", Paint{color}.bold("simulation"),
                         to_string(options.engine), to_string(options.allocator),
                         options.prefix_cache && options.allocator == AllocatorKind::kPaged
                             ? fmt::format("on, evict {}", to_string(options.evict))
                             : std::string("off"));
  line("requests", fmt::format("{} total, {} finished, {} skipped", st.requests + reader_skipped,
                               st.finished, st.skipped + reader_skipped));
  line("prefix-cache hit rate",
       fmt::format("{:.4f} of prompt tokens ({:.4f} per request)", f.hit_rate, f.per_request));
  line("hit blocks / evictions", fmt::format("{} / {}", st.hit_blocks, sim.evictions()));
  line("blocks in use", fmt::format("peak {} ({} per GPU), mean {}", grouped(st.peak_in_use),
                                    bytes_text(std::uint64_t{st.peak_in_use} * sim.block_bytes() /
                                               sim.config().dp_attention),
                                    grouped(static_cast<std::uint64_t>(f.mean_in_use + 0.5))));
  line("cached, no request", fmt::format("peak {} blocks (the cache gives them back on demand)",
                                         grouped(st.peak_cache_resident)));
  line("steps / preemptions", fmt::format("{} / {}", st.steps, st.preemptions));
  line("max running sequences", std::to_string(st.max_running));
  const double seconds = f.seconds;
  line("virtual time",
       fmt::format("{:.1f} s ({:.1f} output tokens/s; cost model {})", seconds,
                   seconds > 0 ? static_cast<double>(st.output_tokens) / seconds : 0.0,
                   sim.roofline() ? fmt::format("roofline on {}", sim.roofline()->gpu())
                                  : std::string("linear")));
  const nlohmann::json& latency = report["latency"];
  line("TTFT", latency_line(latency["ttft_ms"], options.percentiles));
  line("TPOT", latency_line(latency["tpot_ms"], options.percentiles));
  line("ITL", latency_line(latency["itl_ms"], options.percentiles));
  line("queueing", latency_line(latency["queue_ms"], options.percentiles));
  line("end-to-end", latency_line(latency["e2e_ms"], options.percentiles));
  if (report.contains("slo")) {
    for (const auto& [label, text] : slo_lines(report["slo"])) line(label, text);
  }
  if (f.load.ratio()) {
    line("load", fmt::format("{:.2f}x the arrival span{}", *f.load.ratio(),
                             f.load.overloaded() ? " (overloaded)" : ""));
  }
  return summary;
}

}  // namespace sim_detail

InputResult<SimulationResult> simulate_file(
    const std::string& path, std::optional<RequestFormat> format, const RunConfig& config,
    const SimOptions& options, OutputFile* timeline, TimelineSampler* sampler,
    const SimulateTerminal& terminal, const SimFaults& faults, OutputFile* requests,
    OutputFile* kv_events, OutputFile* trace, const std::string& shown_as) {
  auto start = std::chrono::steady_clock::now();
  auto opened = RequestReader::open(path, format, shown_as);
  if (!opened) return Unexpected{opened.error()};
  RequestReader& reader = *opened.value();
  if (auto problem = sim_options_error(config, options)) {
    return Unexpected{InputError{"command line", 0, problem->option, problem->problem}};
  }
  Simulator sim(config, options);
  attach_observers(sim, timeline, sampler, terminal, faults, requests);
  if (kv_events != nullptr) {
    sim.on_kv_events = [kv_events, pt = config.kv.page_tokens](double ts, const KvEventLog& log) {
      kv_events->write(kv_event_batch_line(ts, log, pt, std::nullopt));
    };
  }
  // --emit-trace: the header first (the pool the run's blocks come from),
  // then the engine's events as it runs.
  std::optional<TraceSink> trace_sink;
  std::optional<TraceEmitter> emitter;
  if (trace != nullptr) {
    trace_sink.emplace([trace](std::string_view line) { trace->write(line); });
    if (auto problem = trace_sink->header(config.kv, sim.usable_blocks(), config.alloc_order);
        !problem.empty()) {
      return Unexpected{InputError{"command line", 0, "--emit-trace", problem}};
    }
    emitter.emplace(*trace_sink, 0);
    if (!sim.emit_trace(*emitter)) {
      return Unexpected{InputError{"command line", 0, "--emit-trace",
                                   "this engine's schedule cannot be written as a kvtrace"}};
    }
  }
  auto timeline_failed = [timeline, requests, kv_events, trace] {
    return (timeline != nullptr && timeline->failed()) ||
           (requests != nullptr && requests->failed()) ||
           (kv_events != nullptr && kv_events->failed()) || (trace != nullptr && trace->failed());
  };

  auto load_options = load_for(options.load, path, format, shown_as);
  if (!load_options) return Unexpected{load_options.error()};
  LoadGenerator load(load_options.value(), sim);
  auto ran = drive(reader, sim, load, timeline_failed);
  if (!ran) return Unexpected{ran.error()};
  if (ran.value().output_failed) return SimulationResult{};
  const bool violated = ran.value().violated;
  auto sha256 = reader.content_sha256();  // the whole trace's, even after a violation
  if (!sha256) return Unexpected{sha256.error()};

  const SimTotals& st = sim.sim_totals();
  ReportSource source{
      TraceInfo{shown_as.empty() ? path : shown_as, std::string(to_string(reader.format())),
                st.requests + reader.skipped(), std::move(sha256).value()},
      violated ? RunStatus::kViolation : RunStatus::kOk,
      &sim.config(),
      &sim.totals(),
      &sim.state(),
      sim.pool().total(),
      sim.pool().allocations() - sim.null_blocks(),  // the null block: no allocation for KV
      sim.pool().frees(),
      options.check.name(),
      &sim.violation(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  source.null_blocks = sim.null_blocks();
  if (options.allocator != AllocatorKind::kPaged) {
    // The baselines reserve regions instead of taking blocks.
    source.allocations = 0;
    source.frees = 0;
  }
  const RunFigures figures = run_figures(sim, reader.skipped());
  SimulationResult result;
  result.violated = violated;
  nlohmann::json engine_sections;
  result.figures = instance_figures(sim, options, engine_sections);
  const SimReportContext context =
      report_context(source, options, reader.skipped(), sim, &engine_sections);
  result.report = sim_report(result.figures, context);
  result.trace = context.trace;
  result.reader_skipped = context.reader_skipped;
  result.cost_model = context.cost;
  if (options.load.any()) result.report["load"] = load.figures();
  result.overload_warning = overload_warning(path, figures.load);
  result.latency_cdf = latency_cdf(sim.latencies());
  result.summary = simulation_summary(source, sim, options, figures, reader.skipped(),
                                      terminal.color, result.report);
  skip_warnings(path, sim, result);
  if (options.load.any()) result.summary += load.summary_line();
  return result;
}

}  // namespace kvreplay
