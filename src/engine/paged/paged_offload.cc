// KV offloading (--offload, SPEC 3.7) for the paged engines (vllm and
// generic): vLLM's OffloadingConnector over the tiers of
// engine/offload/offload_connector.h. Each rule names the vLLM function it comes from
// (vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py:
// OffloadingConnectorScheduler; vllm/v1/core/sched/scheduler.py: Scheduler).
//
// kvreplay's choices where vLLM's versions differ or the model is coarser:
//   - a tier block is one GPU block (vLLM's offloaded_block_size = block_size);
//   - a store's blocks become loadable when its copy lands (per-job store
//     completion); the GPU blocks it reads stay held until then;
//   - several tiers (cpu, then disk) are each written through, in turn, and
//     a prefix continues from the GPU into whichever tier holds each next
//     page, cpu first; the loads from each tier run on their own link at once;
//   - generic: a tier hit stops one page short of the prompt's end (that
//     engine's GPU hit's own cap): where vLLM loads the last block and
//     recomputes its last token, generic computes that page (the vllm
//     engine loads it, PagedRules::tier_hit_all_full_pages);
//   - a request whose tier hit another request is loading waits at the head
//     of the queue (vLLM skips it for the step and goes on with the next).
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/paged/paged_scheduler.h"

namespace kvreplay {

std::uint32_t PagedScheduler::offload_keys(Flight& flight, std::uint32_t pages) {
  std::vector<std::uint64_t>& keys = flight.offload_keys;
  while (keys.size() < pages) {
    const auto key = offload_page_key(flight, static_cast<std::uint32_t>(keys.size()));
    if (!key) break;
    keys.push_back(block_key(*key));
  }
  return std::min(pages, static_cast<std::uint32_t>(keys.size()));
}

void PagedScheduler::unpin(BlockId b) {
  auto it = pinned_.find(b);
  if (it == pinned_.end()) return;
  if (--it->second == 0) pinned_.erase(it);
  (void)pool_.release(b);  // the store's own reference: the block stays live otherwise
  cache_.released(b, pool_, tick_);
}

bool PagedScheduler::offload_step_start() {
  // The worker starts the stores queued last step (start_kv_transfers), and
  // reports what finished (get_finished); update_connector_output completes
  // them: complete_store, complete_load.
  const double now = shell_.step_start;
  offload_->start_queued(now);
  landed_.clear();
  for (OffloadConnector::Job& job : offload_->take_landed(now)) {
    OffloadTier& tier = offload_->tier(job.tier);
    OffloadTierFigures& figures = offload_->figures(job.tier);
    if (!job.load) {
      // Counted as stored when issued (queue_stores).
      (void)tier.complete_store(job.keys);
      for (BlockId b : job.blocks) unpin(b);
      continue;
    }
    if (auto done = tier.complete_load(job.keys); !done) {
      violation_ = Violation{sim_.steps + 1, 0, "T3",
                             fmt::format("an offload load of {} blocks completed twice: {}",
                                         job.keys.size(), done.error())};
      return false;
    }
    figures.loaded += job.keys.size();
    figures.load_ms.add((job.done - job.issued) * 1e3);
    auto it = std::find_if(loading_.begin(), loading_.end(),
                           [&](const auto& f) { return f.get() == job.owner; });
    if (it == loading_.end() || --(*it)->loads_in_flight > 0) continue;
    // Scheduler._update_waiting_for_remote_kv: the loaded blocks are cached
    // now (cache_blocks), and the request is scheduled as a waiting one.
    std::unique_ptr<Flight> flight = std::move(*it);
    loading_.erase(it);
    // Its KV is computed up to the table's length (vllm's computed tokens,
    // generic's prefilled ones).
    flight->computed = flight->prefilled = flight->samples[0].length;
    flight->kv_loaded = true;
    if (!kv_landed(*flight)) return false;
    landed_.push_back(std::move(flight));
  }
  // Back at the front of the waiting queue, in the order they landed.
  for (auto it = landed_.rbegin(); it != landed_.rend(); ++it) waiting_.push_front(std::move(*it));
  take_tier_events();
  return true;
}

void PagedScheduler::take_tier_events() {
  // OffloadingConnectorScheduler.take_events: the manager's events, in order;
  // dropped without --kv-events, so that they do not pile up.
  for (std::size_t t = 0; t < offload_->num_tiers(); ++t) {
    for (OffloadEvent& event : offload_->tier(t).take_events()) {
      if (!options_.kv_events) continue;
      shell_.events.tiers.push_back({offload_->tier_options(t).medium, std::move(event)});
    }
  }
}

PagedScheduler::TierHit PagedScheduler::load_from_tiers(Flight& flight, std::uint32_t num_tokens,
                                                        bool& failed) {
  // get_num_new_matched_tokens: every full block of the request is touched in
  // the tiers, then the run of blocks held ready continues the GPU hit.
  const std::uint32_t pt = config_.kv.page_tokens;
  const std::uint32_t full = offload_keys(flight, num_tokens / pt);
  if (full == 0) return TierHit::kNone;
  const std::span<const std::uint64_t> keys(flight.offload_keys.data(), full);
  for (std::size_t t = 0; t < offload_->num_tiers(); ++t) offload_->tier(t).touch(keys);
  const auto gpu_pages = static_cast<std::uint32_t>(flight.hits.blocks.size());
  // vllm: every full block of the request's tokens (_get_num_offloaded_blocks:
  // its block hashes, num_tokens // block_size), the last one too when the
  // tokens fill it; _update_waiting_for_remote_kv then leaves the last token
  // to compute (the engine's kv_landed). generic: a page short of the end.
  const std::uint32_t cap = tier_hit_all_full_pages_ ? full : std::min((num_tokens - 1) / pt, full);
  tier_of_.clear();
  bool deferred = false;
  for (std::uint32_t page = gpu_pages; page < cap; ++page) {
    std::size_t t = 0;
    while (t < offload_->num_tiers() && !offload_->tier(t).ready(keys[page])) ++t;
    if (t == offload_->num_tiers()) break;
    deferred = deferred || offload_->being_loaded(keys[page]);
    tier_of_.push_back(t);
  }
  if (tier_of_.empty()) return TierHit::kNone;
  // Another request loads some of these blocks now: retried later, when they
  // are GPU hits. Its GPU hits are tracked, as those of any head that waits.
  if (deferred) {
    hits_.track(flight.hits, cache_);
    return TierHit::kDeferred;
  }
  const auto pages = static_cast<std::uint32_t>(tier_of_.size());
  // allocate_slots(num_external_computed_tokens, delay_cache_blocks=True):
  // blocks for the loaded pages, beside the GPU hits.
  if (!room_beside_hits(flight, pages)) return TierHit::kNoRoom;

  std::unique_ptr<Flight> owned = std::move(waiting_.front());
  waiting_.pop_front();
  const std::vector<BlockId> hits = owned->hits.blocks;
  const std::uint32_t hit_tokens = gpu_pages * pt;
  count_admission(*owned, num_tokens, hits.size(), hit_tokens, owned->preemptions > 0);
  if (owned->times && owned->preemptions == 0) {
    // The tokens it will not compute: all but the last one at most (vLLM's
    // num_cached_tokens, its num_computed_tokens once the load landed).
    owned->times->cached_tokens =
        std::max(owned->times->cached_tokens, std::min((gpu_pages + pages) * pt, num_tokens - 1));
  }
  if (!install_hits(*owned, hits, hit_tokens)) {
    failed = true;
    return TierHit::kNone;
  }
  owned->computed = owned->prefilled = hit_tokens;
  owned->cached_pages = gpu_pages;
  owned->admitted_before = true;
  hits_.forget(owned->hits, cache_);
  Sample& sample = owned->samples[0];
  if (!allocate_loaded(*owned, pages * pt)) {
    failed = true;
    return TierHit::kNone;
  }
  sample.length += pages * pt;
  totals_.tokens_appended += pages * pt;
  state_.logical_tokens += pages * pt;
  // update_state_after_alloc: the request's stores go on after the pages it
  // loads (_next_stored_block_idx = num_blocks): neither they nor its GPU hits
  // are stored again, whatever a tier evicted since.
  for (std::size_t t = 0; t < offload_->num_tiers(); ++t) {
    owned->offload_stored[t] = gpu_pages + pages;
  }
  // update_state_after_alloc: prepare_load per tier, the load issued.
  for (std::size_t t = 0; t < offload_->num_tiers(); ++t) {
    std::vector<std::uint64_t> tier_keys;
    for (std::uint32_t i = 0; i < pages; ++i) {
      if (tier_of_[i] == t) tier_keys.push_back(keys[gpu_pages + i]);
    }
    if (tier_keys.empty()) continue;
    if (auto prepared = offload_->tier(t).prepare_load(tier_keys); !prepared) {
      violation_ =
          Violation{sim_.steps + 1, owned->request.line, "T3",
                    fmt::format("request {}: a block found ready in the {} tier could "
                                "not be loaded: {}",
                                owned->request.id, to_string(offload_->tier_options(t).medium),
                                prepared.error())};
      failed = true;
      return TierHit::kNone;
    }
    OffloadTierFigures& figures = offload_->figures(t);
    (owned->preemptions == 0 ? figures.hit_tokens : figures.preempted_hit_tokens) +=
        tier_keys.size() * pt;
    offload_->issue_load(t, std::move(tier_keys), owned.get(), shell_.step_start);
    ++owned->loads_in_flight;
  }
  if (trace_ != nullptr) {
    // The trace's loads fill the blocks taken for them, which its cache
    // holds; the sequence is admitted on them and the GPU hits.
    const std::span<const BlockId> entries = sample.table.entries();
    for (std::uint32_t i = 0; i < pages; ++i) {
      trace_->load(trace_tier(tier_of_[i]), keys[gpu_pages + i], entries[gpu_pages + i]);
    }
    sample.trace_seq = trace_->admit(sample.length, entries.first(gpu_pages + pages));
  }
  loading_.push_back(std::move(owned));
  return TierHit::kLoading;
}

std::unique_ptr<PagedScheduler::Flight> PagedScheduler::take_loaded_head(std::uint32_t computed,
                                                                         std::uint32_t tokens,
                                                                         bool& stop) {
  // Its blocks are its own table's, `computed` tokens of them (no hits to
  // count twice).
  const std::uint32_t pt = config_.kv.page_tokens;
  const std::uint64_t held = (std::uint64_t{computed} + pt - 1) / pt;
  const std::uint64_t needed = (std::uint64_t{computed} + tokens + pt - 1) / pt - held;
  if (std::uint64_t{pool_.free_count()} + cache_.evictable() < needed + watermark_blocks_) {
    if (!idle_give_back()) stop = true;  // else tried again
    return nullptr;
  }
  std::unique_ptr<Flight> owned = std::move(waiting_.front());
  waiting_.pop_front();
  owned->kv_loaded = false;
  return owned;
}

bool PagedScheduler::give_back_loaded(bool head_too) {
  // Nothing runs (or the one request running cannot go on), so no block
  // will be freed but by the requests that hold loaded KV while they wait
  // (behind the head, when the head is the one being admitted): the last of
  // them gives its blocks back, as a preempted request does (its loaded pages
  // stay cached, evictable, and it looks its prefix up again when its turn
  // comes). Without this, two such requests could each hold what the other needs.
  const auto first = waiting_.begin() + (head_too || waiting_.empty() ? 0 : 1);
  for (auto it = waiting_.end(); it != first;) {
    --it;
    Flight& flight = **it;
    if (!flight.kv_loaded) continue;
    release_sample(flight.samples[0]);
    flight.samples.clear();
    flight.computed = flight.prefilled = 0;
    flight.cached_pages = 0;
    flight.prefilling = true;
    flight.kv_loaded = false;
    return true;
  }
  return false;
}

bool PagedScheduler::queue_stores(Flight& flight) {
  // _get_reqs_to_store: the blocks full once this step's tokens are computed,
  // from next_stored_block_idx on, go to prepare_store; a refusal leaves the
  // index for the next step; a store touches the request's whole prefix.
  const std::uint32_t pt = config_.kv.page_tokens;
  const std::uint32_t full = offload_keys(flight, flight.samples[0].length / pt);
  if (full == 0) return true;
  const std::span<const std::uint64_t> keys(flight.offload_keys.data(), full);
  const std::span<const BlockId> entries = flight.samples[0].table.entries();
  for (std::size_t t = 0; t < offload_->num_tiers(); ++t) {
    std::uint32_t& next = flight.offload_stored[t];
    if (next >= full) continue;
    OffloadTier& tier = offload_->tier(t);
    auto plan = tier.prepare_store(keys.subspan(next, full - next));
    if (!plan) {
      ++offload_->figures(t).store_refused;
      continue;
    }
    offload_->figures(t).evicted += plan->evicted.size();
    // A block counts as stored once its store is issued, as the emitted
    // trace's `store` is written then and resident_blocks counts it: stored
    // = resident_blocks + evicted at every step.
    offload_->figures(t).stored += plan->stored.size();
    if (trace_ != nullptr) {
      for (std::uint64_t key : plan->evicted) trace_->drop(trace_tier(t), key);
    }
    const std::uint32_t first = next;
    next = full;
    if (plan->stored.empty()) continue;
    tier.touch(keys);
    std::vector<BlockId> blocks;
    blocks.reserve(plan->stored.size());
    std::size_t j = 0;
    for (std::uint32_t page = first; page < full && j < plan->stored.size(); ++page) {
      if (keys[page] != plan->stored[j]) continue;
      ++j;
      if (trace_ != nullptr) {
        trace_->store(flight.samples[0].trace_seq, page, trace_tier(t), keys[page]);
      }
      const BlockId b = entries[page];
      if (auto held = pool_.retain(b); !held) {
        violation_ = Violation{sim_.steps + 1, flight.request.line, "I1",
                               fmt::format("request {}: holding page {} for its offload store "
                                           "failed: {}",
                                           flight.request.id, page, held.error())};
        for (BlockId pinned : blocks) unpin(pinned);
        return false;
      }
      ++pinned_[b];
      blocks.push_back(b);
    }
    offload_->queue_store(t, std::move(plan->stored), std::move(blocks));
  }
  return true;
}

bool PagedScheduler::end_run() {
  // The run's end: no request is left, but the stores of the last steps may
  // still be queued or in flight. They land now (the tier's copies become
  // readable, the GPU blocks they read are let go), as the emitted trace has
  // them: its `store` copied the page when it was written. The run's time
  // stays its last step's end, and their KV events are not sent.
  if (!offload_ || has_requests()) return true;
  offload_->start_queued(shell_.step_start);
  for (OffloadConnector::Job& job :
       offload_->take_landed(std::numeric_limits<double>::infinity())) {
    if (job.load) continue;  // none: a load's request is still waiting
    (void)offload_->tier(job.tier).complete_store(job.keys);
    for (BlockId b : job.blocks) unpin(b);
  }
  // The pool as it ends (what the report's final_used reads); the run's
  // running figures stay the last step's.
  ReplayTotals unchanged = totals_;
  record_event(state_, unchanged, used_blocks(), pool_.filled_total(), config_.kv.page_tokens);
  return true;
}

std::optional<double> PagedScheduler::wake_at() const {
  if (!offload_) return std::nullopt;
  return offload_->next_landing();
}

bool PagedScheduler::check_offload() {
  if (!offload_) return true;
  auto fail = [&](std::string invariant, std::string message) {
    violation_ = Violation{sim_.steps, 0, std::move(invariant), std::move(message)};
    return false;
  };
  for (std::size_t t = 0; t < offload_->num_tiers(); ++t) {
    if (auto found = offload_->tier(t).check()) {
      return fail(found->invariant,
                  fmt::format("the {} tier: {}", to_string(offload_->tier_options(t).medium),
                              found->message));
    }
  }
  // A block being loaded stays in its tier; the GPU blocks a store reads are
  // held once per store (the holds I1 counted above).
  std::unordered_map<BlockId, std::uint32_t> pins;
  for (const OffloadConnector::Job& job : offload_->jobs()) {
    for (BlockId b : job.blocks) ++pins[b];
    if (!job.load) continue;
    for (std::uint64_t key : job.keys) {
      if (!offload_->tier(job.tier).ready(key)) {
        return fail("T3", fmt::format("block {:016x} is being loaded from the {} tier but is not "
                                      "there",
                                      key, to_string(offload_->tier_options(job.tier).medium)));
      }
    }
  }
  if (pins != pinned_) {
    return fail("I1", fmt::format("{} GPU blocks are held for offload stores, the stores in "
                                  "flight read {}",
                                  pinned_.size(), pins.size()));
  }
  return true;
}

TierGauge PagedScheduler::offload_gauge(std::size_t t) const {
  const OffloadTier& tier = offload_->tier(t);
  const OffloadTierFigures& f = offload_->figures(t);
  return TierGauge{offload_->tier_options(t).medium,
                   tier.capacity(),
                   tier.used(),
                   f.stored,
                   f.loaded,
                   f.evicted};
}

void PagedScheduler::add_figures(nlohmann::json& report) const {
  if (!offload_) return;
  std::vector<TierResidency> residency;
  for (std::size_t t = 0; t < offload_->num_tiers(); ++t) {
    residency.push_back(TierResidency{offload_->tier(t).capacity(), offload_->tier(t).used()});
  }
  add_offload_figures(report, *offload_, to_string(offload_->tier(0).policy()), residency, sim_);
}

}  // namespace kvreplay
