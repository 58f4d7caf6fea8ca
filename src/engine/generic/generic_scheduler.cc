#include "engine/generic/generic_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <memory>
#include <span>
#include <utility>

#include "engine/paged/hashed_pages.h"

namespace kvreplay {

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

GenericScheduler::GenericScheduler(EngineShell& shell) : PagedScheduler(shell, PagedRules{}) {
  if (!paged()) free_ranges_[0] = std::uint64_t{config_.kv.pool_blocks} * config_.kv.page_tokens;
}

void GenericScheduler::add_request(Request request) {
  auto flight = std::make_unique<Flight>();
  flight->request = std::move(request);
  flight->times = new_times(flight->request);
  name_prefix(flight->request);
  waiting_.push_back(std::move(flight));
}

void GenericScheduler::release(Sample& sample) {
  if (!paged()) {
    state_.logical_tokens -= sample.length;
    sample.length = 0;
    free_region(sample.region, sample.region_slots);
    return;
  }
  release_sample(sample);
}

std::optional<SkipReason> GenericScheduler::never_fits(const Request& request,
                                                       std::uint64_t& need) const {
  const std::uint64_t pt = config_.kv.page_tokens;
  std::uint64_t final_length = std::uint64_t{request.prompt} + request.output - 1;
  if (final_length > config_.kv.max_seq_tokens) {
    need = final_length;
    return SkipReason::kTooLong;
  }
  // Admission keeps the running samples within max_seqs, so such a request
  // would wait at the head of the queue forever (and block everyone after it).
  if (request.n > options_.max_seqs) {
    need = request.n;
    return SkipReason::kTooManySamples;
  }
  if (!paged()) {
    need = std::uint64_t{request.n} * reservation_tokens(request);
    if (need <= std::uint64_t{config_.kv.pool_blocks} * pt) return std::nullopt;
    return SkipReason::kPoolTooSmall;
  }
  // Full prompt pages are shared by the samples; the rest is per sample.
  std::uint64_t shared = request.prompt / pt;
  need = shared + request.n * (ceil_div(final_length, pt) - shared);
  const std::uint64_t usable = usable_blocks();
  if (need + watermark_blocks_ <= usable) return std::nullopt;
  return SkipReason::kPoolTooSmall;
}

std::uint32_t GenericScheduler::reservation_tokens(const Request& request) const {
  std::uint64_t final_length = std::uint64_t{request.prompt} + request.output - 1;
  switch (options_.allocator) {
    case AllocatorKind::kContiguousMax: return config_.kv.max_seq_tokens;
    case AllocatorKind::kContiguousPow2: {
      std::uint64_t pow2 = 1;
      while (pow2 < final_length) pow2 <<= 1;
      return static_cast<std::uint32_t>(std::min<std::uint64_t>(pow2, config_.kv.max_seq_tokens));
    }
    case AllocatorKind::kContiguousOracle:
    case AllocatorKind::kPaged: return static_cast<std::uint32_t>(final_length);
  }
  return static_cast<std::uint32_t>(final_length);
}

bool GenericScheduler::admit_next(std::uint32_t& budget, bool& stop) {
  Flight& flight = *waiting_.front();
  const Request& request = flight.request;
  const std::uint32_t pt = config_.kv.page_tokens;
  if (running_samples_ + request.n > options_.max_seqs) {
    stop = true;
    return true;
  }
  if (flight.kv_loaded) return admit_loaded(budget, stop);
  std::vector<BlockId>& hits = flight.hits.blocks;
  if (paged()) {
    if (options_.prefix_cache) {
      // Keep the hits of the last attempt that are still cached, then search on.
      hits_.verify(flight.hits, cache_,
                   [&](std::uint32_t page) { return *page_key(flight, page); });
      // At least one prompt token is always computed (it yields the first output).
      for (auto page = static_cast<std::uint32_t>(hits.size());
           (std::uint64_t{page} + 1) * pt < request.prompt; ++page) {
        auto key = page_key(flight, page);
        if (!key) break;
        auto block = cache_.find(*key);
        if (!block) break;
        flight.hits.blocks.push_back(*block);
      }
    }
    if (offload_) {
      // The prefix continues in the offload tiers (the vllm engine's rules,
      // engine/paged/paged_offload.cc); a hit there is loaded before the request runs.
      bool failed = false;
      const TierHit tier_hit = load_from_tiers(flight, request.prompt, failed);
      if (failed) return false;
      if (tier_hit == TierHit::kLoading) return true;
      if (tier_hit == TierHit::kNoRoom && idle_give_back()) return true;
      if (tier_hit != TierHit::kNone) {
        stop = true;
        return true;
      }
    }
    const auto hit_tokens = static_cast<std::uint32_t>(hits.size()) * pt;
    const std::uint32_t chunk = std::min(request.prompt - hit_tokens, budget);
    const std::uint64_t needed = ceil_div(std::uint64_t{hit_tokens} + chunk, pt) - hits.size();
    if (!room_beside_hits(flight, needed)) {
      if (idle_give_back()) return true;
      stop = true;
      return true;
    }
  } else {
    const std::uint64_t slots = reservation_tokens(request);
    std::vector<std::uint64_t> regions;
    for (std::uint32_t k = 0; k < request.n; ++k) {
      auto region = reserve_region(slots);
      if (!region) break;
      regions.push_back(*region);
    }
    if (regions.size() < request.n) {
      std::uint64_t free_slots = std::uint64_t{config_.kv.pool_blocks} * pt - reserved_slots_;
      for (std::uint64_t start : regions) free_region(start, slots);
      if (free_slots >= slots * request.n) ++sim_.admission_blocked_external;
      stop = true;
      return true;
    }
    flight.samples.clear();
    for (std::uint64_t start : regions) {
      flight.samples.push_back(Sample{SequenceBlockTable(0, 1), 0, 0, false, start, slots, {}});
    }
  }

  std::unique_ptr<Flight> owned = std::move(waiting_.front());
  waiting_.pop_front();
  running_samples_ += request.n;
  const auto hit_tokens = static_cast<std::uint32_t>(hits.size()) * pt;
  // A request starts over here, so the tokens it looks up are its prompt's.
  count_admission(*owned, request.prompt, hits.size(), hit_tokens, owned->admitted_before);
  owned->admitted_before = true;
  if (paged() && !install_hits(*owned, hits, hit_tokens)) return false;
  owned->prefilled = hit_tokens;
  owned->cached_pages = static_cast<std::uint32_t>(hits.size());
  hits_.forget(owned->hits, cache_);
  running_.push_back(std::move(owned));
  return run_admitted(budget, stop);
}

bool GenericScheduler::run_admitted(std::uint32_t& budget, bool& stop) {
  Flight& admitted = *running_.back();
  bool stopped = false;
  if (!run_flight(admitted, budget, running_.size() - 1, stopped)) return false;
  if (stopped) {
    stop = true;
    return true;
  }
  bool done = std::all_of(admitted.samples.begin(), admitted.samples.end(),
                          [](const Sample& s) { return s.done; });
  if (done && admitted.prefilled == admitted.request.prompt) {
    ++sim_.finished;
    request_done(admitted);
    running_.pop_back();
  }
  return true;
}

bool GenericScheduler::admit_loaded(std::uint32_t& budget, bool& stop) {
  // Its table holds its GPU hits and the pages loaded from the tiers, which
  // landed cached (kv_landed): the prefill goes on from there.
  const Flight& head = *waiting_.front();
  const std::uint32_t chunk = std::min(head.request.prompt - head.prefilled, budget);
  std::unique_ptr<Flight> owned = take_loaded_head(head.prefilled, chunk, stop);
  if (!owned) return true;
  running_samples_ += owned->request.n;
  running_.push_back(std::move(owned));
  return run_admitted(budget, stop);
}

bool GenericScheduler::kv_landed(Flight& flight) {
  // The loaded pages are cached as a prefill's are (offer_to_cache).
  if (!options_.prefix_cache) return true;
  offer_to_cache(flight);
  return !violation_;
}

bool GenericScheduler::allocate_loaded(Flight& flight, std::uint32_t tokens) {
  // Fresh blocks after the hits (whose last page is full: no copy-on-write),
  // a cached one evicted where no free block is left.
  Sample& sample = flight.samples[0];
  auto needed = sample.table.blocks_needed(tokens, pool_);
  if (!needed) return table_failed(flight, tokens, Growth::kLoad, needed.error());
  if (pool_.free_count() < needed.value()) {
    cache_.evict(pool_, needed.value() - pool_.free_count());
  }
  return grow_table(flight, sample, tokens, Growth::kLoad);
}

bool GenericScheduler::table_failed(const Flight& flight, std::uint32_t tokens, Growth why,
                                    CoreError error) {
  violation_ = Violation{
      sim_.steps + 1, flight.request.line, "I1",
      why == Growth::kAppend
          ? fmt::format("request {}: append of {} tokens failed: {}", flight.request.id, tokens,
                        error)
          : fmt::format("request {}: taking blocks for {} tokens loaded from the offload tiers "
                        "failed: {}",
                        flight.request.id, tokens, error)};
  return false;
}

bool GenericScheduler::grow_table(const Flight& flight, Sample& sample, std::uint32_t tokens,
                                  Growth why) {
  const std::size_t pages_before = sample.table.entries().size();
  count_layout(state_, sample.table, -1);
  auto appended = sample.table.append(tokens, pool_);
  count_layout(state_, sample.table, +1);
  if (!appended) return table_failed(flight, tokens, why, appended.error());
  for (const CopyOnWrite& copy : appended.value().copies) {
    ++totals_.cow_copies;
    totals_.cow_bytes += std::uint64_t{pool_.filled(copy.source)} * config_.kv.bytes_per_token();
  }
  state_.table_entries += sample.table.entries().size() - pages_before;
  request_entries_ += sample.table.entries().size() - pages_before;
  return true;
}

bool GenericScheduler::run_flight(Flight& flight, std::uint32_t& budget, std::size_t index,
                                  bool& stopped) {
  const Request& request = flight.request;
  if (flight.prefilled < request.prompt) {
    const std::uint32_t chunk = std::min(request.prompt - flight.prefilled, budget);
    if (chunk == 0) return true;
    if (!append(flight, flight.samples[0], chunk, index, stopped)) return false;
    if (stopped) return true;
    budget -= chunk;
    schedule_work(flight, flight.prefilled, chunk, true);
    flight.prefilled += chunk;
    sim_.prompt_tokens_computed += chunk;
    if (paged() && options_.prefix_cache) {
      offer_to_cache(flight);
      if (violation_) return false;
    }
    // The prompt pages this chunk filled go to the tiers now, before a
    // finished sample frees them (its store holds them until it lands).
    if (offload_ && !queue_stores(flight)) return false;
    if (flight.prefilled < request.prompt) return true;
    // The step that ends the prefill yields every sample's first token.
    for (std::uint32_t k = 1; k < request.n; ++k) {
      Sample child{new_table(), flight.samples[0].length, 0, false, 0, 0, {}};
      if (paged()) {
        if (auto forked = flight.samples[0].table.fork_into(child.table, pool_); !forked) {
          violation_ = Violation{
              sim_.steps + 1, request.line, "I1",
              fmt::format("request {}: fork_into failed: {}", request.id, forked.error())};
          return false;
        }
        ++totals_.forks;
        if (trace_ != nullptr) child.trace_seq = trace_->fork(flight.samples[0].trace_seq);
        state_.logical_tokens += child.table.length();
        state_.table_entries += child.table.entries().size();
        request_entries_ += child.table.entries().size();
        count_layout(state_, child.table, +1);
        flight.samples.push_back(std::move(child));
      } else {
        // Contiguous baselines copy the prompt into each sample's own region.
        flight.samples[k].length = request.prompt;
        state_.logical_tokens += request.prompt;
      }
    }
    flight.counted.resize(request.n, 0);
    first_token(flight);
    for (std::size_t k = 0; k < flight.samples.size(); ++k) {
      flight.samples[k].generated = 1;
      count_output(flight, k);
    }
    for (Sample& sample : flight.samples) {
      if (sample.generated >= request.output) finish_sample(flight, sample);
    }
    return true;
  }
  // A store the tiers refused for want of room is tried again at each step
  // the request runs (_get_reqs_to_store), while its first table holds the prompt.
  if (offload_ && !flight.samples[0].done && !queue_stores(flight)) return false;
  for (std::size_t k = 0; k < flight.samples.size(); ++k) {
    if (flight.samples[k].done) continue;
    if (budget == 0) break;
    // With drafts (engine/speculative.h): a verify of 1 + K tokens of the
    // budget, keeping the 1 + a it emits.
    const std::uint32_t emitted =
        shell_.draw_decode(std::uint64_t{request.line} * 64 + k, flight.samples[k].generated,
                           request.output - flight.samples[k].generated);
    if (!append(flight, flight.samples[k], emitted, index, stopped)) return false;
    if (stopped) return true;
    Sample& sample = flight.samples[k];
    const std::uint32_t verify = shell_.verify_tokens();
    budget -= std::min(verify, budget);
    sample.generated += emitted;
    shell_.count_decode(flight.times.get(), emitted);
    count_output(flight, k);
    schedule_work(flight, sample.length - emitted, verify, false);
    if (sample.generated >= request.output) finish_sample(flight, sample);
  }
  return true;
}

bool GenericScheduler::append(Flight& flight, Sample& sample, std::uint32_t tokens,
                              std::size_t index, bool& stopped) {
  if (!paged()) {
    sample.length += tokens;  // inside its reserved region
    state_.logical_tokens += tokens;
    totals_.tokens_appended += tokens;
    return true;
  }
  for (;;) {
    auto needed = sample.table.blocks_needed(tokens, pool_);
    if (!needed) return table_failed(flight, tokens, Growth::kAppend, needed.error());
    if (pool_.free_count() < needed.value())
      cache_.evict(pool_, needed.value() - pool_.free_count());
    if (pool_.free_count() >= needed.value()) break;
    if (offload_ && running_.size() == 1) {
      // The one request running is out of blocks. The waiting requests that
      // hold KV loaded from the offload tiers give theirs back first, the
      // last first (give_back_loaded). Blocks that transfers in flight hold
      // (a load's, a store's pins) come back when they land: the request
      // waits for them, running nothing and admitting nothing (an empty step
      // moves the clock to the landing: wake_at). Starting over while they
      // are held, it would stop again where it stopped, and the requests it
      // made give their KV back would load it again, for ever.
      if (give_back_loaded(true)) continue;
      if (offload_->next_landing()) {
        held_back_ = true;
        stopped = true;
        return true;
      }
    }
    // Out of blocks: preempt the most recently admitted request, maybe this one.
    const bool self = index + 1 == running_.size();
    preempt_last();
    if (self) {
      stopped = true;
      return true;
    }
  }
  if (!grow_table(flight, sample, tokens, Growth::kAppend)) return false;
  sample.length += tokens;
  totals_.tokens_appended += tokens;
  state_.logical_tokens += tokens;
  trace_grew(sample, tokens, flight.cached_pages);
  return true;
}

void GenericScheduler::count_output(Flight& flight, std::size_t sample) {
  // A preempted request starts over and produces its first tokens again:
  // recomputation, not output.
  if (flight.samples[sample].generated > flight.counted[sample]) {
    sim_.output_tokens += flight.samples[sample].generated - flight.counted[sample];
    flight.counted[sample] = flight.samples[sample].generated;
  }
}

void GenericScheduler::finish_sample(const Flight& flight, Sample& sample) {
  trace_hand_off(flight, sample);
  release(sample);
  sample.done = true;
  --running_samples_;
}

void GenericScheduler::preempt_last() {
  std::unique_ptr<Flight> victim = std::move(running_.back());
  running_.pop_back();
  if (victim->times) ++victim->times->preemptions;
  // Its n samples counted as running since its admission, less those done
  // (a prefill preempted has one table for them all).
  std::uint32_t done = 0;
  for (Sample& sample : victim->samples) {
    if (sample.done) {
      ++done;
      continue;
    }
    release(sample);
  }
  running_samples_ -= victim->request.n - done;
  // Recompute: the request starts over (prefill, then its first token again).
  victim->samples.clear();
  victim->prefilled = 0;
  victim->cached_pages = 0;
  ++victim->preemptions;
  victim->kv_loaded = false;
  waiting_.push_front(std::move(victim));
  ++sim_.preemptions;
}

void GenericScheduler::offer_to_cache(Flight& flight) {
  const std::uint32_t pt = config_.kv.page_tokens;
  const std::uint32_t full_pages = std::min(flight.prefilled, flight.request.prompt) / pt;
  const std::span<const BlockId> entries = flight.samples[0].table.entries();
  const std::uint32_t last =
      std::min<std::uint32_t>(full_pages, static_cast<std::uint32_t>(entries.size()));
  HashedPages walk(flight.request, pt, flight.cached_pages);
  // --kv-events: the pages cached here are one BlockStored, as one
  // BlockPool.cache_full_blocks call's.
  const PrefixCache::LoggedCall call(cache_);
  for (std::uint32_t page = flight.cached_pages; page < last; ++page, walk.next()) {
    std::uint32_t pages = 1;
    PrefixCache::RunInserted done;
    CoreStatus inserted;
    // --kv-events: the block a page's BlockStored chains to (the page before
    // it in the request, as vLLM's parent_block_hash).
    if (options_.kv_events) {
      cache_.log_parent(page == 0 ? std::nullopt : page_key(flight, page - 1));
    }
    if (walk.hashed()) {
      // The pages of one hash block at once (insert_run: the same inserts).
      pages =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(walk.pages_in_block(), last - page));
      assert(walk.key() == *page_key(flight, page));
      inserted =
          cache_.insert_run(walk.key(), pt, entries.subspan(page, pages), pool_, tick_, done);
    } else {
      auto key = page_key(flight, page);  // a named prefix's page, or none
      if (!key || entries[page] == kInvalidBlock) break;
      auto one = cache_.insert(*key, entries[page], pool_, tick_);
      if (one) done = {1, one.value() ? 1u : 0u};
      inserted = one ? CoreStatus{} : CoreStatus{Unexpected{one.error()}};
    }
    state_.table_entries += done.cached;
    if (!inserted) {
      violation_ = Violation{sim_.steps + 1, flight.request.line, "I1",
                             fmt::format("request {}: caching page {} failed: {}",
                                         flight.request.id, page + done.handled, inserted.error())};
      return;
    }
    if (done.handled < pages) break;  // a page without a block
    walk.skip(pages - 1);             // the loop's next() moves past the last of them
    page += pages - 1;
  }
  trace_cached(flight.samples[0], flight.cached_pages, last);
  flight.cached_pages = std::max(flight.cached_pages, full_pages);
}

std::optional<std::uint64_t> GenericScheduler::reserve_region(std::uint64_t slots) {
  for (auto it = free_ranges_.begin(); it != free_ranges_.end(); ++it) {
    if (it->second < slots) continue;
    std::uint64_t start = it->first;
    std::uint64_t rest = it->second - slots;
    free_ranges_.erase(it);
    if (rest > 0) free_ranges_.emplace(start + slots, rest);
    reserved_slots_ += slots;
    return start;
  }
  return std::nullopt;
}

void GenericScheduler::free_region(std::uint64_t start, std::uint64_t slots) {
  reserved_slots_ -= slots;
  auto [it, inserted] = free_ranges_.emplace(start, slots);
  (void)inserted;
  // Coalesce with the neighbours.
  if (auto next = std::next(it); next != free_ranges_.end() && start + it->second == next->first) {
    it->second += next->second;
    free_ranges_.erase(next);
  }
  if (it != free_ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_ranges_.erase(it);
    }
  }
}

bool GenericScheduler::step() {
  ++tick_;
  held_back_ = false;
  if (offload_ && !offload_step_start()) return false;
  std::uint32_t budget = options_.max_batched_tokens;
  for (std::size_t i = 0; i < running_.size();) {
    bool stopped = false;
    Flight& flight = *running_[i];
    if (!run_flight(flight, budget, i, stopped)) return false;
    if (stopped) break;
    bool done = std::all_of(flight.samples.begin(), flight.samples.end(),
                            [](const Sample& s) { return s.done; });
    if (done && flight.prefilled == flight.request.prompt) {
      ++sim_.finished;
      request_done(flight);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  bool stop = held_back_;
  while (!waiting_.empty() && budget > 0 && !stop) {
    if (!admit_next(budget, stop)) return false;
  }
  if (offload_) take_tier_events();  // the evictions of this step's stores
  sim_.max_running = std::max(sim_.max_running, running_samples_);
  return true;
}

void GenericScheduler::record() {
  if (paged()) return PagedScheduler::record();
  state_.live_sequences = running_samples_;
  const std::uint32_t pt = config_.kv.page_tokens;
  // Contiguous: reserved regions, in units of pages, against the KV they hold.
  sim_.reserved_slots_peak = std::max(sim_.reserved_slots_peak, reserved_slots_);
  const auto used = static_cast<std::uint32_t>(ceil_div(reserved_slots_, pt));
  std::uint64_t physical = state_.logical_tokens;
  record_event(state_, totals_, used, std::min<std::uint64_t>(physical, std::uint64_t{used} * pt),
               pt);
  record_in_use(used, 0);
  totals_.saved_blocks_at_peak = 0;
}

}  // namespace kvreplay
