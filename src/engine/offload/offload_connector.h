// OffloadConnector: the scheduler side of vLLM's native KV offloading
// (vllm/v1/kv_offload/, OffloadingConnectorScheduler in
// distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py) for one
// engine instance: its tiers (engine/offload/offload_tier.h, in lookup order), the
// transfers in flight on each tier's link, and the figures (SPEC 3.7).
//
// The engine (engine/paged/paged_offload.cc) decides what moves: each step the full
// pages of every scheduled request go to each tier (_get_reqs_to_store), and
// a waiting request whose prefix continues in the tiers loads it
// (get_num_new_matched_tokens, update_state_after_alloc). This class times
// the moves. A tier has two links, one each way (PCIe is full duplex): a
// transfer of n blocks takes latency + n * block bytes / bandwidth, after the
// transfers queued on its link before it.
//   - a store queued in a step starts at the next step's start (vLLM's
//     worker submits it then, "so offloading starts after the transfers for
//     token sampling"), and its blocks become loadable when it lands (per
//     job, as vLLM completes stores since its per-job store completion);
//   - a load starts in the step that issues it (start_load_kv at the step's
//     start); the request is admitted at the first step that starts after
//     every one of its loads landed.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/block_pool.h"
#include "engine/latency.h"
#include "engine/offload/offload_tier.h"
#include "engine/paged/prefix_cache.h"
#include "engine/sim_types.h"

namespace kvreplay {

// kvreplay's 64-bit key of a cached page (its PageKey: the trace's hash chain
// and the page's offset in it): what the tiers and the KV events name a block
// by. Deterministic, the same in every run and on every machine.
std::uint64_t block_key(const PageKey& key);

// One tier's figures since the start of the run.
struct OffloadTierFigures {
  std::uint64_t stored = 0;      // blocks stored in the tier (the paged engines: once issued)
  std::uint64_t loaded = 0;      // blocks loaded back into the GPU
  std::uint64_t evicted = 0;     // blocks the tier's policy evicted
  std::uint64_t hit_tokens = 0;  // prompt tokens found in the tier at admission
  // ... at the readmission of a preempted request (counted apart, as vLLM's
  // PrefixCacheStats counts preempted_hits apart from hits).
  std::uint64_t preempted_hit_tokens = 0;
  std::uint64_t bytes_in = 0;       // stored into the tier
  std::uint64_t bytes_out = 0;      // loaded out of it
  std::uint64_t store_refused = 0;  // stores refused for want of room (retried next step)
  LatencyDistribution load_ms;      // per load: issue to landing, queueing included
};

class OffloadConnector {
 public:
  // `block_bytes`: the bytes of one GPU block (one page of every layer the
  // GPU holds), which is also a tier block.
  OffloadConnector(const OffloadOptions& options, std::uint64_t block_bytes);

  std::size_t num_tiers() const { return tiers_.size(); }
  OffloadTier& tier(std::size_t t) { return tiers_[t].store; }
  const OffloadTier& tier(std::size_t t) const { return tiers_[t].store; }
  const OffloadTierOptions& tier_options(std::size_t t) const { return tiers_[t].options; }
  OffloadTierFigures& figures(std::size_t t) { return tiers_[t].figures; }
  const OffloadTierFigures& figures(std::size_t t) const { return tiers_[t].figures; }
  std::uint64_t block_bytes() const { return block_bytes_; }

  // A transfer: the keys it moves, and for a store the GPU blocks it reads
  // (pinned by the engine until it lands); `owner` is the engine's (the
  // request a load is for).
  struct Job {
    std::size_t tier = 0;
    bool load = false;
    std::vector<std::uint64_t> keys;
    std::vector<BlockId> blocks;
    const void* owner = nullptr;
    double issued = 0;
    double done = -1;  // -1: a store not started yet
  };
  // A load of `keys` from tier t (prepare_load done), started at `now`.
  void issue_load(std::size_t t, std::vector<std::uint64_t> keys, const void* owner, double now);
  // A store of `keys` into tier t (prepare_store done), reading `blocks`:
  // started at the next call of start_queued.
  void queue_store(std::size_t t, std::vector<std::uint64_t> keys, std::vector<BlockId> blocks,
                   const void* owner = nullptr);
  // At a step's start (`now`): the queued stores start.
  void start_queued(double now);
  // The jobs landed by `now`, in the order they land, taken out.
  std::vector<Job> take_landed(double now);
  // When the next started job lands; nullopt when none is in flight.
  std::optional<double> next_landing() const;
  // Whether a load in flight reads key (vLLM's _blocks_being_loaded).
  bool being_loaded(std::uint64_t key) const;
  // The jobs in flight or queued (for the invariant checks).
  std::span<const Job> jobs() const { return jobs_; }

 private:
  struct Tier {
    OffloadTierOptions options;
    OffloadTier store;
    OffloadTierFigures figures;
    double out_free = 0;  // GPU -> tier link free from
    double in_free = 0;   // tier -> GPU link free from
  };
  double transfer_s(const Tier& tier, std::size_t blocks) const;

  std::vector<Tier> tiers_;
  std::uint64_t block_bytes_;
  std::vector<Job> jobs_;                                          // in the order issued or queued
  std::unordered_map<std::uint64_t, std::uint32_t> loading_keys_;  // the loads' keys, counted
};

// The report's "offload" section (SPEC 3.7) of an engine's tiers, in lookup
// order: their options and figures from `offload`, and each tier's
// `capacity` and `resident` blocks (the engine's own tiers may differ from
// the connector's). Adds hits_by_tier and hit_rate_with_tiers to the
// report's prefix_cache section, GPU hits from `sim`.
struct TierResidency {
  std::uint32_t capacity = 0;
  std::uint32_t resident = 0;
};
void add_offload_figures(nlohmann::json& report, const OffloadConnector& offload,
                         std::string_view policy, std::span<const TierResidency> residency,
                         const SimTotals& sim);

}  // namespace kvreplay
