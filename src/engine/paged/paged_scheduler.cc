#include "engine/paged/paged_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <deque>
#include <string>

namespace kvreplay {

std::optional<PageKey> PagedScheduler::request_page_key(const Request& request,
                                                        std::uint32_t page) const {
  const std::uint64_t end = (std::uint64_t{page} + 1) * config_.kv.page_tokens;
  if (end > request.prompt) return std::nullopt;
  if (!request.hash_ids.empty()) {
    const std::uint64_t block = request.hash_block_tokens;
    const std::uint64_t k = (end - 1) / block;
    if (k >= request.hash_ids.size()) return std::nullopt;
    return PageKey{request.hash_ids[k], static_cast<std::uint32_t>(end - k * block)};
  }
  if (!request.prefix.empty() && end <= request.prefix_tokens) {
    auto it = prefix_ids_.find(request.prefix);
    if (it == prefix_ids_.end()) return std::nullopt;
    return PageKey{kPrefixChainBase + it->second, static_cast<std::uint32_t>(end)};
  }
  return std::nullopt;
}

std::uint32_t PagedScheduler::cached_prompt_tokens(const Request& request) const {
  if (!paged() || !shell_.options.prefix_cache) return 0;
  std::uint32_t tokens = 0;
  for (std::uint32_t page = 0;; ++page) {
    const auto key = request_page_key(request, page);
    if (!key || !cache_.find(*key)) break;
    tokens = (page + 1) * config_.kv.page_tokens;
  }
  return tokens;
}

std::optional<ReceivedKv> PagedScheduler::receive_kv(const Request& request) {
  if (!paged() || !shell_.options.prefix_cache || hybrid_) return std::nullopt;
  name_prefix(request);
  ReceivedKv received;
  const std::uint32_t pt = config_.kv.page_tokens;
  for (std::uint32_t page = 0; (std::uint64_t{page} + 1) * pt + 1 <= request.prompt; ++page) {
    const auto key = request_page_key(request, page);
    if (!key) break;
    if (const auto hit = cache_.find(*key)) {
      // Cached here: not transferred, but held as the request's local hit is
      // (allocate_slots touches it), so that no eviction for a later page
      // takes it.
      if (!pool_.retain(*hit)) break;
      cache_.touch(*hit, tick_);
      received.held.push_back(*hit);
      ++received_[*hit];
      continue;
    }
    BlockId b = kInvalidBlock;
    if (pool_.free_count() > 0) {
      b = pool_.take_free();
    } else {
      std::vector<BlockId> out;
      if (cache_.evict_for_reuse(pool_, 1, out) == 0) break;  // the rest is computed here
      b = out.front();
    }
    pool_.set_filled(b, pt);  // a whole page of KV arrives
    if (shell_.options.kv_events) {
      cache_.log_parent(page == 0 ? std::nullopt : request_page_key(request, page - 1));
    }
    if (auto cached = cache_.insert(*key, b, pool_, tick_); !cached || !cached.value()) {
      (void)pool_.release(b);
      break;
    }
    received.held.push_back(b);
    ++received.transferred;
    ++received_[b];
    // --emit-trace: the page the prefill side staged lands in b, cached.
    if (trace_ != nullptr) trace_->receive(request.tag, page, b);
  }
  return received;
}

void PagedScheduler::release_received(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    auto it = received_.find(b);
    if (it == received_.end()) continue;
    if (--it->second == 0) received_.erase(it);
    (void)pool_.release(b);  // the cache's reference stays
    cache_.released(b, pool_, tick_);
  }
}

bool PagedScheduler::attach_trace(TraceEmitter& trace) {
  if (!paged() || hybrid_) return false;
  trace_ = &trace;
  cache_.log_evictions(&trace.evictions());
  return true;
}

void PagedScheduler::trace_cached(const Sample& sample, std::uint32_t from, std::uint32_t to) {
  if (trace_ == nullptr || sample.trace_seq == TraceEmitter::kNoSeq) return;
  const std::span<const BlockId> entries = sample.table.entries();
  to = std::min<std::uint32_t>(to, static_cast<std::uint32_t>(entries.size()));
  for (std::uint32_t page = from; page < to; ++page) {
    const BlockId b = entries[page];
    if (b != kInvalidBlock && cache_.is_cached(b) && !trace_->named(b)) {
      trace_->cache(sample.trace_seq, page, b);
    }
  }
}

PagedScheduler::PagedScheduler(EngineShell& shell, PagedRules rules)
    : shell_(shell),
      config_(shell.config),
      options_(shell.options),
      sim_(shell.sim),
      totals_(shell.totals),
      state_(shell.state),
      violation_(shell.violation),
      tick_(shell.tick),
      pool_(config_.kv.pool_blocks, config_.alloc_order),
      cache_(options_.evict, config_.kv.pool_blocks, rules.cache_duplicates,
             config_.kv.page_tokens),
      tier_hit_all_full_pages_(rules.tier_hit_all_full_pages) {
  watermark_blocks_ = static_cast<std::uint32_t>(
      std::floor(options_.watermark * static_cast<double>(config_.kv.pool_blocks)));
  if (paged() && (rules.null_block || config_.alloc_order == AllocOrder::kVllm)) {
    // BlockPool.__init__ (vllm/v1/core/block_pool.py) takes block 0 off the
    // free queue as the null block: it never holds KV, and N - 1 blocks do.
    // The vllm engine always does; --alloc-order vllm does under generic too.
    auto null_block = pool_.allocate();
    if (null_block) null_block_ = null_block.value();
  }
  groups_ = options_.kv_groups.empty() ? config_.kv_groups : options_.kv_groups;
  if (groups_.empty()) {
    groups_.push_back(KvCacheGroupSpec{KvCacheGroupSpec::kFull, 0, config_.kv.layers});
  }
  hybrid_ = groups_.size() > 1 || groups_[0].attention == KvCacheGroupSpec::kSliding;
  if (options_.kv_events) cache_.log_changes(&shell_.events.gpu);
  if (options_.offload.any()) {
    offload_ =
        std::make_unique<OffloadConnector>(options_.offload, kv_block_bytes(config_.kv, groups_));
  }
}

PagedScheduler::~PagedScheduler() = default;

std::shared_ptr<RequestTimes> PagedScheduler::new_times(const Request& request) {
  return std::make_shared<RequestTimes>(request_times(request));
}

void PagedScheduler::record() {
  state_.live_sequences = running_samples_;
  // The null block (filled 0) is neither used nor wasted: used_blocks.
  record_event(state_, totals_, used_blocks(), pool_.filled_total(), config_.kv.page_tokens);
  record_in_use(state_.used - cache_resident_blocks(), cache_resident_blocks());
  // The report's sharing.saved_blocks_at_peak (and the summary's) is the
  // simulation's figure, taken at the in-use peak; replay's definition counts
  // cache entries as table entries, which a prefix cache makes exceed the pool.
  totals_.saved_blocks_at_peak = static_cast<std::int64_t>(sim_.saved_blocks_at_peak);
}

SequenceBlockTable PagedScheduler::new_table() const {
  return SequenceBlockTable(config_.kv.pages_per_seq(), config_.kv.page_tokens);
}

void PagedScheduler::count_admission(const Flight& flight, std::uint32_t num_tokens,
                                     std::size_t hit_blocks, std::uint32_t hit_tokens,
                                     bool readmission) {
  const Request& request = flight.request;
  if (paged() && options_.prefix_cache) {
    // KVCacheManager.record_prefix_cache_stats: num_tokens and hits, a
    // preempted request's apart (PrefixCacheStats).
    (readmission ? sim_.preempted_queries : sim_.queries) += num_tokens;
    (readmission ? sim_.preempted_hits : sim_.hits) += hit_tokens;
  }
  if (readmission) return;
  if (flight.times) flight.times->cached_tokens = std::max(flight.times->cached_tokens, hit_tokens);
  // The hit rates count each request once: never its recomputation.
  sim_.query_tokens += request.prompt;
  sim_.hit_tokens += hit_tokens;
  sim_.hit_blocks += hit_blocks;
  sim_.hit_rate_sum += static_cast<double>(hit_tokens) / static_cast<double>(request.prompt);
  ++sim_.hit_rate_requests;
}

bool PagedScheduler::install_hits(Flight& flight, const std::vector<BlockId>& hits,
                                  std::uint32_t hit_tokens) {
  flight.samples.clear();
  flight.samples.push_back(Sample{new_table(), hit_tokens, 0, false, 0, 0, {}});
  if (hits.empty()) return true;
  // Hit blocks leave the eviction candidates (BlockPool.touch) before any allocation.
  cache_.touch_all(hits, tick_);
  SequenceBlockTable& table = flight.samples[0].table;
  if (auto installed = table.install_shared_prefix(hits, hit_tokens, pool_); !installed) {
    violation_ = Violation{sim_.steps + 1, flight.request.line, "I1",
                           fmt::format("request {}: install_shared_prefix failed: {}",
                                       flight.request.id, installed.error())};
    return false;
  }
  ++totals_.prefix_installs;
  totals_.shared_pages_installed += hits.size();
  state_.logical_tokens += hit_tokens;
  state_.table_entries += hits.size();
  request_entries_ += hits.size();
  count_layout(state_, table, +1);
  return true;
}

bool PagedScheduler::room_beside_hits(Flight& flight, std::uint64_t needed) {
  // Free blocks and evictable cached ones, less the hits that are evictable
  // (touching them takes them off the free queue). The hits are counted only
  // when the bounds leave the answer open.
  const std::vector<BlockId>& hits = flight.hits.blocks;
  const std::uint64_t available = pool_.free_count() + cache_.evictable();
  const std::uint64_t wanted = needed + watermark_blocks_;
  if (available >= wanted + hits.size()) return true;  // admitted: its hits need no tracking
  // The flight waits, or may: its hits tracked from now on.
  hits_.track(flight.hits, cache_);
  if (available < wanted) return false;
  // The hits are the tracked flight's, watched in the cache: those that are
  // evictable (held by the cache alone) are counted as they change.
  const std::uint64_t evictable_hits = cache_.watched_evictable();
  // Recounted under --check every (and always in debug builds, which assert).
#ifdef NDEBUG
  const bool recount_now = options_.check.mode == CheckPolicy::Mode::kEvery;
#else
  const bool recount_now = true;
#endif
  if (recount_now) {
    std::uint64_t recount = 0;
    for (BlockId b : hits) recount += pool_.refcount(b) == 1 ? 1 : 0;
    assert(recount == evictable_hits);
    if (recount != evictable_hits && !violation_) {
      violation_ = Violation{sim_.steps + 1, 0, "I1",
                             fmt::format("a waiting request's evictable hits counted {}, "
                                         "recounted {}",
                                         evictable_hits, recount)};
    }
  }
  return available - evictable_hits >= wanted;
}

void PagedScheduler::release_sample(Sample& sample) {
  state_.logical_tokens -= sample.length;
  sample.length = 0;
  // KVCacheCoordinator.free: group by group, in group order.
  for (std::size_t g = 0; g < 1 + sample.more.size(); ++g) {
    SequenceBlockTable& table = group_table(sample, g);
    count_layout(state_, table, -1);
    // The released entries, handed over rather than copied.
    std::vector<BlockId>& blocks = release_scratch_;
    blocks.clear();
    (void)table.release_all(pool_, blocks);  // tables built by this simulator are consistent
    // Pages on the null block (skipped by a sliding window) were uncounted
    // then; only a hybrid run's tables hold it.
    const auto skipped = static_cast<std::size_t>(
        hybrid_ ? std::count(blocks.begin(), blocks.end(), *null_block_) : 0);
    state_.table_entries -= blocks.size() - skipped;
    request_entries_ -= blocks.size() - skipped;
    // Last page first: a sequence's tail is evicted before its shared prefix.
    cache_.released_last_first(blocks, pool_, tick_);
    if (trace_ != nullptr && g == 0 && sample.trace_seq != TraceEmitter::kNoSeq) {
      trace_->free(sample.trace_seq);
      // A block the trace's cache took that the prefix cache does not hold
      // (a loaded page it never cached) goes with the sequence.
      for (BlockId b : blocks) {
        if (trace_->named(b) && !cache_.is_cached(b)) trace_->uncache(b);
      }
    }
  }
  sample.trace_seq = TraceEmitter::kNoSeq;
}

void PagedScheduler::record_in_use(std::uint32_t in_use, std::uint32_t resident) {
  sim_.in_use_sum += in_use;
  sim_.peak_cache_resident = std::max(sim_.peak_cache_resident, resident);
  if (sim_.steps > 1 && in_use <= sim_.peak_in_use) return;
  sim_.peak_in_use = in_use;
  const std::uint64_t referenced = std::min<std::uint64_t>(request_entries_, usable_blocks());
  sim_.saved_blocks_at_peak = referenced > in_use ? referenced - in_use : 0;
}

bool PagedScheduler::check() {
  if (!paged()) return true;
  table_refs_.clear();
  holds_.clear();
  std::deque<std::string> labels;
  // Running requests, those loading their KV from an offload tier, and those
  // whose KV landed, waiting to run (every other waiting request holds no table).
  std::vector<const Flight*> holders;
  for (const auto& flight : running_) holders.push_back(flight.get());
  for (const auto& flight : loading_) holders.push_back(flight.get());
  for (const auto& flight : waiting_) {
    if (!flight->samples.empty()) holders.push_back(flight.get());
  }
  for (const Flight* flight : holders) {
    for (std::size_t k = 0; k < flight->samples.size(); ++k) {
      if (flight->samples[k].done) continue;
      labels.push_back(fmt::format("request {} sample {}", flight->request.id, k));
      table_refs_.push_back({&flight->samples[k].table, labels.back(),
                             hybrid_ ? null_block_.value_or(kInvalidBlock) : kInvalidBlock});
      // Every KV-cache group's table: pages skipped by a window hold the null block.
      for (std::size_t g = 1; g <= flight->samples[k].more.size(); ++g) {
        labels.push_back(fmt::format("request {} group {}", flight->request.id, g));
        table_refs_.push_back(
            {&flight->samples[k].more[g - 1], labels.back(), null_block_.value_or(kInvalidBlock)});
      }
    }
  }
  cache_.holds(holds_);
  if (null_block_) holds_.push_back(*null_block_);
  for (const auto& [b, count] : received_) holds_.insert(holds_.end(), count, b);
  for (const auto& [b, count] : pinned_) holds_.insert(holds_.end(), count, b);
  ++totals_.checks;
  auto found = checker_.check(pool_, config_.kv.page_tokens, table_refs_, holds_);
  if (!found && options_.prefix_cache) found = cache_.check(pool_);
  if (!found && options_.prefix_cache) {
    const HitList* tracked = nullptr;
    for (const auto& flight : waiting_) {
      if (hits_.tracked() != 0 && flight->hits.track_id == hits_.tracked()) tracked = &flight->hits;
    }
    found = hits_.check(tracked, cache_);
  }
  if (!found) return check_offload();
  violation_ = Violation{sim_.steps, 0, found->invariant, found->message};
  return false;
}

std::vector<std::vector<std::vector<BlockId>>> PagedScheduler::running_group_tables() const {
  std::vector<std::vector<std::vector<BlockId>>> out;
  for (const auto& flight : running_) {
    for (const Sample& sample : flight->samples) {
      if (sample.done) continue;
      auto& tables = out.emplace_back();
      for (std::size_t g = 0; g < groups_.size(); ++g) {
        const SequenceBlockTable& table = group_table(sample, g);
        tables.emplace_back(table.entries().begin(), table.entries().end());
      }
    }
  }
  return out;
}

}  // namespace kvreplay
