// session: sticky by a session key (the native record's "session", else the
// first hash id, else the named prefix, else the request's id) on a
// consistent-hash ring of kRingPoints points per instance.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/fleet/routing_policy.h"

namespace kvreplay {

class SessionPolicy final : public RoutingPolicy {
 public:
  static constexpr std::uint32_t kRingPoints = 64;

  explicit SessionPolicy(const RouterSetup& setup);
  RouteChoice pick(const Request& request, double now, std::span<InstanceView> views) override;

 private:
  std::uint32_t ring_owner(std::uint64_t key) const;

  std::vector<std::pair<std::uint64_t, std::uint32_t>> ring_;  // point, instance; sorted
};

}  // namespace kvreplay
