// The trtllm engine (SPEC 3.1): TensorRT-LLM's KV cache manager and batch
// scheduler over the real pool (engine/trtllm/trtllm_scheduler.cc, each rule
// citing the TensorRT-LLM function it comes from: cpp/tensorrt_llm/
// batch_manager/kvCacheManager.cpp, capacityScheduler.cpp,
// microBatchScheduler.cpp, and the PyTorch executor's loop,
// tensorrt_llm/_torch/pyexecutor/py_executor.py and resource_manager.py):
//   - a step runs the capacity scheduler over the active requests
//     (GUARANTEED_NO_EVICT: running requests first, then new ones while the
//     blocks every scheduled request needs to finish fit, the first that
//     does not stopping admission; MAX_UTILIZATION: in order while the next
//     step's blocks fit, pausing the newest started request when one does
//     not), then the micro-batch scheduler (max_batch_size requests,
//     max_num_tokens tokens: one a generation request, a context request its
//     prompt or, with chunked context, a chunk);
//   - a request's first context chunk allocates its whole prompt's blocks,
//     reusing the longest chain of stored blocks whose tokens match
//     (loadOrAllocateBlocks), a partially matched block by copy (or taken,
//     when a free leaf); each generated token takes a block when it starts
//     one (addToken);
//   - full prompt blocks are stored for reuse when the context ends
//     (storeContextBlocks), every block with its tokens when the request
//     ends (releaseBlocks, tail first);
//   - a paused request (MAX_UTILIZATION) frees its blocks and later
//     recomputes its prompt and the tokens it generated;
//   - --offload cpu:SIZE is the host tier (KvCacheConfig.host_cache_size):
//     a stored block taken for reuse moves there instead of leaving the
//     tree, and a match on it copies it back (onboardBlock). The copies are
//     timed on the cpu tier's link (engine/offload/offload_connector.h): a
//     step waits for the blocks it brings back; the moves out take the
//     other direction's link and delay nothing.
// The block tree and its free queue: engine/trtllm/block_tree.h.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/invariants.h"
#include "engine/kv_connector.h"
#include "engine/offload/offload_connector.h"
#include "engine/scheduler.h"
#include "engine/trtllm/block_tree.h"

namespace kvreplay {

struct EngineEntry;
// Its entry in the table of engines (engine/trtllm/trtllm_engine.cc).
const EngineEntry& trtllm_engine();

class TrtllmScheduler final : public Scheduler, public KvConnector {
 public:
  explicit TrtllmScheduler(EngineShell& shell);
  ~TrtllmScheduler() override;

  std::optional<SkipReason> never_fits(const Request& request, std::uint64_t& need) const override;
  void add_request(Request request) override;
  bool step() override;
  SchedulerStats stats() const override {
    return {num_waiting(), num_running(), tree_.evicted(), tree_.free_stored_blocks()};
  }
  std::size_t num_waiting() const;
  std::size_t num_running() const;
  // Why a request was skipped, in TensorRT-LLM's terms (max_seq_len,
  // max_num_tokens without chunked context, GUARANTEED_NO_EVICT's blocks).
  std::optional<std::string> skip_rule(SkipReason reason,
                                       const SkippedRequest& first) const override;
  void record() override;
  bool check() override;
  const BlockPool& pool() const override { return pool_; }
  const std::optional<BlockId>& null_block() const override { return no_null_block_; }
  const std::vector<KvCacheGroupSpec>& kv_groups() const override { return groups_; }
  std::vector<std::vector<std::vector<BlockId>>> running_group_tables() const override;
  void add_figures(nlohmann::json& report) const override;
  // --offload: the host tier.
  KvConnector* connector() override { return host_ ? this : nullptr; }
  std::size_t offload_tiers() const override { return host_ ? 1 : 0; }
  TierGauge offload_gauge(std::size_t t) const override;
  bool end_run() override;

  const TrtBlockTree& tree() const { return tree_; }
  std::uint64_t pauses() const { return pauses_; }
  std::uint64_t partial_copies() const { return partial_copies_; }
  std::uint64_t partial_claims() const { return partial_claims_; }
  std::uint64_t skipped_for_reuse() const { return skipped_for_reuse_; }

 private:
  friend struct TrtllmFaults;  // tests plant faults
  struct Req;

  // Capacity scheduling: the requests that may run this step (in the order
  // the micro-batch scheduler sees them) and those to pause.
  void capacity_no_evict(std::vector<Req*>& fitting);
  void capacity_max_utilization(std::vector<Req*>& fitting, std::vector<Req*>& paused);
  // beneficialToSkip: a first context chunk whose first block not stored is
  // one an earlier scheduled context request computes waits for it.
  bool beneficial_to_skip(const Req& req, std::vector<TrtBlockKey>& contributed) const;
  void seed_contributed(std::vector<TrtBlockKey>& contributed) const;
  // findNewContextBlock: the first full prompt block not stored, if any.
  std::optional<TrtBlockKey> new_context_block(const Req& req) const;
  // getRemainingBlocksToCompletion / getNeededBlocksOneStep.
  std::uint32_t remaining_blocks(const Req& req) const;
  std::uint32_t needed_one_step(const Req& req) const;
  // MicroBatchScheduler::operator(): the contexts (with their chunks) and
  // the generation requests of this step.
  void micro_batch(const std::vector<Req*>& fitting, std::vector<Req*>& contexts,
                   std::vector<Req*>& generations);
  // addSequence / loadOrAllocateBlocks; false when no block is free.
  bool add_sequence(Req& req);
  bool take_block(Req& req);
  void push_block(Req& req, BlockId b);  // the figures record() reports kept with it
  // storeContextBlocks (full prompt blocks) and storeBlocksForReuse (every
  // block of the first `tokens` tokens).
  void store_blocks(Req& req, std::uint32_t tokens, bool full_only);
  // removeSequence: stored for reuse, then released tail first.
  void remove_sequence(Req& req);
  // LlmRequest::pause: the request starts over with its tokens as prompt.
  void pause(Req& req);
  void finished(Req& req);
  void count_admission(Req& req);
  void fill(Req& req, std::uint32_t from, std::uint32_t to);
  bool fail(std::string invariant, std::string message);
  // The host tier's copies: those landed by the step's start counted, those
  // this step made timed (a step waits for the blocks brought back).
  void host_step_start();
  void host_step_end();

  EngineShell& shell_;
  const RunConfig& config_;
  const TrtllmOptions& options_;
  SimTotals& sim_;
  std::uint32_t tpb_;
  std::uint32_t max_batch_size_;
  std::uint32_t max_num_tokens_;
  bool reuse_;
  BlockPool pool_;
  TrtBlockTree tree_;
  std::vector<TrtBlockTree::Change> changes_;
  std::unique_ptr<OffloadConnector> host_;  // --offload: the host tier's link and figures
  InvariantChecker checker_;
  std::deque<std::unique_ptr<Req>> queue_;    // arrived, not yet active
  std::vector<std::unique_ptr<Req>> active_;  // the executor's active requests, in order
  std::uint64_t next_uid_ = 0;
  std::map<std::string, std::uint64_t> prefix_ids_;
  std::vector<KvCacheGroupSpec> groups_;
  std::optional<BlockId> no_null_block_;
  // Figures of TensorRT-LLM's own (the report's "trtllm" section).
  std::uint64_t pauses_ = 0;
  std::uint64_t reused_blocks_ = 0;
  std::uint64_t missed_blocks_ = 0;
  std::uint64_t partial_copies_ = 0;
  std::uint64_t partial_claims_ = 0;
  std::uint64_t skipped_for_reuse_ = 0;
  std::uint64_t context_chunks_ = 0;
  std::uint64_t max_active_ = 0;
  // The started requests' blocks (entries), those continuing the block
  // before them, the requests with a block, and their computed tokens.
  std::uint64_t entries_ = 0;
  std::uint64_t continued_ = 0;
  std::uint64_t tables_ = 0;
  std::uint64_t logical_ = 0;
  std::size_t started_ = 0;  // active requests with a sequence
  bool any_done_ = false;    // a request finished this step
};

}  // namespace kvreplay
