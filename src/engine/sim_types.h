// The vocabulary of a simulation (SPEC 3): the engines, allocators, cost
// models and options a run is configured with, and the figures it reports.
// Shared by the simulator shell (engine/simulator.h) and every engine behind
// its Scheduler seam (engine/scheduler.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/invariants.h"
#include "engine/latency.h"
#include "engine/offload/offload_media.h"
#include "engine/offload/offload_tier.h"
#include "engine/paged/prefix_cache.h"
#include "engine/replay/replayer.h"
#include "engine/speculative.h"
#include "engine/trtllm/trtllm_options.h"
#include "formats/requests/request.h"
#include "model/cost_profile.h"
#include "model/kv_groups.h"
#include "model/roofline.h"
#include "model/run_config.h"

namespace kvreplay {

enum class AllocatorKind : std::uint8_t {
  kPaged,
  kContiguousMax,
  kContiguousPow2,
  kContiguousOracle
};
std::string_view to_string(AllocatorKind kind);
std::optional<AllocatorKind> parse_allocator(std::string_view name);
std::vector<std::string> allocator_names();  // in table order, for the command line

// The scheduler a simulation imitates (SPEC 3.1): a key of the table of
// engines (engine/engine_registry.h), whose entry says what each engine is,
// what it serves and what it takes.
enum class EngineKind : std::uint8_t { kGeneric, kVllm, kSglang, kTrtllm };
std::string_view to_string(EngineKind kind);
std::optional<EngineKind> parse_engine(std::string_view name);
std::vector<std::string> engine_names();

// The GPU class that picks `vllm serve`'s batch defaults
// (EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py, usage context
// OPENAI_API_SERVER): a GPU with at least 70 GiB that is not an A100 (H100,
// H200, B200, MI300X) is large; any other (A100, L40S, L4, A10G) is small.
enum class GpuClass : std::uint8_t { kLarge, kSmall };
std::string_view to_string(GpuClass gpu_class);
std::optional<GpuClass> parse_gpu_class(std::string_view name);
std::vector<std::string> gpu_class_names();
struct BatchDefaults {
  std::uint32_t max_batched_tokens;
  std::uint32_t max_seqs;
};
// large: 8192 tokens and 1024 sequences per step; small: 2048 and 256.
BatchDefaults vllm_serve_batch_defaults(GpuClass gpu_class);

// Virtual time (SPEC 3.3). roofline: model/roofline.h, from the model's
// parameters and the GPU's figures (--gpu, else kDefaultCostGpu); linear: the
// constants below, for calibration against measured figures:
//   step_ms = step_ms + prefill_tokens * prefill_token_ms + decode_seqs * decode_seq_ms
//           + context_tokens_read * bytes_per_token / (kv_bandwidth_gbps * 1e6)
// auto: roofline when the model's parameter count is known (a preset or a
// config.json), else linear (geometry given by hand).
enum class CostKind : std::uint8_t { kAuto, kRoofline, kLinear };
std::string_view to_string(CostKind kind);
std::optional<CostKind> parse_cost_kind(std::string_view name);
inline constexpr std::string_view kDefaultCostGpu = "h100-80gb";
// The GPU a roofline runs on: --gpu's preset, else kDefaultCostGpu's; nullptr
// for an unknown name.
const GpuSpec* cost_gpu(const RunConfig& config);

struct LinearCost {
  double step_ms = 5.0;             // fixed cost per step (weights read, launch)
  double prefill_token_ms = 0.025;  // per prompt token computed
  double decode_seq_ms = 0.01;      // per sequence decoded
  double kv_bandwidth_gbps = 3000;  // attention reads every context token's KV
  // The formula above, for one step's work.
  double step_ms_of(const StepWork& work, std::uint64_t bytes_per_token) const;
};

// The roofline's constants come from a cost profile (--cost-profile, else the
// shipped one: model/cost_profile.h) for the run's GPU and engine, with the
// constants given on the command line on top.
struct CostModel {
  CostKind kind = CostKind::kAuto;
  LinearCost linear;
  std::shared_ptr<const CostProfile> profile;  // null: CostProfile::shipped()
  RooflineConstants given;                     // the command line's values...
  std::uint32_t given_mask = 0;  // ...where bit i (roofline_constant_infos()[i]) is set
  const CostProfile& cost_profile() const { return profile ? *profile : CostProfile::shipped(); }
  RooflineConstants roofline_for(std::string_view gpu, EngineKind engine) const;
};

// Service-level objectives, in the two forms planners write them.
//
// Per-metric percentile targets (--slo ttft:p95:2000,tpot:p95:50): the
// metric's percentile over the run must be at most the limit. TTFT, TPOT
// (requests of one output token have none), ITL (every gap between two
// emissions of a request's tokens, pooled, as `vllm bench serve` counts it)
// and E2E.
//
// The joint rule (--slo-ttft-ms, --slo-tpot-ms, or --goodput's ttft, tpot and
// e2el): a request meets it when its TTFT, TPOT and end-to-end latency are all
// at most these (an SLO not given always holds); the run meets it when at
// least `attainment` of the requests do. Goodput counts the requests meeting
// it a second, as `vllm bench serve --goodput` does.
enum class SloMetric : std::uint8_t { kTtft, kTpot, kItl, kE2e };
std::string_view to_string(SloMetric metric);
std::optional<SloMetric> parse_slo_metric(std::string_view name);  // "e2el" too
struct PercentileTarget {
  SloMetric metric{};
  double percentile = 95;  // (0, 100]
  double limit_ms = 0;
  bool operator==(const PercentileTarget&) const = default;
};
// "pNN" (0 < NN <= 100, decimals allowed: p99.9) as a percentile, or the problem.
Result<double, std::string> parse_percentile(std::string_view text);
// --slo's list: comma-separated METRIC:pNN:MS, each metric and percentile
// once; the problem names the entry.
Result<std::vector<PercentileTarget>, std::string> parse_slo_targets(std::string_view text);
// --goodput's KEY:MS pairs (vllm bench serve's: ttft, tpot, e2el), into the
// joint rule's limits; each key once.
struct SloTargets;
std::optional<std::string> parse_goodput(const std::vector<std::string>& pairs, SloTargets& slo);
struct SloTargets {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2e_ms;
  double attainment = 0.99;  // the joint rule's share (--slo-attainment)
  std::vector<PercentileTarget> targets;
  bool joint() const { return ttft_ms || tpot_ms || e2e_ms; }
  bool any() const { return joint() || !targets.empty(); }
};

// One request's times, reported when it finishes or is skipped (--requests).
// Times in virtual seconds; a sample's output tokens under n > 1; TTFT is the
// first token of any sample, the end the last sample's last token.
struct RequestTimes {
  std::uint64_t line = 0;
  std::string id;
  std::uint64_t tag = 0;  // Request::tag
  std::uint32_t prompt = 0;
  std::uint32_t output = 0;
  std::uint32_t n = 1;
  double arrival = 0;
  double scheduled = -1;    // the start of the step that first scheduled it
  double first_token = -1;  // the end of the step that produced its first token
  double finished = -1;     // the end of the step that produced its last token
  double last_token = -1;   // the end of the latest step that emitted its tokens
  std::uint32_t preemptions = 0;
  // Prompt tokens found in the prefix cache at its first admission (SGLang's
  // meta_info cached_tokens; the most any of its n > 1 children found).
  std::uint32_t cached_tokens = 0;
  // Speculative decoding: draft tokens proposed for it and accepted.
  std::uint32_t drafted = 0, accepted = 0;
  bool skipped = false;
  double queue_ms() const { return (scheduled - arrival) * 1e3; }
  double ttft_ms() const { return (first_token - arrival) * 1e3; }
  double e2e_ms() const { return (finished - arrival) * 1e3; }
  // (last - first token) / (output - 1); nullopt for one output token.
  std::optional<double> tpot_ms() const {
    if (output <= 1) return std::nullopt;
    return (finished - first_token) * 1e3 / (output - 1);
  }
};

// A request's identity and sizes as times (none of them stamped yet).
RequestTimes request_times(const Request& request);

// Whether arrivals outpaced service (SPEC 3.3). A server that keeps up ends
// about one request's service time (scheduled to done) after its last arrival;
// one that does not still holds a queue then, and drains it for a time that
// grows with the trace. Overloaded: the run's end lies more than
// kOverloadRatio - 1 of the arrival span past the last arrival, and more than
// twice the p99 service time, with requests waiting at the last arrival. A
// trace whose requests all arrive at once is a batch, never overloaded; nor
// is a closed loop (--concurrency), whose clients send only as requests end:
// its queue holds at most its clients.
inline constexpr double kOverloadRatio = 1.1;
struct OverloadFigures {
  double first_arrival = 0;
  double last_arrival = 0;
  double end = 0;  // the virtual time of the last step
  std::uint64_t waiting_at_last_arrival = 0;
  std::uint64_t peak_waiting = 0;
  double service_p99_s = 0;  // p99 of e2e - queueing, finished requests
  bool closed_loop = false;
  double arrival_span() const { return last_arrival - first_arrival; }
  double drain() const { return end - last_arrival; }
  std::optional<double> ratio() const {
    if (arrival_span() <= 0) return std::nullopt;
    return (end - first_arrival) / arrival_span();
  }
  bool overloaded() const {
    if (closed_loop) return false;
    auto r = ratio();
    return r && *r > kOverloadRatio && drain() > 2 * service_p99_s && waiting_at_last_arrival > 0;
  }
};

// The sglang engine's options, as SGLang's ServerArgs names them
// (python/sglang/srt/server_args.py).
enum class SchedulePolicy : std::uint8_t { kFcfs, kLpm };
std::string_view to_string(SchedulePolicy policy);
std::optional<SchedulePolicy> parse_schedule_policy(std::string_view name);
std::vector<std::string> schedule_policy_names();
struct SglangOptions {
  SchedulePolicy policy = SchedulePolicy::kLpm;  // --schedule-policy
  // --chunked-prefill-size: tokens of prompt per prefill batch; 0 turns
  // chunked prefill off (SGLang's -1). The command line's default follows
  // the GPU's memory (sglang_chunked_prefill_default).
  std::uint32_t chunked_prefill_size = 8192;
  std::uint32_t max_prefill_tokens = 16384;  // --max-prefill-tokens
  // --max-running-requests; 0: SGLang's default from the pool's size
  // (engine/sglang/sglang_scheduler.cc, default_max_running_requests).
  std::uint32_t max_running_requests = 0;
  double schedule_conservativeness = 1.0;  // scales the new_token_ratio reservation
};
// ServerArgs._handle_gpu_memory_settings: the default --chunked-prefill-size
// of a GPU with `gpu_gib` GiB (2048 below 35 GiB, 4096 below 60, 8192 below
// 160, else 16384).
std::uint32_t sglang_chunked_prefill_default(double gpu_gib);

// How requests arrive (SPEC 3.5): at the trace's own times (neither set),
// at seeded Poisson times `request_rate` a second apart on average
// (--request-rate), or from `concurrency` clients in a closed loop, each
// sending its next request when its previous one ends (--concurrency). The
// trace gives the requests, in its order, either way. With `warmup` above 0
// (--warmup-requests), the first `warmup` requests are sent the same way
// and every one of them ends before the measured requests start
// (engine/load_generator.h).
// vllm bench serve's --ramp-up-strategy: the request rate climbs from
// --ramp-up-start-rps to --ramp-up-end-rps over the requests' indexes.
enum class RampUp : std::uint8_t { kNone, kLinear, kExponential };
// How --random-range-ratio R spreads a length L: vllm bench serve's random
// dataset draws uniformly in [floor(L(1 - R)), ceil(L(1 + R))]; SGLang's
// bench_serving in [max(floor(L R), 1), L].
enum class RangeStyle : std::uint8_t { kVllm, kSglang };
struct LoadOptions {
  std::optional<double> request_rate;
  std::optional<std::uint32_t> concurrency;
  std::uint64_t seed = 0;    // --load-seed: the Poisson draws
  std::uint64_t warmup = 0;  // --warmup-requests
  // --measure-after N: the first N requests keep the load going but are left
  // out of the load's figures (the steady state a stable measurement window
  // reports); unlike the warm-up, the clients never pause.
  std::uint64_t measure_after = 0;
  double burstiness = 1.0;  // --burstiness: the gamma shape of the gaps (1: Poisson)
  RampUp ramp_up = RampUp::kNone;
  double ramp_start_rps = 0, ramp_end_rps = 0;
  std::uint64_t ramp_requests = 0;  // the requests a ramp spans (the trace's count)
  // --random-range-ratio, when given: SGLang's R = 0 still spreads lengths
  // (over [1, L]), so "not given" is no value, not 0.
  std::optional<double> range_ratio;
  RangeStyle range_style = RangeStyle::kVllm;
  // --time-scale F: the trace's own arrival times divided by F (2 replays it
  // twice as fast, its gaps keeping their shape); only without a generator.
  double time_scale = 1.0;
  bool any() const {
    return request_rate.has_value() || concurrency.has_value() || ramp_up != RampUp::kNone;
  }
};

// KV offload tiers (SPEC 3.7): blocks kept beyond the GPU as vLLM's native
// offloading keeps them (engine/offload/offload_connector.h), per GPU. Each tier has
// its own capacity (bytes per GPU, floored to whole GPU blocks) and link: a
// transfer of n blocks takes latency_us + n * block bytes / (gbps * 1e9).
struct OffloadTierOptions {
  OffloadMedium medium{};  // engine/offload/offload_media.h
  std::uint64_t bytes = 0;
  double gbps = 0;        // GB/s each way
  double latency_us = 0;  // per transfer
};
struct OffloadOptions {
  std::vector<OffloadTierOptions> tiers;  // in lookup order: kOffloadMedia's
  OffloadPolicy policy = OffloadPolicy::kLru;
  bool any() const { return !tiers.empty(); }
};
struct SimOptions {
  std::uint32_t max_seqs = 256;
  std::uint32_t max_batched_tokens = 8192;
  double watermark = 0.01;  // fraction of the pool kept free at admission
  bool prefix_cache = true;
  EvictPolicy evict = EvictPolicy::kLru;
  AllocatorKind allocator = AllocatorKind::kPaged;
  // The library's default, EngineKind's first value (generic); the command
  // line's is vllm (app/options.cc), with vllm_serve_batch_defaults for
  // max_seqs and max_batched_tokens.
  EngineKind engine{};
  GpuClass gpu_class = GpuClass::kLarge;  // recorded: which batch defaults apply
  CostModel cost;
  SloTargets slo;
  // --percentiles: reported beside p50/p90/p95/p99 (report_percentiles).
  std::vector<double> percentiles;
  CheckPolicy check;
  // The KV-cache groups the pool serves (model/kv_groups.h), as vLLM's
  // hybrid KV cache manager forms them. Empty: one full-attention group of
  // every layer, the same run as one such group given explicitly. Several
  // groups, or a sliding-window one, need the vllm engine and the paged
  // allocator; the groups' layers must add up to the model's (kv_groups_error).
  std::vector<KvCacheGroupSpec> kv_groups;
  SglangOptions sglang;  // --engine sglang (its entry's options)
  TrtllmOptions trtllm;  // --engine trtllm (its entry's options)
  // --gpu-hour-usd: the price of one GPU for an hour, for the report's
  // "cost_usd" (none without it).
  std::optional<double> gpu_hour_usd;
  LoadOptions load;        // the trace's own arrival times unless set
  SpecDecode speculative;  // --speculative: off unless set (engine/speculative.h)
  OffloadOptions offload;  // --offload: none unless set
  // --kv-events: the engine logs its caches' changes (EngineShell::events);
  // an engine whose entry declares kv_events.
  bool kv_events = false;
  // --emit-trace: the run is written as a kvtrace (engine/replay/trace_emitter.h);
  // an engine whose entry declares emit_trace, paged, without hybrid groups.
  bool emit_trace = false;
};

// The percentiles a run's latency summaries carry beyond p50/p90/p95/p99:
// --percentiles and the SLO targets' own, ascending, each once.
std::vector<double> report_percentiles(const SimOptions& options);

// A combination of options a run cannot take: the option at fault, as the
// command line names it ("--offload"), and the problem, without that name.
struct OptionsError {
  std::string option;
  std::string problem;
  std::string to_string() const { return option + ": " + problem; }
};

// What is wrong with running `options` on `config`, or nullopt: the KV-cache
// groups (kv_groups_error), a hybrid model (several groups, or a
// sliding-window one) under the generic engine or a contiguous baseline, an
// engine or pool --offload, --kv-events or --emit-trace cannot serve, an
// offload tier that holds no block or more than 2^32 - 1, a roofline without
// its model or GPU. A Simulator built with such options runs nothing:
// run_until returns false, violation() naming the problem.
std::optional<OptionsError> sim_options_error(const RunConfig& config, const SimOptions& options);

// Why a request can never fit; the first applies when several do.
enum class SkipReason : std::uint8_t {
  kTooLong,         // generic: prompt + output - 1 > max_seq_tokens; vllm: prompt >= or
                    // prompt + output > max_seq_tokens, max_model_len (no pool helps)
  kTooManySamples,  // n > max_seqs (no pool helps)
  kPoolTooSmall,    // more blocks (or slots) than the pool minus the watermark
};
inline constexpr std::size_t kSkipReasons = 3;

// The first request skipped for a reason, for the warning naming it.
struct SkippedRequest {
  std::uint64_t line = 0;
  std::string id;
  std::uint64_t need = 0;  // tokens, samples or blocks (slots for the contiguous baselines)
};

struct SimTotals {
  std::uint64_t requests = 0;
  std::uint64_t finished = 0;
  std::uint64_t skipped = 0;
  std::uint64_t skipped_too_long = 0;          // of those, longer than max_seq_tokens
  std::uint64_t skipped_too_many_samples = 0;  // of those, n above max_seqs
  std::uint64_t skipped_stalled = 0;  // of those, vllm: stalled at admission (skip_stalled_vllm)
  std::uint64_t steps = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t max_running = 0;  // samples running at once
  double virtual_seconds = 0.0;
  std::uint64_t output_tokens = 0;  // each once, however often recomputed
  // Speculative decoding: decode steps of a request with drafts, their draft
  // tokens and the drafts accepted (vLLM's spec_decode num_drafts,
  // num_draft_tokens, num_accepted_tokens).
  std::uint64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::uint64_t prompt_tokens_computed = 0;  // recomputation included
  std::uint64_t query_tokens = 0;            // prompt tokens at first admission
  std::uint64_t hit_tokens = 0;
  std::uint64_t hit_blocks = 0;
  double hit_rate_sum = 0.0;  // per-request hit rates at first admission
  std::uint64_t hit_rate_requests = 0;
  // vLLM's PrefixCacheStats (vllm/v1/metrics/stats.py, recorded by
  // KVCacheManager.record_prefix_cache_stats): tokens looked up and found in the
  // cache when a request is admitted; admissions of preempted requests apart.
  std::uint64_t queries = 0;
  std::uint64_t hits = 0;
  std::uint64_t preempted_queries = 0;
  std::uint64_t preempted_hits = 0;
  // Blocks in use: referenced by a running request's table, what vLLM's
  // kv_cache_usage reports. The pool's used blocks (the null block never
  // counted, see used_blocks) less the cache residency (cached blocks no
  // request holds, which the cache gives back on demand). Contiguous
  // baselines: the reserved pages. Taken after every step.
  std::uint32_t peak_in_use = 0;
  double in_use_sum = 0.0;  // over steps, for the mean
  std::uint32_t peak_cache_resident = 0;
  // At the first step that reached peak_in_use: the blocks the running
  // requests' tables reference (as many as the pool could hold) less the blocks
  // in use, i.e. the blocks of this pool that sharing kept free. In
  // [0, pool_blocks - null block - peak_in_use]. Paged only.
  std::uint64_t saved_blocks_at_peak = 0;
  std::uint64_t reserved_slots_peak = 0;  // contiguous baselines
  std::uint64_t admission_blocked_external =
      0;  // contiguous: free space existed but not in one piece
  // vllm, sliding-window groups: blocks given back as they left the window
  // (remove_skipped_blocks).
  std::uint64_t window_freed_blocks = 0;
};

}  // namespace kvreplay
