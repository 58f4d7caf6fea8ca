#include "engine/fleet/policies/prefix_aware.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kvreplay {

PrefixAwarePolicy::PrefixAwarePolicy(const RouterSetup& setup)
    : options_(setup.options),
      page_tokens_(setup.page_tokens),
      approx_capacity_(options_.approx_blocks != 0 ? options_.approx_blocks * page_tokens_
                                                   : setup.pool_tokens),
      draws_(options_.seed),
      lru_(setup.instances),
      active_(setup.instances) {}

std::vector<std::pair<std::uint64_t, std::uint32_t>> PrefixAwarePolicy::keys_of(
    const Request& request) {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> keys;
  if (!request.hash_ids.empty()) {
    const std::uint64_t block = std::max<std::uint32_t>(request.hash_block_tokens, 1);
    for (std::size_t k = 0; k < request.hash_ids.size() && k * block < request.prompt; ++k) {
      const auto end =
          static_cast<std::uint32_t>(std::min<std::uint64_t>((k + 1) * block, request.prompt));
      keys.emplace_back(request.hash_ids[k], end);
    }
  } else if (!request.prefix.empty() && request.prefix_tokens > 0) {
    keys.emplace_back(prefix_key(request.prefix), std::min(request.prefix_tokens, request.prompt));
  }
  return keys;
}

std::uint32_t PrefixAwarePolicy::approximate_tokens(const Request& request, std::uint32_t instance,
                                                    double now) const {
  const Lru& lru = lru_[instance];
  std::uint32_t tokens = 0;
  for (const auto& [key, end] : keys_of(request)) {
    auto it = lru.at.find(key);
    if (it == lru.at.end() || now - it->second->routed > options_.approx_ttl_s) break;
    tokens = end;
  }
  return tokens / page_tokens_ * page_tokens_;
}

void PrefixAwarePolicy::remember(const Request& request, std::uint32_t instance, double now) {
  Lru& lru = lru_[instance];
  std::uint32_t start = 0;
  for (const auto& [key, end] : keys_of(request)) {
    const std::uint32_t tokens = end - start;
    start = end;
    auto it = lru.at.find(key);
    if (it != lru.at.end()) {
      it->second->routed = now;
      lru.order.splice(lru.order.begin(), lru.order, it->second);
      continue;
    }
    lru.order.push_front(Entry{key, now, tokens});
    lru.at.emplace(key, lru.order.begin());
    lru.tokens += tokens;
  }
  while (lru.tokens > approx_capacity_ && !lru.order.empty()) {
    lru.tokens -= lru.order.back().tokens;
    lru.at.erase(lru.order.back().key);
    lru.order.pop_back();
  }
}

RouteChoice PrefixAwarePolicy::pick(const Request& request, double now,
                                    std::span<InstanceView> views) {
  RouteChoice choice;
  const auto n = static_cast<std::uint32_t>(views.size());
  const bool approximate = options_.view == RouterView::kApproximate;
  const double page = page_tokens_;
  RouterBlocks blocks = router_blocks(request, page_tokens_);
  std::vector<std::uint64_t> new_tokens(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    InstanceView& v = views[i];
    if (approximate) v.cached_tokens = approximate_tokens(request, i, now);
    const std::uint32_t overlap = v.cached_tokens / page_tokens_;
    choice.cached_blocks.push_back(overlap);
    const ActiveSequences& active = active_[i];
    // new_tokens: the prompt less its cached blocks (0 when they cover it).
    new_tokens[i] = request.prompt -
                    std::min<std::uint64_t>(request.prompt, std::uint64_t{overlap} * page_tokens_);
    const double prefill_blocks =
        static_cast<double>(new_tokens[i] + active.active_tokens()) / page;
    const double decode_blocks =
        static_cast<double>(active.active_blocks() + active.new_blocks(blocks));
    choice.cost.push_back(options_.overlap_weight * prefill_blocks + decode_blocks);
  }
  if (options_.temperature <= 0.0) {
    choice.instance = lowest_cost(choice.cost);
  } else {
    // softmax_sample: logits normalised to [0, 1], lower better.
    const auto [lo, hi] = std::minmax_element(choice.cost.begin(), choice.cost.end());
    const double range = *hi - *lo;
    std::vector<double> weight(n);
    double total = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      const double normalised = range > 0 ? (choice.cost[i] - *lo) / range : 0.0;
      weight[i] = std::exp(-normalised / options_.temperature);
      total += weight[i];
    }
    double pick = draws_.uniform() * total;
    choice.instance = n - 1;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (pick < weight[i]) {
        choice.instance = i;
        break;
      }
      pick -= weight[i];
    }
  }
  if (approximate) remember(request, choice.instance, now);
  active_[choice.instance].add(request.tag, std::move(blocks), new_tokens[choice.instance]);
  return choice;
}

void PrefixAwarePolicy::prefill_done(std::uint32_t instance, std::uint64_t tag) {
  active_[instance].prefill_done(tag);
}

void PrefixAwarePolicy::finished(std::uint32_t instance, std::uint64_t tag) {
  active_[instance].free(tag);
}

}  // namespace kvreplay
