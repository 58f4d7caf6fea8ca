// The table of routing policies (SPEC 3.6): --router's names, in table order,
// each one's help, the router options it reads and how it is made. A new
// policy is its files in policies/ and one line here (and its value in
// RouterPolicy).
#include <fmt/format.h>

#include <iterator>
#include <memory>
#include <span>

#include "engine/fleet/policies/least_kv.h"
#include "engine/fleet/policies/least_requests.h"
#include "engine/fleet/policies/power_of_two.h"
#include "engine/fleet/policies/prefix_aware.h"
#include "engine/fleet/policies/round_robin.h"
#include "engine/fleet/policies/session.h"
#include "engine/fleet/router_policies.h"

namespace kvreplay {

namespace {

template <class Policy>
std::unique_ptr<RoutingPolicy> make(const RouterSetup& setup) {
  return std::make_unique<Policy>(setup);
}

constexpr RouterPolicyEntry kRouterPolicies[] = {
    {RouterPolicy::kRoundRobin, "round-robin", "the k-th request to instance k mod N", 0,
     make<RoundRobinPolicy>},
    {RouterPolicy::kLeastRequests, "least-requests", "the fewest requests there", 0,
     make<LeastRequestsPolicy>},
    {RouterPolicy::kLeastKv, "least-kv", "the lowest KV usage, then the fewest requests", 0,
     make<LeastKvPolicy>},
    {RouterPolicy::kPowerOfTwo, "power-of-two", "the fewer requests of two drawn (SGLang's)",
     kReadsSeed, make<PowerOfTwoPolicy>},
    {RouterPolicy::kPrefixAware, "prefix-aware", "Dynamo's KV-router cost",
     kReadsOverlapWeight | kReadsTemperature | kReadsView | kReadsApprox | kReadsSeed,
     make<PrefixAwarePolicy>},
    {RouterPolicy::kSession, "session", "sticky by session on a consistent-hash ring", 0,
     make<SessionPolicy>},
};

constexpr bool names_unique() {
  for (std::size_t i = 0; i < std::size(kRouterPolicies); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (kRouterPolicies[i].policy == kRouterPolicies[j].policy ||
          kRouterPolicies[i].name == kRouterPolicies[j].name) {
        return false;
      }
    }
  }
  return true;
}
static_assert(names_unique());

const RouterPolicyEntry& entry_of(RouterPolicy policy) {
  for (const RouterPolicyEntry& entry : kRouterPolicies) {
    if (entry.policy == policy) return entry;
  }
  return kRouterPolicies[0];
}

}  // namespace

std::span<const RouterPolicyEntry> router_policy_table() {
  return kRouterPolicies;
}

std::unique_ptr<RoutingPolicy> make_routing_policy(const RouterSetup& setup) {
  return entry_of(setup.options.policy).make(setup);
}

std::string_view to_string(RouterPolicy policy) {
  for (const RouterPolicyEntry& entry : kRouterPolicies) {
    if (entry.policy == policy) return entry.name;
  }
  return "?";
}

std::optional<RouterPolicy> parse_router_policy(std::string_view name) {
  for (const RouterPolicyEntry& entry : kRouterPolicies) {
    if (entry.name == name) return entry.policy;
  }
  return std::nullopt;
}

std::vector<std::string> router_policy_names() {
  std::vector<std::string> names;
  for (const RouterPolicyEntry& entry : kRouterPolicies) names.emplace_back(entry.name);
  return names;
}

std::uint32_t router_reads(RouterPolicy policy) {
  return entry_of(policy).reads;
}

std::string router_policies_reading(std::uint32_t read) {
  std::string out;
  for (const RouterPolicyEntry& entry : kRouterPolicies) {
    if ((entry.reads & read) == 0) continue;
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

std::string router_policy_help() {
  std::string out;
  for (const RouterPolicyEntry& entry : kRouterPolicies) {
    if (!out.empty()) out += "; ";
    out += fmt::format("{}: {}", entry.name, entry.help);
  }
  return out;
}

}  // namespace kvreplay
