// Simulator: a continuous-batching scheduler (SPEC 3) that turns a request
// trace into work on the real pool and tables, with a prefix cache, or into
// per-request contiguous reservations for the baselines.
//
// Each step, in virtual time:
//   1. requests whose arrival has come join the waiting queue (FCFS);
//   2. running requests advance in admission order within --max-batched-tokens:
//      a prefilling request takes its next prompt chunk (chunked prefill), a
//      decoding one one token per live sample; the step that ends a prefill
//      yields the first output token, and n > 1 forks the other samples then;
//   3. waiting requests are admitted FCFS while the budget lasts, the running
//      samples stay within --max-seqs, and free (plus evictable) blocks stay
//      above the watermark after the first chunk (prefix-cache hits are
//      installed first and need no new block);
//   4. a paged append that cannot get a block, even after evicting the prefix
//      cache, preempts the most recently admitted request by recompute: its
//      blocks are released and it rejoins the front of the queue, to start over;
//   5. a sample finishes after `output` tokens (its KV holds prompt + output - 1
//      tokens); virtual time advances by the cost model (see CostModel).
// Requests that can never fit (longer than max_seq_tokens, more samples than
// max_seqs, or more blocks than the pool minus the watermark) are skipped and
// counted: admission would wait for them forever. Every other request is
// admitted once nothing else runs (its first chunk then fits), so a run ends.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/block_table.h"
#include "core/invariants.h"
#include "engine/latency.h"
#include "engine/prefix_cache.h"
#include "engine/replayer.h"
#include "formats/requests/request.h"
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

// The scheduler a simulation imitates (SPEC 3.1).
//   generic: the engine-neutral scheduler described at the top of this file
//            (fork + COW for n > 1, a watermark, recompute from scratch);
//   vllm:    vLLM v1's synchronous scheduler and KV cache manager
//            (engine/vllm_scheduler.cc, each rule citing the vLLM function it
//            comes from): block 0 is the null block, allocation per step for
//            the tokens scheduled, the last running request preempted and
//            re-prefilled with the tokens it generated, nothing admitted in a
//            step that preempted, finished requests freed at the end of the
//            step, every full block cached when allocated, n > 1 fanned out.
enum class EngineKind : std::uint8_t { kGeneric, kVllm };
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

struct CostModel {
  CostKind kind = CostKind::kAuto;
  LinearCost linear;
  RooflineConstants roofline;
};

// Service-level objectives (--slo-ttft-ms, --slo-tpot-ms): a request meets
// them when its TTFT and its TPOT (a request of one output token has none) are
// at most these; an SLO not given always holds.
struct SloTargets {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  bool any() const { return ttft_ms || tpot_ms; }
};

// One request's times, reported when it finishes or is skipped (--requests).
// Times in virtual seconds; a sample's output tokens under n > 1; TTFT is the
// first token of any sample, the end the last sample's last token.
struct RequestTimes {
  std::uint64_t line = 0;
  std::string id;
  std::uint32_t prompt = 0;
  std::uint32_t output = 0;
  std::uint32_t n = 1;
  double arrival = 0;
  double scheduled = -1;    // the start of the step that first scheduled it
  double first_token = -1;  // the end of the step that produced its first token
  double finished = -1;     // the end of the step that produced its last token
  std::uint32_t preemptions = 0;
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
// trace whose requests all arrive at once is a batch, never overloaded.
inline constexpr double kOverloadRatio = 1.1;
struct OverloadFigures {
  double first_arrival = 0;
  double last_arrival = 0;
  double end = 0;  // the virtual time of the last step
  std::uint64_t waiting_at_last_arrival = 0;
  std::uint64_t peak_waiting = 0;
  double service_p99_s = 0;  // p99 of e2e - queueing, finished requests
  double arrival_span() const { return last_arrival - first_arrival; }
  double drain() const { return end - last_arrival; }
  std::optional<double> ratio() const {
    if (arrival_span() <= 0) return std::nullopt;
    return (end - first_arrival) / arrival_span();
  }
  bool overloaded() const {
    auto r = ratio();
    return r && *r > kOverloadRatio && drain() > 2 * service_p99_s && waiting_at_last_arrival > 0;
  }
};

struct SimOptions {
  std::uint32_t max_seqs = 256;
  std::uint32_t max_batched_tokens = 8192;
  double watermark = 0.01;  // fraction of the pool kept free at admission
  bool prefix_cache = true;
  EvictPolicy evict = EvictPolicy::kLru;
  AllocatorKind allocator = AllocatorKind::kPaged;
  // The library's default; the command line's is vllm (app/options.cc), with
  // vllm_serve_batch_defaults for max_seqs and max_batched_tokens.
  EngineKind engine = EngineKind::kGeneric;
  GpuClass gpu_class = GpuClass::kLarge;  // recorded: which batch defaults apply
  CostModel cost;
  SloTargets slo;
  CheckPolicy check;
  // The KV-cache groups the pool serves (model/kv_groups.h), as vLLM's
  // hybrid KV cache manager forms them. Empty: one full-attention group of
  // every layer, the same run as one such group given explicitly. Several
  // groups, or a sliding-window one, need the vllm engine and the paged
  // allocator; the groups' layers must add up to the model's (kv_groups_error).
  std::vector<KvCacheGroupSpec> kv_groups;
};

// What is wrong with running `options` on `config`, or nullopt: the KV-cache
// groups (kv_groups_error), or a hybrid model (several groups, or a
// sliding-window one) under the generic engine or a contiguous baseline.
// A Simulator built with such options runs nothing: run_until returns false,
// violation() naming the problem.
std::optional<std::string> sim_options_error(const RunConfig& config, const SimOptions& options);

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
  std::uint64_t output_tokens = 0;           // each once, however often recomputed
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

class Simulator {
 public:
  Simulator(const RunConfig& config, const SimOptions& options);
  ~Simulator();

  // Feeds the next request (arrivals must not decrease).
  void submit(Request request);
  // Runs steps until every submitted request whose arrival is before
  // `horizon` has been admitted, or everything is done when horizon is +inf.
  // Returns false when an invariant check failed.
  bool run_until(double horizon);
  // The end-of-run check.
  bool finish();

  const SimTotals& sim_totals() const { return sim_; }
  const ReplayTotals& totals() const { return totals_; }
  const ReplayState& state() const { return state_; }
  const std::optional<Violation>& violation() const { return violation_; }
  const BlockPool& pool() const { return pool_; }
  const RunConfig& config() const { return config_; }
  // The KV-cache groups run (options' kv_groups, else one full group of every
  // layer), and the bytes of one pool block: a page for kv_group_size layers.
  const std::vector<KvCacheGroupSpec>& kv_groups() const { return groups_; }
  std::uint64_t block_bytes() const { return kv_block_bytes(config_.kv, groups_); }
  const SimOptions& options() const { return options_; }
  std::uint64_t evictions() const { return cache_.evictions(); }
  const PrefixCache& prefix_cache() const { return cache_; }
  // The first request skipped for `reason`, if any.
  const std::optional<SkippedRequest>& first_skipped(SkipReason reason) const {
    return first_skipped_[static_cast<std::size_t>(reason)];
  }
  double now() const { return now_; }
  bool idle() const;
  // After the last step: blocks referenced by running requests, and cached
  // blocks no request holds (see SimTotals::peak_in_use).
  std::uint32_t in_use_blocks() const { return state_.used - cache_resident_blocks(); }
  // The pool's blocks that hold KV or are held for it: its used blocks less
  // the null block, which is never used, in use nor wasted in any figure
  // (BlockPool.get_usage: 1 - free / (num_gpu_blocks - 1)). state().used.
  std::uint32_t used_blocks() const { return pool_.used_count() - null_blocks(); }
  // Blocks that can hold KV: the pool less the null block.
  std::uint32_t usable_blocks() const { return pool_.total() - null_blocks(); }
  std::uint32_t null_blocks() const { return null_block_ ? 1 : 0; }
  std::uint32_t cache_resident_blocks() const { return paged() ? cache_.evictable() : 0; }
  // vLLM's null block (vllm engine, or --alloc-order vllm): block 0, never KV.
  const std::optional<BlockId>& null_block() const { return null_block_; }
  // The block tables of the running requests (samples), in running order:
  // what the tests compare with vLLM's block ids.
  std::vector<std::vector<BlockId>> running_block_tables() const;
  // vllm: every running request's tables, one per KV-cache group in group
  // order (skipped pages on the null block).
  std::vector<std::vector<std::vector<BlockId>>> running_group_tables() const;

  // Called after every step (for the timeline).
  std::function<void(const Simulator&)> on_step;
  // Called when a request finishes (its last sample's last token) or is
  // skipped as never fitting (--requests).
  std::function<void(const RequestTimes&)> on_request;

  // The cost model run (roofline or linear: auto resolved), and the roofline
  // when that is it.
  CostKind cost_kind() const { return roofline_ ? CostKind::kRoofline : CostKind::kLinear; }
  const std::optional<Roofline>& roofline() const { return roofline_; }
  // Latencies of the finished requests, in ms (TPOT only for requests of
  // more than one output token), and their service times (scheduled to done)
  // in s; bounded in memory (engine/latency.h).
  struct Latencies {
    LatencyDistribution queue_ms, ttft_ms, tpot_ms, e2e_ms, service_s;
  };
  const Latencies& latencies() const { return latencies_; }
  // Finished requests meeting options().slo (all finished ones without SLOs).
  std::uint64_t slo_met() const { return slo_met_; }
  // With service_p99_s from the finished requests' latencies.
  OverloadFigures overload() const;
  std::uint64_t waiting_requests() const { return waiting_.size(); }
  // The last step: requests that got their first token, and their mean TTFT
  // (nullopt when none did), for the timeline.
  std::uint64_t step_first_tokens() const { return last_first_tokens_; }
  std::optional<double> step_ttft_mean_ms() const {
    if (last_first_tokens_ == 0) return std::nullopt;
    return last_ttft_sum_ms_ / static_cast<double>(last_first_tokens_);
  }
  std::uint64_t running_requests() const { return running_.size(); }

 private:
  struct Sample {
    SequenceBlockTable table;     // paged only
    std::uint32_t length = 0;     // tokens of KV held
    std::uint32_t generated = 0;  // output tokens produced
    bool done = false;
    std::uint64_t region = 0;        // contiguous: first slot of its region
    std::uint64_t region_slots = 0;  // contiguous: size of its region
    // vllm with several KV-cache groups: the tables of groups 1.. (group 0's
    // is `table`), all of the same length.
    std::vector<SequenceBlockTable> more;
  };
  struct Flight {
    // What every step reads first, together (a step visits every running
    // flight twice): vLLM's num_computed_tokens, the output so far, the table.
    std::uint32_t computed = 0;
    std::uint32_t generated = 0;
    std::uint32_t cached_pages = 0;  // leading prompt pages already offered to the cache
    std::uint32_t preemptions = 0;
    // vllm: from (re)admission until its computed tokens catch up with its
    // tokens (a token is sampled): every token computed then is prompt
    // computation, a one-token chunk too (a recompute after a full prefix
    // hit, or the last token of a chunked re-prefill), not a decode.
    bool prefilling = true;
    bool work_stamped = false;  // schedule_work has seen it (its times read once)
    std::vector<Sample> samples;
    Request request;
    std::shared_ptr<RequestTimes> times;  // shared by a request's children (vllm)
    std::vector<std::uint32_t> counted;   // output tokens counted, per sample (survives preemption)
    std::uint64_t order = 0;              // admission order
    bool admitted_before = false;
    std::uint32_t prefilled = 0;
    // Prefix-cache hits found while waiting, re-verified (not re-searched) on
    // every admission attempt.
    std::vector<BlockId> hit_blocks;
    std::uint64_t track_id = 0;      // names this flight's hits in hit_slots_
    std::uint32_t watched_hits = 0;  // the leading hits tracked so far (track_hits)
    // vllm: one table per request (n > 1 fanned out into children). uid keys
    // the request's own pages in the cache, prompt_uid the prompt pages its
    // siblings share.
    std::uint64_t uid = 0;
    std::uint64_t prompt_uid = 0;
    std::shared_ptr<std::uint32_t> siblings_left;  // children of the request not finished
  };

  // vllm, hybrid: skips the waiting head, whose allocation (`needed` blocks)
  // fails with nothing running (admit_hybrid_vllm), and counts it once all its
  // children are done with (skipped_stalled).
  void skip_stalled_vllm(std::uint64_t needed);
  void skipped_stalled(const RequestTimes& times);
  bool step();
  // A flight's chunk of `tokens` after `context` cached, for the cost model; the
  // first chunk ever stamps the request's scheduling time.
  void schedule_work(Flight& flight, std::uint64_t context, std::uint64_t tokens, bool prefill) {
    work_.add(context, tokens, prefill);
    if (!flight.work_stamped) stamp_scheduled(flight);
  }
  // A flight's first step: its request's first scheduling time.
  void stamp_scheduled(Flight& flight);
  // The flight produced its request's first token / its last (request done):
  // stamped with the step's end time in end_step.
  void first_token(Flight& flight);
  void request_done(Flight& flight);
  void skip_request(const Request& request);
  static std::shared_ptr<RequestTimes> new_times(const Request& request);
  // The end of every step: virtual time by the cost model, the figures, the
  // checks the policy asks for, on_step. False when a check failed.
  bool end_step();
  // An admission's prefix-cache figures: PrefixCacheStats (a readmission of a
  // preempted request apart) and, at the first admission, the hit rates.
  void count_admission(const Request& request, std::uint32_t num_tokens, std::size_t hit_blocks,
                       std::uint32_t hit_tokens, bool readmission);
  // A new table for the flight's first sample holding `hits` (touched first).
  bool install_hits(Flight& flight, const std::vector<BlockId>& hits, std::uint32_t hit_tokens);
  // Keeps the leading hits of the flight's last attempt that are still cached
  // under their keys. For the flight verified last, only the blocks evicted
  // since are looked at; any other is verified hit by hit and becomes that flight.
  void verify_hits(Flight& flight);
  void add_hit(Flight& flight, BlockId block) { flight.hit_blocks.push_back(block); }
  // The key under which a flight's hit at `page` was found: a function of
  // the flight and the page, recomputed rather than kept.
  PageKey hit_key(const Flight& flight, std::uint32_t page) const {
    return options_.engine == EngineKind::kVllm ? vllm_key(flight, page) : *page_key(flight, page);
  }
  // Tracks the hits of the tracked flight not tracked yet (track_hit each).
  // Done only once its admission is not settled by the free blocks alone: a
  // flight admitted at its first attempt never needs its hits tracked.
  void track_hits(Flight& flight);
  // Records `block` as the tracked flight's hit at `pos`, and watches it.
  void track_hit(BlockId block, std::size_t pos);
  // Clears an admitted flight's hits; when it was the tracked one, no flight is.
  void forget_hits(Flight& flight);
  // Whether `needed` blocks (and the watermark) can be had besides the hits
  // of `flight` (the tracked one). Under --check every the O(1) count of
  // evictable hits is recounted, a difference recorded as a violation.
  bool room_beside_hits(Flight& flight, std::uint64_t needed);
  bool vllm() const { return options_.engine == EngineKind::kVllm && paged(); }
  // engine/vllm_scheduler.cc
  bool step_vllm();
  void enqueue_vllm(Request request);
  bool schedule_running_vllm(std::uint32_t& budget, bool& preempted,
                             std::vector<std::pair<Flight*, std::uint32_t>>& scheduled);
  bool schedule_waiting_vllm(std::uint32_t& budget,
                             std::vector<std::pair<Flight*, std::uint32_t>>& scheduled);
  bool allocate_vllm(Flight& flight, std::uint32_t tokens);
  // What allocate_vllm does once every group's table took the tokens: the
  // sample's length, the counts, the pages that became full cached.
  bool appended_vllm(Flight& flight, std::uint32_t tokens);
  // allocate_vllm's work in one group's table (no length or cache update).
  bool append_group_vllm(Flight& flight, SequenceBlockTable& table, std::uint32_t tokens);
  // Group g's table of a sample (0: sample.table).
  static SequenceBlockTable& group_table(Sample& sample, std::size_t g) {
    return g == 0 ? sample.table : sample.more[g - 1];
  }
  static const SequenceBlockTable& group_table(const Sample& sample, std::size_t g) {
    return g == 0 ? sample.table : sample.more[g - 1];
  }
  // SlidingWindowManager.get_num_skipped_tokens of group g (0 for full).
  std::uint32_t skipped_tokens(std::size_t g, std::uint32_t computed) const;
  // SingleTypeKVCacheManager.remove_skipped_blocks, every sliding group.
  bool remove_skipped_blocks_vllm(Flight& flight);
  // Hybrid admission of the head of the queue; stop when it cannot get its blocks.
  bool admit_hybrid_vllm(std::uint32_t& budget,
                         std::vector<std::pair<Flight*, std::uint32_t>>& scheduled, bool& stop);
  // HybridKVCacheCoordinator.find_longest_cache_hit: hits per group into
  // hybrid_hits_ (skipped pages on the null block); returns the hit tokens.
  std::uint32_t find_longest_cache_hit_vllm(const Flight& flight, std::uint32_t max_length);
  bool install_hybrid_hits(Flight& flight, std::uint32_t hit_tokens);
  bool hybrid() const { return hybrid_; }
  void preempt_vllm(std::unique_ptr<Flight> victim);
  // BlockPool.cache_full_blocks after a step's allocation. Inline: most steps
  // fill no page (a decode token in a partial page) and cache nothing.
  bool cache_full_blocks_vllm(Flight& flight) {
    if (!options_.prefix_cache) return true;
    const std::uint32_t full_pages = flight.samples[0].table.length() / config_.kv.page_tokens;
    return flight.cached_pages >= full_pages || cache_new_full_blocks_vllm(flight, full_pages);
  }
  // Caches the pages from flight.cached_pages up to full_pages.
  bool cache_new_full_blocks_vllm(Flight& flight, std::uint32_t full_pages);
  // Records cache_new_full_blocks_vllm's failure to cache a page; returns false.
  [[gnu::cold]] bool caching_failed(const Flight& flight, std::uint32_t page, CoreError error);
  PageKey vllm_key(const Flight& flight, std::uint32_t page) const;
  std::optional<SkipReason> never_fits_vllm(const Request& request, std::uint64_t& need) const;
  bool admit_next(std::uint32_t& budget, bool& stop);
  bool run_flight(Flight& flight, std::uint32_t& budget, std::size_t index, bool& preempted_self);
  bool append(Flight& flight, Sample& sample, std::uint32_t tokens, std::size_t index,
              bool& preempted_self);
  void preempt_last();
  void release_sample(Sample& sample);
  void finish_sample(Sample& sample);
  // A sample produced its `generated`-th token: counted unless it is recomputed.
  void count_output(Flight& flight, std::size_t sample);
  void offer_to_cache(Flight& flight);
  std::optional<PageKey> page_key(const Flight& flight, std::uint32_t page) const;
  std::uint32_t reservation_tokens(const Request& request) const;
  // Why `request` can never run to completion here, or nullopt when it can;
  // `need` is set to what it needs (see SkippedRequest).
  std::optional<SkipReason> never_fits(const Request& request, std::uint64_t& need) const;
  bool check_now();
  void record();
  void record_in_use(std::uint32_t in_use, std::uint32_t resident);
  void record_saved_blocks();
  SequenceBlockTable new_table() const;
  bool paged() const { return options_.allocator == AllocatorKind::kPaged; }
  // Contiguous first-fit arena over pool_blocks * page_tokens slots.
  std::optional<std::uint64_t> reserve_region(std::uint64_t slots);
  void free_region(std::uint64_t start, std::uint64_t slots);

  RunConfig config_;
  SimOptions options_;
  BlockPool pool_;
  PrefixCache cache_;
  InvariantChecker checker_;
  std::deque<Request> arriving_;
  std::deque<std::unique_ptr<Flight>> waiting_;
  std::vector<std::unique_ptr<Flight>> running_;
  std::map<std::string, std::uint64_t> prefix_ids_;
  std::map<std::uint64_t, std::uint64_t> free_ranges_;  // contiguous: start -> length
  std::uint64_t reserved_slots_ = 0;
  std::uint64_t next_order_ = 0;
  std::uint64_t running_samples_ = 0;
  std::uint64_t request_entries_ = 0;     // valid entries of the running samples' tables
  std::uint64_t next_uid_ = 0;            // vllm: request identities for cache keys
  std::optional<BlockId> null_block_;     // vllm: block 0, held for the life of the pool
  std::vector<KvCacheGroupSpec> groups_;  // never empty
  bool hybrid_ = false;                   // several groups, or a sliding one
  // Group ids per attention spec, full attention first (HybridKVCacheCoordinator
  // .verify_and_split_kv_cache_groups).
  std::vector<std::vector<std::size_t>> attention_types_;
  std::vector<std::vector<BlockId>> hybrid_hits_;  // per group, find_longest_cache_hit_vllm's
  double now_ = 0.0;
  std::uint64_t tick_ = 0;
  std::uint32_t watermark_blocks_ = 0;
  SimTotals sim_;
  std::array<std::optional<SkippedRequest>, kSkipReasons> first_skipped_;
  ReplayTotals totals_;
  ReplayState state_;
  std::optional<Violation> violation_;
  std::vector<TableRef> table_refs_;
  std::vector<BlockId> holds_;
  std::vector<BlockId> release_scratch_;  // a released table's entries (release_sample)
  std::vector<BlockId> alloc_scratch_;    // allocate_vllm's blocks for new pages
  std::vector<std::pair<Flight*, std::uint32_t>> scheduled_;  // step_vllm's, reused
  // By block: which tracked flight's hit it is, and where (see verify_hits).
  struct HitSlot {
    std::uint64_t owner = 0;
    std::uint32_t pos = 0;
  };
  std::vector<HitSlot> hit_slots_;
  std::uint64_t tracked_ = 0;  // track_id of the flight verified last, 0: none
  std::uint64_t last_track_id_ = 0;
  std::uint64_t tracked_mark_ = 0;  // cache_.evictions() when it was verified
  // Per step, for the cost model and the request times.
  std::optional<Roofline> roofline_;
  StepWork work_;
  double step_start_ = 0.0;
  std::vector<std::shared_ptr<RequestTimes>> step_first_tokens_, step_done_;
  Latencies latencies_;
  std::uint64_t slo_met_ = 0;
  std::uint64_t last_first_tokens_ = 0;
  double last_ttft_sum_ms_ = 0;
  OverloadFigures overload_;
  bool any_arrival_ = false;
};

}  // namespace kvreplay
