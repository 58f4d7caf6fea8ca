#include "engine/fleet/router.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/enum_names.h"
#include "core/mix64.h"
#include "engine/key_spaces.h"

namespace kvreplay {

namespace {

constexpr EnumName<RouterPolicy> kPolicyNames[] = {
    {RouterPolicy::kRoundRobin, "round-robin"},   {RouterPolicy::kLeastRequests, "least-requests"},
    {RouterPolicy::kLeastKv, "least-kv"},         {RouterPolicy::kPowerOfTwo, "power-of-two"},
    {RouterPolicy::kPrefixAware, "prefix-aware"}, {RouterPolicy::kSession, "session"},
};
static_assert(enum_names_unique(kPolicyNames));

constexpr EnumName<RouterView> kViewNames[] = {
    {RouterView::kPrecise, "precise"},
    {RouterView::kApproximate, "approximate"},
};
static_assert(enum_names_unique(kViewNames));

// SplitMix64's output: a fixed, well-mixed 64-bit hash.
std::uint64_t mix(std::uint64_t x) {
  return splitmix64(x);
}

// FNV-1a of a string, for keys named by text (prefix names, request ids).
std::uint64_t text_hash(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// A named prefix's key: above every trace hash id (the request readers refuse
// one past kMaxTraceHashId), so a prefix's key and a hash id never alias.
constexpr std::uint64_t kPrefixKeyBit = kPrefixKeyBase;
static_assert(kMaxTraceHashId < kPrefixKeyBit);

}  // namespace

std::string_view to_string(RouterPolicy policy) {
  return enum_name(kPolicyNames, policy);
}
std::optional<RouterPolicy> parse_router_policy(std::string_view name) {
  return enum_parse(kPolicyNames, name);
}
std::vector<std::string> router_policy_names() {
  return enum_names(kPolicyNames);
}
std::string_view to_string(RouterView view) {
  return enum_name(kViewNames, view);
}
std::optional<RouterView> parse_router_view(std::string_view name) {
  return enum_parse(kViewNames, name);
}
std::vector<std::string> router_view_names() {
  return enum_names(kViewNames);
}

Router::Router(const RouterOptions& options, std::uint32_t instances, std::uint32_t page_tokens,
               std::uint64_t pool_tokens)
    : options_(options),
      instances_(std::max<std::uint32_t>(instances, 1)),
      page_tokens_(std::max<std::uint32_t>(page_tokens, 1)),
      approx_capacity_(options.approx_blocks != 0 ? options.approx_blocks * page_tokens_
                                                  : pool_tokens),
      rng_(mix(options.seed)),
      lru_(instances_) {
  if (options_.policy == RouterPolicy::kSession) {
    for (std::uint32_t i = 0; i < instances_; ++i) {
      for (std::uint32_t v = 0; v < kRingPoints; ++v) {
        ring_.emplace_back(mix((std::uint64_t{i} << 32) | v), i);
      }
    }
    std::sort(ring_.begin(), ring_.end());
  }
}

std::uint64_t Router::next_random() {
  // SplitMix64: the same sequence on every platform.
  rng_ += kGoldenGamma;
  return mix64_finalize(rng_);
}

std::vector<std::pair<std::uint64_t, std::uint32_t>> Router::keys_of(const Request& request) {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> keys;
  if (!request.hash_ids.empty()) {
    const std::uint64_t block = std::max<std::uint32_t>(request.hash_block_tokens, 1);
    for (std::size_t k = 0; k < request.hash_ids.size() && k * block < request.prompt; ++k) {
      const auto end =
          static_cast<std::uint32_t>(std::min<std::uint64_t>((k + 1) * block, request.prompt));
      keys.emplace_back(request.hash_ids[k], end);
    }
  } else if (!request.prefix.empty() && request.prefix_tokens > 0) {
    keys.emplace_back(text_hash(request.prefix) | kPrefixKeyBit,
                      std::min(request.prefix_tokens, request.prompt));
  }
  return keys;
}

std::uint32_t Router::approximate_tokens(const Request& request, std::uint32_t instance,
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

void Router::remember(const Request& request, std::uint32_t instance, double now) {
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

std::uint32_t Router::ring_owner(std::uint64_t key) const {
  const std::uint64_t h = mix(key);
  auto it =
      std::lower_bound(ring_.begin(), ring_.end(), std::pair<std::uint64_t, std::uint32_t>{h, 0});
  if (it == ring_.end()) it = ring_.begin();
  return it->second;
}

RouteChoice Router::route(const Request& request, double now, std::span<InstanceView> views) {
  RouteChoice choice;
  const auto n = static_cast<std::uint32_t>(views.size());
  const std::uint64_t k = routed_++;
  // The lowest cost, ties to the lowest index.
  auto argmin = [&choice, n] {
    std::uint32_t best = 0;
    for (std::uint32_t i = 1; i < n; ++i) {
      if (choice.cost[i] < choice.cost[best]) best = i;
    }
    return best;
  };
  switch (options_.policy) {
    case RouterPolicy::kRoundRobin: choice.instance = static_cast<std::uint32_t>(k % n); break;
    case RouterPolicy::kLeastRequests:
      for (const InstanceView& v : views) choice.cost.push_back(static_cast<double>(v.requests));
      choice.instance = argmin();
      break;
    case RouterPolicy::kLeastKv: {
      // Usage first, then requests: an instance's usage changes only as it
      // steps, so requests arriving together would otherwise pile onto one.
      std::uint32_t best = 0;
      for (std::uint32_t i = 0; i < n; ++i) {
        const InstanceView& v = views[i];
        choice.cost.push_back(static_cast<double>(v.in_use_blocks) /
                              static_cast<double>(std::max<std::uint64_t>(v.usable_blocks, 1)));
        if (i > 0 && (choice.cost[i] < choice.cost[best] ||
                      (choice.cost[i] == choice.cost[best] && v.requests < views[best].requests))) {
          best = i;
        }
      }
      choice.instance = best;
      break;
    }
    case RouterPolicy::kPowerOfTwo: {
      for (const InstanceView& v : views) choice.cost.push_back(static_cast<double>(v.requests));
      if (n == 1) break;
      const auto a = static_cast<std::uint32_t>(next_random() % n);
      auto b = static_cast<std::uint32_t>(next_random() % (n - 1));
      if (b >= a) ++b;
      const std::uint32_t lo = std::min(a, b);
      const std::uint32_t hi = std::max(a, b);
      choice.instance = views[hi].requests < views[lo].requests ? hi : lo;
      break;
    }
    case RouterPolicy::kPrefixAware: {
      const double page = page_tokens_;
      const std::uint64_t request_blocks =
          (std::uint64_t{request.prompt} + page_tokens_ - 1) / page_tokens_;
      for (std::uint32_t i = 0; i < n; ++i) {
        InstanceView& v = views[i];
        if (options_.view == RouterView::kApproximate) {
          v.cached_tokens = approximate_tokens(request, i, now);
        }
        const std::uint32_t overlap = v.cached_tokens / page_tokens_;
        choice.cached_blocks.push_back(overlap);
        const double prefill_blocks =
            static_cast<double>(request.prompt - std::min(request.prompt, overlap * page_tokens_)) /
            page;
        const double decode_blocks =
            static_cast<double>(v.active_blocks) +
            static_cast<double>(request_blocks - std::min<std::uint64_t>(request_blocks, overlap));
        choice.cost.push_back(options_.overlap_weight * prefill_blocks + decode_blocks);
      }
      if (options_.temperature <= 0.0) {
        choice.instance = argmin();
        break;
      }
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
      double pick = uniform() * total;
      choice.instance = n - 1;
      for (std::uint32_t i = 0; i < n; ++i) {
        if (pick < weight[i]) {
          choice.instance = i;
          break;
        }
        pick -= weight[i];
      }
      break;
    }
    case RouterPolicy::kSession: {
      std::uint64_t key = 0;
      if (!request.session.empty()) {
        key = text_hash(request.session);
      } else if (!request.hash_ids.empty()) {
        key = request.hash_ids[0];
      } else if (!request.prefix.empty()) {
        key = text_hash(request.prefix) | kPrefixKeyBit;
      } else {
        key = text_hash(request.id);
      }
      choice.instance = ring_owner(key);
      break;
    }
  }
  if (options_.policy == RouterPolicy::kPrefixAware && options_.view == RouterView::kApproximate) {
    remember(request, choice.instance, now);
  }
  return choice;
}

}  // namespace kvreplay
