// The seam between the simulator and the engines it imitates (SPEC 3.1).
//
// An engine is a Scheduler: it owns its requests (waiting and running), its
// pool and its cache, and runs one step at a time, as vLLM's
// SchedulerInterface (vllm/v1/core/sched/interface.py: add_request,
// schedule + update_from_output, finish_requests, stats). The Simulator
// (engine/simulator.h) is the shell around it: it feeds arrivals, keeps
// virtual time with the cost model, and collects the figures; it never asks
// which engine it runs.
//
// What an engine reports as it works goes through the EngineShell the
// simulator hands it: the figures (SimTotals, the pool's ReplayTotals and
// ReplayState), the step's work for the cost model, the requests' times, and
// the first violation found.
//
// Adding an engine: its folder (a Scheduler subclass and its entry) and one
// line in the table of engine/engine_registry.cc (engine/engine_registry.h).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/block_pool.h"
#include "engine/kv_connector.h"
#include "engine/sim_types.h"
#include "engine/token_runs.h"

namespace kvreplay {

class TraceEmitter;

// --kv-events (SPEC 3.8): what changed in an engine's caches during a step,
// which the shell publishes as one KVEventBatch (Simulator::on_kv_events):
// the GPU prefix cache's keys as they became cached or stopped being, and
// the offload tiers' events, each in the order it happened.
struct KvEventLog {
  struct TierChange {
    OffloadMedium medium{};
    OffloadEvent event;
  };
  std::vector<PrefixCache::KeyChange> gpu;
  std::vector<TierChange> tiers;
  // A tree of token pages (the sglang and trtllm engines'): its pages, one event each.
  std::vector<PageChange> pages;
  bool empty() const { return gpu.empty() && tiers.empty() && pages.empty(); }
  void clear() {
    gpu.clear();
    tiers.clear();
    pages.clear();
  }
};

// What Scheduler::stats() returns: the queues and the cache's figures now.
struct SchedulerStats {
  std::size_t waiting = 0;  // requests (not samples) waiting, loading included
  std::size_t running = 0;  // requests running
  std::uint64_t evictions = 0;
  // Cached blocks no request holds, which the cache gives back on demand.
  std::uint32_t cache_resident_blocks = 0;
};

// The shell's side of the seam, owned by the Simulator.
class EngineShell {
 public:
  EngineShell(const RunConfig& run_config, const SimOptions& sim_options)
      : config(run_config), options(sim_options) {}

  const RunConfig& config;
  const SimOptions& options;
  SimTotals sim;
  ReplayTotals totals;  // the pool's figures, as a replay counts them
  ReplayState state;
  std::optional<Violation> violation;  // the first one; the run stops there
  std::array<std::optional<SkippedRequest>, kSkipReasons> first_skipped;
  // The step being scheduled: its start in virtual time and its work for the
  // cost model.
  double step_start = 0.0;
  StepWork work;
  // A transfer the step's compute overlaps and cannot end before (SGLang's
  // HiCache loads a batch's host hits layer by layer as it computes).
  double step_waits = 0.0;
  std::uint64_t tick = 0;  // steps begun: the cache's clock
  KvEventLog events;       // filled only under options.kv_events

  // A request's chunk of `tokens` after `context` tokens of KV, for the cost
  // model; the first chunk ever scheduled for `times` stamps its scheduling time.
  void schedule_work(RequestTimes* times, std::uint64_t context, std::uint64_t tokens,
                     bool prefill) {
    work.add(context, tokens, prefill);
    if (times && times->scheduled < 0) times->scheduled = step_start;
  }
  // Speculative decoding (engine/speculative.h): the tokens a decode of a
  // request verifies (1 + K; 1 without drafts), and the tokens it emits: 1 +
  // the drafts accepted, at most `left` (at least 1), drawn for the request
  // keyed `key` at `generated` tokens of output and counted.
  std::uint32_t verify_tokens() const { return 1 + options.speculative.k; }
  std::uint32_t decode_tokens(RequestTimes* times, std::uint64_t key, std::uint32_t generated,
                              std::uint32_t left) {
    const std::uint32_t emitted = draw_decode(key, generated, left);
    count_decode(times, emitted);
    return emitted;
  }
  // decode_tokens in two: the draw, and its count once the step keeps it.
  std::uint32_t draw_decode(std::uint64_t key, std::uint32_t generated, std::uint32_t left) const {
    const SpecDecode& spec = options.speculative;
    if (!spec.on()) return 1;
    return std::min(1 + spec.draw(key, generated), std::max(left, 1u));
  }
  void count_decode(RequestTimes* times, std::uint32_t emitted) {
    later_token(times);
    const SpecDecode& spec = options.speculative;
    if (!spec.on()) return;
    ++sim.spec_drafts;
    sim.spec_draft_tokens += spec.k;
    sim.spec_accepted_tokens += emitted - 1;
    if (times) {
      times->drafted += spec.k;
      times->accepted += emitted - 1;
    }
  }
  // The request produced its first token / its last one in this step: stamped
  // with the step's end when the shell ends it.
  // A request that had its first token and emits again after a recompute
  // (a preempted or retracted one) counts as a later token.
  void first_token(const std::shared_ptr<RequestTimes>& times) {
    if (times && times->first_token < 0) {
      times->first_token = 0;
      step_first_tokens.push_back(times);
    } else {
      later_token(times.get());
    }
  }
  // The request emitted tokens after its first in this step: its inter-token
  // gap is taken when the shell ends the step (engine/simulator.cc).
  void later_token(RequestTimes* times) {
    if (times) step_later_tokens.push_back(times);
  }
  void request_done(const std::shared_ptr<RequestTimes>& times) {
    if (times) step_done.push_back(times);
  }
  // A request the engine gives up on (never fits, or stalled): counted
  // by the engine, reported to --requests here.
  void request_skipped(const RequestTimes& times) const {
    if (on_request && *on_request) (*on_request)(times);
  }

  // The shell's bookkeeping of the step's times (engine/simulator.cc).
  std::vector<std::shared_ptr<RequestTimes>> step_first_tokens, step_done;
  // Not owned: a request emitting in a step lives to its end (step_done holds
  // one that finishes in it).
  std::vector<RequestTimes*> step_later_tokens;
  const std::function<void(const RequestTimes&)>* on_request = nullptr;
};

// One engine's scheduler and KV-cache manager.
class Scheduler {
 public:
  virtual ~Scheduler() = default;

  // Why `request` can never run to completion here (setting `need` to what it
  // needs, see SkippedRequest), or nullopt: the shell skips such a request.
  virtual std::optional<SkipReason> never_fits(const Request& request,
                                               std::uint64_t& need) const = 0;
  // The request arrived: it joins the waiting queue.
  virtual void add_request(Request request) = 0;
  // One step: schedule within the budgets, run it (its work to
  // shell.work), take its output, free what finished. False when an
  // invariant failed (shell.violation says which).
  virtual bool step() = 0;
  // The engine's figures now (vLLM's SchedulerInterface.make_stats).
  virtual SchedulerStats stats() const = 0;
  bool has_requests() const {
    const SchedulerStats now = stats();
    return now.waiting + now.running > 0;
  }

  // After every step: the step's figures into shell.sim, shell.state and
  // shell.totals (blocks used, in use, cached).
  virtual void record() = 0;
  // The invariant checks of the engine's pool, tables and cache (I1-I3,
  // the cache's own); false, with shell.violation set, when one fails.
  virtual bool check() = 0;

  // Figures and views for the reports and tests.
  virtual const BlockPool& pool() const = 0;
  // Blocks reserved for the engine itself, never KV (vLLM's null block).
  virtual const std::optional<BlockId>& null_block() const = 0;
  // The KV-cache groups a block serves (one full group unless hybrid).
  virtual const std::vector<KvCacheGroupSpec>& kv_groups() const = 0;
  // The running requests' (samples') tables in running order, one per group.
  virtual std::vector<std::vector<std::vector<BlockId>>> running_group_tables() const = 0;
  // The engine's own figures, added to the report: the section its entry
  // names (EngineEntry::report_section); none by default.
  virtual void add_figures(nlohmann::json& report) const { (void)report; }
  // Why requests were skipped for `reason`, in the engine's own words (the
  // rule it imitates), `first` the first of them; nullopt: the shell's words.
  virtual std::optional<std::string> skip_rule(SkipReason reason,
                                               const SkippedRequest& first) const {
    (void)reason;
    (void)first;
    return std::nullopt;
  }
  // The leading prompt tokens of `request` this engine's prefix cache holds
  // now, in whole pages, as a router indexing the engine's KV events sees
  // them (engine/fleet/router.h, view "precise"): read-only, nothing touched or
  // split, no eviction clock advanced. 0 without a prefix cache.
  virtual std::uint32_t cached_prompt_tokens(const Request& request) const {
    (void)request;
    return 0;
  }
  // The KV the engine moves beyond its pool (P/D receiving, offload tiers),
  // as one object (engine/kv_connector.h); nullptr where it moves none.
  virtual KvConnector* connector() { return nullptr; }
  const KvConnector* connector() const { return const_cast<Scheduler*>(this)->connector(); }
  // --emit-trace (engine/replay/trace_emitter.h): from now on the engine writes what
  // it does to its pool, tables and caches through `trace`. False where the
  // engine cannot (sim_options_error refuses such runs first).
  virtual bool attach_trace(TraceEmitter& trace) {
    (void)trace;
    return false;
  }
};

}  // namespace kvreplay
