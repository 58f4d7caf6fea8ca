// The vllm engine (SPEC 3.1): vLLM v1's synchronous scheduler and KV cache
// manager over the real pool, tables and prefix cache. Each rule names the
// vLLM function it comes from (vllm/v1/core/sched/scheduler.py,
// kv_cache_manager.py, block_pool.py; vllm/v1/engine/parallel_sampling.py).
//
// Under --alloc-order lifo the block ids are those of vLLM's free queue
// (FreeKVCacheBlockQueue): freed uncached blocks first, the last freed first
// (the pool's lifo list), then never-used blocks in id order, then cached ones
// in the order they were freed (the prefix cache's lru queue), evicted as
// reached (allocate_vllm). Like BlockPool.cached_block_hash_to_block, the
// cache keeps duplicates: a block recomputed under a key already cached is
// cached too, and a hit takes the earliest.
#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <memory>
#include <utility>

#include "engine/simulator.h"

namespace kvreplay {

namespace {

// Cache keys of pages no trace hash names: a request's own pages (or the prompt
// its siblings share). Above the hash ids of real traces, below kPrefixChainBase.
constexpr std::uint64_t kOwnChainBase = 1ull << 62;

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

std::optional<SkipReason> Simulator::never_fits_vllm(const Request& request,
                                                     std::uint64_t& need) const {
  const std::uint64_t final_length = std::uint64_t{request.prompt} + request.output - 1;
  if (final_length > config_.kv.max_seq_tokens) {
    need = final_length;
    return SkipReason::kTooLong;
  }
  // Each child of an n > 1 request is a request of its own (no --max-seqs
  // bound on n). One that needs more blocks than the pool less the null block
  // (and the watermark, when given) waits at the head of the queue forever.
  need = ceil_div(final_length, config_.kv.page_tokens);
  if (need + 1 + watermark_blocks_ <= config_.kv.pool_blocks) return std::nullopt;
  return SkipReason::kPoolTooSmall;
}

void Simulator::enqueue_vllm(Request request) {
  if (!request.prefix.empty()) prefix_ids_.emplace(request.prefix, prefix_ids_.size());
  // ParentRequest (parallel_sampling.py): n > 1 becomes n child requests with
  // the same prompt, queued in order; they share full prompt blocks only
  // through the prefix cache. No fork, no copy-on-write.
  const std::uint32_t n = request.n;
  const std::uint64_t prompt_uid = next_uid_++;
  auto left = std::make_shared<std::uint32_t>(n);
  for (std::uint32_t k = 0; k < n; ++k) {
    auto flight = std::make_unique<Flight>();
    flight->request = request;
    flight->request.n = 1;
    flight->prompt_uid = prompt_uid;
    flight->uid = k == 0 ? prompt_uid : next_uid_++;
    flight->siblings_left = left;
    waiting_.push_back(std::move(flight));
  }
}

PageKey Simulator::vllm_key(const Flight& flight, std::uint32_t page) const {
  const std::uint64_t end = (std::uint64_t{page} + 1) * config_.kv.page_tokens;
  const auto offset = static_cast<std::uint32_t>(end);
  if (end <= flight.request.prompt) {
    // A prompt page: the trace's hash chain (or shared prefix) when it names
    // the page, else a key the request's siblings share.
    if (auto key = page_key(flight, page)) return *key;
    return PageKey{kOwnChainBase + flight.prompt_uid, offset};
  }
  // A page holding generated tokens: no other request has this content.
  return PageKey{kOwnChainBase + flight.uid, offset};
}

bool Simulator::cache_full_blocks_vllm(Flight& flight) {
  if (!options_.prefix_cache) return true;
  // BlockPool.cache_full_blocks, called from KVCacheManager.allocate_slots:
  // every block that is full once the tokens scheduled this step are computed
  // is cached now, prompt and output blocks alike.
  Sample& sample = flight.samples[0];
  const std::uint32_t pt = config_.kv.page_tokens;
  const std::uint32_t full_pages = sample.table.length() / pt;
  if (flight.cached_pages >= full_pages) return true;
  const std::span<const BlockId> entries = sample.table.entries();
  // vllm_key of consecutive pages, walking the trace's hash blocks instead of
  // dividing for each page (the keys are the same: checked in debug builds).
  const Request& request = flight.request;
  const std::uint64_t hash_block = request.hash_block_tokens;
  std::uint64_t k = 0;  // hash block holding the page's last token
  std::uint64_t end = (std::uint64_t{flight.cached_pages} + 1) * pt;
  if (!request.hash_ids.empty()) k = (end - 1) / hash_block;
  std::uint64_t k_start = k * hash_block;  // its first token
  // Pages keyed by the trace's hash chain: prompt pages inside its hash blocks.
  const std::uint64_t hashed_end =
      std::min<std::uint64_t>(request.prompt, request.hash_ids.size() * hash_block);
  const std::uint32_t last = std::min<std::uint32_t>(full_pages, static_cast<std::uint32_t>(entries.size()));
  for (std::uint32_t page = flight.cached_pages; page < last; ++page, end += pt) {
    if (entries[page] == kInvalidBlock) break;
    PageKey key;
    if (end <= hashed_end) {
      while (k_start + hash_block < end) {
        ++k;
        k_start += hash_block;
      }
      key = PageKey{request.hash_ids[k], static_cast<std::uint32_t>(end - k_start)};
    } else {
      key = vllm_key(flight, page);
    }
    assert(key == vllm_key(flight, page));
    auto inserted = cache_.insert(key, entries[page], pool_, tick_);
    if (!inserted) {
      violation_ = Violation{sim_.steps + 1, flight.request.line, "I1",
                             fmt::format("request {}: caching page {} failed: {}",
                                         flight.request.id, page, inserted.error())};
      return false;
    }
    state_.table_entries += inserted.value() ? 1 : 0;
  }
  flight.cached_pages = std::max(flight.cached_pages, full_pages);
  return true;
}

bool Simulator::allocate_vllm(Flight& flight, std::uint32_t tokens) {
  // KVCacheManager.allocate_slots: blocks for the tokens scheduled this step
  // only, never for the whole request ahead. BlockPool.get_new_blocks pops the
  // free queue, evicting a cached block only when it reaches one (lazy).
  Sample& sample = flight.samples[0];
  if (sample.table.append_in_place(tokens, pool_)) {
    // The common decode step: the tokens fit the partial last page, which
    // this request holds alone (no block taken, the layout unchanged).
    sample.length += tokens;
    totals_.tokens_appended += tokens;
    state_.logical_tokens += tokens;
    return cache_full_blocks_vllm(flight);
  }
  const std::size_t pages_before = sample.table.entries().size();
  count_layout(state_, sample.table, -1);
  // The free queue holds the uncached free blocks first and the evictable
  // cached ones behind them: pages take the free blocks first, and only then
  // a cached block each, evicted as the queue reaches it.
  const std::uint32_t pt = config_.kv.page_tokens;
  std::uint32_t remaining = tokens;
  CoreStatus appended;
  // The partial last page (this request's alone) takes what fits first.
  const std::uint32_t room = sample.table.length() % pt == 0 ? 0 : pt - sample.table.length() % pt;
  if (room > 0) {
    const std::uint32_t chunk = std::min(room, remaining);
    if (!sample.table.append_in_place(chunk, pool_)) appended = Unexpected{CoreError::kBlockNotLive};
    remaining -= appended ? chunk : 0;
  }
  if (appended && remaining > 0) {
    // BlockPool.get_new_blocks: the free blocks in the pool's order, then the
    // cached ones, each evicted as the queue reaches it and handed straight
    // to the page (evicting it onto the empty free list and popping it again
    // would give the same block).
    std::vector<BlockId>& blocks = alloc_scratch_;
    blocks.clear();
    const auto pages = static_cast<std::uint32_t>(ceil_div(remaining, pt));
    while (blocks.size() < pages && pool_.free_count() > 0) blocks.push_back(pool_.take_free());
    if (blocks.size() < pages) {
      cache_.evict_for_reuse(pool_, pages - static_cast<std::uint32_t>(blocks.size()), blocks);
    }
    auto taken = blocks.size() < pages ? CoreResult<std::uint32_t>{Unexpected{CoreError::kPoolExhausted}}
                                       : sample.table.append_taken(remaining, blocks, pool_);
    if (!taken) {
      for (BlockId b : blocks) (void)pool_.release(b);  // back to the free list
      appended = Unexpected{taken.error()};
    }
  }
  count_layout(state_, sample.table, +1);
  if (!appended) {
    violation_ = Violation{
        sim_.steps + 1, flight.request.line, "I1",
        fmt::format("request {}: allocate_slots failed: {}", flight.request.id, appended.error())};
    return false;
  }
  sample.length += tokens;
  totals_.tokens_appended += tokens;
  state_.logical_tokens += tokens;
  state_.table_entries += sample.table.entries().size() - pages_before;
  request_entries_ += sample.table.entries().size() - pages_before;
  return cache_full_blocks_vllm(flight);
}

void Simulator::preempt_vllm(std::unique_ptr<Flight> victim) {
  // Scheduler._preempt_request: KVCacheManager.free releases the blocks (the
  // cached ones stay cached, evictable), num_computed_tokens = 0, and the
  // request goes to the front of the waiting queue keeping its output so far.
  release_sample(victim->samples[0]);
  victim->samples.clear();
  victim->computed = 0;
  victim->cached_pages = 0;
  ++victim->preemptions;
  ++sim_.preemptions;
  waiting_.push_front(std::move(victim));
}

bool Simulator::schedule_running_vllm(std::uint32_t& budget, bool& preempted,
                                      std::vector<std::pair<Flight*, std::uint32_t>>& scheduled) {
  // Scheduler.schedule, running requests first, in order, within the token budget.
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    Flight& flight = *running_[i];
    const std::uint32_t num_tokens = flight.request.prompt + flight.generated;
    const std::uint32_t tokens = std::min(num_tokens - flight.computed, budget);
    if (tokens == 0) {
      ++i;
      continue;
    }
    bool self = false;
    for (;;) {
      auto needed = flight.samples[0].table.blocks_needed(tokens, pool_);
      if (!needed) {
        violation_ = Violation{sim_.steps + 1, flight.request.line, "I1",
                               fmt::format("request {}: allocate_slots failed: {}",
                                           flight.request.id, needed.error())};
        return false;
      }
      if (pool_.free_count() + cache_.evictable() >= needed.value()) break;
      // allocate_slots returned None: preempt the last request of the running
      // list (FCFS policy); when that is this request, stop scheduling.
      std::unique_ptr<Flight> victim = std::move(running_.back());
      running_.pop_back();
      preempted = true;
      self = victim.get() == &flight;
      preempt_vllm(std::move(victim));
      if (self) break;
    }
    if (self) break;
    if (!allocate_vllm(flight, tokens)) return false;
    scheduled.emplace_back(&flight, tokens);
    budget -= tokens;
    ++i;
  }
  return true;
}

bool Simulator::schedule_waiting_vllm(std::uint32_t& budget,
                                      std::vector<std::pair<Flight*, std::uint32_t>>& scheduled) {
  const std::uint32_t pt = config_.kv.page_tokens;
  // Scheduler.schedule, then waiting requests FCFS while the budget and
  // max_num_seqs allow; one that cannot get its blocks stops admission.
  while (!waiting_.empty() && budget > 0 && running_.size() < options_.max_seqs) {
    Flight& flight = *waiting_.front();
    const std::uint32_t num_tokens = flight.request.prompt + flight.generated;
    // KVCacheManager.get_computed_blocks: the longest chain of cached full
    // blocks, at most num_tokens - 1 tokens (the last one is computed for its logits).
    // A request waiting at the head is looked up again every step: the hits of
    // its last attempt that are still cached as they were are kept (the same
    // chain get_computed_blocks would walk), and the search goes on from there.
    std::vector<BlockId>& hits = flight.hit_blocks;
    if (options_.prefix_cache) {
      verify_hits(flight);
      for (auto page = static_cast<std::uint32_t>(hits.size());
           (std::uint64_t{page} + 1) * pt <= num_tokens - 1; ++page) {
        const PageKey key = vllm_key(flight, page);
        auto block = cache_.find(key);
        if (!block) break;
        add_hit(flight, *block, key);
      }
    }
    const auto hit_tokens = static_cast<std::uint32_t>(hits.size()) * pt;
    const std::uint32_t tokens = std::min(num_tokens - hit_tokens, budget);
    const std::uint64_t needed = ceil_div(std::uint64_t{hit_tokens} + tokens, pt) - hits.size();
    if (!room_beside_hits(hits, needed)) break;  // allocate_slots returned None

    std::unique_ptr<Flight> owned = std::move(waiting_.front());
    waiting_.pop_front();
    count_admission(flight.request, num_tokens, hits.size(), hit_tokens, owned->preemptions > 0);
    owned->order = next_order_++;
    if (!install_hits(*owned, hits, hit_tokens)) return false;
    owned->computed = hit_tokens;
    owned->cached_pages = static_cast<std::uint32_t>(hits.size());
    forget_hits(*owned);
    running_.push_back(std::move(owned));
    Flight& admitted = *running_.back();
    if (!allocate_vllm(admitted, tokens)) return false;
    scheduled.emplace_back(&admitted, tokens);
    budget -= tokens;
  }
  return true;
}

bool Simulator::step_vllm() {
  ++tick_;
  step_prefill_tokens_ = step_decode_seqs_ = step_context_tokens_ = 0;
  std::uint32_t budget = options_.max_batched_tokens;
  std::vector<std::pair<Flight*, std::uint32_t>> scheduled;
  bool preempted = false;
  if (!schedule_running_vllm(budget, preempted, scheduled)) return false;
  // Scheduler.schedule: no waiting request is scheduled in a step that preempted.
  if (!preempted && !schedule_waiting_vllm(budget, scheduled)) return false;
  sim_.max_running = std::max<std::uint64_t>(sim_.max_running, running_.size());

  // The model runs; Scheduler.update_from_output: a request whose computed
  // tokens catch up with its tokens samples one more; one that reaches its
  // output length finishes.
  bool any_finished = false;
  for (auto [flight, tokens] : scheduled) {
    const std::uint32_t num_tokens = flight->request.prompt + flight->generated;
    const bool prefill = flight->generated == 0 || num_tokens - flight->computed > 1;
    flight->computed += tokens;
    if (prefill) {
      step_prefill_tokens_ += tokens;
      sim_.prompt_tokens_computed += tokens;
    } else {
      ++step_decode_seqs_;
    }
    step_context_tokens_ += flight->computed;
    if (flight->computed < num_tokens) continue;
    ++flight->generated;
    ++sim_.output_tokens;  // once: a preempted request keeps what it generated
    if (flight->generated >= flight->request.output) {
      flight->samples[0].done = true;
      any_finished = true;
    }
  }
  // Scheduler._free_request at the end of the step: blocks in reverse order
  // (KVCacheManager.free), uncached ones back to the free queue, cached ones
  // evictable.
  if (any_finished) {
    std::vector<std::unique_ptr<Flight>> still;
    still.reserve(running_.size());
    for (auto& flight : running_) {
      if (!flight->samples[0].done) {
        still.push_back(std::move(flight));
        continue;
      }
      release_sample(flight->samples[0]);
      if (--*flight->siblings_left == 0) ++sim_.finished;
    }
    running_ = std::move(still);
  }
  running_samples_ = running_.size();
  return end_step();
}

}  // namespace kvreplay
