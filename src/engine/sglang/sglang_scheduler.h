// The sglang engine (SPEC 3.1): SGLang's scheduler and radix cache over the
// real pool (engine/sglang/sglang_scheduler.cc, each rule citing the SGLang function
// it comes from, python/sglang/srt/managers/scheduler.py, schedule_policy.py,
// schedule_batch.py and mem_cache/radix_cache.py):
//   - a step runs a prefill batch when one can be formed, else one decode step
//     of every running request (get_next_batch_to_run; no mixed chunks);
//   - the waiting queue is ordered by policy (lpm: longest cached prefix
//     first, fcfs), and PrefillAdder admits requests within the token budgets
//     and a reservation of new_token_ratio x the running requests' remaining
//     output; one request at a time is prefilled in chunks;
//   - prompts enter the radix tree when their prefill (or chunk) ends, every
//     token of a request when it finishes (cache_unfinished_req,
//     cache_finished_req); a request locks the nodes it uses;
//   - when a decode step finds no room, requests are retracted (fewest
//     output tokens first) and re-queued to recompute later;
//   - --offload cpu:SIZE is SGLang's HiCache (--enable-hierarchical-cache,
//     write_through; engine/sglang/radix_cache.h): the tree's pages are copied to a
//     host pool of SIZE as they enter it, a page evicted from the device
//     stays in the tree on the host, and a prompt whose match goes on into
//     the host is loaded back when it is admitted (PrefillAdder.add_one_req:
//     init_load_back). The load runs beside the batch's compute, layer by
//     layer, so the batch's step ends no earlier than the load lands.
// Its gauges, checks (S1-S3) and report section are in engine/sglang/sglang_checks.cc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/invariants.h"
#include "engine/offload/offload_connector.h"
#include "engine/replay/trace_emitter.h"
#include "engine/scheduler.h"
#include "engine/sglang/radix_cache.h"

namespace kvreplay {

// Its KvConnector side: HiCache's host tier (engine/sglang/sglang_hicache.cc).
class SglangScheduler final : public Scheduler, public KvConnector {
 public:
  explicit SglangScheduler(EngineShell& shell);
  ~SglangScheduler() override;

  std::optional<SkipReason> never_fits(const Request& request, std::uint64_t& need) const override;
  void add_request(Request request) override;
  bool step() override;
  SchedulerStats stats() const override {
    return {waiting_.size(), num_running(), tree_.evicted_pages(), cache_resident_blocks()};
  }
  KvConnector* connector() override { return this; }
  // Requests running: the decode batch, those prefilled, the chunked one.
  std::size_t num_running() const;
  void record() override;
  bool check() override;
  const BlockPool& pool() const override { return pool_; }
  // Pages of the tree no request holds, which eviction gives back.
  std::uint32_t cache_resident_blocks() const {
    return static_cast<std::uint32_t>(tree_.evictable_size() / page_);
  }
  const std::optional<BlockId>& null_block() const override { return no_null_block_; }
  const std::vector<KvCacheGroupSpec>& kv_groups() const override { return groups_; }
  std::vector<std::vector<std::vector<BlockId>>> running_group_tables() const override;
  void add_figures(nlohmann::json& report) const override;
  std::optional<std::string> skip_rule(SkipReason reason,
                                       const SkippedRequest& first) const override;
  // --offload: HiCache's host pool, one cpu tier.
  std::size_t offload_tiers() const override { return hicache_ ? 1 : 0; }
  TierGauge offload_gauge(std::size_t t) const override;
  std::optional<double> wake_at() const override;
  bool end_run() override;
  // --emit-trace: a request's row of pages is a kvtrace sequence (its first
  // growth an `admit` on the tree's pages as hits), a page the tree takes a
  // `cache`, an eviction an `uncache`. A request the tree moves onto its own
  // copy of pages the request computed too (cache_unfinished) continues as a
  // new sequence on the tree's pages, its partial last page written again.
  bool attach_trace(TraceEmitter& trace) override;

  const RadixCache& tree() const { return tree_; }
  // --emit-trace: the hit pages of the admits that moved a request onto the
  // tree's copy of its pages (attach_trace), which the simulation's own hits
  // do not count.
  std::uint64_t trace_moved_pages() const { return trace_moved_pages_; }
  // The tree's match of the prompt's named tokens (RadixCache.peek_prefix).
  std::uint32_t cached_prompt_tokens(const Request& request) const override;
  std::uint32_t max_running_requests() const { return max_running_; }
  double new_token_ratio() const { return new_token_ratio_; }

  // SGLang's constants (environment variables there).
  static constexpr std::uint32_t kClipMaxNewTokens = 4096;  // SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
  static constexpr std::uint32_t kRetractDecodeSteps = 20;  // SGLANG_RETRACT_DECODE_STEPS
  static constexpr double kInitNewTokenRatio = 0.7;         // SGLANG_INIT_NEW_TOKEN_RATIO
  static constexpr double kMinNewTokenRatioFactor = 0.14;   // SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
  static constexpr double kNewTokenRatioDecaySteps = 600;   // SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
  static constexpr std::uint32_t kLpmQueueLimit = 128;      // _determine_active_policy
  static constexpr std::uint32_t kInBatchThreshold = 32;    // IN_BATCH_PREFIX_CACHING_*_THRESHOLD

 private:
  friend struct SglangFaults;  // tests plant faults
  struct Req;
  enum class AddResult : std::uint8_t { kContinue, kNoToken, kOther };
  class Adder;

  // The KV pages of the i-th running request (fault tests).
  std::vector<BlockId>& running_kv(std::size_t i);
  // step() but HiCache's transfers: a prefill batch, else a decode step.
  bool step_batch();
  bool prefill_step(std::vector<Req*>& batch);
  bool decode_step();
  // get_next_batch_to_run's merge of the last prefill batch into the
  // running batch, and what it does to batch_is_full.
  void merge_prefilled();
  // get_new_batch_prefill: the requests of this step's prefill batch.
  void new_prefill_batch(std::vector<Req*>& batch);
  // SchedulePolicy.calc_priority under lpm.
  void sort_longest_prefix();
  // Req.init_next_round_input: the tokens to fill and the cached prefix.
  void init_next_round(Req& req);
  // alloc_token_slots: evicts (RadixCache.evict) when the free pages are fewer
  // than `tokens` need; false when the pool still cannot give `pages`.
  bool make_room(std::uint64_t tokens, std::uint64_t pages);
  // Grows req's KV by `tokens` (pages from the pool). REQUIRES the room.
  void extend_kv(Req& req, std::uint32_t tokens);
  // Writes the pages of tokens [from, to) on the path ending at `node` into
  // kv (REQUIRES kv covers them).
  void path_pages(const RadixCache::Node* node, std::uint32_t from, std::uint32_t to,
                  std::vector<BlockId>& kv) const;
  // RadixCache.insert of req's first `aligned` tokens (whole pages) with its
  // pages, then frees the request's own pages the tree already had (from
  // tree_len to what insert found present). Returns the tokens present.
  std::uint32_t insert_own(Req& req, std::uint32_t aligned);
  void cache_unfinished(Req& req);
  void cache_finished(Req& req);
  // Empties req's row of pages, uncounted: those from `own_from` on are its
  // own and go back to the pool, those before are the tree's.
  void drop_kv(Req& req, std::size_t own_from);
  // ScheduleBatch.release_req, as retract_decode does it (counted when a
  // retraction, not when a prefill batch puts a request back).
  void release(Req& req, bool retraction);
  void finished(Req& req);
  // check_decode_mem: room for one decode step of the running requests
  // (those of `running_` before `count`), evicting if needed.
  bool decode_room(std::size_t count);
  void retract_decode();
  void count_admission(const Req& req);
  // A waiting request that cannot be admitted with nothing running.
  void skip_stalled();
  // --emit-trace: req's sequence freed, if it has one.
  void trace_free(Req& req);
  // HiCache: the transfers landed by the step's start (writing_check,
  // loading_check) and the writes queued before it started.
  void hicache_step_start();
  // A transfer landed (loading_check, writing_check): its node and figures.
  void hicache_landed(const OffloadConnector::Job& job);
  // The writes the tree issued this step, queued on the host link (with
  // --emit-trace, each a short sequence on the node's path storing its
  // pages), and the host pages it dropped.
  void hicache_step_end();
  // init_load_back of req's host hit; its prefix grows by what loads.
  void load_back(Req& req);

  EngineShell& shell_;
  const RunConfig& config_;
  const SglangOptions& options_;
  SimTotals& sim_;
  std::uint32_t page_;
  BlockPool pool_;
  RadixCache tree_;
  RadixCache waiting_tree_;                    // _compute_prefix_matches's in-batch tree
  bool caching_;                               // no: --no-prefix-cache (SGLang's ChunkCache)
  TraceEmitter* trace_ = nullptr;              // --emit-trace
  std::unique_ptr<OffloadConnector> hicache_;  // --offload: the host pool's link and figures
  std::vector<std::uint64_t> trace_drops_;     // --emit-trace: host pages the tree dropped
  std::uint64_t trace_moved_pages_ = 0;
  InvariantChecker checker_;
  std::vector<std::unique_ptr<Req>> waiting_;
  std::vector<std::unique_ptr<Req>> running_;    // finished ones until the next decode step
  std::unique_ptr<Req> chunked_;                 // Scheduler.chunked_req
  std::vector<std::unique_ptr<Req>> prefilled_;  // last step's prefill batch, to merge
  // The size of last step's prefill batch (Scheduler.last_batch, an extend
  // batch) before its finished and chunked requests were filtered out; 0
  // when the last step ran no prefill batch.
  std::size_t last_prefill_size_ = 0;
  // ScheduleBatch.batch_is_full of the running batch (Scheduler.running_batch):
  // it belongs to that batch object, so it goes when an empty running batch
  // is replaced by the last prefill batch (a new ScheduleBatch, the flag
  // false); see merge_prefilled.
  bool batch_is_full_ = false;
  std::uint32_t max_running_ = 0;
  std::optional<std::uint32_t> chunk_limit_;  // rem_chunk_tokens' start; none: chunking off
  double init_new_token_ratio_ = kInitNewTokenRatio;
  double min_new_token_ratio_ = 0;
  double new_token_ratio_decay_ = 0;
  double new_token_ratio_ = kInitNewTokenRatio;
  std::uint64_t next_uid_ = 0;
  std::map<std::string, std::uint64_t> prefix_ids_;
  std::vector<KvCacheGroupSpec> groups_;
  std::optional<BlockId> no_null_block_;
  // Figures of SGLang's own (the report's "sglang" section).
  std::uint64_t retracted_ = 0;
  std::uint64_t prefill_batches_ = 0;
  std::uint64_t decode_batches_ = 0;
  std::uint64_t chunked_prefills_ = 0;
  std::uint64_t prefill_out_of_memory_ = 0;
  std::uint64_t stalled_ = 0;
  // HiCache: pages loaded back for a request that was then refused, and
  // evicted again (or the request skipped) before it was admitted.
  std::uint64_t loads_unused_ = 0;
  double token_usage_sum_ = 0;
  double token_usage_peak_ = 0;
  double min_ratio_seen_ = kInitNewTokenRatio;
  std::uint64_t in_use_entries_ = 0;    // pages of KV the unfinished requests reference
  std::uint64_t layout_continued_ = 0;  // of those, pages continuing the previous one's block
  std::uint64_t layout_tables_ = 0;     // requests with a page
};

// The engine's entry in the table of engines (engine/sglang/sglang_engine.cc).
struct EngineEntry;
const EngineEntry& sglang_engine();

}  // namespace kvreplay
