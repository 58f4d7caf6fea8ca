// Fleet: N identical instances of an engine behind a router, on one virtual
// clock (SPEC 3.6).
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
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/router.h"
#include "engine/simulator.h"

namespace kvreplay {

struct FleetOptions {
  std::uint32_t replicas = 1;  // --replicas
  RouterOptions router;
};

class Fleet {
 public:
  Fleet(const RunConfig& config, const SimOptions& options, const FleetOptions& fleet);
  ~Fleet();

  std::size_t size() const { return instances_.size(); }
  Simulator& instance(std::size_t i) { return *instances_[i]; }
  const Simulator& instance(std::size_t i) const { return *instances_[i]; }
  const FleetOptions& options() const { return fleet_; }

  // Routes the request and submits it to the chosen instance; returns which.
  // Call run_until(request.arrival) first, so that the router sees every
  // instance as it is when the request arrives.
  std::uint32_t submit(Request request);
  // Every instance's run_until; false when one found an invariant violated
  // (violated_instance() says which).
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

  // Called for every routing decision, before the request is submitted.
  std::function<void(const Request&, const RouteChoice&)> on_route;

 private:
  FleetOptions fleet_;
  std::uint64_t page_tokens_;
  std::vector<std::unique_ptr<Simulator>> instances_;
  Router router_;
  std::vector<InstanceView> views_;
  std::vector<Routed> routed_;
  std::optional<std::size_t> violated_;
};

}  // namespace kvreplay
