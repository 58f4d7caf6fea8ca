// The vllm engine (SPEC 3.1): vLLM v1's synchronous scheduler and KV cache
// manager over the real pool, tables and prefix cache
// (engine/vllm_scheduler.cc, each rule citing the vLLM function it comes
// from): block 0 is the null block, allocation per step for the tokens
// scheduled, the last running request preempted and re-prefilled with the
// tokens it generated, nothing admitted in a step that preempted, finished
// requests freed at the end of the step, every full block cached when
// allocated, n > 1 fanned out.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/paged_scheduler.h"

namespace kvreplay {

class VllmScheduler final : public PagedScheduler {
 public:
  explicit VllmScheduler(EngineShell& shell);

  std::optional<SkipReason> never_fits(const Request& request, std::uint64_t& need) const override;
  // ParentRequest: n > 1 fanned out into n children.
  void add_request(Request request) override;
  bool step() override;

 private:
  using Scheduled = std::vector<std::pair<Flight*, std::uint32_t>>;
  // Hybrid: skips the waiting head, whose allocation (`needed` blocks) fails
  // with nothing running (admit_hybrid), and counts it once all its children
  // are done with (skipped_stalled).
  void skip_stalled(std::uint64_t needed);
  void skipped_stalled(const RequestTimes& times);
  bool schedule_running(std::uint32_t& budget, bool& preempted, Scheduled& scheduled);
  bool schedule_waiting(std::uint32_t& budget, Scheduled& scheduled);
  bool allocate(Flight& flight, std::uint32_t tokens);
  // What allocate does once every group's table took the tokens: the
  // sample's length, the counts, the pages that became full cached.
  bool appended(Flight& flight, std::uint32_t tokens);
  // allocate's work in one group's table (no length or cache update).
  bool append_group(Flight& flight, SequenceBlockTable& table, std::uint32_t tokens);
  // SlidingWindowManager.get_num_skipped_tokens of group g (0 for full).
  std::uint32_t skipped_tokens(std::size_t g, std::uint32_t computed) const;
  // SingleTypeKVCacheManager.remove_skipped_blocks, every sliding group.
  bool remove_skipped_blocks(Flight& flight);
  // Hybrid admission of the head of the queue; stop when it cannot get its blocks.
  bool admit_hybrid(std::uint32_t& budget, Scheduled& scheduled, bool& stop);
  // HybridKVCacheCoordinator.find_longest_cache_hit: hits per group into
  // hybrid_hits_ (skipped pages on the null block); returns the hit tokens.
  std::uint32_t find_longest_cache_hit(const Flight& flight, std::uint32_t max_length);
  bool install_hybrid_hits(Flight& flight, std::uint32_t hit_tokens);
  void preempt(std::unique_ptr<Flight> victim);
  // BlockPool.cache_full_blocks after a step's allocation. Inline: most steps
  // fill no page (a decode token in a partial page) and cache nothing.
  bool cache_full_blocks(Flight& flight) {
    if (!options_.prefix_cache) return true;
    const std::uint32_t full_pages = flight.samples[0].table.length() / config_.kv.page_tokens;
    return flight.cached_pages >= full_pages || cache_new_full_blocks(flight, full_pages);
  }
  // Caches the pages from flight.cached_pages up to full_pages.
  bool cache_new_full_blocks(Flight& flight, std::uint32_t full_pages);
  // Records cache_new_full_blocks's failure to cache a page; returns false.
  [[gnu::cold]] bool caching_failed(const Flight& flight, std::uint32_t page, CoreError error);
  PageKey vllm_key(const Flight& flight, std::uint32_t page) const;

  std::uint64_t next_uid_ = 0;  // request identities for cache keys
  // Group ids per attention spec, full attention first (HybridKVCacheCoordinator
  // .verify_and_split_kv_cache_groups).
  std::vector<std::vector<std::size_t>> attention_types_;
  std::vector<std::vector<BlockId>> hybrid_hits_;  // per group, find_longest_cache_hit's
  std::vector<BlockId> alloc_scratch_;             // allocate's blocks for new pages
  Scheduled scheduled_;                            // step's, reused
};

}  // namespace kvreplay
