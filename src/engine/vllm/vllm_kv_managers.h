// The vllm engine's KV-cache management per attention type, split as vLLM
// splits it: a KvCacheCoordinator (vllm/v1/core/kv_cache_coordinator.py;
// UnitaryKVCacheCoordinator and HybridKVCacheCoordinator in one: one
// attention type is the unitary case) over one SingleTypeKvCacheManager per
// KV-cache group (single_type_kv_cache_manager.py): FullAttentionManager,
// SlidingWindowManager. MLA is a full-attention spec (MLAAttentionSpec is a
// FullAttentionSpec of the latent), managed as full attention. The scheduler
// (engine/vllm/vllm_scheduler.cc) keeps the queues' rules and asks the coordinator
// for every group's blocks; each rule here names the vLLM function it comes from.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/block_pool.h"
#include "core/block_table.h"
#include "engine/paged/prefix_cache.h"
#include "engine/replay/replayer.h"
#include "engine/sim_types.h"
#include "formats/requests/request.h"
#include "model/kv_groups.h"

namespace kvreplay {

// What the managers change besides a request's tables: the scheduler's pool,
// cache and counts (PagedScheduler's members).
struct KvCacheContext {
  std::uint32_t page_tokens = 0;
  BlockPool& pool;
  PrefixCache& cache;
  std::uint64_t& tick;
  ReplayState& state;
  SimTotals& sim;
  std::optional<Violation>& violation;
  std::uint64_t& request_entries;            // valid entries of the running samples' tables
  const std::optional<BlockId>& null_block;  // block 0, held for the life of the pool
};

// A request's tables, one per KV-cache group: group 0's and those of groups
// 1.. (PagedScheduler::Sample's table and more), all of the same length.
struct GroupTables {
  SequenceBlockTable& first;
  std::span<SequenceBlockTable> more;
  SequenceBlockTable& operator[](std::size_t g) const { return g == 0 ? first : more[g - 1]; }
};

// Whether a page is cached in every group of one attention type; the blocks
// found go to the coordinator's per-group scratch.
using CachedPage = std::function<bool(std::uint32_t page)>;

// SingleTypeKVCacheManager: one KV-cache group's blocks.
class SingleTypeKvCacheManager {
 public:
  SingleTypeKvCacheManager(const KvCacheGroupSpec& spec, KvCacheContext& ctx)
      : spec_(spec), ctx_(ctx) {}
  virtual ~SingleTypeKvCacheManager() = default;
  SingleTypeKvCacheManager(const SingleTypeKvCacheManager&) = delete;
  SingleTypeKvCacheManager& operator=(const SingleTypeKvCacheManager&) = delete;

  const KvCacheGroupSpec& spec() const { return spec_; }
  // get_num_skipped_tokens: the tokens before the window of the next token
  // once `computed` are computed; none for full attention.
  virtual std::uint32_t num_skipped_tokens(std::uint32_t computed) const = 0;
  // allocate_new_blocks: `tokens` more in the group's table (no length or
  // cache update).
  bool allocate_new_blocks(SequenceBlockTable& table, std::uint32_t tokens, const Request& request);
  // remove_skipped_blocks: the pages wholly before the window onto the null block.
  bool remove_skipped_blocks(SequenceBlockTable& table, std::uint32_t computed,
                             const Request& request);
  // find_longest_cache_hit of the groups `ids` of this type (this manager's
  // spec), at most max_length tokens: their hits into hits[g] (skipped pages
  // on the null block); returns the hit length in tokens.
  virtual std::uint32_t find_longest_cache_hit(const std::vector<std::size_t>& ids,
                                               std::uint32_t max_length, const CachedPage& cached,
                                               const std::vector<BlockId>& found,
                                               std::vector<std::vector<BlockId>>& hits) const = 0;

 protected:
  [[gnu::cold]] bool failed(const Request& request, const char* what, CoreError error);

  KvCacheGroupSpec spec_;
  KvCacheContext& ctx_;
  std::vector<BlockId> scratch_;  // allocate_new_blocks's new blocks, remove_skipped_blocks's freed
};

// FullAttentionManager (MLA included): every page held, hits left to right.
class FullAttentionManager final : public SingleTypeKvCacheManager {
 public:
  using SingleTypeKvCacheManager::SingleTypeKvCacheManager;
  // SingleTypeKVCacheManager.get_num_skipped_tokens: none for full attention.
  std::uint32_t num_skipped_tokens(std::uint32_t /*computed*/) const override { return 0; }
  std::uint32_t find_longest_cache_hit(const std::vector<std::size_t>& ids,
                                       std::uint32_t max_length, const CachedPage& cached,
                                       const std::vector<BlockId>& found,
                                       std::vector<std::vector<BlockId>>& hits) const override;
};

// SlidingWindowManager: the pages in the window held, hits right to left.
class SlidingWindowManager final : public SingleTypeKvCacheManager {
 public:
  using SingleTypeKvCacheManager::SingleTypeKvCacheManager;
  std::uint32_t num_skipped_tokens(std::uint32_t computed) const override;
  std::uint32_t find_longest_cache_hit(const std::vector<std::size_t>& ids,
                                       std::uint32_t max_length, const CachedPage& cached,
                                       const std::vector<BlockId>& found,
                                       std::vector<std::vector<BlockId>>& hits) const override;
};

// KVCacheCoordinator: every group's manager, asked in group order.
class KvCacheCoordinator {
 public:
  KvCacheCoordinator(const std::vector<KvCacheGroupSpec>& groups, KvCacheContext ctx);
  KvCacheCoordinator(const KvCacheCoordinator&) = delete;  // the managers hold ctx_
  KvCacheCoordinator& operator=(const KvCacheCoordinator&) = delete;

  std::size_t num_groups() const { return managers_.size(); }
  std::uint32_t num_skipped_tokens(std::size_t g, std::uint32_t computed) const {
    return managers_[g]->num_skipped_tokens(computed);
  }
  // allocate_new_blocks: `tokens` more in every group's table.
  bool allocate_new_blocks(GroupTables tables, std::uint32_t tokens, const Request& request) {
    for (std::size_t g = 0; g < managers_.size(); ++g) {
      if (!managers_[g]->allocate_new_blocks(tables[g], tokens, request)) return false;
    }
    return true;
  }
  bool remove_skipped_blocks(GroupTables tables, std::uint32_t computed, const Request& request);
  // get_num_blocks_to_allocate of a running request (no new hits); nullopt
  // after recording a violation.
  std::optional<std::uint32_t> num_blocks_to_allocate(GroupTables tables, std::uint32_t tokens,
                                                      const Request& request);
  // get_num_blocks_to_allocate of a new request holding the hits of
  // find_longest_cache_hit (hit_tokens).
  std::uint64_t num_blocks_to_allocate_new(std::uint32_t hit_tokens, std::uint32_t tokens) const;
  // find_longest_cache_hit: the hits per group, kept for the two calls
  // below (skipped pages on the null block); returns the hit tokens. `key` is a page's cache key
  // (group 0).
  std::uint32_t find_longest_cache_hit(const std::function<PageKey(std::uint32_t)>& key,
                                       std::uint32_t max_length);
  void clear_hits() {
    for (auto& hits : hits_) hits.clear();
  }
  // allocate_new_computed_blocks: the hits of hit_tokens (> 0) into every
  // group's (empty) table; `shared` counts the blocks shared.
  bool install_hits(GroupTables tables, std::uint32_t hit_tokens, const Request& request,
                    std::uint64_t& shared);
  // cache_blocks of every group for one full page under `key` (group 0's).
  CoreStatus cache_blocks(GroupTables tables, std::uint32_t page, PageKey key);

 private:
  KvCacheContext ctx_;
  std::vector<std::unique_ptr<SingleTypeKvCacheManager>> managers_;  // per group
  // Group ids per attention spec, full attention first
  // (HybridKVCacheCoordinator.verify_and_split_kv_cache_groups).
  std::vector<std::vector<std::size_t>> attention_types_;
  std::vector<std::vector<BlockId>> hits_;  // per group, find_longest_cache_hit's
  std::vector<BlockId> found_;              // per group, a page's blocks
};

}  // namespace kvreplay
