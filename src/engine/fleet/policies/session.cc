#include "engine/fleet/policies/session.h"

#include <algorithm>

namespace kvreplay {

SessionPolicy::SessionPolicy(const RouterSetup& setup) {
  for (std::uint32_t i = 0; i < setup.instances; ++i) {
    for (std::uint32_t v = 0; v < kRingPoints; ++v) {
      ring_.emplace_back(splitmix64((std::uint64_t{i} << 32) | v), i);
    }
  }
  std::sort(ring_.begin(), ring_.end());
}

std::uint32_t SessionPolicy::ring_owner(std::uint64_t key) const {
  const std::uint64_t h = splitmix64(key);
  auto it =
      std::lower_bound(ring_.begin(), ring_.end(), std::pair<std::uint64_t, std::uint32_t>{h, 0});
  if (it == ring_.end()) it = ring_.begin();
  return it->second;
}

RouteChoice SessionPolicy::pick(const Request& request, double /*now*/,
                                std::span<InstanceView> /*views*/) {
  std::uint64_t key = 0;
  if (!request.session.empty()) {
    key = text_hash(request.session);
  } else if (!request.hash_ids.empty()) {
    key = request.hash_ids[0];
  } else if (!request.prefix.empty()) {
    key = prefix_key(request.prefix);
  } else {
    key = text_hash(request.id);
  }
  RouteChoice choice;
  choice.instance = ring_owner(key);
  return choice;
}

}  // namespace kvreplay
