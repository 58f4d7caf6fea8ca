// SimFigures: one simulation's figures as a value, and the rule by which a
// fleet's figures are made of its instances' (SimFigures::merge, one line a
// field naming its rule). The report writer (app/simulation/sim_report.h)
// renders one instance's value and a fleet's merged value alike; no figure
// travels as JSON inside the process.
//
// Identity: a default SimFigures (instances == 0) is the merge's neutral
// element: merging instances into it gives their fleet total, and a kSame
// field takes the first merged instance's value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/latency.h"
#include "engine/replay/replay_observer.h"
#include "engine/sim_types.h"

namespace kvreplay {

// How a fleet's figure is made of its instances' values.
enum class Merge : std::uint8_t {
  kSum,           // counts and bytes; a peak summed over the instances' own peaks
  kMax,           // the latest time, the largest ratio
  kMin,           // the earliest
  kMean,          // the plain mean over the instances (MeanOverInstances)
  kRatioOfSums,   // not stored: recomputed from merged numerator and denominator
  kSame,          // a setting equal on every instance: the first's
  kAny,           // a flag: set when any instance's is
  kDistribution,  // a latency (LatencyFigures::merge)
  kConcat,        // a list: each instance's entries, in instance order
  kPerInstance,   // not merged: a fleet's total has none
};
std::string_view to_string(Merge rule);

// A figure that is a mean an instance keeps without its weights (a mean of
// per-step ratios): a fleet's is the plain mean of its instances' values.
struct MeanOverInstances {
  double sum = 0.0;
  std::uint64_t instances = 0;
  static MeanOverInstances of(double value) { return {0.0 + value, 1}; }
  double value() const { return instances == 0 ? 0.0 : sum / static_cast<double>(instances); }
  void merge(const MeanOverInstances& o) {
    sum += o.sum;
    instances += o.instances;
  }
};

// A latency's summary, mergeable: count summed, mean weighted by the counts
// (from `weighted`, the running sum of mean x count), quantiles and max the
// largest instance's (an upper bound of the merged distribution's). Where the
// values themselves are at hand (a fleet's requests) the driver replaces a
// merged summary with their distribution's (LatencyFigures::of).
struct LatencyFigures {
  std::uint64_t count = 0;
  double mean = 0.0;
  double weighted = 0.0;  // mean x count, summed over the merged instances
  double p50 = 0.0, p90 = 0.0, p95 = 0.0, p99 = 0.0, max = 0.0;
  bool exact = true;
  std::vector<std::pair<double, double>> extra;  // LatencySummary::extra
  static LatencyFigures of(const LatencySummary& s);
  LatencySummary summary() const {
    LatencySummary s;
    s.count = count;
    s.mean = mean;
    s.p50 = p50;
    s.p90 = p90;
    s.p95 = p95;
    s.p99 = p99;
    s.max = max;
    s.exact = exact;
    s.extra = extra;
    return s;
  }
  void merge(const LatencyFigures& o);
};

// One offload tier's figures (engine/offload/offload_connector.h).
struct OffloadTierSimFigures {
  std::string medium;                      // kSame
  std::uint64_t capacity_blocks = 0;       // kSum
  std::uint64_t capacity_bytes = 0;        // kSum
  double gbps = 0.0;                       // kSame
  double latency_us = 0.0;                 // kSame
  std::uint64_t stored = 0;                // kSum
  std::uint64_t loaded = 0;                // kSum
  std::uint64_t evicted = 0;               // kSum
  std::uint64_t hit_tokens = 0;            // kSum
  std::uint64_t preempted_hit_tokens = 0;  // kSum
  std::uint64_t bytes_in = 0;              // kSum
  std::uint64_t bytes_out = 0;             // kSum
  std::uint64_t store_refused = 0;         // kSum
  std::uint64_t resident_blocks = 0;       // kSum
  LatencyFigures load_ms;                  // kDistribution (its p90 unreported)
};

// A violation an instance's checks found; `instance` names it in a fleet's list.
struct InstanceViolation {
  Violation violation;
  std::optional<std::uint32_t> instance;
};

struct SimFigures {
  std::uint64_t instances = 0;  // kSum: how many were merged (1: one instance's)

  // requests
  std::uint64_t requests = 0;                  // kSum: submitted (a fleet: to its entry side)
  std::uint64_t finished = 0;                  // kSum (a fleet: its answering side's)
  std::uint64_t skipped = 0;                   // kSum
  std::uint64_t skipped_too_long = 0;          // kSum
  std::uint64_t skipped_too_many_samples = 0;  // kSum

  // prefix_cache (a fleet: its entry side's; a decode instance's hits are KV it received)
  std::uint64_t query_tokens = 0;         // kSum
  std::uint64_t hit_tokens = 0;           // kSum
  double hit_rate_sum = 0.0;              // kSum: the requests' own hit rates
  std::uint64_t hit_rate_requests = 0;    // kSum
  std::uint64_t hit_blocks = 0;           // kSum
  std::uint64_t evictions = 0;            // kSum
  std::uint64_t queries = 0;              // kSum
  std::uint64_t hits = 0;                 // kSum
  std::uint64_t preempted_queries = 0;    // kSum
  std::uint64_t preempted_hits = 0;       // kSum
  std::uint64_t peak_cache_resident = 0;  // kSum
  // With offload: the tokens each tier answered, in the tiers' order. kSum
  std::vector<std::uint64_t> tier_hit_tokens;
  double hit_rate() const;              // kRatioOfSums: hit_tokens / query_tokens
  double hit_rate_per_request() const;  // kRatioOfSums: hit_rate_sum / hit_rate_requests
  double hit_rate_with_tiers() const;   // kRatioOfSums: (hit_tokens + tiers') / query_tokens

  // blocks, memory
  std::uint64_t pool_blocks = 0;        // kSum
  std::uint64_t peak_used = 0;          // kSum
  std::uint64_t final_used = 0;         // kSum
  std::uint64_t allocations = 0;        // kSum
  std::uint64_t frees = 0;              // kSum
  std::uint64_t peak_in_use = 0;        // kSum
  double mean_in_use = 0.0;             // kSum: each instance's mean over its steps
  std::uint64_t peak_in_use_bytes = 0;  // kSum

  // tokens, fragmentation, layout, sharing, cow
  std::uint64_t tokens_appended = 0;          // kSum
  std::uint64_t peak_logical = 0;             // kSum
  std::uint64_t peak_physical = 0;            // kSum
  MeanOverInstances waste_ratio_at_peak;      // kMean
  MeanOverInstances waste_ratio_mean;         // kMean
  double waste_ratio_max = 0.0;               // kMax
  std::uint64_t waste_slots_at_peak = 0;      // kSum
  MeanOverInstances runs_per_seq_mean;        // kMean
  MeanOverInstances runs_per_seq_at_peak;     // kMean
  MeanOverInstances continued_share_mean;     // kMean
  MeanOverInstances continued_share_at_peak;  // kMean
  std::uint64_t forks = 0;                    // kSum
  std::uint64_t prefix_installs = 0;          // kSum
  std::uint64_t shared_pages_installed = 0;   // kSum
  std::uint64_t saved_blocks_at_peak = 0;     // kSum
  std::uint64_t cow_copies = 0;               // kSum
  std::uint64_t cow_bytes = 0;                // kSum

  // invariants, oom
  std::uint64_t checks = 0;                      // kSum
  std::vector<InstanceViolation> violations;     // kConcat
  std::uint64_t oom_events = 0;                  // kSum
  std::optional<std::uint64_t> oom_first_event;  // kMin: the earliest instance's own count

  // scheduler
  std::uint64_t steps = 0;        // kSum
  std::uint64_t preemptions = 0;  // kSum
  // Speculative decoding (SimTotals::spec_drafts ...): kSum each.
  std::uint64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::uint64_t max_running = 0;             // kSum
  double virtual_seconds = 0.0;              // kMax
  std::uint64_t output_tokens = 0;           // kSum (a fleet: its answering side's)
  std::uint64_t prompt_tokens_computed = 0;  // kSum
  double output_tokens_per_second() const;   // kRatioOfSums: output_tokens / virtual_seconds
  double requests_per_second() const;        // kRatioOfSums: finished / virtual_seconds

  // The requests as the user sees them: latency, SLOs. A fleet's driver sets
  // these from its requests (disaggregated: timed from the user's arrival).
  LatencyFigures queue_ms, ttft_ms, tpot_ms, itl_ms, e2e_ms;  // kDistribution
  std::uint64_t slo_met = 0;                                  // kSum
  std::uint64_t slo_output_tokens = 0;                        // kSum

  // overload (OverloadFigures); a fleet's: over instances given requests.
  bool has_arrivals = false;                  // kAny
  double first_arrival = 0.0;                 // kMin (over instances with arrivals)
  double last_arrival = 0.0;                  // kMax (over instances with arrivals)
  double end = 0.0;                           // kMax
  std::uint64_t waiting_at_last_arrival = 0;  // kSum
  std::uint64_t peak_waiting = 0;             // kSum
  double service_p99_s = 0.0;                 // kMax (an upper bound; a fleet's: its requests')
  bool closed_loop = false;                   // kSame
  OverloadFigures overload() const;

  // cost
  std::uint64_t gpus = 0;  // kSum

  // offload
  bool offload = false;                      // kSame
  std::string offload_policy;                // kSame
  std::uint64_t offload_block_bytes = 0;     // kSame
  std::vector<OffloadTierSimFigures> tiers;  // each field by its rule, tier by tier

  // this + o, field by field.
  // REQUIRES: both ran the same options (the same tiers, in the same order).
  void merge(const SimFigures& o);
};

}  // namespace kvreplay
