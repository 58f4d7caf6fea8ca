#include "engine/fleet/policies/power_of_two.h"

#include <algorithm>

namespace kvreplay {

RouteChoice PowerOfTwoPolicy::pick(const Request& /*request*/, double /*now*/,
                                   std::span<InstanceView> views) {
  RouteChoice choice;
  const auto n = static_cast<std::uint32_t>(views.size());
  for (const InstanceView& v : views) choice.cost.push_back(static_cast<double>(v.requests));
  if (n == 1) return choice;
  const auto a = static_cast<std::uint32_t>(draws_.next() % n);
  auto b = static_cast<std::uint32_t>(draws_.next() % (n - 1));
  if (b >= a) ++b;
  const std::uint32_t lo = std::min(a, b);
  const std::uint32_t hi = std::max(a, b);
  choice.instance = views[hi].requests < views[lo].requests ? hi : lo;
  return choice;
}

}  // namespace kvreplay
