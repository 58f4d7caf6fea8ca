// Simulator: the shell that runs an engine over a request trace (SPEC 3).
#pragma once

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "engine/replay/trace_emitter.h"
#include "engine/scheduler.h"
#include "engine/sim_types.h"

namespace kvreplay {

// The simulator shell (SPEC 3): feeds a request trace's arrivals to an engine
// (a Scheduler, engine/scheduler.h, chosen by SimOptions::engine from the
// table of engine/engines.cc), advances virtual time by the cost model after
// each of its steps, and collects the figures: latencies, SLOs, overload, the
// per-step and per-request callbacks, and the invariant checks the policy
// asks for. It never asks which engine it runs.
//
// Requests that can never fit (the engine's never_fits: longer than
// max_seq_tokens, more samples than max_seqs, more blocks than the pool) are
// skipped and counted: admission would wait for them forever.
// Whether a finished request meets the SLOs (SloTargets).
bool meets_slo(const SloTargets& slo, const RequestTimes& times);

class Simulator {
 public:
  Simulator(const RunConfig& config, const SimOptions& options);
  // The engine shell points back into this object: it stays where it is made.
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;
  ~Simulator();

  // Feeds the next request (arrivals must not decrease). A client's request
  // reaches the engine request_overhead_ms after its arrival (the roofline's
  // constant; at once under the linear cost model); `from_client` false: one
  // handed over by another instance, which the engine sees at its arrival.
  void submit(Request request, bool from_client = true);
  // Whether the engine can never run `request` (Scheduler::never_fits), and
  // the blocks it would need in `need`; submits nothing.
  std::optional<SkipReason> never_fits(const Request& request, std::uint64_t& need) const;
  // Takes `request` and skips it for `reason`, counted as submit counts one
  // that never fits (a fleet's prefill instance skips a request its decode
  // side can never fit, before its prefill).
  void skip(const Request& request, SkipReason reason, std::uint64_t need);
  // Runs steps until every submitted request whose arrival is before
  // `horizon` has been admitted, or everything is done when horizon is +inf.
  // Returns false when an invariant check failed.
  bool run_until(double horizon);
  // The end-of-run check.
  bool finish();  // the final checks; a trace being emitted is flushed

  const SimTotals& sim_totals() const { return shell_.sim; }
  const ReplayTotals& totals() const { return shell_.totals; }
  const ReplayState& state() const { return shell_.state; }
  const std::optional<Violation>& violation() const { return shell_.violation; }
  const BlockPool& pool() const { return scheduler_->pool(); }
  const RunConfig& config() const { return config_; }
  // The KV-cache groups run (options' kv_groups, else one full group of every
  // layer), and the bytes of one pool block: a page for kv_group_size layers.
  const std::vector<KvCacheGroupSpec>& kv_groups() const { return scheduler_->kv_groups(); }
  std::uint64_t block_bytes() const { return kv_block_bytes(config_.kv, kv_groups()); }
  const SimOptions& options() const { return options_; }
  std::uint64_t evictions() const { return scheduler_->stats().evictions; }
  // The engine run (tests look inside it).
  const Scheduler& scheduler() const { return *scheduler_; }
  // The first request skipped for `reason`, if any.
  const std::optional<SkippedRequest>& first_skipped(SkipReason reason) const {
    return shell_.first_skipped[static_cast<std::size_t>(reason)];
  }
  double now() const { return now_; }
  // When the last step began (on_step: the step just run).
  double step_started() const { return shell_.step_start; }
  // The server's intake of a request (request_overhead_ms): the engine sees
  // it `queued` overheads after `base`, its arrival; queued 0 when it took
  // no time. (Requests are taken in side by side: the API server's intake is
  // not a queue here; a burst of thousands that one event loop would
  // serialize is not modelled.)
  struct Intake {
    double base = 0;
    std::uint64_t queued = 0;
  };
  // What the last step waited for, idle, when it began after the one before
  // had ended: the intake of the request it began for.
  const std::optional<Intake>& last_step_waited_for() const { return step_waited_for_; }
  // The work of the last step (what the cost model priced it by).
  const StepWork& step_work() const { return shell_.work; }
  bool idle() const;
  // After the last step: blocks referenced by running requests, and cached
  // blocks no request holds (see SimTotals::peak_in_use).
  std::uint32_t in_use_blocks() const { return shell_.state.used - cache_resident_blocks(); }
  // The pool's blocks that hold KV or are held for it: its used blocks less
  // the null block, which is never used, in use nor wasted in any figure
  // (BlockPool.get_usage: 1 - free / (num_gpu_blocks - 1)). state().used.
  std::uint32_t used_blocks() const { return pool().used_count() - null_blocks(); }
  // Blocks that can hold KV: the pool less the null block.
  std::uint32_t usable_blocks() const { return pool().total() - null_blocks(); }
  std::uint32_t null_blocks() const { return null_block() ? 1 : 0; }
  std::uint32_t cache_resident_blocks() const { return scheduler_->stats().cache_resident_blocks; }
  // vLLM's null block (vllm engine, or --alloc-order vllm): block 0, never KV.
  const std::optional<BlockId>& null_block() const { return scheduler_->null_block(); }
  // The block tables of the running requests (samples), in running order:
  // what the tests compare with vLLM's block ids.
  std::vector<std::vector<BlockId>> running_block_tables() const;
  // Every running request's tables, one per KV-cache group in group order
  // (skipped pages on the null block).
  std::vector<std::vector<std::vector<BlockId>>> running_group_tables() const {
    return scheduler_->running_group_tables();
  }

  // --emit-trace (options().emit_trace): the engine writes its schedule
  // through `trace` from now on (engine/replay/trace_emitter.h), each step's events
  // stamped with its start. False where the engine cannot.
  bool emit_trace(TraceEmitter& trace);

  // Called after every step (for the timeline).
  std::function<void(const Simulator&)> on_step;
  // Called when a request finishes (its last sample's last token) or is
  // skipped as never fitting (--requests).
  std::function<void(const RequestTimes&)> on_request;
  // --kv-events (options().kv_events): called after every step that changed
  // the engine's caches, with the step's end and the changes, in order.
  std::function<void(double ts, const KvEventLog& events)> on_kv_events;
  // Called after on_request for the same requests (those the engine gives
  // up on mid-run too): the fleet's own bookkeeping (engine/fleet/fleet.h), apart
  // from the observers the caller sets.
  std::function<void(const RequestTimes&)> on_request_end;
  // Called at the end of the step that produced a request's first token
  // (first_token stamped): the fleet's router stops counting its prefill.
  std::function<void(const RequestTimes&)> on_first_token;
  // Where a fleet pools its instances' inter-token gaps too (not owned).
  LatencyDistribution* itl_sink = nullptr;

  // The cost model run (roofline or linear: auto resolved), and the roofline
  // when that is it.
  CostKind cost_kind() const { return roofline_ ? CostKind::kRoofline : CostKind::kLinear; }
  const std::optional<Roofline>& roofline() const { return roofline_; }
  // Latencies of the finished requests, in ms (TPOT only for requests of
  // more than one output token), and their service times (scheduled to done)
  // in s; bounded in memory (engine/latency.h).
  struct Latencies {
    LatencyDistribution queue_ms, ttft_ms, tpot_ms, e2e_ms, service_s;
    // Every gap between two emissions of a request's tokens, as the steps
    // end (SloMetric::kItl), finished request or not.
    LatencyDistribution itl_ms;
    // A finished request's times.
    void add(const RequestTimes& times);
  };
  const Latencies& latencies() const { return latencies_; }
  // Finished requests meeting options().slo (all finished ones without SLOs).
  std::uint64_t slo_met() const { return slo_met_; }
  // Their output tokens (every sample's): what a price per token is paid by.
  std::uint64_t slo_output_tokens() const { return slo_output_tokens_; }
  // With service_p99_s from the finished requests' latencies.
  OverloadFigures overload() const;
  std::uint64_t waiting_requests() const { return scheduler_->stats().waiting; }
  // The last step: requests that got their first token, and their mean TTFT
  // (nullopt when none did), for the timeline.
  std::uint64_t step_first_tokens() const { return last_first_tokens_; }
  std::optional<double> step_ttft_mean_ms() const {
    if (last_first_tokens_ == 0) return std::nullopt;
    return last_ttft_sum_ms_ / static_cast<double>(last_first_tokens_);
  }
  std::uint64_t running_requests() const { return scheduler_->stats().running; }
  // --offload: the engine's tiers and their gauges after the last step, and
  // the waiting requests loading their KV from a tier (TierGauge).
  std::size_t offload_tiers() const { return kv().offload_tiers(); }
  TierGauge offload_gauge(std::size_t t) const { return kv().offload_gauge(t); }
  std::size_t loading_requests() const { return kv().loading_requests(); }
  // Requests submitted whose arrival the run has not reached (not yet added
  // to the engine).
  std::uint64_t arriving_requests() const { return arriving_.size(); }
  // The prompt tokens of `request` the engine's prefix cache holds now
  // (Scheduler::cached_prompt_tokens: read-only).
  std::uint32_t cached_prompt_tokens(const Request& request) const {
    return scheduler_->cached_prompt_tokens(request);
  }
  // Disaggregated prefill: Scheduler::receive_kv and release_received.
  // At `now`, under --emit-trace, the pages received are loaded from the
  // trace's link tier, and the copies the prefill side staged dropped.
  // The KV events they log are stamped no earlier than the latest such
  // `now` (a decode instance that takes no step after them: finish()).
  std::optional<ReceivedKv> receive_kv(const Request& request, double now) {
    waiting_until_.reset();
    unrecorded_ = true;
    kv_clock_ = std::max(kv_clock_, now);
    if (trace_ != nullptr) trace_->at(now);
    std::optional<ReceivedKv> received = kv().receive_kv(request);
    if (trace_ != nullptr) trace_->unstage(request.tag);
    return received;
  }
  // At `now`: the KV landed (`landed`: the landing expect_kv announced for
  // then is done), or the request it was for ended.
  void release_received(std::span<const BlockId> blocks, double now, bool landed = false) {
    waiting_until_.reset();
    unrecorded_ = true;
    kv_clock_ = std::max(kv_clock_, now);
    if (auto it = kv_landings_.find(now); landed && it != kv_landings_.end())
      kv_landings_.erase(it);
    kv().release_received(blocks);
  }
  // A transfer to this instance lands at `at` (release_received then). A
  // step that runs nothing while one is in flight moves the clock on to the
  // first landing (or the next arrival) without stepping, as it does for
  // offload loads (wake_at).
  void expect_kv(double at) { kv_landings_.insert(at); }
  // The earliest time this instance can change on its own: now() (the end
  // of the step in progress, or the next step to begin), or, when its last
  // step found nothing to run while KV loads were in flight, the first
  // landing or the next arrival. A caller that waits on the instance (the
  // fleet's transfer retry) looks again then, not one ulp later.
  double next_change() const;

 private:
  bool step(double horizon);
  // The end of every step: virtual time by the cost model, the figures, the
  // checks the policy asks for, on_step. False when a check failed.
  bool end_step();
  bool check_now();
  void skip_request(const Request& request);

  RunConfig config_;
  SimOptions options_;
  EngineShell shell_;
  // What the engine calls for a request it gives up on (a stalled one):
  // on_request, then on_request_end.
  std::function<void(const RequestTimes&)> engine_skipped_;
  std::unique_ptr<Scheduler> scheduler_;
  // The engine's KvConnector, or one that moves nothing (every method's default).
  KvConnector& kv() const {
    static KvConnector none;
    KvConnector* connector = scheduler_->connector();
    return connector != nullptr ? *connector : none;
  }
  TraceEmitter* trace_ = nullptr;  // --emit-trace
  struct Arriving {
    double ready;  // when the engine sees it: its arrival, plus the server's intake
    Intake intake;
    Request request;
  };
  std::optional<Intake> step_waited_for_;
  std::deque<Arriving> arriving_;
  std::optional<Intake> waited_for_;  // the step about to run waited for this intake
  double now_ = 0.0;
  // Set by a step that found nothing to run: when it can next (next_change).
  std::optional<double> waiting_until_;
  // KV received or released (receive_kv, release_received) since the last
  // step's record: finish() records the pool as it ends.
  bool unrecorded_ = false;
  // The latest time KV was received or released here; landings announced.
  double kv_clock_ = 0.0;
  std::multiset<double> kv_landings_;
  // Steps in a row that ran nothing and awaited nothing; at kStallSteps the
  // run stops with a violation (P1) instead of stepping in place forever.
  std::uint64_t idle_steps_ = 0;
  static constexpr std::uint64_t kStallSteps = 10000;
  std::optional<Roofline> roofline_;
  Latencies latencies_;
  std::uint64_t slo_met_ = 0;
  std::uint64_t slo_output_tokens_ = 0;
  std::uint64_t last_first_tokens_ = 0;
  double last_ttft_sum_ms_ = 0;
  OverloadFigures overload_;
  bool any_arrival_ = false;
};

}  // namespace kvreplay
