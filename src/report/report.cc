#include "report/report.h"

#include <fmt/format.h>

#include "core/enum_names.h"
#include "report/paint.h"

namespace kvreplay {

namespace {

constexpr EnumName<RunStatus> kRunStatusNames[] = {
    {RunStatus::kOk, "ok"},
    {RunStatus::kOom, "oom"},
    {RunStatus::kViolation, "violation"},
};
static_assert(enum_names_unique(kRunStatusNames));

}  // namespace

std::string_view to_string(RunStatus status) {
  return enum_name(kRunStatusNames, status);
}

ReportSource report_source(const ReplayReportInput& input) {
  const Replayer& replayer = *input.replayer;
  // Block 0 taken as the null block is no allocation for KV.
  const std::uint64_t allocations = replayer.pool().allocations() - replayer.null_blocks();
  return ReportSource{input.trace,
                      input.status,
                      &replayer.config(),
                      &replayer.totals(),
                      &replayer.state(),
                      replayer.pool().total(),
                      allocations,
                      replayer.pool().frees(),
                      replayer.check_policy().name(),
                      &replayer.violation(),
                      input.wall_seconds,
                      replayer.null_blocks()};
}

nlohmann::json base_report(const ReportSource& source) {
  const ReplayTotals& totals = *source.totals;
  const ReplayState& state = *source.state;
  nlohmann::json report;
  report["kvreplay_report"] = 1;
  report["trace"] = {{"path", source.trace.path},
                     {"format", source.trace.format},
                     {"events", source.trace.events},
                     {"sha256", source.trace.sha256}};
  report["config"] = source.config->to_json();
  report["status"] = std::string(to_string(source.status));
  report["blocks"] = {{"total", source.pool_total},
                      {"peak_used", totals.peak_used},
                      {"final_used", state.used},
                      {"allocations", source.allocations},
                      {"frees", source.frees}};
  report["tokens"] = {{"appended", totals.tokens_appended},
                      {"peak_logical", totals.peak_logical},
                      {"peak_physical", totals.peak_physical}};
  report["fragmentation"] = {{"waste_ratio_at_peak", totals.waste_ratio_at_peak},
                             {"waste_ratio_mean", totals.waste_ratio_mean()},
                             {"waste_ratio_max", totals.waste_ratio_max},
                             {"waste_slots_at_peak", totals.waste_slots_at_peak}};
  report["layout"] = {{"runs_per_seq_mean", totals.runs_per_seq_mean()},
                      {"runs_per_seq_at_peak", totals.runs_per_seq_at_peak},
                      {"continued_share_mean", totals.continued_share_mean()},
                      {"continued_share_at_peak", totals.continued_share_at_peak}};
  report["sharing"] = {{"forks", totals.forks},
                       {"prefix_installs", totals.prefix_installs},
                       {"shared_pages_installed", totals.shared_pages_installed},
                       {"saved_blocks_at_peak", totals.saved_blocks_at_peak}};
  report["cow"] = {{"copies", totals.cow_copies}, {"bytes", totals.cow_bytes}};
  if (totals.used_cache_ops()) {
    // A kvtrace with the prefix cache's and the offload tiers' ops (cache,
    // uncache, store, load, drop, hits): absent otherwise.
    nlohmann::json tiers = nlohmann::json::object();
    for (std::uint8_t t = 0; t < kTraceTiers; ++t) {
      if (!totals.used_tier(t)) continue;
      tiers[std::string(trace_tier_name(t))] = {{"stores", totals.tier_stores[t]},
                                                {"loads", totals.tier_loads[t]},
                                                {"drops", totals.tier_drops[t]},
                                                {"peak_copies", totals.tier_peak[t]}};
    }
    report["cache_ops"] = {{"holds", totals.cache_holds},
                           {"drops", totals.cache_drops},
                           {"hit_pages", totals.hit_pages},
                           {"peak_cached", totals.peak_cached},
                           {"tiers", std::move(tiers)}};
  }
  nlohmann::json violations = nlohmann::json::array();
  if (const auto& v = *source.violation) {
    violations.push_back(
        {{"event", v->event == 0 ? nlohmann::json(nullptr) : nlohmann::json(v->event)},
         {"line", v->line == 0 ? nlohmann::json(nullptr) : nlohmann::json(v->line)},
         {"invariant", v->invariant},
         {"message", v->message}});
  }
  report["invariants"] = {{"mode", source.check_mode},
                          {"checks", totals.checks},
                          {"violations", std::move(violations)}};
  report["oom"] = {{"events", totals.oom_events},
                   {"first_event", totals.oom_first_event ? nlohmann::json(*totals.oom_first_event)
                                                          : nlohmann::json(nullptr)}};
  report["timing"] = {{"wall_seconds", source.wall_seconds}, {"kernels", nlohmann::json::object()}};
  return report;
}

nlohmann::json replay_report(const ReplayReportInput& input) {
  return base_report(report_source(input));
}

std::string bytes_text(std::uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

namespace {

std::string percent(double ratio) {
  return fmt::format("{:.2f}%", ratio * 100.0);
}

}  // namespace

std::string base_summary(const ReportSource& input, bool color) {
  const ReplayTotals& totals = *input.totals;
  const ReplayState& state = *input.state;
  const RunConfig& config = *input.config;
  const Paint paint{color};
  std::string out;
  auto line = [&out](std::string_view label, const std::string& value) {
    out += fmt::format("  {:<26} {}\n", label, value);
  };
  const std::string status(to_string(input.status));
  out += fmt::format("kvreplay: {} ({}, {} events) -> {}\n", input.trace.path, input.trace.format,
                     input.trace.events,
                     input.status == RunStatus::kOk    ? paint.green(status)
                     : input.status == RunStatus::kOom ? paint.yellow(status)
                                                       : paint.red(status));
  out += fmt::format(
      "config (per GPU): {} {}, page {} tokens, {} blocks of {} ({} pool), alloc {}\n",
      config.model.empty()
          ? fmt::format("{}x{}x{}", config.kv.layers, config.kv.kv_heads, config.kv.head_dim)
          : config.model,
      to_string(config.kv.dtype), config.kv.page_tokens, config.kv.pool_blocks,
      bytes_text(config.kv.block_bytes()), bytes_text(config.kv.pool_bytes()),
      to_string(config.alloc_order));
  if (!config.gpu.empty() || config.tp > 1 || config.pp > 1) {
    // Where the pool came from: one GPU's memory, less its weights and activations.
    std::string memory;
    if (config.weights_bytes_per_gpu) {
      memory += fmt::format(", weights {}", bytes_text(*config.weights_bytes_per_gpu));
    }
    std::string rule;
    if (config.capacity) {
      // The engine's startup rule sized the pool (kvreplay capacity): its terms.
      const CapacityFigures& f = *config.capacity;
      memory += fmt::format(", activation {}, CUDA graphs {}, non-torch {}, KV {}",
                            bytes_text(f.activation_bytes), bytes_text(f.cuda_graph_bytes),
                            bytes_text(f.non_torch_bytes), bytes_text(f.kv_bytes));
      rule = fmt::format(", {} {}'s rule at {} {}", to_string(f.engine), f.version, f.fraction_name,
                         f.fraction);
    } else if (config.gpu_memory_utilization) {
      rule = fmt::format(", {} of its memory", *config.gpu_memory_utilization);
    }
    std::string replicas;
    if (config.dp_attention > 1) {
      replicas = fmt::format(", {} attention replicas of {} GPUs (the pool is theirs together)",
                             config.dp_attention, config.tp / config.dp_attention);
    }
    if (config.ep > 1) replicas += fmt::format(", experts over {} GPUs", config.ep);
    out += fmt::format("deployment: {}tp {}, pp {} ({} layers x {} KV heads per GPU){}{}{}\n",
                       config.gpu.empty() ? std::string() : fmt::format("{}, ", config.gpu),
                       config.tp, config.pp, config.kv.layers, config.kv.kv_heads, replicas, rule,
                       memory.empty() ? std::string() : ": per GPU" + memory.substr(1));
  }
  out += paint.bold("blocks") + "\n";
  // The share of the blocks that can hold KV: vLLM's BlockPool.get_usage
  // divides by num_gpu_blocks - 1, the null block left out.
  const std::uint32_t usable = input.pool_total - input.null_blocks;
  line("peak used", fmt::format("{} of {} ({})", totals.peak_used, input.pool_total,
                                percent(usable == 0 ? 0.0
                                                    : static_cast<double>(totals.peak_used) /
                                                          static_cast<double>(usable))));
  line("final used", std::to_string(state.used));
  line("allocations / frees", fmt::format("{} / {}", input.allocations, input.frees));
  out += paint.bold("waste (unfilled slots of used blocks)") + "\n";
  line("at peak", fmt::format("{} ({} slots)", percent(totals.waste_ratio_at_peak),
                              totals.waste_slots_at_peak));
  line("mean / max",
       fmt::format("{} / {}", percent(totals.waste_ratio_mean()), percent(totals.waste_ratio_max)));
  out += paint.bold("tokens") + "\n";
  line("appended", std::to_string(totals.tokens_appended));
  line("peak logical / physical",
       fmt::format("{} / {}", totals.peak_logical, totals.peak_physical));
  out += paint.bold("layout (physically contiguous runs of a sequence's blocks)") + "\n";
  line("runs per sequence", fmt::format("{:.2f} mean, {:.2f} at peak", totals.runs_per_seq_mean(),
                                        totals.runs_per_seq_at_peak));
  line("pages continuing the last",
       fmt::format("{} mean, {} at peak", percent(totals.continued_share_mean()),
                   percent(totals.continued_share_at_peak)));
  out += paint.bold("sharing") + "\n";
  line("forks", std::to_string(totals.forks));
  line("prefix installs (pages)",
       fmt::format("{} ({})", totals.prefix_installs, totals.shared_pages_installed));
  line("blocks saved at peak", std::to_string(totals.saved_blocks_at_peak));
  if (totals.used_cache_ops()) {
    line("cache holds / hit pages", fmt::format("{} / {} (at most {} cached)", totals.cache_holds,
                                                totals.hit_pages, totals.peak_cached));
    for (std::uint8_t t = 0; t < kTraceTiers; ++t) {
      if (!totals.used_tier(t)) continue;
      line(fmt::format("{} tier stores / loads", trace_tier_name(t)),
           fmt::format("{} / {} (at most {} copies)", totals.tier_stores[t], totals.tier_loads[t],
                       totals.tier_peak[t]));
    }
  }
  out += paint.bold("copy-on-write") + "\n";
  line("copies", fmt::format("{} ({})", totals.cow_copies, bytes_text(totals.cow_bytes)));
  out += paint.bold("invariants") + "\n";
  line("mode / checks", fmt::format("{} / {}", input.check_mode, totals.checks));
  if (const auto& v = *input.violation) {
    line("violation",
         paint.red(v->event == 0 ? fmt::format("{} at the end: {}", v->invariant, v->message)
                                 : fmt::format("{} at event {} (line {}): {}", v->invariant,
                                               v->event, v->line, v->message)));
  } else {
    line("violations", "none");
  }
  out += paint.bold("pool exhaustion") + "\n";
  line("failed operations",
       totals.oom_events == 0
           ? std::string("none")
           : fmt::format("{} (first at event {})", totals.oom_events, *totals.oom_first_event));
  if (totals.skipped_events > 0) line("skipped events", std::to_string(totals.skipped_events));
  return out;
}

std::string replay_summary(const ReplayReportInput& input, bool color) {
  return base_summary(report_source(input), color);
}

TimelineWriter::TimelineWriter(OutputFile& out) : out_(out) {
  out_.write(
      "event,line,op,t,used_blocks,free_blocks,waste_slots,waste_ratio,logical_tokens,"
      "physical_tokens,live_seqs,cow_copies,allocations,frees\n");
}

void TimelineWriter::row(const Event& event, const Replayer& replayer) {
  const ReplayState& s = replayer.state();
  const BlockPool& pool = replayer.pool();
  out_.print("{},{},{},{},{},{},{},{:.6f},{},{},{},{},{},{}\n", event.index, event.line,
             to_string(event.op), event.has_t ? fmt::format("{}", event.t) : std::string(), s.used,
             pool.free_count(), s.waste_slots, s.waste_ratio, s.logical_tokens, s.physical_tokens,
             s.live_sequences, replayer.cow_copies(), pool.allocations() - replayer.null_blocks(),
             pool.frees());
}

}  // namespace kvreplay
