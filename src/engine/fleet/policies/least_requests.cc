#include "engine/fleet/policies/least_requests.h"

namespace kvreplay {

RouteChoice LeastRequestsPolicy::pick(const Request& /*request*/, double /*now*/,
                                      std::span<InstanceView> views) {
  RouteChoice choice;
  for (const InstanceView& v : views) choice.cost.push_back(static_cast<double>(v.requests));
  choice.instance = lowest_cost(choice.cost);
  return choice;
}

}  // namespace kvreplay
