// The vllm engine (SPEC 3.1): vLLM v1's synchronous scheduler and KV cache
// manager over the real pool, tables and prefix cache
// (engine/vllm/vllm_scheduler.cc, each rule citing the vLLM function it comes
// from; each KV-cache group's blocks in engine/vllm/vllm_kv_managers.h): block 0 is the null block,
// allocation per step for the tokens scheduled, the last running request preempted and re-prefilled
// with the tokens it generated, nothing admitted in a step that preempted, finished requests freed
// at the end of the step, every full block cached when allocated, n > 1 fanned out.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/paged/paged_scheduler.h"
#include "engine/vllm/vllm_kv_managers.h"

namespace kvreplay {

class VllmScheduler final : public PagedScheduler {
 public:
  explicit VllmScheduler(EngineShell& shell);

  std::optional<SkipReason> never_fits(const Request& request, std::uint64_t& need) const override;
  std::optional<std::string> skip_rule(SkipReason reason,
                                       const SkippedRequest& first) const override;
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
  // Hybrid admission of the head of the queue; stop when it cannot get its blocks.
  bool admit_hybrid(std::uint32_t& budget, Scheduled& scheduled, bool& stop);
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
  // The sample's tables, one per group, for the coordinator.
  static GroupTables tables(Sample& sample) { return GroupTables{sample.table, sample.more}; }

  // --offload (engine/paged/paged_offload.cc): the waiting head's KV landed, it is
  // admitted with its table as loaded.
  bool admit_loaded(std::uint32_t& budget, Scheduled& scheduled, bool& stop);
  std::optional<PageKey> offload_page_key(const Flight& flight, std::uint32_t page) const override {
    return vllm_key(flight, page);
  }
  bool kv_landed(Flight& flight) override;
  bool allocate_loaded(Flight& flight, std::uint32_t tokens) override {
    return coordinator_.allocate_new_blocks(tables(flight.samples[0]), tokens, flight.request);
  }

  std::uint64_t next_uid_ = 0;  // request identities for cache keys
  // Every group's blocks, per attention type (engine/vllm/vllm_kv_managers.h).
  KvCacheCoordinator coordinator_;
  Scheduled scheduled_;  // step's, reused
};

// The engine's entry in the table of engines (engine/vllm/vllm_engine.cc).
struct EngineEntry;
const EngineEntry& vllm_engine();

}  // namespace kvreplay
