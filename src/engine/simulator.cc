#include "engine/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/enum_names.h"
#include "core/memory_budget.h"
#include "engine/engine_registry.h"

namespace kvreplay {

namespace {

constexpr EnumName<AllocatorKind> kAllocatorNames[] = {
    {AllocatorKind::kPaged, "paged"},
    {AllocatorKind::kContiguousMax, "contiguous-max"},
    {AllocatorKind::kContiguousPow2, "contiguous-pow2"},
    {AllocatorKind::kContiguousOracle, "contiguous-oracle"},
};
static_assert(enum_names_unique(kAllocatorNames));

constexpr EnumName<GpuClass> kGpuClassNames[] = {
    {GpuClass::kLarge, "large"},
    {GpuClass::kSmall, "small"},
};
static_assert(enum_names_unique(kGpuClassNames));

constexpr EnumName<CostKind> kCostKindNames[] = {
    {CostKind::kAuto, "auto"},
    {CostKind::kRoofline, "roofline"},
    {CostKind::kLinear, "linear"},
};
static_assert(enum_names_unique(kCostKindNames));

constexpr EnumName<SloMetric> kSloMetricNames[] = {
    {SloMetric::kTtft, "ttft"},
    {SloMetric::kTpot, "tpot"},
    {SloMetric::kItl, "itl"},
    {SloMetric::kE2e, "e2e"},
};
static_assert(enum_names_unique(kSloMetricNames));

}  // namespace

std::string_view to_string(SloMetric metric) {
  return enum_name(kSloMetricNames, metric);
}

std::optional<SloMetric> parse_slo_metric(std::string_view name) {
  if (name == "e2el") return SloMetric::kE2e;  // vllm bench serve's name
  return enum_parse(kSloMetricNames, name);
}

namespace {

// A limit in ms: a finite number from 0 to 1e12, written whole.
std::optional<double> parse_limit_ms(std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) ||
      std::signbit(value) || value > 1e12) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

Result<double, std::string> parse_percentile(std::string_view text) {
  double value = 0;
  const bool prefixed = !text.empty() && text.front() == 'p';
  const std::string_view digits = prefixed ? text.substr(1) : text;
  // Decimal digits with at most one point between digits (no exponent).
  const std::size_t point = digits.find('.');
  const bool plain =
      !digits.empty() && digits.find_first_not_of("0123456789.") == std::string_view::npos &&
      (point == std::string_view::npos ||
       (point > 0 && point + 1 < digits.size() && digits.find('.', point + 1) == digits.npos));
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (!prefixed || !plain || error != std::errc() || end != digits.data() + digits.size() ||
      !(value > 0 && value <= 100)) {
    return Unexpected{fmt::format(
        "'{}' is not a percentile (p50, p95, p99.9: above 0, at most 100)", text.substr(0, 40))};
  }
  return value;
}

Result<std::vector<PercentileTarget>, std::string> parse_slo_targets(std::string_view text) {
  std::vector<PercentileTarget> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view entry = text.substr(start, comma - start);
    start = comma + 1;
    auto problem = [&](std::string_view what) {
      return Unexpected{
          fmt::format("'{}': {} (expected METRIC:pNN:MS, as ttft:p95:2000; metrics {})",
                      entry.substr(0, 60), what, "ttft, tpot, itl, e2e")};
    };
    const std::size_t first = entry.find(':');
    const std::size_t second = first == std::string_view::npos ? first : entry.find(':', first + 1);
    if (second == std::string_view::npos || entry.find(':', second + 1) != std::string_view::npos) {
      return problem("not three fields");
    }
    const auto metric = parse_slo_metric(entry.substr(0, first));
    if (!metric) return problem("unknown metric");
    auto percentile = parse_percentile(entry.substr(first + 1, second - first - 1));
    if (!percentile)
      return Unexpected{fmt::format("'{}': {}", entry.substr(0, 60), percentile.error())};
    const auto limit = parse_limit_ms(entry.substr(second + 1));
    if (!limit) return problem("the limit is not a number of ms from 0 to 1e12");
    PercentileTarget target{*metric, percentile.value(), *limit};
    for (const PercentileTarget& t : out) {
      if (t.metric == target.metric && t.percentile == target.percentile) {
        return problem("that metric and percentile are given twice");
      }
    }
    out.push_back(target);
  }
  return out;
}

std::optional<std::string> parse_goodput(const std::vector<std::string>& pairs, SloTargets& slo) {
  for (const std::string& pair : pairs) {
    const std::size_t colon = pair.find(':');
    const std::string_view key = std::string_view(pair).substr(0, colon);
    std::optional<double>* limit = nullptr;
    if (key == "ttft") limit = &slo.ttft_ms;
    if (key == "tpot") limit = &slo.tpot_ms;
    if (key == "e2el" || key == "e2e") limit = &slo.e2e_ms;
    if (colon == std::string::npos || limit == nullptr) {
      return fmt::format("'{}' is not KEY:MS with KEY ttft, tpot or e2el (vllm bench serve's)",
                         pair.substr(0, 60));
    }
    const auto ms = parse_limit_ms(std::string_view(pair).substr(colon + 1));
    if (!ms)
      return fmt::format("'{}': the limit is not a number of ms from 0 to 1e12",
                         pair.substr(0, 60));
    if (limit->has_value()) {
      return fmt::format(
          "'{}': the {} limit is given twice (by --slo-{}-ms, or earlier in --goodput)",
          pair.substr(0, 60), key, key);
    }
    *limit = *ms;
  }
  return std::nullopt;
}

std::vector<double> report_percentiles(const SimOptions& options) {
  std::vector<double> out;
  auto add = [&](double p) {
    if (p == 50 || p == 90 || p == 95 || p == 99) return;
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  for (double p : options.percentiles) add(p);
  for (const PercentileTarget& t : options.slo.targets) add(t.percentile);
  std::sort(out.begin(), out.end());
  return out;
}

double LinearCost::step_ms_of(const StepWork& work, std::uint64_t bytes_per_token) const {
  return step_ms + static_cast<double>(work.prefill_tokens()) * prefill_token_ms +
         static_cast<double>(work.decode_requests()) * decode_seq_ms +
         work.context_read() * static_cast<double>(bytes_per_token) / (kv_bandwidth_gbps * 1e6);
}

RooflineConstants CostModel::roofline_for(std::string_view gpu, EngineKind engine) const {
  RooflineConstants out = cost_profile().constants_for(gpu, to_string(engine));
  const auto& infos = roofline_constant_infos();
  for (std::size_t i = 0; i < infos.size(); ++i) {
    if (given_mask & (1u << i)) out.*infos[i].field = given.*infos[i].field;
  }
  return out;
}

std::string_view to_string(CostKind kind) {
  return enum_name(kCostKindNames, kind);
}

std::optional<CostKind> parse_cost_kind(std::string_view name) {
  return enum_parse(kCostKindNames, name);
}

std::string_view to_string(GpuClass gpu_class) {
  return enum_name(kGpuClassNames, gpu_class);
}

std::optional<GpuClass> parse_gpu_class(std::string_view name) {
  return enum_parse(kGpuClassNames, name);
}

std::vector<std::string> gpu_class_names() {
  return enum_names(kGpuClassNames);
}

BatchDefaults vllm_serve_batch_defaults(GpuClass gpu_class) {
  // EngineArgs.get_batch_defaults, OPENAI_API_SERVER column.
  switch (gpu_class) {
    case GpuClass::kLarge: return BatchDefaults{8192, 1024};
    case GpuClass::kSmall: return BatchDefaults{2048, 256};
  }
  return BatchDefaults{2048, 256};
}

std::string_view to_string(AllocatorKind kind) {
  return enum_name(kAllocatorNames, kind);
}

std::optional<AllocatorKind> parse_allocator(std::string_view name) {
  return enum_parse(kAllocatorNames, name);
}

std::vector<std::string> allocator_names() {
  return enum_names(kAllocatorNames);
}

const GpuSpec* cost_gpu(const RunConfig& config) {
  return find_gpu_preset(config.gpu.empty() ? kDefaultCostGpu : config.gpu);
}

std::optional<OptionsError> sim_options_error(const RunConfig& config, const SimOptions& options) {
  auto error = [](std::string option, std::string problem) {
    return std::optional<OptionsError>{OptionsError{std::move(option), std::move(problem)}};
  };
  // The run's groups: the options' (tests), else the model's (RunConfig::kv_groups).
  const std::vector<KvCacheGroupSpec>& groups =
      options.kv_groups.empty() ? config.kv_groups : options.kv_groups;
  if (auto problem = kv_groups_error(groups, config.kv.layers)) return error("--model", *problem);
  const bool hybrid = groups.size() > 1 ||
                      (groups.size() == 1 && groups[0].attention == KvCacheGroupSpec::kSliding);
  if (config.kv.block_layers != 0 && config.kv.block_layers != kv_group_size(groups)) {
    return error("--model", fmt::format("the pool's blocks hold {} layers, the KV-cache groups {}",
                                        config.kv.block_layers, kv_group_size(groups)));
  }
  const EngineEntry& engine = engine_entry(options.engine);
  if (hybrid && (!engine.can.hybrid_models || options.allocator != AllocatorKind::kPaged)) {
    return error(!engine.can.hybrid_models ? "--engine" : "--allocator",
                 fmt::format("hybrid KV-cache groups (several groups, or a sliding window) need "
                             "the {} engine and the paged allocator",
                             engines_with(&EngineCapabilities::hybrid_models, " or ")));
  }
  if (hybrid) {
    // A tier slot, a KV event's block and a kvtrace sequence's table each
    // stand for one page of every layer: one KV-cache group of full attention.
    for (auto [given, option] : {std::pair{options.offload.any(), "--offload"},
                                 std::pair{options.kv_events, "--kv-events"},
                                 std::pair{options.emit_trace, "--emit-trace"}}) {
      if (given) {
        return error(option,
                     "needs one full-attention KV-cache group; this model has several groups, "
                     "or a sliding window");
      }
    }
  }
  if (options.offload.any()) {
    // The offloading connector (vLLM's OffloadingConnector) stores and loads
    // whole blocks of a paged pool's prefix cache: the vllm and generic
    // engines'. The allocator first: a contiguous one runs the generic engine
    // without --engine, and the remedy is the allocator.
    if (options.allocator != AllocatorKind::kPaged) {
      return error("--offload", "needs the paged allocator (a contiguous region is no block)");
    }
    if (!engine.can.offload) {
      return error("--offload",
                   engine.can.offload_media_why.empty()
                       ? fmt::format("the {} engine keeps no offload tier", engine.name)
                       : std::string(engine.can.offload_media_why));
    }
    // The media and policies the engine's entry declares.
    for (const OffloadTierOptions& tier : options.offload.tiers) {
      if (!declared(engine.can.offload_media, to_string(tier.medium))) {
        return error("--offload", engine.can.offload_media_why.empty()
                                      ? fmt::format("the {} engine keeps no {} tier", engine.name,
                                                    to_string(tier.medium))
                                      : std::string(engine.can.offload_media_why));
      }
    }
    if (!declared(engine.can.offload_policies, to_string(options.offload.policy))) {
      return error("--offload-policy",
                   engine.can.offload_policies_why.empty()
                       ? fmt::format("the {} engine's tiers do not evict {}", engine.name,
                                     to_string(options.offload.policy))
                       : std::string(engine.can.offload_policies_why));
    }
    if (!options.prefix_cache) {
      return error("--offload", "needs the prefix cache (drop --no-prefix-cache)");
    }
    const std::uint64_t block = kv_block_bytes(config.kv, groups);
    for (const OffloadTierOptions& tier : options.offload.tiers) {
      if (!(tier.gbps > 0) || !std::isfinite(tier.gbps) || !(tier.latency_us >= 0) ||
          !std::isfinite(tier.latency_us)) {
        return error("--offload",
                     fmt::format("the {} tier's link needs a bandwidth above 0 and a latency of "
                                 "at least 0",
                                 to_string(tier.medium)));
      }
      // A tier slot is one GPU block (offload_connector.h); its count is 32-bit.
      if (block > 0 && tier.bytes < block) {
        return error("--offload", fmt::format("the {} tier's {} hold no block of {} "
                                              "(a block is a page of every layer's KV per GPU)",
                                              to_string(tier.medium), memory_text(tier.bytes),
                                              memory_text(block)));
      }
      if (block > 0 && tier.bytes / block > std::numeric_limits<std::uint32_t>::max()) {
        return error("--offload", fmt::format("the {} tier's {} hold {} blocks of {}, over the "
                                              "most a tier indexes ({})",
                                              to_string(tier.medium), memory_text(tier.bytes),
                                              tier.bytes / block, memory_text(block),
                                              std::numeric_limits<std::uint32_t>::max()));
      }
    }
  }
  if (options.kv_events) {
    if (!engine.can.kv_events) {
      return error("--kv-events",
                   fmt::format("the {} engine logs no KV events (those of {} do)", engine.name,
                               engines_with(&EngineCapabilities::kv_events, ", ")));
    }
    if (options.allocator != AllocatorKind::kPaged) {
      return error("--kv-events", "needs the paged allocator (a contiguous region caches nothing)");
    }
    if (!options.prefix_cache) {
      return error("--kv-events", "needs the prefix cache (drop --no-prefix-cache)");
    }
  }
  if (options.emit_trace) {
    // A kvtrace has one table per sequence over one pool of whole-model
    // blocks, and a prefix cache of full pages: what every engine whose entry
    // declares emit_trace keeps on the paged allocator.
    if (!engine.can.emit_trace) {
      return error("--emit-trace",
                   fmt::format("the {} engine writes no trace (those of {} do)", engine.name,
                               engines_with(&EngineCapabilities::emit_trace, ", ")));
    }
    if (options.allocator != AllocatorKind::kPaged) {
      return error("--emit-trace",
                   "needs the paged allocator (a contiguous region is no "
                   "block table)");
    }
  }
  if (options.cost.kind == CostKind::kRoofline) {
    if (!config.model_spec) {
      return error("--cost-model",
                   "roofline needs the model's parameter count (--model or --model-config); "
                   "give --cost-model linear for geometry set by hand");
    }
    if (cost_gpu(config) == nullptr) {
      return error("--cost-model", fmt::format("roofline: unknown GPU '{}'", config.gpu));
    }
  }
  return std::nullopt;
}

RequestTimes request_times(const Request& request) {
  RequestTimes times;
  times.line = request.line;
  times.id = request.id;
  times.tag = request.tag;
  times.prompt = request.prompt;
  times.output = request.output;
  times.n = request.n;
  times.arrival = request.arrival;
  return times;
}

void Simulator::Latencies::add(const RequestTimes& times) {
  queue_ms.add(times.queue_ms());
  ttft_ms.add(times.ttft_ms());
  e2e_ms.add(times.e2e_ms());
  service_s.add((times.e2e_ms() - times.queue_ms()) / 1e3);
  if (const std::optional<double> tpot = times.tpot_ms()) tpot_ms.add(*tpot);
}

bool meets_slo(const SloTargets& slo, const RequestTimes& times) {
  const std::optional<double> tpot = times.tpot_ms();
  return (!slo.ttft_ms || times.ttft_ms() <= *slo.ttft_ms) &&
         (!slo.tpot_ms || !tpot || *tpot <= *slo.tpot_ms) &&
         (!slo.e2e_ms || times.e2e_ms() <= *slo.e2e_ms);
}

Simulator::Simulator(const RunConfig& config, const SimOptions& options)
    : config_(config), options_(options), shell_(config_, options_) {
  engine_skipped_ = [this](const RequestTimes& times) {
    if (on_request) on_request(times);
    if (on_request_end) on_request_end(times);
  };
  shell_.on_request = &engine_skipped_;
  scheduler_ = make_scheduler(options_.engine, shell_);
  if (auto error = sim_options_error(config, options)) {
    shell_.violation = Violation{0, 0, "config", error->to_string()};
    return;
  }
  if (options.cost.kind != CostKind::kLinear && config.model_spec) {
    const GpuSpec* gpu = cost_gpu(config);
    const double per_layer = static_cast<double>(config.kv.bytes_per_token()) /
                             std::max<std::uint32_t>(config.kv.layers, 1);
    if (gpu != nullptr) {
      auto made = Roofline::make(*config.model_spec, *gpu, config.tp, config.pp, per_layer,
                                 options.cost.roofline_for(gpu->name, options.engine),
                                 ParallelLayout{config.dp_attention, config.ep});
      if (made) roofline_ = std::move(made).value();
      const SpecDecode& spec = options.speculative;
      if (roofline_ && spec.draft_layers() > 0) {
        // The draft's own projection: EAGLE's fc from [embedding, hidden]
        // (2 hidden x hidden), EAGLE-3's from three layers' features (3), MTP's
        // eh_proj (2).
        const double hidden = config.model_spec->hidden_size;
        const double inputs = spec.method == SpecMethod::kEagle3 ? 3 : 2;
        roofline_->set_draft(spec.k, spec.draft_layers(), inputs * hidden * hidden);
      }
    }
  }
  shell_.work = StepWork(roofline_ ? roofline_->sliding_window() : 0);
}

Simulator::~Simulator() = default;

std::vector<std::vector<BlockId>> Simulator::running_block_tables() const {
  std::vector<std::vector<BlockId>> out;
  for (auto& tables : scheduler_->running_group_tables()) out.push_back(std::move(tables[0]));
  return out;
}

bool Simulator::idle() const {
  return arriving_.empty() && !scheduler_->has_requests();
}

std::optional<SkipReason> Simulator::never_fits(const Request& request, std::uint64_t& need) const {
  return scheduler_->never_fits(request, need);
}

void Simulator::skip(const Request& request, SkipReason reason, std::uint64_t need) {
  SimTotals& sim = shell_.sim;
  ++sim.requests;
  ++sim.skipped;
  if (reason == SkipReason::kTooLong) ++sim.skipped_too_long;
  if (reason == SkipReason::kTooManySamples) ++sim.skipped_too_many_samples;
  auto& first = shell_.first_skipped[static_cast<std::size_t>(reason)];
  if (!first) first = SkippedRequest{request.line, request.id, need};
  skip_request(request);
}

void Simulator::submit(Request request, bool from_client) {
  std::uint64_t need = 0;
  if (auto reason = scheduler_->never_fits(request, need)) {
    skip(request, *reason, need);
    return;
  }
  ++shell_.sim.requests;
  if (!any_arrival_) overload_.first_arrival = request.arrival;
  any_arrival_ = true;
  overload_.last_arrival = request.arrival;
  // The engine sees a client's request once the server has taken it in
  // (roofline.h: request_overhead_ms); one handed over by another instance
  // is already in. Kept in the order the engine sees them.
  double ready = request.arrival;
  Intake intake{request.arrival, 0};
  if (from_client && roofline_) {
    const double overhead = roofline_->constants().request_overhead_ms / 1e3;
    if (overhead > 0) {
      intake.queued = 1;
      ready = request.arrival + overhead;
    }
  }
  auto at = arriving_.end();
  while (at != arriving_.begin() && std::prev(at)->ready > ready) --at;
  arriving_.insert(at, Arriving{ready, intake, std::move(request)});
}

OverloadFigures Simulator::overload() const {
  OverloadFigures out = overload_;
  out.service_p99_s = latencies_.service_s.quantile(0.99);
  out.closed_loop = options_.load.concurrency.has_value();
  return out;
}

void Simulator::skip_request(const Request& request) {
  if (!on_request && !on_request_end) return;
  RequestTimes times = request_times(request);
  times.skipped = true;
  if (on_request) on_request(times);
  if (on_request_end) on_request_end(times);
}

bool Simulator::run_until(double horizon) {
  if (shell_.violation) return false;  // sim_options_error, or an earlier failure
  for (;;) {
    const bool arrivals = !arriving_.empty() && arriving_.front().ready <= now_;
    while (!arriving_.empty() && arriving_.front().ready <= now_) {
      scheduler_->add_request(std::move(arriving_.front().request));
      arriving_.pop_front();
    }
    if (arrivals) {
      // Overwritten by every later arrival: in the end, the queue the last
      // request joined (children of one request counted once each).
      overload_.waiting_at_last_arrival = scheduler_->stats().waiting;
    }
    if (!scheduler_->has_requests()) {
      if (arriving_.empty()) return true;
      if (arriving_.front().ready > now_) waited_for_ = arriving_.front().intake;
      now_ = std::max(now_, arriving_.front().ready);
      continue;
    }
    if (now_ >= horizon) return true;
    if (!step(horizon)) return false;
  }
}

bool Simulator::emit_trace(TraceEmitter& trace) {
  if (!scheduler_->attach_trace(trace)) return false;
  trace_ = &trace;
  return true;
}

bool Simulator::step(double horizon) {
  step_waited_for_ = waited_for_;
  waited_for_.reset();
  shell_.step_start = now_;
  shell_.step_waits = now_;
  shell_.work.clear();
  shell_.step_later_tokens.clear();
  if (trace_ != nullptr) trace_->at(now_);
  if (!scheduler_->step()) return false;
  if (shell_.work.tokens() != 0 || !shell_.step_done.empty() || !shell_.step_first_tokens.empty()) {
    idle_steps_ = 0;
  } else {
    std::optional<double> wake = kv().wake_at();
    if (!kv_landings_.empty())
      wake = std::min(wake.value_or(*kv_landings_.begin()), *kv_landings_.begin());
    if (wake && *wake > now_) {
      idle_steps_ = 0;
      // Nothing ran: the requests wait for transfers (KV loads from an
      // offload tier, or a disaggregated fleet's KV crossing to this decode
      // instance: expect_kv). The clock moves on to the first landing, the
      // next arrival or the horizon, whichever comes first, without a step.
      double next = *wake;
      if (!arriving_.empty()) next = std::min(next, arriving_.front().ready);
      waiting_until_ = std::max(now_, next);
      now_ = std::max(now_, std::min(next, horizon));
      return true;
    }
    // Nothing ran and nothing is awaited: an engine step may still change
    // its state (a preemption, a request given up on) and run the next time,
    // but not for this many steps in a row. Held in place, the run would
    // never end: it stops here, as a failed check, saying where it stood.
    if (++idle_steps_ >= kStallSteps) {
      shell_.violation = Violation{
          shell_.sim.steps + 1, 0, "P1",
          fmt::format("the engine ran nothing for {} steps in a row at {:.6f} s of virtual time "
                      "(requests waiting: {}, running: {}; free blocks: {}): nothing it holds "
                      "can run (a kvreplay bug, or a fault forced on the pool)",
                      idle_steps_, now_, scheduler_->stats().waiting, scheduler_->stats().running,
                      scheduler_->pool().free_count())};
      return false;
    }
  }
  return end_step();
}

double Simulator::next_change() const {
  if (!waiting_until_) return now_;
  if (!arriving_.empty()) return std::min(*waiting_until_, std::max(now_, arriving_.front().ready));
  return *waiting_until_;
}

bool Simulator::end_step() {
  waiting_until_.reset();
  double step_ms = 0;
  if (roofline_) {
    step_ms = roofline_->step_ms(shell_.work);
  } else {
    step_ms = options_.cost.linear.step_ms_of(shell_.work, config_.kv.bytes_per_token());
  }
  now_ = std::max(now_ + step_ms / 1000.0, shell_.step_waits);
  last_first_tokens_ = shell_.step_first_tokens.size();
  last_ttft_sum_ms_ = 0;
  // Inter-token latency: each later emission's gap from the request's last
  // one (once a step, whatever its samples or drafts emitted).
  // Requests that also emitted in the step before share their gap: counted
  // as runs of equal values, one histogram lookup a run.
  double run_value = 0;
  std::uint64_t run_length = 0;
  auto flush = [&] {
    latencies_.itl_ms.add(run_value, run_length);
    if (itl_sink != nullptr) itl_sink->add(run_value, run_length);
    run_length = 0;
  };
  for (RequestTimes* times : shell_.step_later_tokens) {
    if (times->last_token >= 0 && times->last_token < now_) {
      const double itl = (now_ - times->last_token) * 1e3;
      if (run_length > 0 && itl != run_value) flush();
      run_value = itl;
      ++run_length;
    }
    times->last_token = now_;
  }
  flush();
  shell_.step_later_tokens.clear();
  for (auto& times : shell_.step_first_tokens) {
    times->first_token = now_;
    times->last_token = now_;
    last_ttft_sum_ms_ += times->ttft_ms();
    if (on_first_token) on_first_token(*times);
  }
  shell_.step_first_tokens.clear();
  for (auto& times : shell_.step_done) {
    times->finished = now_;
    latencies_.add(*times);
    if (meets_slo(options_.slo, *times)) {
      ++slo_met_;
      slo_output_tokens_ += std::uint64_t{times->output} * times->n;
    }
    if (on_request) on_request(*times);
    if (on_request_end) on_request_end(*times);
  }
  shell_.step_done.clear();
  overload_.end = now_;
  overload_.peak_waiting =
      std::max<std::uint64_t>(overload_.peak_waiting, scheduler_->stats().waiting);
  ++shell_.sim.steps;
  shell_.sim.virtual_seconds = now_;
  if (!shell_.events.empty()) {
    if (on_kv_events) on_kv_events(now_, shell_.events);
    shell_.events.clear();
  }
  scheduler_->record();
  unrecorded_ = false;
  bool due = options_.check.mode == CheckPolicy::Mode::kEvery ||
             (options_.check.mode == CheckPolicy::Mode::kEveryN &&
              shell_.sim.steps % options_.check.every == 0);
  if (due && !check_now()) return false;
  if (on_step) on_step(*this);
  return true;
}

bool Simulator::check_now() {
  return scheduler_->check();
}

bool Simulator::finish() {
  if (!kv().end_run()) return false;
  if (trace_ != nullptr) trace_->flush();
  if (unrecorded_) {
    // A decode instance that received KV for a request it then skipped takes
    // no step after: its figures and KV events see the pool as it ends.
    // Its KV events are stamped when the KV last moved here (a landing),
    // not at its last step's end.
    if (!shell_.events.empty()) {
      if (on_kv_events) on_kv_events(std::max(now_, kv_clock_), shell_.events);
      shell_.events.clear();
    }
    scheduler_->record();
    unrecorded_ = false;
  }
  if (options_.check.mode == CheckPolicy::Mode::kOff) return true;
  return check_now();
}

}  // namespace kvreplay
