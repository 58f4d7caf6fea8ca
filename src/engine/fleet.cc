#include "engine/fleet.h"

#include <algorithm>
#include <cassert>

#include "core/enum_names.h"

namespace kvreplay {

namespace {

constexpr EnumName<InstanceRole> kRoleNames[] = {
    {InstanceRole::kMixed, "mixed"},
    {InstanceRole::kPrefill, "prefill"},
    {InstanceRole::kDecode, "decode"},
};
static_assert(enum_names_unique(kRoleNames));

// Hash ids the decode side keys a prompt's pages by where the trace names
// none: the two top bits set (above the engines' named-prefix chains), the
// request's tag and the block's index below.
constexpr std::uint64_t kSyntheticIds = 0xC000000000000000ULL;

// How long a transfer waiting for room on an idle-stepping decode instance
// waits before it looks again (a step in progress sets the time otherwise).
constexpr double kRetrySeconds = 1e-3;

std::uint64_t blocks_of(std::uint64_t tokens, std::uint64_t page) {
  return (tokens + page - 1) / page;
}

}  // namespace

std::string_view to_string(InstanceRole role) {
  return enum_name(kRoleNames, role);
}

Fleet::Fleet(const RunConfig& config, const SimOptions& options, const FleetOptions& fleet)
    : fleet_(fleet),
      page_tokens_(std::max<std::uint32_t>(config.kv.page_tokens, 1)),
      prefill_count_(fleet.disaggregated() ? fleet.prefill_replicas : fleet.instances()),
      router_(fleet.router, prefill_count_, config.kv.page_tokens,
              std::uint64_t{config.kv.pool_blocks} * config.kv.page_tokens) {
  const std::uint32_t n = fleet.instances();
  views_.resize(n);
  routed_.resize(n);
  instances_.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    instances_.push_back(std::make_unique<Simulator>(config, options));
    roles_.push_back(!fleet.disaggregated()       ? InstanceRole::kMixed
                     : i < fleet.prefill_replicas ? InstanceRole::kPrefill
                                                  : InstanceRole::kDecode);
    Simulator& sim = *instances_.back();
    const InstanceRole role = roles_.back();
    sim.on_request_end = [this, i, role](const RequestTimes& times) {
      views_[i].active_blocks -= blocks_of(times.prompt, page_tokens_);
      if (role == InstanceRole::kPrefill) {
        prefill_done(times);
      } else if (role == InstanceRole::kDecode) {
        auto it = in_flight_.find(times.tag);
        if (it == in_flight_.end()) return;
        instances_[i]->release_received(it->second.held);
        in_flight_.erase(it);
      }
    };
  }
  block_bytes_ = instances_.front()->block_bytes();
  if (fleet.disaggregated()) {
    RouterOptions decode;
    decode.policy = RouterPolicy::kLeastKv;
    decode_router_.emplace(decode, fleet.decode_replicas, config.kv.page_tokens,
                           std::uint64_t{config.kv.pool_blocks} * config.kv.page_tokens);
  }
}

Fleet::~Fleet() = default;

void Fleet::fill_views(std::size_t first, std::size_t count, const Request& request, bool precise) {
  for (std::size_t i = first; i < first + count; ++i) {
    const Simulator& sim = *instances_[i];
    InstanceView& view = views_[i];
    view.requests = sim.waiting_requests() + sim.running_requests() + sim.arriving_requests();
    view.in_use_blocks = sim.in_use_blocks();
    view.usable_blocks = sim.usable_blocks();
    view.cached_tokens = precise ? sim.cached_prompt_tokens(request) : 0;
  }
}

std::uint32_t Fleet::submit(Request request) {
  fill_views(0, prefill_count_, request, router_.needs_precise_overlap());
  const RouteChoice choice = router_.route(request, request.arrival,
                                           std::span<InstanceView>(views_.data(), prefill_count_));
  if (on_route) on_route(request, choice);
  const std::uint32_t target = choice.instance;
  views_[target].active_blocks += blocks_of(request.prompt, page_tokens_);
  Routed& routed = routed_[target];
  ++routed.requests;
  routed.prompt_tokens += request.prompt;
  if (!fleet_.disaggregated()) {
    routed.output_tokens += std::uint64_t{request.output} * request.n;
    instances_[target]->submit(std::move(request));
    return target;
  }
  // The prompt and its first token on the prefill instance; the rest later.
  const std::uint64_t tag = next_tag_++;
  Request prefill = request;
  prefill.tag = tag;
  prefill.output = 1;
  prefill.n = 1;
  routed.output_tokens += 1;
  request.tag = tag;
  in_flight_.emplace(tag, InFlight{std::move(request), 0, 0.0, {}});
  instances_[target]->submit(std::move(prefill));
  return target;
}

void Fleet::prefill_done(const RequestTimes& times) {
  auto it = in_flight_.find(times.tag);
  if (it == in_flight_.end()) return;
  if (times.skipped) {  // it never fits a prefill instance: skipped there, once
    in_flight_.erase(it);
    return;
  }
  it->second.ready = times.finished;
  pending_.push(Pending{times.finished, times.tag, false, 0});
}

Request Fleet::decode_copy(const Request& request) const {
  Request out = request;
  const std::uint64_t tag_bits = request.tag << 16;
  if (out.hash_ids.empty()) {
    out.prefix.clear();
    out.prefix_tokens = 0;
    out.hash_block_tokens = std::max<std::uint32_t>(out.prompt, 1);
    out.hash_ids.push_back(kSyntheticIds | tag_bits);
    return out;
  }
  const std::uint64_t block = std::max<std::uint32_t>(out.hash_block_tokens, 1);
  for (std::uint64_t k = out.hash_ids.size(); k * block < out.prompt; ++k) {
    out.hash_ids.push_back(kSyntheticIds | tag_bits | (k & 0xFFFF));
  }
  return out;
}

void Fleet::start_transfer(const Pending& event) {
  InFlight& flight = in_flight_.at(event.tag);
  const std::size_t first = prefill_count_;
  const std::size_t count = instances_.size() - first;
  const Request keyed = decode_copy(flight.request);
  fill_views(first, count, keyed, false);
  const RouteChoice choice = decode_router_->route(
      keyed, event.time, std::span<InstanceView>(views_.data() + first, count));
  const auto decode = static_cast<std::uint32_t>(first + choice.instance);
  // The decode side admits the request and allocates its blocks before the
  // transfer (vLLM's Scheduler.schedule with a KV connector: a request
  // waiting for remote KV holds its slots, in queue order). So the transfer
  // waits until that instance has no request waiting ahead of it and room
  // for the prompt (free blocks and evictable cached ones): it is then
  // admitted at the step after the KV lands. An instance with nothing to run
  // frees nothing more: the transfer then goes at once, with what room
  // there is.
  const Simulator& target = *instances_[decode];
  const std::uint64_t room =
      std::uint64_t{target.pool().free_count()} + target.cache_resident_blocks();
  const bool queued = target.waiting_requests() + target.arriving_requests() > 0;
  const bool idle = !queued && target.running_requests() == 0;
  if (!idle && (queued || room < blocks_of(keyed.prompt, page_tokens_))) {
    // Again when its step in progress ends, when memory may have come free.
    const double again = target.now() > event.time ? target.now() : event.time + kRetrySeconds;
    pending_.push(Pending{again, event.tag, false, 0});
    return;
  }
  if (flight.ready < event.time) {
    ++transfers_.waited;
  }
  transfers_.wait_ms.add((event.time - flight.ready) * 1e3);
  flight.decode = decode;
  // The decode side allocates what its cache lacks, then the bytes cross.
  std::optional<Scheduler::ReceivedKv> received = instances_[decode]->receive_kv(keyed);
  const std::uint64_t blocks = received ? received->transferred : 0;
  if (received) flight.held = std::move(received->held);
  const std::uint64_t bytes = blocks * block_bytes_;
  const double seconds = fleet_.kv_transfer_latency_us / 1e6 +
                         static_cast<double>(bytes) / (fleet_.kv_transfer_gbps * 1e9);
  ++transfers_.requests;
  transfers_.blocks += blocks;
  transfers_.bytes += bytes;
  transfers_.ms.add(seconds * 1e3);
  pending_.push(Pending{event.time + seconds, event.tag, true, decode});
}

bool Fleet::run_instances(std::size_t first, std::size_t count, double horizon) {
  for (std::size_t i = first; i < first + count; ++i) {
    if (!instances_[i]->run_until(horizon)) {
      violated_ = i;
      return false;
    }
  }
  return true;
}

bool Fleet::run_until(double horizon) {
  if (violated_) return false;
  if (!fleet_.disaggregated()) return run_instances(0, instances_.size(), horizon);
  // The prefill side depends on nothing the decode side does.
  if (!run_instances(0, prefill_count_, horizon)) return false;
  const std::size_t decode_first = prefill_count_;
  const std::size_t decode_count = instances_.size() - decode_first;
  while (!pending_.empty() && pending_.top().time <= horizon) {
    const Pending event = pending_.top();
    pending_.pop();
    if (!event.arrive) {
      // Every decode instance as it is when the prefill ends.
      if (!run_instances(decode_first, decode_count, event.time)) return false;
      start_transfer(event);
      continue;
    }
    if (!run_instances(event.decode, 1, event.time)) return false;
    InFlight& flight = in_flight_.at(event.tag);
    // The KV is in: the held pages become the decode side's cached pages,
    // the most recently used (evictable again, so that a request waiting at
    // the head of the queue can always have them back).
    instances_[event.decode]->release_received(flight.held);
    flight.held.clear();
    Request decode = decode_copy(flight.request);
    decode.arrival = event.time;
    views_[event.decode].active_blocks += blocks_of(decode.prompt, page_tokens_);
    Routed& routed = routed_[event.decode];
    ++routed.requests;
    routed.prompt_tokens += decode.prompt;
    routed.output_tokens += std::uint64_t{decode.output} * decode.n;
    instances_[event.decode]->submit(std::move(decode));
  }
  return run_instances(decode_first, decode_count, horizon);
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

std::optional<double> Fleet::user_arrival(std::uint64_t tag) const {
  auto it = in_flight_.find(tag);
  if (it == in_flight_.end()) return std::nullopt;
  return it->second.request.arrival;
}

}  // namespace kvreplay
