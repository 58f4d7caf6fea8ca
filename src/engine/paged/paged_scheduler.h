// PagedScheduler: what the generic and vllm engines share behind the
// Scheduler seam. Both keep a request's KV in block tables over the real pool
// (BlockPool) with a vLLM-style prefix cache of full pages (PrefixCache), and
// both look a waiting request's hits up again on each admission attempt
// (WaitingHits). Each engine derives from it with its own queues' rules
// (engine/generic/generic_scheduler.h, engine/vllm/vllm_scheduler.h); an engine of another
// design (a radix tree, say) derives from Scheduler directly.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/block_pool.h"
#include "core/block_table.h"
#include "core/invariants.h"
#include "engine/offload/offload_connector.h"
#include "engine/paged/prefix_cache.h"
#include "engine/paged/waiting_hits.h"
#include "engine/replay/trace_emitter.h"
#include "engine/scheduler.h"

namespace kvreplay {

// What a paged engine's pool and cache keep as the engine it imitates does.
struct PagedRules {
  // Block 0 is held as the null block (vLLM's BlockPool.__init__); under
  // --alloc-order vllm it is whatever the engine.
  bool null_block = false;
  // The prefix cache keeps a key's duplicate blocks (PrefixCache).
  bool cache_duplicates = false;
  // --offload: a tier hit may take every full page of the request's tokens,
  // its last page too when they fill it (vLLM's
  // OffloadingConnectorScheduler.get_num_new_matched_tokens), and the engine's
  // kv_landed leaves the last token to compute; else it stops a page short of
  // the tokens' end, as the GPU hit does (the generic engine).
  bool tier_hit_all_full_pages = false;
};

// Its KvConnector side: P/D receiving and vLLM's OffloadingConnector.
class PagedScheduler : public Scheduler, public KvConnector {
 public:
  PagedScheduler(EngineShell& shell, PagedRules rules);
  ~PagedScheduler() override;

  // Waiting requests count those waiting for their KV from an offload tier.
  SchedulerStats stats() const override {
    return {waiting_.size() + loading_.size(), running_.size(), cache_.evictions(),
            cache_resident_blocks()};
  }
  KvConnector* connector() override { return this; }
  bool receiving() const override { return !received_.empty(); }
  std::size_t loading_requests() const override { return loading_.size(); }
  void record() override;
  bool check() override;
  const BlockPool& pool() const override { return pool_; }
  // Cached blocks no request holds, which the cache gives back on demand.
  std::uint32_t cache_resident_blocks() const { return paged() ? cache_.evictable() : 0; }
  const std::optional<BlockId>& null_block() const override { return null_block_; }
  const std::vector<KvCacheGroupSpec>& kv_groups() const override { return groups_; }
  std::vector<std::vector<std::vector<BlockId>>> running_group_tables() const override;
  const PrefixCache& prefix_cache() const { return cache_; }
  // The cache's consecutive hits from the first prompt page (group 0's keys):
  // what a KV-event index of this engine would report.
  std::uint32_t cached_prompt_tokens(const Request& request) const override;
  std::optional<ReceivedKv> receive_kv(const Request& request) override;
  void release_received(std::span<const BlockId> blocks) override;
  bool attach_trace(TraceEmitter& trace) override;
  // --offload (engine/paged/paged_offload.cc): the tiers' landings, the "offload"
  // section and prefix_cache.hits_by_tier, the tiers' gauges.
  std::optional<double> wake_at() const override;
  bool end_run() override;
  void add_figures(nlohmann::json& report) const override;
  std::size_t offload_tiers() const override { return offload_ ? offload_->num_tiers() : 0; }
  TierGauge offload_gauge(std::size_t t) const override;
  // The offload tiers, or nullptr without --offload (tests look inside).
  const OffloadConnector* offload() const { return offload_.get(); }

 protected:
  struct Sample {
    SequenceBlockTable table;     // paged only
    std::uint32_t length = 0;     // tokens of KV held
    std::uint32_t generated = 0;  // output tokens produced
    bool done = false;
    std::uint64_t region = 0;        // contiguous: first slot of its region
    std::uint64_t region_slots = 0;  // contiguous: size of its region
    // vllm with several KV-cache groups: the tables of groups 1.. (group 0's
    // is `table`), all of the same length.
    std::vector<SequenceBlockTable> more;
    // --emit-trace: the sample's sequence in the trace, once it has grown.
    std::uint64_t trace_seq = TraceEmitter::kNoSeq;
  };
  struct Flight {
    // What every step reads first, together (a step visits every running
    // flight twice): vLLM's num_computed_tokens, the output so far, the table.
    std::uint32_t computed = 0;
    std::uint32_t generated = 0;
    std::uint32_t cached_pages = 0;  // leading prompt pages already offered to the cache
    std::uint32_t preemptions = 0;
    // vllm: from (re)admission until its computed tokens catch up with its
    // tokens (a token is sampled): every token computed then is prompt
    // computation, a one-token chunk too (a recompute after a full prefix
    // hit, or the last token of a chunked re-prefill), not a decode.
    bool prefilling = true;
    std::vector<Sample> samples;
    Request request;
    std::shared_ptr<RequestTimes> times;  // shared by a request's children (vllm)
    std::vector<std::uint32_t> counted;   // output tokens counted, per sample (survives preemption)
    bool admitted_before = false;
    std::uint32_t prefilled = 0;
    // Prefix-cache hits found while waiting, re-verified (not re-searched) on
    // every admission attempt (WaitingHits).
    HitList hits;
    // vllm: one table per request (n > 1 fanned out into children). uid keys
    // the request's own pages in the cache, prompt_uid the prompt pages its
    // siblings share.
    std::uint64_t uid = 0;
    std::uint64_t prompt_uid = 0;
    std::shared_ptr<std::uint32_t> siblings_left;  // children of the request not finished
    // --offload (engine/paged/paged_offload.cc): the block keys of its full pages so
    // far (up to the first page without a key), the pages each tier was asked to store (vLLM's
    // next_stored_block_idx), its loads in flight, and whether its KV landed
    // from the tiers (it is admitted then without a new lookup).
    std::vector<std::uint64_t> offload_keys;
    std::array<std::uint32_t, kMaxOffloadTiers> offload_stored{};
    std::uint32_t loads_in_flight = 0;
    bool kv_loaded = false;
  };

  bool paged() const { return shell_.options.allocator == AllocatorKind::kPaged; }
  // The pool's used blocks less the null block, and the blocks that can hold KV.
  std::uint32_t used_blocks() const { return pool_.used_count() - null_blocks(); }
  std::uint32_t usable_blocks() const { return pool_.total() - null_blocks(); }
  std::uint32_t null_blocks() const { return null_block_ ? 1 : 0; }
  SequenceBlockTable new_table() const;
  static std::shared_ptr<RequestTimes> new_times(const Request& request);
  // The id a trace's named prefix has in the cache's keys (first seen, first numbered).
  void name_prefix(const Request& request) {
    if (!request.prefix.empty()) prefix_ids_.emplace(request.prefix, prefix_ids_.size());
  }
  // A flight's chunk of `tokens` after `context` cached, for the cost model.
  void schedule_work(Flight& flight, std::uint64_t context, std::uint64_t tokens, bool prefill) {
    shell_.schedule_work(flight.times.get(), context, tokens, prefill);
  }
  void first_token(Flight& flight) { shell_.first_token(flight.times); }
  void request_done(Flight& flight) { shell_.request_done(flight.times); }
  // An admission's prefix-cache figures: PrefixCacheStats (a readmission of a
  // preempted request apart) and, at the first admission, the hit rates.
  void count_admission(const Flight& flight, std::uint32_t num_tokens, std::size_t hit_blocks,
                       std::uint32_t hit_tokens, bool readmission);
  // A new table for the flight's first sample holding `hits` (touched first).
  bool install_hits(Flight& flight, const std::vector<BlockId>& hits, std::uint32_t hit_tokens);
  // Whether `needed` blocks (and the watermark) can be had besides the hits
  // of `flight` (WaitingHits::room_beside).
  bool room_beside_hits(Flight& flight, std::uint64_t needed);
  // Releases a sample's tables (every group's), the cache told last page first.
  void release_sample(Sample& sample);
  // Group g's table of a sample (0: sample.table).
  static SequenceBlockTable& group_table(Sample& sample, std::size_t g) {
    return g == 0 ? sample.table : sample.more[g - 1];
  }
  static const SequenceBlockTable& group_table(const Sample& sample, std::size_t g) {
    return g == 0 ? sample.table : sample.more[g - 1];
  }
  // page_key of a request not yet in flight; a named prefix the engine has
  // not seen has no key.
  std::optional<PageKey> request_page_key(const Request& request, std::uint32_t page) const;
  // The cache key a trace names for a prompt page (its hash ids, or its
  // named prefix), or nullopt when it names none.
  // Inline: admission calls it for every page it looks up.
  std::optional<PageKey> page_key(const Flight& flight, std::uint32_t page) const;
  // Cache keys of a trace's named prefixes (above every hash id).
  static constexpr std::uint64_t kPrefixChainBase = 1ull << 63;
  void record_in_use(std::uint32_t in_use, std::uint32_t resident);
  // --emit-trace: the sample grew by `tokens` (its length counts them): new to
  // the trace, it is admitted with its first `hit_pages` pages as hits
  // (cached blocks, all named); else the tokens are appended.
  void trace_grew(Sample& sample, std::uint32_t tokens, std::uint32_t hit_pages) {
    if (trace_ == nullptr) return;
    if (sample.trace_seq == TraceEmitter::kNoSeq) {
      sample.trace_seq = trace_->admit(sample.length, sample.table.entries().first(hit_pages));
    } else {
      trace_->append(sample.trace_seq, tokens);
    }
  }
  // --emit-trace on a disaggregated fleet's prefill instance: a finished
  // prompt's pages that its decode side may receive (receive_kv's: the full
  // pages before its last token) staged in the trace's link tier before the
  // sample's free (TraceEmitter::stage).
  void trace_hand_off(const Flight& flight, const Sample& sample) {
    if (trace_ == nullptr || !trace_->hands_off() || sample.trace_seq == TraceEmitter::kNoSeq) {
      return;
    }
    const std::uint32_t pt = config_.kv.page_tokens;
    const std::uint32_t pages = flight.request.prompt == 0 ? 0 : (flight.request.prompt - 1) / pt;
    trace_->stage(flight.request.tag, sample.trace_seq, std::min(pages, sample.length / pt));
  }
  // --emit-trace: the pages [from, to) of the sample that the cache holds now
  // and the trace's does not.
  void trace_cached(const Sample& sample, std::uint32_t from, std::uint32_t to);

  // --offload (engine/paged/paged_offload.cc): vLLM's OffloadingConnector, the
  // scheduler side, shared by the engines that keep a paged prefix cache.
  enum class TierHit : std::uint8_t { kNone, kLoading, kDeferred, kNoRoom };
  // The key of a flight's page in the tiers and the KV events; nullopt for a
  // page the engine caches under no key. The paged engines key a prompt page
  // as the trace names it (page_key); vllm keys every page.
  virtual std::optional<PageKey> offload_page_key(const Flight& flight, std::uint32_t page) const {
    return page_key(flight, page);
  }
  // The flight's load from the tiers landed (its table holds `computed`
  // tokens of KV, its length): the engine caches the loaded pages as it
  // caches computed ones; false on a violation.
  virtual bool kv_landed(Flight& flight) = 0;
  // Blocks for `tokens` more tokens in the flight's first sample, for a load
  // to fill (room_beside_hits found them); false on a violation.
  virtual bool allocate_loaded(Flight& flight, std::uint32_t tokens) = 0;
  // The flight's offload_keys grown to its first `pages` pages, or up to its
  // first page without a key: how many it holds then.
  std::uint32_t offload_keys(Flight& flight, std::uint32_t pages);
  // At a step's start: the queued stores start, the landed transfers complete,
  // and the requests whose loads all landed rejoin the front of the queue.
  bool offload_step_start();
  // The waiting head, with its GPU hits found for its first `num_tokens`
  // tokens, continues its prefix in the tiers: it takes blocks for the pages
  // found and loads them (kLoading, the flight moved to loading_), or waits
  // for another request's load of them (kDeferred), or cannot get the blocks
  // (kNoRoom); kNone: no tier hit.
  TierHit load_from_tiers(Flight& flight, std::uint32_t num_tokens, bool& failed);
  // The waiting head, whose KV landed (kv_loaded), taken off the queue
  // when `tokens` more after its `computed` fit beside the blocks it holds;
  // else nullptr, and `stop` unless a request behind it gave its loaded KV
  // back (nothing running: give_back_loaded), to be tried again.
  std::unique_ptr<Flight> take_loaded_head(std::uint32_t computed, std::uint32_t tokens,
                                           bool& stop);
  // With nothing running: the last waiting request holding loaded KV, behind
  // the head unless `head_too`, gives its blocks back; false when none does.
  bool give_back_loaded(bool head_too = false);
  // An admission found no room with nothing running: a waiting request
  // holding loaded KV gives it back (give_back_loaded), and the admission is
  // tried again; false (nothing given back) when the queue must stop.
  bool idle_give_back() { return offload_ && running_.empty() && give_back_loaded(); }
  // The flight's pages that are full once this step runs go to each tier
  // (OffloadingConnectorScheduler._get_reqs_to_store).
  bool queue_stores(Flight& flight);
  void unpin(BlockId b);
  // A tier's index in a kvtrace (--emit-trace): its medium's.
  std::size_t trace_tier(std::size_t t) const {
    return medium_info(offload_->tier_options(t).medium).trace_tier;
  }
  // The tiers' events to shell_.events (--kv-events), or dropped.
  void take_tier_events();
  // The tiers' invariants, and the GPU blocks pinned by stores.
  bool check_offload();

  EngineShell& shell_;
  const RunConfig& config_;
  const SimOptions& options_;
  SimTotals& sim_;
  ReplayTotals& totals_;
  ReplayState& state_;
  std::optional<Violation>& violation_;
  std::uint64_t& tick_;
  BlockPool pool_;
  PrefixCache cache_;
  WaitingHits hits_;
  InvariantChecker checker_;
  std::deque<std::unique_ptr<Flight>> waiting_;
  // Requests whose KV is being loaded from an offload tier (vLLM's
  // WAITING_FOR_REMOTE_KVS), in the order their loads were issued: they hold
  // their tables (the hits and the blocks the loads fill) and run nothing.
  std::vector<std::unique_ptr<Flight>> loading_;
  // GPU blocks read by offload stores in flight, each with its pins: held
  // (a pool reference each) until the store lands, as vLLM delays freeing a
  // finished request's blocks until its stores are done.
  std::unordered_map<BlockId, std::uint32_t> pinned_;
  std::vector<std::unique_ptr<Flight>> running_;
  std::map<std::string, std::uint64_t> prefix_ids_;
  std::uint64_t running_samples_ = 0;
  std::uint64_t request_entries_ = 0;     // valid entries of the running samples' tables
  std::optional<BlockId> null_block_;     // vllm: block 0, held for the life of the pool
  std::vector<KvCacheGroupSpec> groups_;  // never empty
  bool hybrid_ = false;                   // several groups, or a sliding one
  std::uint32_t watermark_blocks_ = 0;
  bool tier_hit_all_full_pages_ = false;  // PagedRules::tier_hit_all_full_pages
  std::vector<TableRef> table_refs_;
  std::vector<BlockId> holds_;
  // Blocks held for transfers in flight (receive_kv), each with its holds.
  std::unordered_map<BlockId, std::uint32_t> received_;
  std::vector<BlockId> release_scratch_;         // a released table's entries (release_sample)
  TraceEmitter* trace_ = nullptr;                // --emit-trace
  std::unique_ptr<OffloadConnector> offload_;    // --offload
  std::vector<std::size_t> tier_of_;             // load_from_tiers's, reused
  std::vector<std::unique_ptr<Flight>> landed_;  // offload_step_start's, reused
};

inline std::optional<PageKey> PagedScheduler::page_key(const Flight& flight,
                                                       std::uint32_t page) const {
  const Request& request = flight.request;
  const std::uint64_t end = (std::uint64_t{page} + 1) * config_.kv.page_tokens;
  if (end > request.prompt) return std::nullopt;
  if (!request.hash_ids.empty()) {
    const std::uint64_t block = request.hash_block_tokens;
    const std::uint64_t k = (end - 1) / block;
    if (k >= request.hash_ids.size()) return std::nullopt;
    return PageKey{request.hash_ids[k], static_cast<std::uint32_t>(end - k * block)};
  }
  if (!request.prefix.empty() && end <= request.prefix_tokens) {
    return PageKey{kPrefixChainBase + prefix_ids_.at(request.prefix),
                   static_cast<std::uint32_t>(end)};
  }
  return std::nullopt;
}

}  // namespace kvreplay
