// The vllm engine's KVCacheCoordinator and SingleTypeKVCacheManagers
// (engine/vllm/vllm_kv_managers.h). Each rule names the vLLM function it comes
// from (vllm/v1/core/kv_cache_coordinator.py, single_type_kv_cache_manager.py,
// block_pool.py).
#include "engine/vllm/vllm_kv_managers.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace kvreplay {

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

bool SingleTypeKvCacheManager::failed(const Request& request, const char* what, CoreError error) {
  ctx_.violation = Violation{ctx_.sim.steps + 1, request.line, "I1",
                             fmt::format("request {}: {} failed: {}", request.id, what, error)};
  return false;
}

bool SingleTypeKvCacheManager::allocate_new_blocks(SequenceBlockTable& table, std::uint32_t tokens,
                                                   const Request& request) {
  // BlockPool.get_new_blocks pops the free queue, evicting a cached block only
  // when it reaches one (lazy).
  BlockPool& pool = ctx_.pool;
  if (table.append_in_place(tokens, pool)) {
    // The common decode step: the tokens fit the partial last page, which
    // this request holds alone (no block taken, the layout unchanged).
    return true;
  }
  const std::size_t pages_before = table.entries().size();
  count_layout(ctx_.state, table, -1);
  // The free queue holds the uncached free blocks first and the evictable
  // cached ones behind them: pages take the free blocks first, and only then
  // a cached block each, evicted as the queue reaches it.
  const std::uint32_t pt = ctx_.page_tokens;
  std::uint32_t remaining = tokens;
  CoreStatus appended;
  // The partial last page (this request's alone) takes what fits first.
  const std::uint32_t room = table.length() % pt == 0 ? 0 : pt - table.length() % pt;
  if (room > 0) {
    const std::uint32_t chunk = std::min(room, remaining);
    if (!table.append_in_place(chunk, pool)) appended = Unexpected{CoreError::kBlockNotLive};
    remaining -= appended ? chunk : 0;
  }
  if (appended && remaining > 0) {
    // BlockPool.get_new_blocks: the free blocks in the pool's order, then the
    // cached ones, each evicted as the queue reaches it and handed straight
    // to the page (evicting it onto the empty free list and popping it again
    // would give the same block).
    std::vector<BlockId>& blocks = scratch_;
    blocks.clear();
    const auto pages = static_cast<std::uint32_t>(ceil_div(remaining, pt));
    while (blocks.size() < pages && pool.free_count() > 0) blocks.push_back(pool.take_free());
    if (blocks.size() < pages) {
      ctx_.cache.evict_for_reuse(pool, pages - static_cast<std::uint32_t>(blocks.size()), blocks);
    }
    auto taken = blocks.size() < pages
                     ? CoreResult<std::uint32_t>{Unexpected{CoreError::kPoolExhausted}}
                     : table.append_taken(remaining, blocks, pool);
    if (!taken) {
      for (BlockId b : blocks) (void)pool.release(b);  // back to the free list
      appended = Unexpected{taken.error()};
    }
  }
  count_layout(ctx_.state, table, +1);
  if (!appended) return failed(request, "allocate_slots", appended.error());
  ctx_.state.table_entries += table.entries().size() - pages_before;
  ctx_.request_entries += table.entries().size() - pages_before;
  return true;
}

bool SingleTypeKvCacheManager::remove_skipped_blocks(SequenceBlockTable& table,
                                                     std::uint32_t computed,
                                                     const Request& request) {
  // SingleTypeKVCacheManager.remove_skipped_blocks: the pages wholly before
  // the window of the next token give their block back (BlockPool.free_blocks:
  // an uncached one is free, a cached one evictable) and point at the null
  // block, walking back from the last such page until one already is.
  const std::uint32_t skipped = num_skipped_tokens(computed) / ctx_.page_tokens;
  if (skipped == 0) return true;
  const BlockId null = *ctx_.null_block;
  const auto entries = table.entries();
  const auto last = static_cast<std::uint32_t>(std::min<std::size_t>(skipped, entries.size()));
  std::uint32_t first = last;
  while (first > 0 && entries[first - 1] != null) --first;
  if (first == last) return true;
  count_layout(ctx_.state, table, -1);
  std::vector<BlockId>& freed = scratch_;
  freed.clear();
  // free_blocks gets the pages last to first: in the pool's free list the
  // last page comes out first, as releasing them in page order gives.
  for (std::uint32_t page = first; page < last; ++page) {
    auto block = table.skip_page(page, null, ctx_.pool);
    if (!block) {
      count_layout(ctx_.state, table, +1);
      ctx_.violation = Violation{ctx_.sim.steps + 1, request.line, "I1",
                                 fmt::format("request {}: remove_skipped_blocks page {} failed: {}",
                                             request.id, page, block.error())};
      return false;
    }
    freed.push_back(block.value());
  }
  count_layout(ctx_.state, table, +1);
  for (auto it = freed.rbegin(); it != freed.rend(); ++it) {
    ctx_.cache.released(*it, ctx_.pool, ctx_.tick);
  }
  ctx_.state.table_entries -= freed.size();
  ctx_.request_entries -= freed.size();
  ctx_.sim.window_freed_blocks += freed.size();
  return true;
}

std::uint32_t FullAttentionManager::find_longest_cache_hit(
    const std::vector<std::size_t>& ids, std::uint32_t max_length, const CachedPage& cached,
    const std::vector<BlockId>& found, std::vector<std::vector<BlockId>>& hits) const {
  // FullAttentionManager.find_longest_cache_hit: left to right, up to the
  // first page not cached.
  const std::uint32_t pt = ctx_.page_tokens;
  std::uint32_t pages = 0;
  while ((pages + 1) * pt <= max_length && cached(pages)) {
    for (std::size_t g : ids) hits[g].push_back(found[g]);
    ++pages;
  }
  return pages * pt;
}

std::uint32_t SlidingWindowManager::num_skipped_tokens(std::uint32_t computed) const {
  // SlidingWindowManager.get_num_skipped_tokens: the tokens before the window
  // of the next token, max(0, computed - window + 1).
  return computed + 1 > spec_.window_tokens ? computed + 1 - spec_.window_tokens : 0;
}

std::uint32_t SlidingWindowManager::find_longest_cache_hit(
    const std::vector<std::size_t>& ids, std::uint32_t max_length, const CachedPage& cached,
    const std::vector<BlockId>& found, std::vector<std::vector<BlockId>>& hits) const {
  // SlidingWindowManager.find_longest_cache_hit: right to left, the first
  // run of ceil((window - 1) / block) cached pages ends the hit; pages
  // before the run are the null block. Without such a run, the cached
  // pages from page 0 on are the hit.
  const std::uint32_t pt = ctx_.page_tokens;
  const BlockId null = ctx_.null_block.value_or(kInvalidBlock);
  const std::uint32_t needed = (spec_.window_tokens - 1 + pt - 1) / pt;
  const std::uint32_t max_pages = max_length / pt;
  for (std::size_t g : ids) hits[g].assign(max_pages, null);
  std::uint32_t run = 0;
  bool match = false;
  for (std::uint32_t i = max_pages; i-- > 0;) {
    if (!cached(i)) {
      run = 0;
      continue;
    }
    for (std::size_t g : ids) hits[g][i] = found[g];
    ++run;
    if (run >= needed) {
      for (std::size_t g : ids) hits[g].resize(i + run);
      match = true;
      break;
    }
  }
  if (!match) {
    for (std::size_t g : ids) hits[g].resize(run);
  }
  return static_cast<std::uint32_t>(hits[ids[0]].size()) * pt;
}

KvCacheCoordinator::KvCacheCoordinator(const std::vector<KvCacheGroupSpec>& groups,
                                       KvCacheContext ctx)
    : ctx_(ctx) {
  // get_manager_for_kv_cache_spec: one manager per group, by its spec.
  for (const KvCacheGroupSpec& spec : groups) {
    if (spec.attention == KvCacheGroupSpec::kSliding) {
      managers_.push_back(std::make_unique<SlidingWindowManager>(spec, ctx_));
    } else {
      managers_.push_back(std::make_unique<FullAttentionManager>(spec, ctx_));
    }
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto it = std::find_if(
        attention_types_.begin(), attention_types_.end(),
        [&](const std::vector<std::size_t>& ids) { return groups[ids[0]].same_spec(groups[g]); });
    if (it == attention_types_.end()) {
      attention_types_.push_back({g});
    } else {
      it->push_back(g);
    }
  }
  std::stable_partition(attention_types_.begin(), attention_types_.end(),
                        [&](const std::vector<std::size_t>& ids) {
                          return groups[ids[0]].attention == KvCacheGroupSpec::kFull;
                        });
  hits_.resize(groups.size());
  found_.resize(groups.size());
}

bool KvCacheCoordinator::remove_skipped_blocks(GroupTables tables, std::uint32_t computed,
                                               const Request& request) {
  // KVCacheCoordinator.remove_skipped_blocks, called by allocate_slots before
  // it counts the blocks to allocate (even when it then fails): every group's
  // manager in turn (none but a sliding one skips a page).
  if (!ctx_.null_block) return true;
  for (std::size_t g = 0; g < managers_.size(); ++g) {
    if (!managers_[g]->remove_skipped_blocks(tables[g], computed, request)) return false;
  }
  return true;
}

std::optional<std::uint32_t> KvCacheCoordinator::num_blocks_to_allocate(GroupTables tables,
                                                                        std::uint32_t tokens,
                                                                        const Request& request) {
  // KVCacheCoordinator.get_num_blocks_to_allocate: the sum over the groups
  // (a running request has no new hits).
  std::uint32_t needed = 0;
  for (std::size_t g = 0; g < managers_.size(); ++g) {
    const auto more = tables[g].blocks_needed(tokens, ctx_.pool);
    if (!more) {
      ctx_.violation =
          Violation{ctx_.sim.steps + 1, request.line, "I1",
                    fmt::format("request {}: allocate_slots failed: {}", request.id, more.error())};
      return std::nullopt;
    }
    needed += more.value();
  }
  return needed;
}

std::uint64_t KvCacheCoordinator::num_blocks_to_allocate_new(std::uint32_t hit_tokens,
                                                             std::uint32_t tokens) const {
  // SingleTypeKVCacheManager.get_num_blocks_to_allocate of a new request,
  // summed over the groups: the pages of hit + scheduled tokens not covered by
  // the hits or skipped by the window, plus the hits inside the window that
  // are evictable (touching them takes them off the free queue).
  const std::uint32_t pt = ctx_.page_tokens;
  const BlockId null = ctx_.null_block.value_or(kInvalidBlock);
  std::uint64_t needed = 0;
  for (std::size_t g = 0; g < managers_.size(); ++g) {
    const std::vector<BlockId>& hits = hits_[g];
    const std::uint64_t required = ceil_div(std::uint64_t{hit_tokens} + tokens, pt);
    const std::uint64_t skipped = managers_[g]->num_skipped_tokens(hit_tokens) / pt;
    const std::uint64_t covered = std::max<std::uint64_t>(skipped, hits.size());
    needed += required > covered ? required - covered : 0;
    for (std::size_t i = std::min<std::size_t>(skipped, hits.size()); i < hits.size(); ++i) {
      needed += hits[i] != null && ctx_.pool.refcount(hits[i]) == 1 ? 1 : 0;  // the cache's alone
    }
  }
  return needed;
}

std::uint32_t KvCacheCoordinator::find_longest_cache_hit(
    const std::function<PageKey(std::uint32_t)>& key, std::uint32_t max_length) {
  // HybridKVCacheCoordinator.find_longest_cache_hit (UnitaryKVCacheCoordinator's
  // when there is one attention type): each type, full attention first, takes
  // the candidate length or shortens it, until a pass shortens nothing; with
  // one full type and one other, a single pass. A page hits in a type only
  // when it is cached in every group of it (BlockPool.get_cached_block).
  const std::uint32_t pt = ctx_.page_tokens;
  clear_hits();
  const std::vector<std::size_t>* type = nullptr;
  const CachedPage cached_in_all = [&](std::uint32_t page) {
    PageKey k = key(page);
    for (std::size_t g : *type) {
      k.group = static_cast<std::uint32_t>(g);
      auto block = ctx_.cache.find(k);
      if (!block) return false;
      found_[g] = *block;
    }
    return true;
  };
  const bool simple =
      attention_types_.size() == 2 &&
      managers_[attention_types_[0][0]]->spec().attention == KvCacheGroupSpec::kFull;
  std::uint32_t hit_length = max_length;
  std::vector<bool> full_done(attention_types_.size(), false);
  for (;;) {
    std::uint32_t current = hit_length;
    for (std::size_t t = 0; t < attention_types_.size(); ++t) {
      const std::vector<std::size_t>& ids = attention_types_[t];
      const SingleTypeKvCacheManager& manager = *managers_[ids[0]];
      const bool full = manager.spec().attention == KvCacheGroupSpec::kFull;
      if (full && full_done[t]) {
        // Downward closed: the first current / block pages still hit.
        current = current / pt * pt;
        continue;
      }
      type = &ids;
      current = manager.find_longest_cache_hit(ids, current, cached_in_all, found_, hits_);
      if (full) full_done[t] = true;
    }
    if (current >= hit_length) break;
    hit_length = current;
    if (simple) break;
  }
  // The full-attention pages beyond the final length are not hits.
  for (auto& hits : hits_) hits.resize(std::min<std::size_t>(hits.size(), hit_length / pt));
  return hit_length;
}

bool KvCacheCoordinator::install_hits(GroupTables tables, std::uint32_t hit_tokens,
                                      const Request& request, std::uint64_t& shared) {
  // SingleTypeKVCacheManager.allocate_new_computed_blocks, every group: the
  // pages before the window are the null block, the others are touched
  // (BlockPool.touch) and shared.
  const std::uint32_t pt = ctx_.page_tokens;
  const BlockId null = ctx_.null_block.value_or(kInvalidBlock);
  for (std::size_t g = 0; g < managers_.size(); ++g) {
    std::vector<BlockId>& pages = hits_[g];
    const std::uint32_t skipped = managers_[g]->num_skipped_tokens(hit_tokens) / pt;
    for (std::uint32_t i = 0; i < std::min<std::size_t>(skipped, pages.size()); ++i) {
      pages[i] = null;
    }
    for (BlockId b : pages) {
      if (b == null) continue;
      ctx_.cache.touch(b, ctx_.tick);
      ++shared;
    }
    SequenceBlockTable& table = tables[g];
    if (auto installed = table.install_shared_prefix(pages, hit_tokens, ctx_.pool); !installed) {
      ctx_.violation = Violation{ctx_.sim.steps + 1, request.line, "I1",
                                 fmt::format("request {}: install_shared_prefix failed: {}",
                                             request.id, installed.error())};
      return false;
    }
    count_layout(ctx_.state, table, +1);
  }
  return true;
}

CoreStatus KvCacheCoordinator::cache_blocks(GroupTables tables, std::uint32_t page, PageKey key) {
  // SingleTypeKVCacheManager.cache_blocks of every group, in group order:
  // the same block hash, keyed by group (make_block_hash_with_group_id);
  // a page on the null block (skipped by a window) is not cached.
  for (std::size_t g = 0; g < managers_.size(); ++g) {
    const BlockId block = tables[g].entries()[page];
    if (block == *ctx_.null_block) continue;
    key.group = static_cast<std::uint32_t>(g);
    auto inserted = ctx_.cache.insert(key, block, ctx_.pool, ctx_.tick);
    if (!inserted) return Unexpected{inserted.error()};
    ctx_.state.table_entries += inserted.value() ? 1 : 0;
  }
  return {};
}

}  // namespace kvreplay
