// Router: which instance of a fleet a request goes to (SPEC 3.6).
//
// The policies are the table of router_policies.cc: each row a policy's name
// (--router's), a line of help, the router options it reads and its factory;
// each policy a RoutingPolicy (routing_policy.h) in a file of its own under
// policies/. Outside src/engine/fleet/ no code names a value of RouterPolicy:
// it asks the table (router_reads, router_sees_caches, router_policy_help).
// Deterministic: the same requests and views give the same choices.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/requests/request.h"

namespace kvreplay {

enum class RouterPolicy : std::uint8_t {
  kRoundRobin,
  kLeastRequests,
  kLeastKv,
  kPowerOfTwo,
  kPrefixAware,
  kSession
};
std::string_view to_string(RouterPolicy policy);
std::optional<RouterPolicy> parse_router_policy(std::string_view name);
std::vector<std::string> router_policy_names();

enum class RouterView : std::uint8_t { kPrecise, kApproximate };
std::string_view to_string(RouterView view);
std::optional<RouterView> parse_router_view(std::string_view name);
std::vector<std::string> router_view_names();

struct RouterOptions {
  RouterPolicy policy = RouterPolicy::kRoundRobin;
  double overlap_weight = 1.0;  // --router-overlap-weight (Dynamo's kv_overlap_score_weight)
  double temperature = 0.0;     // --router-temperature
  RouterView view = RouterView::kPrecise;
  std::uint64_t seed = 0;  // --router-seed: power-of-two's draws, the softmax's
  // The approximate view, per instance: the pages of prompt it remembers
  // (0: as many as the instance's pool holds) and how long an entry lives.
  std::uint64_t approx_blocks = 0;
  double approx_ttl_s = 120.0;
};

// What the router sees of one instance when a request arrives.
struct InstanceView {
  std::uint64_t requests = 0;       // waiting + running + routed, not yet admitted
  std::uint64_t in_use_blocks = 0;  // referenced by a request's table
  std::uint64_t usable_blocks = 1;  // the pool less the null block
  std::uint32_t cached_tokens = 0;  // prompt tokens cached there (the view's)
};

// One routing decision, for --router-log.
struct RouteChoice {
  std::uint32_t instance = 0;
  std::vector<std::uint32_t> cached_blocks;  // per instance (prefix-aware; else empty)
  std::vector<double> cost;                  // per instance: the policy's score, lower wins
};

class RoutingPolicy;

// The router options a policy reads (its row's `reads`).
enum RouterRead : std::uint32_t {
  kReadsOverlapWeight = 1u << 0,  // --router-overlap-weight
  kReadsTemperature = 1u << 1,    // --router-temperature (a softmax above 0)
  kReadsView = 1u << 2,           // --router-view: it reads the instances' caches
  kReadsApprox = 1u << 3,         // --router-approx-blocks, --router-approx-ttl-s
  kReadsSeed = 1u << 4,           // --router-seed (with a temperature: above 0 only)
};
std::uint32_t router_reads(RouterPolicy policy);
// Whether the policy reads the instances' caches (--router-log's cached blocks).
inline bool router_sees_caches(RouterPolicy policy) {
  return (router_reads(policy) & kReadsView) != 0;
}
// The policies that read `read`, comma-separated ("prefix-aware").
std::string router_policies_reading(std::uint32_t read);
// --router's help: each policy's name and help, in table order.
std::string router_policy_help();

class Router {
 public:
  // `instances` >= 1; `page_tokens`: the engines' page (the overlap's block);
  // `pool_tokens`: one instance's pool in tokens (the approximate view's
  // default capacity).
  Router(const RouterOptions& options, std::uint32_t instances, std::uint32_t page_tokens,
         std::uint64_t pool_tokens);
  ~Router();
  Router(Router&&) noexcept;
  Router& operator=(Router&&) noexcept;

  const RouterOptions& options() const { return options_; }
  // Whether route() reads InstanceView::cached_tokens from the instances
  // (prefix-aware under the precise view): the caller fills it then.
  bool needs_precise_overlap() const;
  // Chooses the instance for `request` arriving at `now` (the policy may fill
  // `views`' cached_tokens itself: the approximate view).
  RouteChoice route(const Request& request, double now, std::span<InstanceView> views);
  // The request `tag` routed to `instance` produced its first token there
  // (Dynamo's mark_prefill_completed), or ended there (free).
  void prefill_done(std::uint32_t instance, std::uint64_t tag);
  void finished(std::uint32_t instance, std::uint64_t tag);

 private:
  RouterOptions options_;
  std::unique_ptr<RoutingPolicy> policy_;
};

}  // namespace kvreplay
