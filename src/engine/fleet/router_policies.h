// The table of routing policies (router_policies.cc): one row per policy.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "engine/fleet/routing_policy.h"

namespace kvreplay {

struct RouterPolicyEntry {
  RouterPolicy policy;
  std::string_view name;  // --router's, the report's
  std::string_view help;  // one line, for --router's help
  std::uint32_t reads;    // RouterRead bits: the router options it reads
  std::unique_ptr<RoutingPolicy> (*make)(const RouterSetup& setup);
};

std::span<const RouterPolicyEntry> router_policy_table();
// The policy `setup.options.policy` names.
std::unique_ptr<RoutingPolicy> make_routing_policy(const RouterSetup& setup);

}  // namespace kvreplay
