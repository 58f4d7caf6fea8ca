#include "engine/fleet/fleet.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "core/enum_names.h"
#include "engine/key_spaces.h"

namespace kvreplay {

namespace {

constexpr EnumName<InstanceRole> kRoleNames[] = {
    {InstanceRole::kMixed, "mixed"},
    {InstanceRole::kPrefill, "prefill"},
    {InstanceRole::kDecode, "decode"},
};
static_assert(enum_names_unique(kRoleNames));

// The hash ids the decode side keys a prompt's pages by where the trace
// names none come from a counter in kvreplay's reserved range
// (engine/key_spaces.h): no trace id (the readers refuse one there) and no
// engine's own or named-prefix chain can alias them, whatever the prompt's
// length or the number of requests.
static_assert(kFleetKeyBase > kPrefixKeyBase);

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
  next_key_ = kFleetKeyBase;
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
    // The router's account of what it sent (prefix-aware: Dynamo's
    // mark_prefill_completed at the first token, free at the end).
    if (i < prefill_count_) {
      sim.on_first_token = [this, i](const RequestTimes& times) {
        router_.prefill_done(i, times.tag);
      };
    }
    sim.on_request_end = [this, i, role](const RequestTimes& times) {
      if (i < prefill_count_) router_.finished(i, times.tag);
      // The end as the user sees it: the last token, or when the instance
      // gave up on it (a decode instance refuses it as the KV lands).
      const double end = times.skipped || times.finished < 0
                             ? std::max(instances_[i]->now(), times.arrival)
                             : times.finished;
      if (role == InstanceRole::kMixed) {
        if (on_request_end) on_request_end(times, end);
      } else if (role == InstanceRole::kPrefill) {
        // Only a prompt given up on ends the user's request here.
        if (times.skipped && on_request_end && in_flight_.contains(times.tag)) {
          RequestTimes user = times;
          user.output = in_flight_.at(times.tag).request.output;
          user.n = in_flight_.at(times.tag).request.n;
          on_request_end(user, end);
        }
        prefill_done(times);
      } else {
        auto it = in_flight_.find(times.tag);
        if (it == in_flight_.end()) return;
        if (on_request_end) {
          RequestTimes user = times;
          user.arrival = it->second.request.arrival;
          user.output = it->second.request.output;
          user.n = it->second.request.n;
          on_request_end(user, end);
        }
        instances_[i]->release_received(it->second.held, instances_[i]->now());
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
    landings_.resize(fleet.decode_replicas);
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
  // The tag follows the request through the router's accounts and, when
  // disaggregated, from its prefill instance to its decode one.
  const std::uint64_t tag = next_tag_++;
  request.tag = tag;
  fill_views(0, prefill_count_, request, router_.needs_precise_overlap());
  const RouteChoice choice = router_.route(request, request.arrival,
                                           std::span<InstanceView>(views_.data(), prefill_count_));
  if (on_route) on_route(request, choice);
  const std::uint32_t target = choice.instance;
  Routed& routed = routed_[target];
  ++routed.requests;
  routed.prompt_tokens += request.prompt;
  if (!fleet_.disaggregated()) {
    routed.output_tokens += std::uint64_t{request.output} * request.n;
    instances_[target]->submit(std::move(request));
    return target;
  }
  // The prompt and its first token on the prefill instance; the rest later.
  Request prefill = request;
  prefill.output = 1;
  prefill.n = 1;
  routed.output_tokens += 1;
  InFlight& flight =
      in_flight_.emplace(tag, InFlight{std::move(request), 0, 0.0, {}, 0}).first->second;
  // A request the decode side can never run (every decode instance is the
  // same engine and pool) is skipped here, once, before its prefill and
  // transfer: counted as the prefill instance's skipped request.
  std::uint64_t need = 0;
  if (auto reason = instances_[prefill_count_]->never_fits(flight.request, need)) {
    instances_[target]->skip(prefill, *reason, need);
    return target;
  }
  assign_keys(flight);
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
  pending_.push(Pending{times.finished, Pending::kReady, times.tag, 0});
}

std::uint64_t Fleet::take_keys(std::uint64_t count) {
  // 2^62 ids, one a prompt page: no run comes near their end.
  assert(count <= ~std::uint64_t{0} - next_key_);
  const std::uint64_t first = next_key_;
  next_key_ += count;
  return first;
}

void Fleet::assign_keys(InFlight& flight) {
  const Request& request = flight.request;
  if (request.hash_ids.empty() && !request.prefix.empty() &&
      request.prefix_tokens >= page_tokens_) {
    // A named prefix: one id per page, those within the prefix the same for
    // every request naming it (so the decode side's cache shares them), the
    // rest the request's own.
    const std::uint64_t pages = blocks_of(request.prompt, page_tokens_);
    const std::uint64_t shared =
        std::min<std::uint64_t>(request.prefix_tokens / page_tokens_, pages);
    std::vector<std::uint64_t>& ids = prefix_keys_[request.prefix];
    while (ids.size() < shared) ids.push_back(take_keys(1));
    flight.own_keys = take_keys(pages - shared);
    return;
  }
  if (request.hash_ids.empty()) {
    flight.own_keys = take_keys(1);  // one block of the whole prompt
    return;
  }
  // Hash ids short of the prompt: the blocks past them are the request's own.
  const std::uint64_t block = std::max<std::uint32_t>(request.hash_block_tokens, 1);
  const std::uint64_t blocks = blocks_of(request.prompt, block);
  flight.own_keys =
      take_keys(blocks > request.hash_ids.size() ? blocks - request.hash_ids.size() : 0);
}

Request Fleet::decode_copy(const InFlight& flight) const {
  Request out = flight.request;
  if (out.hash_ids.empty() && !out.prefix.empty() && out.prefix_tokens >= page_tokens_) {
    const std::vector<std::uint64_t>& prefix = prefix_keys_.at(out.prefix);
    out.hash_block_tokens = static_cast<std::uint32_t>(page_tokens_);
    std::uint64_t own = flight.own_keys;
    for (std::uint64_t k = 0; k * page_tokens_ < out.prompt; ++k) {
      const bool shared = (k + 1) * page_tokens_ <= out.prefix_tokens;
      out.hash_ids.push_back(shared ? prefix[k] : own++);
    }
    out.prefix.clear();
    out.prefix_tokens = 0;
    return out;
  }
  if (out.hash_ids.empty()) {
    out.prefix.clear();
    out.prefix_tokens = 0;
    out.hash_block_tokens = std::max<std::uint32_t>(out.prompt, 1);
    out.hash_ids.push_back(flight.own_keys);
    return out;
  }
  const std::uint64_t block = std::max<std::uint32_t>(out.hash_block_tokens, 1);
  std::uint64_t own = flight.own_keys;
  for (std::uint64_t k = out.hash_ids.size(); k * block < out.prompt; ++k) {
    out.hash_ids.push_back(own++);
  }
  return out;
}

std::optional<double> Fleet::start_transfer(std::uint64_t tag, double now) {
  InFlight& flight = in_flight_.at(tag);
  const std::size_t first = prefill_count_;
  const std::size_t count = instances_.size() - first;
  const Request keyed = decode_copy(flight);
  fill_views(first, count, keyed, false);
  const RouteChoice choice =
      decode_router_->route(keyed, now, std::span<InstanceView>(views_.data() + first, count));
  const auto decode = static_cast<std::uint32_t>(first + choice.instance);
  // The decode side admits the request and allocates its blocks before the
  // transfer (vLLM's Scheduler.schedule with a KV connector: a request
  // waiting for remote KV holds its slots, in queue order). So the transfer
  // waits until that instance has no request waiting ahead of it and room
  // for the prompt (free blocks and evictable cached ones): it is then
  // admitted at the step after the KV lands. It looks again when something
  // there can change: the step in progress ends, or a transfer to it lands.
  // When nothing can (no step, no transfer in flight), it goes at once with
  // what room there is.
  const Simulator& target = *instances_[decode];
  const std::uint64_t room =
      std::uint64_t{target.pool().free_count()} + target.cache_resident_blocks();
  const bool queued = target.waiting_requests() + target.arriving_requests() > 0;
  if (queued || room < blocks_of(keyed.prompt, page_tokens_)) {
    std::optional<double> again;
    if (queued || target.running_requests() > 0) {
      // Its next step ends then, or (not yet begun) starts now: just after.
      // An instance that only waits for KV loads changes at their landing.
      const double next = target.next_change();
      again = next > now ? next : std::nextafter(now, std::numeric_limits<double>::infinity());
    }
    const std::multiset<double>& landing = landings_[decode - first];
    if (!landing.empty()) again = std::min(again.value_or(*landing.begin()), *landing.begin());
    if (again) return again;
  }
  if (flight.ready < now) ++transfers_.waited;
  transfers_.wait_ms.add((now - flight.ready) * 1e3);
  flight.decode = decode;
  // The decode side allocates what its cache lacks, then the bytes cross.
  std::optional<ReceivedKv> received = instances_[decode]->receive_kv(keyed, now);
  const std::uint64_t blocks = received ? received->transferred : 0;
  if (received) flight.held = std::move(received->held);
  const std::uint64_t bytes = blocks * block_bytes_;
  const double seconds = fleet_.kv_transfer_latency_us / 1e6 +
                         static_cast<double>(bytes) / (fleet_.kv_transfer_gbps * 1e9);
  ++transfers_.requests;
  transfers_.blocks += blocks;
  transfers_.bytes += bytes;
  transfers_.ms.add(seconds * 1e3);
  landings_[decode - first].insert(now + seconds);
  instances_[decode]->expect_kv(now + seconds);
  pending_.push(Pending{now + seconds, Pending::kArrive, tag, decode});
  return std::nullopt;
}

void Fleet::start_transfers(double now) {
  while (!ready_.empty()) {
    const std::optional<double> again = start_transfer(ready_.front(), now);
    if (again) {
      pending_.push(Pending{*again, Pending::kRetry, 0, 0});
      retry_pending_ = true;
      return;
    }
    ready_.pop_front();
  }
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
    if (event.kind != Pending::kArrive) {
      // Every decode instance as it is at this time. Transfers start in the
      // order their prefills ended: one waiting for room holds back the rest,
      // and only it looks again (one retry at a time).
      if (!run_instances(decode_first, decode_count, event.time)) return false;
      if (event.kind == Pending::kReady) ready_.push_back(event.tag);
      if (event.kind == Pending::kRetry) retry_pending_ = false;
      if (!retry_pending_) start_transfers(event.time);
      continue;
    }
    if (!run_instances(event.decode, 1, event.time)) return false;
    std::multiset<double>& landing = landings_[event.decode - decode_first];
    landing.erase(landing.find(event.time));
    InFlight& flight = in_flight_.at(event.tag);
    // The KV is in: the held pages become the decode side's cached pages,
    // the most recently used (evictable again, so that a request waiting at
    // the head of the queue can always have them back).
    instances_[event.decode]->release_received(flight.held, event.time, /*landed=*/true);
    flight.held.clear();
    Request decode = decode_copy(flight);
    decode.arrival = event.time;
    Routed& routed = routed_[event.decode];
    ++routed.requests;
    routed.prompt_tokens += decode.prompt;
    routed.output_tokens += std::uint64_t{decode.output} * decode.n;
    instances_[event.decode]->submit(std::move(decode), /*from_client=*/false);
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

double Fleet::frontier() const {
  double at = std::numeric_limits<double>::infinity();
  for (const auto& sim : instances_) {
    if (!sim->idle()) at = std::min(at, sim->next_change());
  }
  if (!pending_.empty()) at = std::min(at, pending_.top().time);
  return at;
}

std::optional<double> Fleet::user_arrival(std::uint64_t tag) const {
  auto it = in_flight_.find(tag);
  if (it == in_flight_.end()) return std::nullopt;
  return it->second.request.arrival;
}

}  // namespace kvreplay
