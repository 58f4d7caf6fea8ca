// least-kv: the lowest KV usage there (blocks in use ÷ usable blocks, vLLM's
// kv_cache_usage; llm-d's kv-cache-utilization scorer), ties to the fewest
// requests, then to the lowest index. Usage first, then requests: an
// instance's usage changes only as it steps, so requests arriving together
// would otherwise pile onto one.
#pragma once

#include "engine/fleet/routing_policy.h"

namespace kvreplay {

class LeastKvPolicy final : public RoutingPolicy {
 public:
  explicit LeastKvPolicy(const RouterSetup& /*setup*/) {}
  RouteChoice pick(const Request& request, double now, std::span<InstanceView> views) override;
};

}  // namespace kvreplay
