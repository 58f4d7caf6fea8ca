// Fleet: instances of an engine behind a router, on one virtual clock
// (SPEC 3.6).
//
// Each instance is a Simulator of its own (its engine, pool, scheduler,
// prefix cache and cost model: TP x PP GPUs). A request is routed when the
// clock reaches its arrival: every instance has run its steps up to that
// time (run_until), the router reads what each holds (requests, blocks in
// use, cached prefix) and the request joins the chosen instance's arrivals,
// to be added at that instance's next step boundary exactly as a lone
// Simulator adds it. An instance never sees another's requests, so under
// round-robin each instance's run is that of a Simulator given its sub-trace
// alone (a test compares every figure).
//
// Disaggregated prefill (prefill and decode instances), after vLLM's
// disaggregated serving with the NixlConnector: the router sends a request's
// prompt to a prefill instance, which computes it and its first token (the
// proxy's max_tokens = 1); a request the decode side can never run is
// skipped there on admission, before its prefill. When that step ends, a
// decode instance is chosen (least KV usage). The transfer starts once that
// instance has no request waiting and room for the prompt (free and
// evictable blocks): the decode side admits in queue order and allocates
// before the KV moves. Transfers start in prefill order; a waiting one looks
// again when that instance's step ends or a transfer to it lands. It then
// takes blocks for the prompt pages its own prefix cache lacks
// (Scheduler::receive_kv) and holds them, with its own hits, while the KV
// crosses the link: latency + bytes / bandwidth, bytes = blocks x block
// bytes. The instance, told when it lands (Simulator::expect_kv), waits for
// it without stepping when it has nothing to run. Pages the trace names no
// hash for are keyed there by ids from a counter in kvreplay's reserved
// range (engine/key_spaces.h), so that none alias. The request arrives at
// the decode instance with those pages cached and most recently used;
// admission finds them and computes only the tail no full page holds. The
// decode instance produces every output token, the first one included (the
// proxy streams its tokens), so TTFT as the user sees it is prefill + wait +
// transfer + the first decode step. Deviations, each documented in the
// README: the held pages are released (kept cached) when the KV lands rather
// than when the request is admitted; a page that finds no free or evictable
// block is computed on the decode side; the prefill instance frees its
// blocks when its step ends (its prompt pages stay cached) rather than when
// the transfer completes.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/fleet/router.h"
#include "engine/latency.h"
#include "engine/simulator.h"

namespace kvreplay {

struct FleetOptions {
  std::uint32_t replicas = 1;  // --replicas: instances that prefill and decode
  // --prefill-replicas and --decode-replicas, both above 0: disaggregated
  // (replicas is then ignored).
  std::uint32_t prefill_replicas = 0;
  std::uint32_t decode_replicas = 0;
  // The link a request's KV crosses from prefill to decode instance:
  // --kv-transfer-gbps (GB/s) and --kv-transfer-latency-us.
  double kv_transfer_gbps = 50.0;
  double kv_transfer_latency_us = 20.0;
  RouterOptions router;
  bool disaggregated() const { return prefill_replicas > 0 && decode_replicas > 0; }
  // Whether the router has a choice to make: more than one instance takes
  // the trace's requests (of one prefill instance, the router picks nothing).
  bool routed() const { return disaggregated() ? prefill_replicas > 1 : instances() > 1; }
  std::uint32_t instances() const {
    return disaggregated() ? prefill_replicas + decode_replicas
                           : std::max<std::uint32_t>(replicas, 1);
  }
};

enum class InstanceRole : std::uint8_t { kMixed, kPrefill, kDecode };
std::string_view to_string(InstanceRole role);

class Fleet {
 public:
  Fleet(const RunConfig& config, const SimOptions& options, const FleetOptions& fleet);
  ~Fleet();

  std::size_t size() const { return instances_.size(); }
  Simulator& instance(std::size_t i) { return *instances_[i]; }
  const Simulator& instance(std::size_t i) const { return *instances_[i]; }
  InstanceRole role(std::size_t i) const { return roles_[i]; }
  const FleetOptions& options() const { return fleet_; }

  // Routes the request and submits it to the chosen instance (disaggregated:
  // a prefill instance); returns which. Call run_until(request.arrival)
  // first, so that the router sees every instance as it is when the request
  // arrives.
  std::uint32_t submit(Request request);
  // Every instance's run_until; false when one found an invariant violated
  // (violated_instance() says which). Disaggregated: the prefill instances
  // first, then each request's transfer and decode in time order.
  bool run_until(double horizon);
  // Every instance's end-of-run check.
  bool finish();
  const std::optional<std::size_t>& violated_instance() const { return violated_; }

  // What the router sent each instance.
  struct Routed {
    std::uint64_t requests = 0;
    std::uint64_t prompt_tokens = 0;
    std::uint64_t output_tokens = 0;  // the trace's, times n
  };
  const std::vector<Routed>& routed() const { return routed_; }
  // The virtual time the fleet ends: the last instance's.
  double now() const;
  // The earliest time at which a request in flight can still end or move:
  // the clock of the instances with work, and the next transfer event; +inf
  // when nothing is in flight. A request end at or before it is final: no
  // step still to run can end before it (a closed loop's clients, app/
  // load_generator.h).
  double frontier() const;

  // Disaggregated: the KV moved from prefill to decode instances.
  struct Transfers {
    std::uint64_t requests = 0;
    std::uint64_t blocks = 0;
    std::uint64_t bytes = 0;
    LatencyDistribution ms;  // per request: latency + bytes / bandwidth
    // Requests whose transfer waited for room on the decode side, and per
    // request how long from the end of its prefill to its transfer's start.
    std::uint64_t waited = 0;
    LatencyDistribution wait_ms;
  };
  const Transfers& transfers() const { return transfers_; }
  // The arrival of the request a decode instance's request stands for
  // (its tag's), as the user sent it; nullopt for a tag not in flight.
  std::optional<double> user_arrival(std::uint64_t tag) const;
  // The request as the user sent it, for a tag in flight; else nullptr.
  const Request* user_request(std::uint64_t tag) const {
    auto it = in_flight_.find(tag);
    return it == in_flight_.end() ? nullptr : &it->second.request;
  }

  // Called for every routing decision, before the request is submitted
  // (disaggregated: the prefill side's).
  std::function<void(const Request&, const RouteChoice&)> on_route;
  // Called when a request as the user sent it ends: finished (its last
  // token, on a decode instance when disaggregated) or given up on, anywhere
  // in the fleet. Times as the user sees them: its own arrival, output and
  // samples; `finished` < 0 unless it finished. `end`: its last token's
  // time, or the clock of the instance that gave up on it.
  std::function<void(const RequestTimes&, double end)> on_request_end;

 private:
  struct Pending {
    // In this order at one time: a landing frees room before a transfer
    // looks for it.
    enum Kind : std::uint8_t { kArrive, kReady, kRetry };
    double time = 0;
    Kind kind = kReady;  // the KV has landed; a prefill is done; look again for room
    std::uint64_t tag = 0;
    std::uint32_t decode = 0;  // kArrive: where
    bool operator>(const Pending& other) const {
      if (time != other.time) return time > other.time;
      if (kind != other.kind) return kind > other.kind;
      return tag > other.tag;
    }
  };
  struct InFlight {
    Request request;  // as the user sent it
    std::uint32_t decode = 0;
    double ready = 0;           // when its prefill ended
    std::vector<BlockId> held;  // on the decode instance, while the KV crosses
    // The first of its own decode-side page keys (assign_keys), one a page
    // its trace names no hash for.
    std::uint64_t own_keys = 0;
  };
  void fill_views(std::size_t first, std::size_t count, const Request& request, bool precise);
  bool run_instances(std::size_t first, std::size_t count, double horizon);
  void prefill_done(const RequestTimes& times);
  // Starts the transfer of the request `tag` at time `now`, or returns when
  // to look again (its decode instance has no room yet).
  std::optional<double> start_transfer(std::uint64_t tag, double now);
  // Starts the ready transfers in order until one must wait.
  void start_transfers(double now);
  // The request as its decode instance receives it: its prompt keyed page by
  // page (hash ids from assign_keys where the trace names none), the same
  // for every call.
  Request decode_copy(const InFlight& flight) const;
  // Takes the decode-side keys of a request in flight: its own pages', and a
  // named prefix's the first time it needs them.
  void assign_keys(InFlight& flight);
  // `count` consecutive ids from the fleet's key space; the first of them.
  std::uint64_t take_keys(std::uint64_t count);

  FleetOptions fleet_;
  std::uint64_t page_tokens_;
  std::uint64_t block_bytes_ = 0;
  std::vector<std::unique_ptr<Simulator>> instances_;
  std::vector<InstanceRole> roles_;
  std::uint32_t prefill_count_;  // instances [0, prefill_count_) take arrivals
  Router router_;
  std::optional<Router> decode_router_;
  std::vector<InstanceView> views_;
  std::vector<Routed> routed_;
  std::optional<std::size_t> violated_;
  std::uint64_t next_tag_ = 1;
  std::uint64_t next_key_ = 0;  // the next decode-side page key (kFleetKeyBase up)
  // Per named prefix, the decode-side keys of its pages, in order.
  std::unordered_map<std::string, std::vector<std::uint64_t>> prefix_keys_;
  std::unordered_map<std::uint64_t, InFlight> in_flight_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> pending_;
  std::deque<std::uint64_t> ready_;  // prefills done, transfers not started, in order
  bool retry_pending_ = false;       // a kRetry event is queued
  // Per decode instance, when the transfers to it land.
  std::vector<std::multiset<double>> landings_;
  Transfers transfers_;
};

}  // namespace kvreplay
