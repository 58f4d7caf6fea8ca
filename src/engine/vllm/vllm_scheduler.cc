// The vllm engine (SPEC 3.1): vLLM v1's synchronous scheduler and KV cache
// manager over the real pool, tables and prefix cache. Each rule names the
// vLLM function it comes from (vllm/v1/core/sched/scheduler.py,
// kv_cache_manager.py, block_pool.py; vllm/v1/engine/parallel_sampling.py).
//
// Under --alloc-order lifo the block ids are those of vLLM's free queue
// (FreeKVCacheBlockQueue): freed uncached blocks first, the last freed first
// (the pool's lifo list), then never-used blocks in id order, then cached ones
// in the order they were freed (the prefix cache's lru queue), evicted as
// reached (allocate). Like BlockPool.cached_block_hash_to_block, the
// cache keeps duplicates: a block recomputed under a key already cached is
// cached too, and a hit takes the earliest.
#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <memory>
#include <span>
#include <utility>

#include "engine/key_spaces.h"
#include "engine/paged/hashed_pages.h"
#include "engine/vllm/vllm_scheduler.h"

namespace kvreplay {

namespace {

// Cache keys of pages no trace hash names: a request's own pages (or the prompt
// its siblings share). Above every trace hash id, below kPrefixChainBase
// (engine/key_spaces.h).
constexpr std::uint64_t kOwnChainBase = kOwnKeyBase;

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

VllmScheduler::VllmScheduler(EngineShell& shell)
    : PagedScheduler(shell, PagedRules{.null_block = true,
                                       .cache_duplicates = true,
                                       .tier_hit_all_full_pages = true}),
      coordinator_(groups_, KvCacheContext{config_.kv.page_tokens, pool_, cache_, tick_, state_,
                                           sim_, violation_, request_entries_, null_block_}) {
  static_assert(kPrefixChainBase == kPrefixKeyBase && kOwnChainBase < kPrefixChainBase);
}

std::optional<SkipReason> VllmScheduler::never_fits(const Request& request,
                                                    std::uint64_t& need) const {
  // max_model_len (--max-seq-tokens) as `vllm serve` applies it, a trace's
  // output being the request's max_tokens: InputProcessor._validate_prompt_len
  // (vllm/v1/engine/input_processor.py) rejects a prompt of max_model_len
  // tokens or more (equal: "plus the number of requested output tokens (at
  // least 1) is longer"), and the OpenAI server's TokenizeParams._token_len_check
  // (vllm/renderers/params.py, max_output_tokens = the request's max_tokens,
  // CompletionRequest.build_tok_params) one whose prompt + max_tokens exceeds
  // it. Rejected requests never reach the scheduler: skipped, counted.
  const std::uint64_t max_model_len = config_.kv.max_seq_tokens;
  const std::uint64_t total = std::uint64_t{request.prompt} + request.output;
  if (request.prompt >= max_model_len || total > max_model_len) {
    need = total;
    return SkipReason::kTooLong;
  }
  const std::uint64_t final_length = total - 1;  // KV held when the last token is sampled
  // Each child of an n > 1 request is a request of its own (no --max-seqs
  // bound on n). One that needs more blocks than the pool less the null block
  // (and the watermark, when given) waits at the head of the queue forever.
  const std::uint32_t pt = config_.kv.page_tokens;
  need = ceil_div(final_length, pt);
  if (hybrid_) {
    // Blocks held at once by the request running alone, summed over the
    // groups: a full group holds every page, a sliding one the pages the
    // step writes and those still in its window (remove_skipped_blocks runs
    // before each step's allocation). Evaluated at every chunk of
    // --max-batched-tokens tokens up to the final length (a preempted request
    // re-prefills its output too), the first decode steps until the window
    // pattern repeats, and the last page's worth of decode steps.
    const std::uint64_t budget = options_.max_batched_tokens;
    auto held = [&](std::uint64_t computed, std::uint64_t tokens) {
      std::uint64_t sum = 0;
      for (std::size_t g = 0; g < groups_.size(); ++g) {
        const std::uint64_t pages = ceil_div(computed + tokens, pt);
        const std::uint64_t skipped =
            coordinator_.num_skipped_tokens(g, static_cast<std::uint32_t>(computed)) / pt;
        sum += pages - std::min(pages, skipped);
      }
      return sum;
    };
    need = 0;
    for (std::uint64_t c = 0; c < final_length;
         c += std::min<std::uint64_t>(budget, final_length - c)) {
      need = std::max(need, held(c, std::min<std::uint64_t>(budget, final_length - c)));
    }
    const std::uint64_t c = request.prompt;
    std::uint64_t window = 0;
    for (const KvCacheGroupSpec& g : groups_)
      window = std::max<std::uint64_t>(window, g.window_tokens);
    const std::uint64_t first_end = std::min<std::uint64_t>(final_length, c + window + 2 * pt);
    for (std::uint64_t d = c; d < first_end; ++d) need = std::max(need, held(d, 1));
    for (std::uint64_t d = std::max(first_end, final_length > pt ? final_length - pt : 0);
         d < final_length; ++d) {
      need = std::max(need, held(d, 1));
    }
  }
  if (need + 1 + watermark_blocks_ <= config_.kv.pool_blocks) return std::nullopt;
  return SkipReason::kPoolTooSmall;
}

std::optional<std::string> VllmScheduler::skip_rule(SkipReason reason,
                                                    const SkippedRequest& first) const {
  if (reason != SkipReason::kTooLong) return std::nullopt;
  return fmt::format(
      "prompt + output tokens above --max-seq-tokens {} (vLLM's max_model_len: `vllm serve` "
      "rejects them; first: line {}, {} tokens)",
      config_.kv.max_seq_tokens, first.line, first.need);
}

void VllmScheduler::add_request(Request request) {
  if (!request.prefix.empty()) prefix_ids_.emplace(request.prefix, prefix_ids_.size());
  // ParentRequest (parallel_sampling.py): n > 1 becomes n child requests with
  // the same prompt, queued in order; they share full prompt blocks only
  // through the prefix cache. No fork, no copy-on-write.
  const std::uint32_t n = request.n;
  const std::uint64_t prompt_uid = next_uid_++;
  auto left = std::make_shared<std::uint32_t>(n);
  auto times = new_times(request);
  for (std::uint32_t k = 0; k < n; ++k) {
    auto flight = std::make_unique<Flight>();
    flight->request = request;
    flight->request.n = 1;
    flight->prompt_uid = prompt_uid;
    flight->uid = k == 0 ? prompt_uid : next_uid_++;
    flight->siblings_left = left;
    flight->times = times;
    waiting_.push_back(std::move(flight));
  }
}

PageKey VllmScheduler::vllm_key(const Flight& flight, std::uint32_t page) const {
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

bool VllmScheduler::cache_new_full_blocks(Flight& flight, std::uint32_t full_pages) {
  // BlockPool.cache_full_blocks, called from KVCacheManager.allocate_slots:
  // every block that is full once the tokens scheduled this step are computed
  // is cached now, prompt and output blocks alike.
  Sample& sample = flight.samples[0];
  const std::uint32_t pt = config_.kv.page_tokens;
  const std::span<const BlockId> entries = sample.table.entries();
  const std::uint32_t last =
      std::min<std::uint32_t>(full_pages, static_cast<std::uint32_t>(entries.size()));
  const std::uint32_t first = flight.cached_pages;
  HashedPages walk(flight.request, pt, flight.cached_pages);
  // --kv-events: the blocks this call caches are one BlockStored (one a
  // group: the writer splits them by group, as each SingleTypeKVCacheManager
  // calls cache_full_blocks for its own).
  const PrefixCache::LoggedCall call(cache_);
  for (std::uint32_t page = flight.cached_pages; page < last; ++page, walk.next()) {
    if (!hybrid_ && walk.hashed()) {
      // The pages of one hash block at once (insert_run: the same inserts).
      const auto pages =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(walk.pages_in_block(), last - page));
      assert(walk.key_after(pages - 1) == vllm_key(flight, page + pages - 1));
      PrefixCache::RunInserted done;
      if (options_.kv_events) {
        cache_.log_parent(page == 0 ? std::nullopt
                                    : std::optional<PageKey>(vllm_key(flight, page - 1)));
      }
      auto inserted =
          cache_.insert_run(walk.key(), pt, entries.subspan(page, pages), pool_, tick_, done);
      state_.table_entries += done.cached;
      if (!inserted) return caching_failed(flight, page + done.handled, inserted.error());
      if (done.handled < pages) break;  // a page without a block
      walk.skip(pages - 1);             // the loop's next() moves past the last of them
      page += pages - 1;
      continue;
    }
    if (entries[page] == kInvalidBlock) break;
    PageKey key = walk.hashed() ? walk.key() : vllm_key(flight, page);
    assert(key == vllm_key(flight, page));
    if (!hybrid_) {
      // One full-attention group: the page's block, never the null block.
      if (options_.kv_events) {
        cache_.log_parent(page == 0 ? std::nullopt
                                    : std::optional<PageKey>(vllm_key(flight, page - 1)));
      }
      auto inserted = cache_.insert(key, entries[page], pool_, tick_);
      if (!inserted) return caching_failed(flight, page, inserted.error());
      state_.table_entries += inserted.value() ? 1 : 0;
      continue;
    }
    // KVCacheCoordinator.cache_blocks: every group's manager in turn.
    if (auto cached = coordinator_.cache_blocks(tables(sample), page, key); !cached) {
      return caching_failed(flight, page, cached.error());
    }
  }
  trace_cached(sample, first, last);
  flight.cached_pages = std::max(flight.cached_pages, full_pages);
  return true;
}

bool VllmScheduler::caching_failed(const Flight& flight, std::uint32_t page, CoreError error) {
  violation_ = Violation{
      sim_.steps + 1, flight.request.line, "I1",
      fmt::format("request {}: caching page {} failed: {}", flight.request.id, page, error)};
  return false;
}

bool VllmScheduler::allocate(Flight& flight, std::uint32_t tokens) {
  // KVCacheManager.allocate_slots: blocks for the tokens scheduled this step
  // only, never for the whole request ahead; KVCacheCoordinator.allocate_new_blocks
  // asks every group in turn, all from the one pool.
  if (!coordinator_.allocate_new_blocks(tables(flight.samples[0]), tokens, flight.request)) {
    return false;
  }
  return appended(flight, tokens);
}

bool VllmScheduler::appended(Flight& flight, std::uint32_t tokens) {
  flight.samples[0].length += tokens;
  totals_.tokens_appended += tokens;
  state_.logical_tokens += tokens;
  trace_grew(flight.samples[0], tokens, flight.cached_pages);
  return cache_full_blocks(flight);
}

void VllmScheduler::preempt(std::unique_ptr<Flight> victim) {
  // Scheduler._preempt_request: KVCacheManager.free releases the blocks (the
  // cached ones stay cached, evictable), num_computed_tokens = 0, and the
  // request goes to the front of the waiting queue keeping its output so far.
  ++victim->times->preemptions;
  release_sample(victim->samples[0]);
  victim->samples.clear();
  victim->computed = 0;
  victim->cached_pages = 0;
  victim->prefilling = true;  // it re-prefills prompt + generated tokens
  victim->kv_loaded = false;
  ++victim->preemptions;
  ++sim_.preemptions;
  waiting_.push_front(std::move(victim));
}

bool VllmScheduler::schedule_running(std::uint32_t& budget, bool& preempted, Scheduled& scheduled) {
  // Scheduler.schedule, running requests first, in order, within the token budget.
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    Flight& flight = *running_[i];
    const std::uint32_t num_tokens = flight.request.prompt + flight.generated;
    const std::uint32_t tokens = std::min(num_tokens - flight.computed, budget);
    if (tokens == 0) {
      ++i;
      continue;
    }
    // A decode with drafts verifies 1 + K tokens of the budget (its
    // num_new_tokens counts the spec tokens; the budget trims them).
    const std::uint32_t charge =
        flight.prefilling ? tokens : std::min(std::max(tokens, shell_.verify_tokens()), budget);
    if (!hybrid_ && flight.samples[0].table.append_in_place(tokens, pool_)) {
      // The common decode step: the tokens fit the partial last page, so
      // get_num_blocks_to_allocate is 0 and allocate_slots cannot fail (what
      // the loop below and allocate would do, at once).
      if (!appended(flight, tokens)) return false;
      scheduled.emplace_back(&flight, tokens);
      budget -= charge;
      ++i;
      continue;
    }
    bool self = false;
    if (hybrid_ && !coordinator_.remove_skipped_blocks(tables(flight.samples[0]), flight.computed,
                                                       flight.request)) {
      return false;
    }
    for (;;) {
      const auto needed =
          coordinator_.num_blocks_to_allocate(tables(flight.samples[0]), tokens, flight.request);
      if (!needed) return false;
      if (pool_.free_count() + cache_.evictable() >= *needed) break;
      // allocate_slots returned None: preempt the last request of the running
      // list (FCFS policy); when that is this request, stop scheduling.
      std::unique_ptr<Flight> victim = std::move(running_.back());
      running_.pop_back();
      preempted = true;
      self = victim.get() == &flight;
      preempt(std::move(victim));
      if (self) break;
    }
    if (self) break;
    if (!allocate(flight, tokens)) return false;
    scheduled.emplace_back(&flight, tokens);
    budget -= charge;
    ++i;
  }
  return true;
}

bool VllmScheduler::schedule_waiting(std::uint32_t& budget, Scheduled& scheduled) {
  const std::uint32_t pt = config_.kv.page_tokens;
  // Scheduler.schedule, then waiting requests FCFS while the budget and
  // max_num_seqs allow; one that cannot get its blocks stops admission.
  while (!waiting_.empty() && budget > 0 && running_.size() < options_.max_seqs) {
    if (hybrid_) {
      bool stop = false;
      if (!admit_hybrid(budget, scheduled, stop)) return false;
      if (stop) break;
      continue;
    }
    Flight& flight = *waiting_.front();
    if (flight.kv_loaded) {
      bool stop = false;
      if (!admit_loaded(budget, scheduled, stop)) return false;
      if (stop) break;
      continue;
    }
    const std::uint32_t num_tokens = flight.request.prompt + flight.generated;
    // KVCacheManager.get_computed_blocks: the longest chain of cached full
    // blocks, at most num_tokens - 1 tokens (the last one is computed for its logits).
    // A request waiting at the head is looked up again every step: the hits of
    // its last attempt that are still cached as they were are kept (the same
    // chain get_computed_blocks would walk), and the search goes on from there.
    std::vector<BlockId>& hits = flight.hits.blocks;
    if (options_.prefix_cache) {
      hits_.verify(flight.hits, cache_, [&](std::uint32_t page) { return vllm_key(flight, page); });
      const auto first = static_cast<std::uint32_t>(hits.size());
      HashedPages walk(flight.request, pt, first);
      const std::uint32_t pages = (num_tokens - 1) / pt;  // full pages before the last token
      for (std::uint32_t page = first; page < pages; ++page, walk.next()) {
        if (walk.hashed()) {
          // The pages of one hash block at once (find_run: the same lookups).
          const auto run = static_cast<std::uint32_t>(
              std::min<std::uint64_t>(walk.pages_in_block(), pages - page));
          assert(walk.key_after(run - 1) == vllm_key(flight, page + run - 1));
          if (cache_.find_run(walk.key(), pt, run, hits) < run) break;
          walk.skip(run - 1);  // the loop's next() moves past the last of them
          page += run - 1;
          continue;
        }
        const PageKey key = vllm_key(flight, page);
        auto block = cache_.find(key);
        if (!block) break;
        flight.hits.blocks.push_back(*block);
      }
    }
    if (offload_) {
      // The connector's get_num_new_matched_tokens: the prefix continues in
      // the offload tiers; a hit there is loaded before the request runs.
      bool failed = false;
      const TierHit tier_hit = load_from_tiers(flight, num_tokens, failed);
      if (failed) return false;
      if (tier_hit == TierHit::kLoading) continue;
      if (tier_hit == TierHit::kNoRoom && idle_give_back()) continue;
      if (tier_hit != TierHit::kNone) break;
    }
    const auto hit_tokens = static_cast<std::uint32_t>(hits.size()) * pt;
    const std::uint32_t tokens = std::min(num_tokens - hit_tokens, budget);
    const std::uint64_t needed = ceil_div(std::uint64_t{hit_tokens} + tokens, pt) - hits.size();
    if (!room_beside_hits(flight, needed)) {  // allocate_slots returned None
      if (idle_give_back()) continue;
      break;
    }

    std::unique_ptr<Flight> owned = std::move(waiting_.front());
    waiting_.pop_front();
    count_admission(flight, num_tokens, hits.size(), hit_tokens, owned->preemptions > 0);
    if (!install_hits(*owned, hits, hit_tokens)) return false;
    owned->computed = hit_tokens;
    owned->cached_pages = static_cast<std::uint32_t>(hits.size());
    hits_.forget(owned->hits, cache_);
    running_.push_back(std::move(owned));
    Flight& admitted = *running_.back();
    if (!allocate(admitted, tokens)) return false;
    scheduled.emplace_back(&admitted, tokens);
    budget -= tokens;
  }
  return true;
}

bool VllmScheduler::install_hybrid_hits(Flight& flight, std::uint32_t hit_tokens) {
  // KVCacheCoordinator.allocate_new_computed_blocks: a table per group, the
  // hits installed by every group's manager.
  flight.samples.clear();
  flight.samples.push_back(Sample{new_table(), hit_tokens, 0, false, 0, 0, {}});
  Sample& sample = flight.samples[0];
  for (std::size_t g = 1; g < groups_.size(); ++g) sample.more.push_back(new_table());
  if (hit_tokens == 0) return true;
  std::uint64_t shared = 0;
  if (!coordinator_.install_hits(tables(sample), hit_tokens, flight.request, shared)) return false;
  ++totals_.prefix_installs;
  totals_.shared_pages_installed += shared;
  state_.logical_tokens += hit_tokens;
  state_.table_entries += shared;
  request_entries_ += shared;
  return true;
}

bool VllmScheduler::admit_hybrid(std::uint32_t& budget, Scheduled& scheduled, bool& stop) {
  Flight& flight = *waiting_.front();
  const std::uint32_t pt = config_.kv.page_tokens;
  const std::uint32_t num_tokens = flight.request.prompt + flight.generated;
  // KVCacheManager.get_computed_blocks: at most num_tokens - 1 tokens, the
  // hit holding in every group. Looked up afresh at every attempt.
  std::uint32_t hit_tokens = 0;
  if (options_.prefix_cache) {
    hit_tokens = coordinator_.find_longest_cache_hit(
        [&](std::uint32_t page) { return vllm_key(flight, page); }, num_tokens - 1);
  } else {
    coordinator_.clear_hits();
  }
  const std::uint32_t tokens = std::min(num_tokens - hit_tokens, budget);
  // KVCacheCoordinator.get_num_blocks_to_allocate with the new hits.
  const std::uint64_t needed = coordinator_.num_blocks_to_allocate_new(hit_tokens, tokens);
  if (std::uint64_t{pool_.free_count()} + cache_.evictable() < needed + watermark_blocks_) {
    if (running_.empty()) {
      // Nothing runs, so no block will be freed or evicted: every block but
      // the null one is already free or evictable, and this allocation fails
      // at every step to come. vLLM's scheduler would retry it each step and
      // never admit it nor anything queued behind it (Scheduler.schedule:
      // allocate_slots returns None, the request stays first in the queue).
      // never_fits cannot rule this out: it checks chunks that start at
      // the budget's boundaries, while a prefix-cache hit can start the first
      // chunk at any page, where a window group holds more pages at once.
      // kvreplay skips the request as one the pool is too small for, and goes on.
      skip_stalled(needed);
      return true;
    }
    stop = true;  // allocate_slots returned None
    return true;
  }
  std::unique_ptr<Flight> owned = std::move(waiting_.front());
  waiting_.pop_front();
  count_admission(*owned, num_tokens, hit_tokens / pt, hit_tokens, owned->preemptions > 0);
  if (!install_hybrid_hits(*owned, hit_tokens)) return false;
  owned->computed = hit_tokens;
  owned->cached_pages = hit_tokens / pt;
  running_.push_back(std::move(owned));
  Flight& admitted = *running_.back();
  if (!allocate(admitted, tokens)) return false;
  scheduled.emplace_back(&admitted, tokens);
  budget -= tokens;
  return true;
}

bool VllmScheduler::kv_landed(Flight& flight) {
  // Scheduler._update_waiting_for_remote_kv: num_computed_tokens is the
  // tokens of the blocks it holds, less one when that is all its tokens (a
  // whole prompt loaded: its last token is computed again, for its logits);
  // cache_blocks caches the full blocks of those tokens, the last one when
  // it is scheduled (allocate_slots caches up to the tokens it computes).
  const std::uint32_t num_tokens = flight.request.prompt + flight.generated;
  if (flight.computed >= num_tokens) flight.computed = flight.prefilled = num_tokens - 1;
  if (!options_.prefix_cache) return true;
  const std::uint32_t full_pages = flight.computed / config_.kv.page_tokens;
  return flight.cached_pages >= full_pages || cache_new_full_blocks(flight, full_pages);
}

bool VllmScheduler::admit_loaded(std::uint32_t& budget, Scheduled& scheduled, bool& stop) {
  // A request whose num_computed_tokens the load set: no prefix lookup, its
  // blocks are its own (Scheduler.schedule skips get_computed_blocks).
  const Flight& head = *waiting_.front();
  const std::uint32_t num_tokens = head.request.prompt + head.generated;
  const std::uint32_t tokens = std::min(num_tokens - head.computed, budget);
  std::unique_ptr<Flight> owned = take_loaded_head(head.computed, tokens, stop);
  if (!owned) return true;
  running_.push_back(std::move(owned));
  Flight& admitted = *running_.back();
  // allocate_slots: slots up to computed + tokens; a whole prompt loaded
  // holds them all (its last token's slot is in its last loaded block), and
  // only caches that block now.
  const std::uint32_t length = admitted.samples[0].length;
  const std::uint32_t end = admitted.computed + tokens;
  if (!(end > length ? allocate(admitted, end - length) : cache_full_blocks(admitted))) {
    return false;
  }
  scheduled.emplace_back(&admitted, tokens);
  budget -= tokens;
  return true;
}

void VllmScheduler::skip_stalled(std::uint64_t needed) {
  std::unique_ptr<Flight> flight = std::move(waiting_.front());
  waiting_.pop_front();  // it holds no block while waiting
  hits_.forget(flight->hits, cache_);
  auto& first = shell_.first_skipped[static_cast<std::size_t>(SkipReason::kPoolTooSmall)];
  if (!first) first = SkippedRequest{flight->request.line, flight->request.id, needed};
  // A request of n > 1 is skipped as a whole, counted once its last child is
  // done with (its siblings that finished released their blocks already).
  // add_request gives every child its request's times.
  flight->times->skipped = true;
  if (--*flight->siblings_left == 0) skipped_stalled(*flight->times);
}

void VllmScheduler::skipped_stalled(const RequestTimes& times) {
  ++sim_.skipped;
  ++sim_.skipped_stalled;
  shell_.request_skipped(times);
}

bool VllmScheduler::step() {
  ++tick_;
  if (offload_ && !offload_step_start()) return false;
  std::uint32_t budget = options_.max_batched_tokens;
  Scheduled& scheduled = scheduled_;
  scheduled.clear();
  bool preempted = false;
  if (!schedule_running(budget, preempted, scheduled)) return false;
  // Scheduler.schedule: no waiting request is scheduled in a step that preempted.
  if (!preempted && !schedule_waiting(budget, scheduled)) return false;
  sim_.max_running = std::max<std::uint64_t>(sim_.max_running, running_.size());
  if (offload_) {
    for (auto [flight, tokens] : scheduled) {
      if (!queue_stores(*flight)) return false;
    }
    take_tier_events();  // the evictions of this step's stores
  }

  // The model runs; Scheduler.update_from_output: a request whose computed
  // tokens catch up with its tokens samples one more; check_stop
  // (vllm/v1/core/sched/utils.py) finishes one that reaches its max_tokens
  // (the trace's output) or num_tokens >= max_model_len (FINISHED_LENGTH_CAPPED;
  // never first here, as never_fits rejects prompt + output > max_model_len).
  bool any_finished = false;
  const std::uint64_t max_model_len = config_.kv.max_seq_tokens;
  for (auto [flight, tokens] : scheduled) {
    const std::uint32_t num_tokens = flight->request.prompt + flight->generated;
    // Prompt computation from (re)admission until a token is sampled, one-token
    // chunks included: a preempted request whose prefix hit covers all but its
    // last token (get_computed_blocks caps the hit at num_tokens - 1)
    // recomputes that token as part of its re-prefill, not as a decode.
    const bool prefill = flight->prefilling;
    // A decode with drafts verifies 1 + K tokens (engine/speculative.h); its
    // KV keeps the tokens it emits.
    schedule_work(*flight, flight->computed,
                  prefill ? tokens : std::max(tokens, shell_.verify_tokens()), prefill);
    flight->computed += tokens;
    if (prefill) sim_.prompt_tokens_computed += tokens;
    if (flight->computed < num_tokens) continue;
    flight->prefilling = false;
    if (flight->generated == 0) {
      first_token(*flight);
    } else if (prefill) {
      shell_.later_token(flight->times.get());  // resumed after a preemption
    }
    const std::uint32_t emitted =
        prefill ? 1
                : shell_.decode_tokens(flight->times.get(), flight->request.line, flight->generated,
                                       flight->request.output - flight->generated);
    flight->generated += emitted;
    sim_.output_tokens += emitted;  // once: a preempted request keeps what it generated
    if (flight->generated >= flight->request.output ||
        std::uint64_t{flight->request.prompt} + flight->generated >= max_model_len) {
      flight->samples[0].done = true;
      any_finished = true;
    }
  }
  // Scheduler._free_request at the end of the step: blocks in reverse order
  // (KVCacheManager.free), uncached ones back to the free queue, cached ones
  // evictable.
  if (any_finished) {
    std::size_t kept = 0;  // the running ones, moved up in order
    for (std::size_t i = 0; i < running_.size(); ++i) {
      Flight& flight = *running_[i];
      if (!flight.samples[0].done) {
        if (kept != i) running_[kept] = std::move(running_[i]);
        ++kept;
        continue;
      }
      trace_hand_off(flight, flight.samples[0]);
      release_sample(flight.samples[0]);
      if (--*flight.siblings_left == 0) {
        if (flight.times && flight.times->skipped) {
          skipped_stalled(*flight.times);  // a sibling stalled (skip_stalled)
        } else {
          ++sim_.finished;
          request_done(flight);
        }
      }
    }
    running_.resize(kept);
  }
  running_samples_ = running_.size();
  return true;
}

}  // namespace kvreplay
