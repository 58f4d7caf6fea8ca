// round-robin: the k-th request in arrival order to instance k mod N.
#pragma once

#include <cstdint>

#include "engine/fleet/routing_policy.h"

namespace kvreplay {

class RoundRobinPolicy final : public RoutingPolicy {
 public:
  explicit RoundRobinPolicy(const RouterSetup& /*setup*/) {}
  RouteChoice pick(const Request& request, double now, std::span<InstanceView> views) override;

 private:
  std::uint64_t routed_ = 0;  // requests routed so far: k
};

}  // namespace kvreplay
