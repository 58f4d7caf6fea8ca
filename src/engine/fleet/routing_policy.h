// RoutingPolicy: how a router picks one instance of a fleet for a request
// (SPEC 3.6). One class per policy in policies/, one row per policy in the
// table of router_policies.cc (its name, help, the router options it reads
// and its factory); the Router holds the one its options name.
//
// Contract:
//   - pick() is called once per routed request, in arrival order, with one
//     view per instance (at least one); it returns the instance chosen and,
//     for --router-log, each instance's cost (lower wins; empty for a policy
//     without a score) and the cached blocks it saw (policies that read the
//     caches; else empty).
//   - The same calls in the same order give the same choices: every draw
//     comes from SeededDraws, seeded by --router-seed.
//   - A policy may fill views' cached_tokens itself (the approximate view);
//     it reads them from the caller only when needs_precise_overlap().
//   - prefill_done() and finished() tell it of a request it routed (by its
//     Request::tag): its first token, and its end (finished or given up on)
//     on the instance it was sent to; a policy that keeps no account of its
//     requests ignores them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "core/mix64.h"
#include "engine/fleet/router.h"
#include "engine/key_spaces.h"
#include "formats/requests/request.h"

namespace kvreplay {

// What a policy is made from.
struct RouterSetup {
  const RouterOptions& options;
  std::uint32_t instances = 1;    // >= 1
  std::uint32_t page_tokens = 1;  // >= 1: the engines' page (the overlap's block)
  std::uint64_t pool_tokens = 0;  // one instance's pool in tokens
};

class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;
  // Whether pick() reads InstanceView::cached_tokens from the caller.
  virtual bool needs_precise_overlap() const { return false; }
  virtual RouteChoice pick(const Request& request, double now, std::span<InstanceView> views) = 0;
  virtual void prefill_done(std::uint32_t /*instance*/, std::uint64_t /*tag*/) {}
  virtual void finished(std::uint32_t /*instance*/, std::uint64_t /*tag*/) {}
};

// SplitMix64 draws from --router-seed: the same sequence on every platform.
class SeededDraws {
 public:
  explicit SeededDraws(std::uint64_t seed) : state_(splitmix64(seed)) {}
  std::uint64_t next() {
    state_ += kGoldenGamma;
    return mix64_finalize(state_);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  std::uint64_t state_;
};

// The instance of the lowest cost, ties to the lowest index.
inline std::uint32_t lowest_cost(std::span<const double> cost) {
  std::uint32_t best = 0;
  for (std::uint32_t i = 1; i < cost.size(); ++i) {
    if (cost[i] < cost[best]) best = i;
  }
  return best;
}

// FNV-1a of a string, for keys named by text (prefix names, sessions, ids).
constexpr std::uint64_t text_hash(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// A named prefix's key: above every trace hash id (the request readers refuse
// one past kMaxTraceHashId), so a prefix's key and a hash id never alias.
constexpr std::uint64_t prefix_key(std::string_view prefix) {
  return text_hash(prefix) | kPrefixKeyBase;
}
static_assert(kMaxTraceHashId < kPrefixKeyBase);

}  // namespace kvreplay
