// least-requests: the fewest requests there (waiting, running, and routed but
// not yet admitted), ties to the lowest index; llm-d's queue scorer, SGLang's
// router in its shortest-queue mode.
#pragma once

#include "engine/fleet/routing_policy.h"

namespace kvreplay {

class LeastRequestsPolicy final : public RoutingPolicy {
 public:
  explicit LeastRequestsPolicy(const RouterSetup& /*setup*/) {}
  RouteChoice pick(const Request& request, double now, std::span<InstanceView> views) override;
};

}  // namespace kvreplay
