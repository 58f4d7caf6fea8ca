// power-of-two: two distinct instances drawn by a generator seeded with
// --router-seed, the one with fewer requests, ties to the lower index
// (SGLang's router, power_of_two).
#pragma once

#include "engine/fleet/routing_policy.h"

namespace kvreplay {

class PowerOfTwoPolicy final : public RoutingPolicy {
 public:
  explicit PowerOfTwoPolicy(const RouterSetup& setup) : draws_(setup.options.seed) {}
  RouteChoice pick(const Request& request, double now, std::span<InstanceView> views) override;

 private:
  SeededDraws draws_;
};

}  // namespace kvreplay
