#include "engine/fleet/policies/least_kv.h"

#include <algorithm>

namespace kvreplay {

RouteChoice LeastKvPolicy::pick(const Request& /*request*/, double /*now*/,
                                std::span<InstanceView> views) {
  RouteChoice choice;
  std::uint32_t best = 0;
  for (std::uint32_t i = 0; i < views.size(); ++i) {
    const InstanceView& v = views[i];
    choice.cost.push_back(static_cast<double>(v.in_use_blocks) /
                          static_cast<double>(std::max<std::uint64_t>(v.usable_blocks, 1)));
    if (i > 0 && (choice.cost[i] < choice.cost[best] ||
                  (choice.cost[i] == choice.cost[best] && v.requests < views[best].requests))) {
      best = i;
    }
  }
  choice.instance = best;
  return choice;
}

}  // namespace kvreplay
