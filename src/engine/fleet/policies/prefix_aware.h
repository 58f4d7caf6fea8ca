// prefix-aware: NVIDIA Dynamo's KV router cost, as ai-dynamo/dynamo db19bd2a
// has it (DefaultWorkerSelector::select_worker, lib/llm/src/kv_router/
// scheduler.rs, over ActiveSequencesMultiWorker::potential_blocks_and_tokens,
// lib/llm/src/kv_router/sequence.rs):
//   logit = overlap_weight × potential prefill blocks + potential decode blocks
// potential prefill blocks = (new tokens + active tokens) ÷ page, where new
// tokens = prompt - overlap blocks × page (new_tokens: what this request would
// compute there) and active tokens = the new tokens of the requests the router
// sent there that have not yet produced a first token; potential decode
// blocks = the unique prompt blocks of the requests sent there that have not
// finished (active blocks) + the request's full-page blocks not among them
// (new_blocks). The router keeps those accounts itself (ActiveSequences,
// engine/fleet/active_sequences.h): a request enters them as it is routed,
// with the new tokens of the instance chosen (add_request), its tokens leave
// at its first token (mark_prefill_completed) and its blocks at its end
// (free). Temperature 0 takes the lowest logit, ties to the lowest index;
// above 0, a seeded softmax over the logits normalised to [0, 1] (Dynamo's
// softmax_sample), divided by the temperature. The overlap comes from the
// view: precise, the instances' own caches as an index of their KV events
// sees them (Scheduler::cached_prompt_tokens, Dynamo's KvIndexer);
// approximate, a router-side LRU of the hash blocks it sent to each instance,
// of a set capacity and time to live (llm-d's approximate prefix-cache scorer,
// Dynamo without KV events).
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/fleet/active_sequences.h"
#include "engine/fleet/routing_policy.h"

namespace kvreplay {

class PrefixAwarePolicy final : public RoutingPolicy {
 public:
  explicit PrefixAwarePolicy(const RouterSetup& setup);
  bool needs_precise_overlap() const override { return options_.view == RouterView::kPrecise; }
  RouteChoice pick(const Request& request, double now, std::span<InstanceView> views) override;
  void prefill_done(std::uint32_t instance, std::uint64_t tag) override;
  void finished(std::uint32_t instance, std::uint64_t tag) override;
  // The router's account of the requests it sent `instance`.
  const ActiveSequences& active(std::uint32_t instance) const { return active_[instance]; }

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
  std::vector<Lru> lru_;                 // approximate view, per instance
  std::vector<ActiveSequences> active_;  // per instance
};

}  // namespace kvreplay
