// Router: which instance of a fleet a request goes to (SPEC 3.6).
//
// Policies, each after the router it imitates:
//   round-robin     the k-th request in arrival order to instance k mod N;
//   least-requests  the fewest requests there (waiting, running, and routed
//                   but not yet admitted); llm-d's queue scorer, SGLang's
//                   router in its shortest-queue mode;
//   least-kv        the lowest KV usage there (blocks in use ÷ usable blocks,
//                   vLLM's kv_cache_usage; llm-d's kv-cache-utilization
//                   scorer), ties to the fewest requests;
//   power-of-two    two distinct instances drawn by a seeded generator, the
//                   one with fewer requests (SGLang's router, power_of_two);
//   prefix-aware    NVIDIA Dynamo's KV router cost
//                   (DefaultWorkerSelector::select_worker,
//                   lib/kv-router/src/scheduling/selector.rs):
//                     logit = overlap_weight × potential prefill blocks
//                             + potential decode blocks
//                   potential prefill blocks = (prompt tokens - overlap blocks
//                   × page) ÷ page, the prompt the instance would compute;
//                   potential decode blocks = the prompt blocks of the
//                   requests the router sent there that have not finished
//                   (its active blocks) + the request's blocks not cached
//                   there. Temperature 0 takes the
//                   lowest logit, ties to the lowest index; above 0, a seeded
//                   softmax over the logits normalised to [0, 1] (Dynamo's
//                   softmax_sample), divided by the temperature. The overlap
//                   comes from the view: precise, the instances' own caches
//                   as an index of their KV events sees them
//                   (Scheduler::cached_prompt_tokens, Dynamo's KvIndexer);
//                   approximate, a router-side LRU of the hash blocks it sent
//                   to each instance, of a set capacity and time to live
//                   (llm-d's approximate prefix-cache scorer, Dynamo without
//                   KV events);
//   session         sticky by a session key (the native record's "session",
//                   else the first hash id, else the named prefix, else the
//                   request's id) on a consistent-hash
//                   ring of kRingPoints points per instance.
// Deterministic: the same requests and views give the same choices.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
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
  // Prompt blocks of the requests routed there and not finished, as the
  // router counts them (Dynamo's active blocks: added when a request is
  // routed, taken out when it completes).
  std::uint64_t active_blocks = 0;
  std::uint64_t usable_blocks = 1;  // the pool less the null block
  std::uint32_t cached_tokens = 0;  // prompt tokens cached there (the view's)
};

// One routing decision, for --router-log.
struct RouteChoice {
  std::uint32_t instance = 0;
  std::vector<std::uint32_t> cached_blocks;  // per instance (prefix-aware; else empty)
  std::vector<double> cost;                  // per instance: the policy's score, lower wins
};

class Router {
 public:
  static constexpr std::uint32_t kRingPoints = 64;

  // `instances` >= 1; `page_tokens`: the engines' page (the overlap's block);
  // `pool_tokens`: one instance's pool in tokens (the approximate view's
  // default capacity).
  Router(const RouterOptions& options, std::uint32_t instances, std::uint32_t page_tokens,
         std::uint64_t pool_tokens);

  const RouterOptions& options() const { return options_; }
  // Whether route() reads InstanceView::cached_tokens from the instances
  // (prefix-aware under the precise view): the caller fills it then.
  bool needs_precise_overlap() const {
    return options_.policy == RouterPolicy::kPrefixAware && options_.view == RouterView::kPrecise;
  }
  // Chooses the instance for `request` arriving at `now`; under the
  // approximate view fills `views`' cached_tokens first, and remembers the
  // request's blocks on the instance chosen.
  RouteChoice route(const Request& request, double now, std::span<InstanceView> views);

  // The approximate view's cached prompt tokens of `request` on `instance` at
  // `now` (tests).
  std::uint32_t approximate_tokens(const Request& request, std::uint32_t instance,
                                   double now) const;

 private:
  struct Entry {
    std::uint64_t key = 0;
    double routed = 0;         // when a request naming it was last sent there
    std::uint32_t tokens = 0;  // the tokens the key names
  };
  struct Lru {
    std::list<Entry> order;  // front: most recently routed
    std::unordered_map<std::uint64_t, std::list<Entry>::iterator> at;
    std::uint64_t tokens = 0;
  };
  std::uint64_t next_random();
  double uniform() { return static_cast<double>(next_random() >> 11) * 0x1.0p-53; }
  // The request's router keys: (key, end token) per hash block or named prefix.
  static std::vector<std::pair<std::uint64_t, std::uint32_t>> keys_of(const Request& request);
  void remember(const Request& request, std::uint32_t instance, double now);
  std::uint32_t ring_owner(std::uint64_t key) const;

  RouterOptions options_;
  std::uint32_t instances_;
  std::uint32_t page_tokens_;
  std::uint64_t approx_capacity_;  // tokens per instance
  std::uint64_t routed_ = 0;       // requests routed (round-robin's k)
  std::uint64_t rng_;
  std::vector<Lru> lru_;                                       // approximate view, per instance
  std::vector<std::pair<std::uint64_t, std::uint32_t>> ring_;  // session: point, instance
};

}  // namespace kvreplay
