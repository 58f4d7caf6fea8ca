// The KV an engine moves beyond its own pool: received from another instance
// (disaggregated prefill) or stored to and loaded from offload tiers. The
// scheduler side of vLLM's KV connector (vllm/distributed/kv_transfer/
// kv_connector/v1/base.py: KVConnectorBase_V1, its scheduler-side methods
// get_num_new_matched_tokens, update_state_after_alloc, request_finished),
// which vLLM hands the scheduler as one object instead of hooks on the
// scheduler itself. An engine with none returns nullptr from
// Scheduler::connector(); the shell asks only through this interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/block_pool.h"
#include "engine/sim_types.h"

namespace kvreplay {

// The KV of a request's prompt received from a prefill instance (receive_kv).
struct ReceivedKv {
  std::vector<BlockId> held;      // local hits and received pages, in page order
  std::uint32_t transferred = 0;  // of them, the pages that cross the link
};

// One offload tier's gauges now (the timeline's columns, the HTML charts).
struct TierGauge {
  OffloadMedium medium{};  // engine/offload/offload_media.h
  std::uint32_t capacity_blocks = 0;
  std::uint32_t resident_blocks = 0;  // slots holding a block, in any state
  std::uint64_t stored = 0;           // cumulative, as the report's
  std::uint64_t loaded = 0;
  std::uint64_t evicted = 0;
};

class KvConnector {
 public:
  virtual ~KvConnector() = default;

  // Disaggregated prefill (engine/fleet/fleet.h): the KV of `request`'s
  // prompt arrives from a prefill instance, as vLLM's NixlConnector receives
  // it (the decode side allocates the blocks its prefix cache lacks before
  // the transfer). For each full prompt page within prompt - 1 tokens (what
  // admission can hit): a page cached here is held (its local hit, as
  // allocate_slots touches it), else a block is taken, cached under the
  // page's key and held; all are held until release_received. Stops at the
  // first page no free or evictable block is left for (the decode instance
  // computes the rest). nullopt where the engine cannot receive KV.
  virtual std::optional<ReceivedKv> receive_kv(const Request& request) {
    (void)request;
    return std::nullopt;
  }
  // The transfer is done: the held blocks become ordinary cached blocks.
  virtual void release_received(std::span<const BlockId> blocks) { (void)blocks; }
  // Whether blocks received with receive_kv are still held for a transfer
  // in flight: until it lands, a step may find nothing to run (their blocks
  // are neither free nor evictable), and that is waiting, not a stall.
  virtual bool receiving() const { return false; }

  // When a transfer the engine waits for lands (a KV load from an offload
  // tier), or nullopt: after a step that ran nothing, the shell moves its
  // clock on to then (or to the next arrival) instead of pricing an empty step.
  virtual std::optional<double> wake_at() const { return std::nullopt; }
  // The run is over (Simulator::finish): the transfers still in flight are
  // done with (the paged engines' offload stores land). False when an
  // invariant failed (the shell's violation says which).
  virtual bool end_run() { return true; }

  // --offload (SPEC 3.7): the tiers in lookup order, each tier's gauges now,
  // and the waiting requests whose KV is being loaded from a tier.
  virtual std::size_t offload_tiers() const { return 0; }
  // REQUIRES: t < offload_tiers().
  virtual TierGauge offload_gauge(std::size_t t) const {
    (void)t;
    return {};
  }
  virtual std::size_t loading_requests() const { return 0; }
};

}  // namespace kvreplay
