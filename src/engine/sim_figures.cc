#include "engine/sim_figures.h"

#include <algorithm>

namespace kvreplay {

namespace {

// The rules, as merge() names them field by field.
template <typename T>
void sum(T& a, const T& b) {
  a += b;
}
template <typename T>
void max(T& a, const T& b) {
  a = std::max(a, b);
}
void any(bool& a, bool b) {
  a = a || b;
}
// kSame: the first merged instance's value (`first`: this is the identity).
template <typename T>
void same(T& a, const T& b, bool first) {
  if (first) a = b;
}
void earliest(std::optional<std::uint64_t>& a, const std::optional<std::uint64_t>& b) {
  if (b) a = a ? std::min(*a, *b) : *b;
}
template <typename T>
void concat(std::vector<T>& a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
}
void sum_each(std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b) {
  a.resize(std::max(a.size(), b.size()), 0);
  for (std::size_t i = 0; i < b.size(); ++i) a[i] += b[i];
}

double ratio(double numerator, double denominator) {
  return denominator == 0 ? 0.0 : numerator / denominator;
}

void merge_tier(OffloadTierSimFigures& a, const OffloadTierSimFigures& b, bool first) {
  same(a.medium, b.medium, first);
  sum(a.capacity_blocks, b.capacity_blocks);
  sum(a.capacity_bytes, b.capacity_bytes);
  same(a.gbps, b.gbps, first);
  same(a.latency_us, b.latency_us, first);
  sum(a.stored, b.stored);
  sum(a.loaded, b.loaded);
  sum(a.evicted, b.evicted);
  sum(a.hit_tokens, b.hit_tokens);
  sum(a.preempted_hit_tokens, b.preempted_hit_tokens);
  sum(a.bytes_in, b.bytes_in);
  sum(a.bytes_out, b.bytes_out);
  sum(a.store_refused, b.store_refused);
  sum(a.resident_blocks, b.resident_blocks);
  a.load_ms.merge(b.load_ms);  // kDistribution
}

}  // namespace

std::string_view to_string(Merge rule) {
  switch (rule) {
    case Merge::kSum: return "sum";
    case Merge::kMax: return "max";
    case Merge::kMin: return "min";
    case Merge::kMean: return "mean";
    case Merge::kRatioOfSums: return "ratio of sums";
    case Merge::kSame: return "same";
    case Merge::kAny: return "any";
    case Merge::kDistribution: return "distribution";
    case Merge::kConcat: return "concat";
    case Merge::kPerInstance: return "per instance";
  }
  return "?";
}

LatencyFigures LatencyFigures::of(const LatencySummary& s) {
  LatencyFigures f;
  f.count = s.count;
  f.mean = s.mean;
  f.weighted = 0.0 + s.mean * static_cast<double>(s.count);
  f.p50 = s.p50;
  f.p90 = s.p90;
  f.p95 = s.p95;
  f.p99 = s.p99;
  f.max = s.max;
  f.exact = s.exact;
  f.extra = s.extra;
  return f;
}

void LatencyFigures::merge(const LatencyFigures& o) {
  count += o.count;
  weighted += o.weighted;
  mean = count == 0 ? 0.0 : weighted / static_cast<double>(count);
  p50 = std::max(p50, o.p50);
  p90 = std::max(p90, o.p90);
  p95 = std::max(p95, o.p95);
  p99 = std::max(p99, o.p99);
  max = std::max(max, o.max);
  // The same percentiles asked of every instance (an empty one takes the other's).
  if (extra.empty()) {
    extra = o.extra;
  } else if (extra.size() == o.extra.size()) {
    for (std::size_t i = 0; i < extra.size(); ++i) {
      extra[i].second = std::max(extra[i].second, o.extra[i].second);
    }
  }
  exact = exact && o.exact;
}

double SimFigures::hit_rate() const {
  return ratio(static_cast<double>(hit_tokens), static_cast<double>(query_tokens));
}

double SimFigures::hit_rate_per_request() const {
  return ratio(hit_rate_sum, static_cast<double>(hit_rate_requests));
}

double SimFigures::hit_rate_with_tiers() const {
  std::uint64_t all_hits = hit_tokens;
  for (std::uint64_t t : tier_hit_tokens) all_hits += t;
  return ratio(static_cast<double>(all_hits), static_cast<double>(query_tokens));
}

double SimFigures::output_tokens_per_second() const {
  return virtual_seconds > 0 ? static_cast<double>(output_tokens) / virtual_seconds : 0.0;
}

double SimFigures::requests_per_second() const {
  return virtual_seconds > 0 ? static_cast<double>(finished) / virtual_seconds : 0.0;
}

OverloadFigures SimFigures::overload() const {
  OverloadFigures o;
  o.first_arrival = first_arrival;
  o.last_arrival = last_arrival;
  o.end = end;
  o.waiting_at_last_arrival = waiting_at_last_arrival;
  o.peak_waiting = peak_waiting;
  o.service_p99_s = service_p99_s;
  o.closed_loop = closed_loop;
  return o;
}

void SimFigures::merge(const SimFigures& o) {
  const bool first = instances == 0;
  sum(instances, o.instances);

  sum(requests, o.requests);
  sum(finished, o.finished);
  sum(skipped, o.skipped);
  sum(skipped_too_long, o.skipped_too_long);
  sum(skipped_too_many_samples, o.skipped_too_many_samples);

  sum(query_tokens, o.query_tokens);
  sum(hit_tokens, o.hit_tokens);
  sum(hit_rate_sum, o.hit_rate_sum);
  sum(hit_rate_requests, o.hit_rate_requests);
  sum(hit_blocks, o.hit_blocks);
  sum(evictions, o.evictions);
  sum(queries, o.queries);
  sum(hits, o.hits);
  sum(preempted_queries, o.preempted_queries);
  sum(preempted_hits, o.preempted_hits);
  sum(peak_cache_resident, o.peak_cache_resident);
  sum_each(tier_hit_tokens, o.tier_hit_tokens);

  sum(pool_blocks, o.pool_blocks);
  sum(peak_used, o.peak_used);
  sum(final_used, o.final_used);
  sum(allocations, o.allocations);
  sum(frees, o.frees);
  sum(peak_in_use, o.peak_in_use);
  sum(mean_in_use, o.mean_in_use);
  sum(peak_in_use_bytes, o.peak_in_use_bytes);

  sum(tokens_appended, o.tokens_appended);
  sum(peak_logical, o.peak_logical);
  sum(peak_physical, o.peak_physical);
  waste_ratio_at_peak.merge(o.waste_ratio_at_peak);  // kMean
  waste_ratio_mean.merge(o.waste_ratio_mean);        // kMean
  max(waste_ratio_max, o.waste_ratio_max);
  sum(waste_slots_at_peak, o.waste_slots_at_peak);
  runs_per_seq_mean.merge(o.runs_per_seq_mean);              // kMean
  runs_per_seq_at_peak.merge(o.runs_per_seq_at_peak);        // kMean
  continued_share_mean.merge(o.continued_share_mean);        // kMean
  continued_share_at_peak.merge(o.continued_share_at_peak);  // kMean
  sum(forks, o.forks);
  sum(prefix_installs, o.prefix_installs);
  sum(shared_pages_installed, o.shared_pages_installed);
  sum(saved_blocks_at_peak, o.saved_blocks_at_peak);
  sum(cow_copies, o.cow_copies);
  sum(cow_bytes, o.cow_bytes);

  sum(checks, o.checks);
  concat(violations, o.violations);
  sum(oom_events, o.oom_events);
  earliest(oom_first_event, o.oom_first_event);  // kMin

  sum(steps, o.steps);
  sum(preemptions, o.preemptions);
  sum(spec_drafts, o.spec_drafts);
  sum(spec_draft_tokens, o.spec_draft_tokens);
  sum(spec_accepted_tokens, o.spec_accepted_tokens);
  sum(max_running, o.max_running);
  max(virtual_seconds, o.virtual_seconds);
  sum(output_tokens, o.output_tokens);
  sum(prompt_tokens_computed, o.prompt_tokens_computed);

  queue_ms.merge(o.queue_ms);  // kDistribution
  ttft_ms.merge(o.ttft_ms);    // kDistribution
  tpot_ms.merge(o.tpot_ms);    // kDistribution
  itl_ms.merge(o.itl_ms);      // kDistribution
  e2e_ms.merge(o.e2e_ms);      // kDistribution
  sum(slo_met, o.slo_met);
  sum(slo_output_tokens, o.slo_output_tokens);

  if (o.has_arrivals) {  // kMin, kMax: over the instances with arrivals
    first_arrival = has_arrivals ? std::min(first_arrival, o.first_arrival) : o.first_arrival;
    last_arrival = has_arrivals ? std::max(last_arrival, o.last_arrival) : o.last_arrival;
  }
  any(has_arrivals, o.has_arrivals);
  max(end, o.end);
  sum(waiting_at_last_arrival, o.waiting_at_last_arrival);
  sum(peak_waiting, o.peak_waiting);
  max(service_p99_s, o.service_p99_s);
  same(closed_loop, o.closed_loop, first);

  sum(gpus, o.gpus);

  same(offload, o.offload, first);
  same(offload_policy, o.offload_policy, first);
  same(offload_block_bytes, o.offload_block_bytes, first);
  if (first) tiers.resize(o.tiers.size());
  for (std::size_t t = 0; t < tiers.size() && t < o.tiers.size(); ++t) {
    merge_tier(tiers[t], o.tiers[t], first);
  }
}

}  // namespace kvreplay
