#include "engine/offload/offload_connector.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/mix64.h"

namespace kvreplay {

namespace {

std::uint64_t mix64(std::uint64_t x) {
  return splitmix64(x);
}

}  // namespace

std::uint64_t block_key(const PageKey& key) {
  return mix64(mix64(key.chain) ^ (std::uint64_t{key.group} << 32 | key.offset));
}

OffloadConnector::OffloadConnector(const OffloadOptions& options, std::uint64_t block_bytes)
    : block_bytes_(std::max<std::uint64_t>(block_bytes, 1)) {
  for (const OffloadTierOptions& t : options.tiers) {
    const std::uint64_t blocks =
        std::min<std::uint64_t>(t.bytes / block_bytes_, std::numeric_limits<std::uint32_t>::max());
    tiers_.push_back(
        Tier{t, OffloadTier(options.policy, static_cast<std::uint32_t>(blocks)), {}, 0, 0});
  }
}

double OffloadConnector::transfer_s(const Tier& tier, std::size_t blocks) const {
  const double bytes = static_cast<double>(blocks) * static_cast<double>(block_bytes_);
  return tier.options.latency_us * 1e-6 + bytes / (tier.options.gbps * 1e9);
}

void OffloadConnector::issue_load(std::size_t t, std::vector<std::uint64_t> keys, const void* owner,
                                  double now) {
  Tier& tier = tiers_[t];
  const double start = std::max(now, tier.in_free);
  const double done = start + transfer_s(tier, keys.size());
  tier.in_free = done;
  tier.figures.bytes_out += keys.size() * block_bytes_;
  for (std::uint64_t key : keys) ++loading_keys_[key];
  jobs_.push_back(Job{t, true, std::move(keys), {}, owner, now, done});
}

void OffloadConnector::queue_store(std::size_t t, std::vector<std::uint64_t> keys,
                                   std::vector<BlockId> blocks, const void* owner) {
  jobs_.push_back(Job{t, false, std::move(keys), std::move(blocks), owner, 0, -1});
}

void OffloadConnector::start_queued(double now) {
  for (Job& job : jobs_) {
    if (job.load || job.done >= 0) continue;
    Tier& tier = tiers_[job.tier];
    job.issued = now;
    job.done = std::max(now, tier.out_free) + transfer_s(tier, job.keys.size());
    tier.out_free = job.done;
    tier.figures.bytes_in += job.keys.size() * block_bytes_;
  }
}

std::vector<OffloadConnector::Job> OffloadConnector::take_landed(double now) {
  std::vector<Job> landed;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < jobs_.size(); ++i) {
    Job& job = jobs_[i];
    if (job.done >= 0 && job.done <= now) {
      landed.push_back(std::move(job));
      continue;
    }
    if (kept != i) jobs_[kept] = std::move(job);
    ++kept;
  }
  jobs_.resize(kept);
  // In the order they land (a stable sort keeps the issue order of ties).
  std::stable_sort(landed.begin(), landed.end(),
                   [](const Job& a, const Job& b) { return a.done < b.done; });
  for (const Job& job : landed) {
    if (!job.load) continue;
    for (std::uint64_t key : job.keys) {
      auto it = loading_keys_.find(key);
      if (it != loading_keys_.end() && --it->second == 0) loading_keys_.erase(it);
    }
  }
  return landed;
}

std::optional<double> OffloadConnector::next_landing() const {
  std::optional<double> next;
  for (const Job& job : jobs_) {
    if (job.done >= 0 && (!next || job.done < *next)) next = job.done;
  }
  return next;
}

bool OffloadConnector::being_loaded(std::uint64_t key) const {
  return loading_keys_.contains(key);
}

void add_offload_figures(nlohmann::json& report, const OffloadConnector& offload,
                         std::string_view policy, std::span<const TierResidency> residency,
                         const SimTotals& sim) {
  nlohmann::json tiers = nlohmann::json::object();
  nlohmann::json by_tier = {{"gpu", sim.hit_tokens}};
  std::uint64_t tier_hits = 0;
  for (std::size_t t = 0; t < offload.num_tiers(); ++t) {
    const OffloadTierOptions& options = offload.tier_options(t);
    const OffloadTierFigures& f = offload.figures(t);
    const LatencySummary load = f.load_ms.summary();
    const std::string name(to_string(options.medium));
    tiers[name] = {{"capacity_blocks", residency[t].capacity},
                   {"capacity_bytes", std::uint64_t{residency[t].capacity} * offload.block_bytes()},
                   {"gbps", options.gbps},
                   {"latency_us", options.latency_us},
                   {"stored", f.stored},
                   {"loaded", f.loaded},
                   {"evicted", f.evicted},
                   {"hit_tokens", f.hit_tokens},
                   {"preempted_hit_tokens", f.preempted_hit_tokens},
                   {"bytes_in", f.bytes_in},
                   {"bytes_out", f.bytes_out},
                   {"store_refused", f.store_refused},
                   {"resident_blocks", residency[t].resident},
                   {"load_ms",
                    {{"count", load.count},
                     {"mean", load.mean},
                     {"p50", load.p50},
                     {"p99", load.p99},
                     {"max", load.max}}}};
    by_tier[name] = f.hit_tokens;
    tier_hits += f.hit_tokens;
  }
  report["offload"] = {
      {"policy", std::string(policy)}, {"block_bytes", offload.block_bytes()}, {"tiers", tiers}};
  if (report.contains("prefix_cache")) {
    nlohmann::json& cache = report["prefix_cache"];
    cache["hits_by_tier"] = by_tier;
    cache["hit_rate_with_tiers"] = sim.query_tokens == 0
                                       ? 0.0
                                       : static_cast<double>(sim.hit_tokens + tier_hits) /
                                             static_cast<double>(sim.query_tokens);
  }
}

}  // namespace kvreplay
