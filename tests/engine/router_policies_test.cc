// The table of routing policies (engine/fleet/router_policies.cc): names and
// values both ways, the options each policy reads, and each row's factory
// making a policy that picks one of the instances it is shown. Each policy's
// choices are worked by hand in fleet_test.cc.
#include "engine/fleet/router_policies.h"

#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

namespace {

using namespace kvreplay;

}  // namespace

TEST_CASE("router policies: each row's name parses to its value and back, in table order") {
  std::vector<std::string> names;
  for (const RouterPolicyEntry& entry : router_policy_table()) {
    INFO(entry.name);
    CHECK(parse_router_policy(entry.name) == entry.policy);
    CHECK(to_string(entry.policy) == entry.name);
    CHECK_FALSE(entry.help.empty());
    names.emplace_back(entry.name);
  }
  CHECK(router_policy_names() == names);
  CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
  CHECK_FALSE(parse_router_policy("nearest").has_value());
  CHECK(to_string(RouterOptions{}.policy) == names.front());  // the default: the first row
}

TEST_CASE("router policies: the options each reads, as the command line and report use them") {
  CHECK(router_policies_reading(kReadsView) == "prefix-aware");
  CHECK(router_policies_reading(kReadsApprox) == "prefix-aware");
  CHECK(router_policies_reading(kReadsSeed) == "power-of-two, prefix-aware");
  for (const RouterPolicyEntry& entry : router_policy_table()) {
    INFO(entry.name);
    CHECK(router_reads(entry.policy) == entry.reads);
    CHECK(router_sees_caches(entry.policy) == ((entry.reads & kReadsView) != 0));
    // The approximate view is a view's: only a policy that reads the view reads it.
    if ((entry.reads & kReadsApprox) != 0) CHECK((entry.reads & kReadsView) != 0);
  }
  const std::string help = router_policy_help();
  for (const RouterPolicyEntry& entry : router_policy_table()) {
    CHECK(help.find(std::string(entry.name) + ": " + std::string(entry.help)) != std::string::npos);
  }
}

TEST_CASE(
    "router policies: each row's policy picks one of the instances shown, the precise "
    "view's only from the caller's overlap") {
  for (const RouterPolicyEntry& entry : router_policy_table()) {
    INFO(entry.name);
    for (RouterView view : {RouterView::kPrecise, RouterView::kApproximate}) {
      RouterOptions options;
      options.policy = entry.policy;
      options.view = view;
      auto policy = entry.make(RouterSetup{options, 3, 4, 1024});
      REQUIRE(policy != nullptr);
      CHECK(policy->needs_precise_overlap() ==
            (router_sees_caches(entry.policy) && view == RouterView::kPrecise));
      std::vector<InstanceView> views(3);
      views[1].requests = 2;
      views[2].in_use_blocks = 5;
      for (int k = 0; k < 8; ++k) {
        Request r;
        r.arrival = k;
        r.prompt = 16;
        r.output = 1;
        r.id = std::to_string(k);
        r.hash_block_tokens = 8;
        r.hash_ids = {static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(k + 1)};
        const RouteChoice choice = policy->pick(r, r.arrival, views);
        CHECK(choice.instance < 3);
        CHECK((choice.cost.empty() || choice.cost.size() == 3));
      }
    }
  }
}
