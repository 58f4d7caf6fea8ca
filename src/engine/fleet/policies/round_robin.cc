#include "engine/fleet/policies/round_robin.h"

namespace kvreplay {

RouteChoice RoundRobinPolicy::pick(const Request& /*request*/, double /*now*/,
                                   std::span<InstanceView> views) {
  RouteChoice choice;
  choice.instance = static_cast<std::uint32_t>(routed_++ % views.size());
  return choice;
}

}  // namespace kvreplay
