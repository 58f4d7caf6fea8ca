// prefix-aware: NVIDIA Dynamo's KV router cost (DefaultWorkerSelector::
// select_worker, lib/kv-router/src/scheduling/selector.rs):
//   logit = overlap_weight × potential prefill blocks + potential decode blocks
// potential prefill blocks = (prompt tokens - overlap blocks × page) ÷ page,
// the prompt the instance would compute; potential decode blocks = the prompt
// blocks of the requests the router sent there that have not finished (its
// active blocks) + the request's blocks not cached there. Temperature 0 takes
// the lowest logit, ties to the lowest index; above 0, a seeded softmax over
// the logits normalised to [0, 1] (Dynamo's softmax_sample), divided by the
// temperature. The overlap comes from the view: precise, the instances' own
// caches as an index of their KV events sees them
// (Scheduler::cached_prompt_tokens, Dynamo's KvIndexer); approximate, a
// router-side LRU of the hash blocks it sent to each instance, of a set
// capacity and time to live (llm-d's approximate prefix-cache scorer, Dynamo
// without KV events).
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/fleet/routing_policy.h"

namespace kvreplay {

class PrefixAwarePolicy final : public RoutingPolicy {
 public:
  explicit PrefixAwarePolicy(const RouterSetup& setup);
  bool needs_precise_overlap() const override { return options_.view == RouterView::kPrecise; }
  RouteChoice pick(const Request& request, double now, std::span<InstanceView> views) override;

  // The approximate view's cached prompt tokens of `request` on `instance` at
  // `now`, whole pages.
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
  // The request's router keys: (key, end token) per hash block or named prefix.
  static std::vector<std::pair<std::uint64_t, std::uint32_t>> keys_of(const Request& request);
  void remember(const Request& request, std::uint32_t instance, double now);

  RouterOptions options_;
  std::uint32_t page_tokens_;
  std::uint64_t approx_capacity_;  // tokens per instance
  SeededDraws draws_;
  std::vector<Lru> lru_;  // approximate view, per instance
};

}  // namespace kvreplay
