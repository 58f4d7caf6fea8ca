#include "engine/fleet.h"

#include <algorithm>

namespace kvreplay {

Fleet::Fleet(const RunConfig& config, const SimOptions& options, const FleetOptions& fleet)
    : fleet_(fleet),
      page_tokens_(std::max<std::uint32_t>(config.kv.page_tokens, 1)),
      router_(fleet.router, std::max<std::uint32_t>(fleet.replicas, 1), config.kv.page_tokens,
              std::uint64_t{config.kv.pool_blocks} * config.kv.page_tokens) {
  const std::uint32_t n = std::max<std::uint32_t>(fleet.replicas, 1);
  instances_.reserve(n);
  views_.resize(n);
  const std::uint64_t page = std::max<std::uint32_t>(config.kv.page_tokens, 1);
  for (std::uint32_t i = 0; i < n; ++i) {
    instances_.push_back(std::make_unique<Simulator>(config, options));
    instances_.back()->on_request_end = [this, i, page](const RequestTimes& times) {
      views_[i].active_blocks -= (std::uint64_t{times.prompt} + page - 1) / page;
    };
  }
  routed_.resize(n);
}

Fleet::~Fleet() = default;

std::uint32_t Fleet::submit(Request request) {
  const bool precise = router_.needs_precise_overlap();
  for (std::size_t i = 0; i < instances_.size(); ++i) {
    const Simulator& sim = *instances_[i];
    InstanceView& view = views_[i];
    view.requests = sim.waiting_requests() + sim.running_requests() + sim.arriving_requests();
    view.in_use_blocks = sim.in_use_blocks();
    view.usable_blocks = sim.usable_blocks();
    view.cached_tokens = precise ? sim.cached_prompt_tokens(request) : 0;
  }
  const RouteChoice choice = router_.route(request, request.arrival, views_);
  if (on_route) on_route(request, choice);
  views_[choice.instance].active_blocks +=
      (std::uint64_t{request.prompt} + page_tokens_ - 1) / page_tokens_;
  Routed& routed = routed_[choice.instance];
  ++routed.requests;
  routed.prompt_tokens += request.prompt;
  routed.output_tokens += std::uint64_t{request.output} * request.n;
  instances_[choice.instance]->submit(std::move(request));
  return choice.instance;
}

bool Fleet::run_until(double horizon) {
  if (violated_) return false;
  for (std::size_t i = 0; i < instances_.size(); ++i) {
    if (!instances_[i]->run_until(horizon)) {
      violated_ = i;
      return false;
    }
  }
  return true;
}

bool Fleet::finish() {
  if (violated_) return false;
  for (std::size_t i = 0; i < instances_.size(); ++i) {
    if (!instances_[i]->finish()) {
      violated_ = i;
      return false;
    }
  }
  return true;
}

double Fleet::now() const {
  double end = 0;
  for (const auto& sim : instances_) end = std::max(end, sim->now());
  return end;
}

}  // namespace kvreplay
