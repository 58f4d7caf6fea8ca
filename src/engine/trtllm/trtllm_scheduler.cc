// The trtllm engine, rule by rule. Each rule names the TensorRT-LLM function
// it comes from: cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp
// (KVCacheManager, WindowBlockManager), capacityScheduler.cpp,
// microBatchScheduler.cpp, cpp/include/tensorrt_llm/batch_manager/
// scheduledBlocksManager.h and llmRequest.h, and the PyTorch executor
// (tensorrt_llm/_torch/pyexecutor/py_executor.py, resource_manager.py), as of
// TensorRT-LLM 1.x. Where kvreplay differs, the comment says so.
#include "engine/trtllm/trtllm_scheduler.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "core/enum_names.h"
#include "engine/key_spaces.h"
#include "engine/trtllm/trtllm_req.h"

namespace kvreplay {

namespace {

constexpr EnumName<CapacityPolicy> kCapacityNames[] = {
    {CapacityPolicy::kGuaranteedNoEvict, "guaranteed-no-evict"},
    {CapacityPolicy::kMaxUtilization, "max-utilization"},
};
static_assert(enum_names_unique(kCapacityNames));

constexpr std::uint32_t kOpenEnd = std::numeric_limits<std::uint32_t>::max();

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

// The id of the token at `pos` of `seq`, for positions that only grow:
// `cursor` is the run index reached so far.
std::uint64_t id_at(const TokenRuns& seq, std::uint32_t pos, std::size_t& cursor) {
  while (cursor < seq.size() && seq[cursor].end <= pos) ++cursor;
  return cursor < seq.size() ? seq[cursor].id : ~std::uint64_t{0};
}

}  // namespace

std::string_view to_string(CapacityPolicy policy) {
  return enum_name(kCapacityNames, policy);
}
std::optional<CapacityPolicy> parse_capacity_policy(std::string_view name) {
  return enum_parse(kCapacityNames, name);
}
std::vector<std::string> capacity_policy_names() {
  return enum_names(kCapacityNames);
}

TrtllmScheduler::TrtllmScheduler(EngineShell& shell)
    : shell_(shell),
      config_(shell.config),
      options_(shell.options.trtllm),
      sim_(shell.sim),
      tpb_(std::max<std::uint32_t>(shell.config.kv.page_tokens, 1)),
      max_batch_size_(std::max<std::uint32_t>(shell.options.max_seqs, 1)),
      max_num_tokens_(std::max<std::uint32_t>(shell.options.max_batched_tokens, 1)),
      reuse_(shell.options.prefix_cache),
      pool_(shell.config.kv.pool_blocks, shell.config.alloc_order),
      tree_(&pool_, tpb_) {
  groups_ = config_.kv_groups;
  if (groups_.empty()) {
    groups_.push_back(KvCacheGroupSpec{KvCacheGroupSpec::kFull, 0, config_.kv.layers});
  }
  // KVCacheEventManager: stored and removed blocks (--kv-events).
  if (shell.options.kv_events) tree_.log_changes(&changes_);
  if (shell.options.offload.any()) {
    // KvCacheConfig.host_cache_size: --offload's one cpu tier, in blocks of
    // every layer (the secondary pool has the primary's block layout).
    const std::uint64_t block = kv_block_bytes(config_.kv, groups_);
    host_ = std::make_unique<OffloadConnector>(shell.options.offload, block);
    const std::uint64_t blocks =
        shell.options.offload.tiers[0].bytes / std::max<std::uint64_t>(block, 1);
    tree_.enable_host(static_cast<std::uint32_t>(
        std::min<std::uint64_t>(blocks, std::numeric_limits<std::uint32_t>::max())));
  }
}

TrtllmScheduler::~TrtllmScheduler() = default;

std::size_t TrtllmScheduler::num_waiting() const {
  return queue_.size() + active_.size() - started_;
}

std::size_t TrtllmScheduler::num_running() const {
  return started_;
}

std::optional<SkipReason> TrtllmScheduler::never_fits(const Request& request,
                                                      std::uint64_t& need) const {
  // The executor refuses a request past max_seq_len, and (chunked context
  // off) a prompt above max_num_tokens, which no batch could hold. A prompt
  // of no token has no context to run.
  const std::uint64_t total = std::uint64_t{request.prompt} + request.output;
  if (request.prompt == 0 || total > config_.kv.max_seq_tokens) {
    need = total;
    return SkipReason::kTooLong;
  }
  if (!options_.enable_chunked_context && request.prompt > max_num_tokens_) {
    need = request.prompt;
    return SkipReason::kTooLong;
  }
  // GUARANTEED_NO_EVICT admits a request whose blocks to completion fit
  // the free blocks: more than the pool never do.
  const std::uint64_t blocks = ceil_div(total, tpb_);
  if (blocks > pool_.total()) {
    need = blocks;
    return SkipReason::kPoolTooSmall;
  }
  return std::nullopt;
}

void TrtllmScheduler::add_request(Request request) {
  // The trace names each prompt token by its hash block (or named prefix);
  // the rest of the prompt, and the output, are the request's own.
  TokenRuns prompt = named_prompt_runs(request, prefix_ids_);
  const std::uint32_t named = prompt.empty() ? 0 : prompt.back().end;
  if (named < request.prompt) prompt.push_back(TokenRun{kOwnKeyBase + next_uid_++, request.prompt});
  // n > 1: the LLM API's n samples are child requests of their own
  // (LlmRequest::createChildRequest), sharing the prompt through reuse.
  const std::uint32_t n = request.n;
  auto left = std::make_shared<std::uint32_t>(n);
  auto times = std::make_shared<RequestTimes>(request_times(request));
  for (std::uint32_t k = 0; k < n; ++k) {
    auto req = std::make_unique<Req>();
    req->request = request;
    req->request.n = 1;
    req->seq = prompt;
    req->seq.push_back(TokenRun{kOwnKeyBase + next_uid_++, kOpenEnd});
    req->times = times;
    req->siblings_left = left;
    req->prompt = request.prompt;
    req->max_new = request.output;
    queue_.push_back(std::move(req));
  }
}

std::uint32_t TrtllmScheduler::remaining_blocks(const Req& req) const {
  // KVCacheManager::getRemainingBlocksToCompletion: the prompt's full blocks
  // and the blocks of prompt + max_new_tokens, less those allocated.
  const std::uint64_t context = req.prompt / tpb_;
  const std::uint64_t total = ceil_div(std::uint64_t{req.prompt} + req.max_new, tpb_);
  const std::uint64_t alloc = req.blocks.size();
  if (alloc < context) return static_cast<std::uint32_t>(total - alloc);
  return static_cast<std::uint32_t>(total > alloc ? total - alloc : 0);
}

std::uint32_t TrtllmScheduler::needed_one_step(const Req& req) const {
  // KVCacheManager::getNeededBlocksOneStep: a first context chunk needs its
  // whole prompt's blocks, a generation step a block when its token starts
  // one, a later context chunk none (its blocks were allocated).
  if (!req.has_seq) return static_cast<std::uint32_t>(ceil_div(req.prompt, tpb_));
  if (!req.generating) return 0;
  // With drafts, the 1 + K tokens a verify may keep (engine/speculative.h).
  const std::uint64_t past = req.num_tokens;
  return static_cast<std::uint32_t>(ceil_div(past + shell_.verify_tokens(), tpb_) -
                                    ceil_div(past, tpb_));
}

std::optional<TrtBlockKey> TrtllmScheduler::new_context_block(const Req& req) const {
  // WindowBlockManager::findNewContextBlock: the prompt's full blocks walked
  // down the tree; the first not stored, named by the prefix it ends.
  if (req.walked_version == tree_.version() && req.walked_prompt == req.prompt) return req.walked;
  req.walked_version = tree_.version();
  req.walked_prompt = req.prompt;
  req.walked.reset();
  BlockId parent = TrtBlockTree::kRoot;
  std::size_t cursor = 0;
  for (std::uint32_t start = 0; start + tpb_ <= req.prompt; start += tpb_) {
    const std::uint64_t last = id_at(req.seq, start + tpb_ - 1, cursor);
    auto m = tree_.find_exact(parent, start, start + tpb_, last);
    if (!m) {
      req.walked = block_key_of(req.seq, start, start + tpb_);
      break;
    }
    parent = m->block;
  }
  return req.walked;
}

void TrtllmScheduler::seed_contributed(std::vector<TrtBlockKey>& contributed) const {
  // prefillWithChunkedContextsAlreadyExecuting: the context requests past
  // their first chunk contribute their first block not yet stored.
  if (!reuse_) return;
  for (const auto& r : active_) {
    if (!r->has_seq || r->generating) continue;
    if (auto key = new_context_block(*r)) contributed.push_back(std::move(*key));
  }
}

bool TrtllmScheduler::beneficial_to_skip(const Req& req,
                                         std::vector<TrtBlockKey>& contributed) const {
  // beneficialToSkip / oneManagerBeneficialToSkip: a first context chunk
  // whose first new block an earlier scheduled context request computes
  // waits a step to reuse it. A key is its block's tokens, which name their
  // whole prefix (the run ids chain).
  if (!reuse_ || req.has_seq) return false;
  auto key = new_context_block(req);
  if (!key) return false;
  auto same = [&](const TrtBlockKey& k) { return k == *key; };
  if (std::any_of(contributed.begin(), contributed.end(), same)) return true;
  contributed.push_back(std::move(*key));
  return false;
}

void TrtllmScheduler::capacity_no_evict(std::vector<Req*>& fitting) {
  // GuaranteedNoEvictScheduler::impl: the running (generating) requests
  // first, their blocks to completion reserved out of the free blocks
  // (NoEvictScheduledBlocksManager); then the others in order while theirs
  // fit, the first that does not ending the pass.
  std::vector<TrtBlockKey> contributed;
  seed_contributed(contributed);
  std::int64_t available = tree_.free_blocks();
  std::vector<Req*> pending;
  for (const auto& r : active_) {
    if (fitting.size() >= max_batch_size_) break;
    if (r->generating) {
      fitting.push_back(r.get());
      available -= remaining_blocks(*r);
    } else {
      pending.push_back(r.get());
    }
  }
  for (Req* r : pending) {
    if (beneficial_to_skip(*r, contributed)) {
      ++skipped_for_reuse_;
      continue;
    }
    if (fitting.size() >= max_batch_size_) break;
    const std::int64_t need = remaining_blocks(*r);
    if (need > available) break;
    fitting.push_back(r);
    available -= need;
  }
}

void TrtllmScheduler::capacity_max_utilization(std::vector<Req*>& fitting,
                                               std::vector<Req*>& paused) {
  // MaxUtilizationScheduler::operator(): in order, a request fits while the
  // blocks of this step fit the free blocks (startScheduling,
  // MaxUtilizationScheduledBlocksManager); when one does not, the last
  // started request not yet scheduled is paused (schedulingRemoveSequence:
  // the blocks it alone holds count as free) and the request is tried again;
  // with none to pause, the pass ends.
  std::vector<TrtBlockKey> contributed;
  seed_contributed(contributed);
  std::int64_t free = tree_.free_blocks();
  std::int64_t scheduled = 0;
  std::vector<Req*> list;
  for (const auto& r : active_) list.push_back(r.get());
  std::vector<std::uint32_t> scheduling_refs;
  std::size_t end = list.size();
  for (std::size_t i = 0; i < end;) {
    Req* r = list[i];
    if (beneficial_to_skip(*r, contributed)) {
      ++skipped_for_reuse_;
      ++i;
      continue;
    }
    const std::int64_t need = needed_one_step(*r);
    if (fitting.size() < max_batch_size_ && scheduled + need <= free) {
      fitting.push_back(r);
      scheduled += need;
      ++i;
      continue;
    }
    std::size_t k = end;
    while (k > i && !list[k - 1]->has_seq) --k;
    if (k == i) break;
    Req* victim = list[k - 1];
    if (scheduling_refs.empty()) scheduling_refs.assign(pool_.total(), kOpenEnd);
    for (BlockId b : victim->blocks) {
      if (scheduling_refs[b] == kOpenEnd) scheduling_refs[b] = tree_.holders(b);
      if (--scheduling_refs[b] == 0) ++free;
    }
    paused.push_back(victim);
    end = k - 1;
  }
}

void TrtllmScheduler::micro_batch(const std::vector<Req*>& fitting, std::vector<Req*>& contexts,
                                  std::vector<Req*>& generations) {
  // MicroBatchScheduler::operator(): a generation request takes a token of
  // max_num_tokens, a context request its remaining prompt (the whole of it
  // without chunking, the first that does not fit ending the batch); at most
  // max_batch_size requests.
  std::uint64_t batch_tokens = 0;
  std::uint32_t scheduled = 0;
  std::vector<Req*> to_chunk;
  std::uint64_t chunked_tokens = 0;
  for (Req* r : fitting) {
    if (!r->generating) {
      r->chunk = r->prompt - r->context_pos;
      if (!options_.enable_chunked_context) {
        if (batch_tokens + r->chunk > max_num_tokens_) break;
        contexts.push_back(r);
        batch_tokens += r->chunk;
      } else {
        to_chunk.push_back(r);
        chunked_tokens += r->chunk;
      }
    } else {
      // Draft tokens count towards max_num_tokens (engine/speculative.h).
      const std::uint32_t verify = shell_.verify_tokens();
      if (batch_tokens + verify > max_num_tokens_) break;
      generations.push_back(r);
      batch_tokens += verify;
    }
    if (++scheduled >= max_batch_size_) break;
  }
  // setCtxRequestsChunkSize<kFIRST_COME_FIRST_SERVED>: when the contexts do
  // not all fit what generation left, each in order takes what is left, a
  // cut chunk rounded down to whole blocks (chunkUnitSize = tokens_per_block).
  if (chunked_tokens > max_num_tokens_ - std::min<std::uint64_t>(batch_tokens, max_num_tokens_)) {
    std::uint64_t capacity =
        max_num_tokens_ - std::min<std::uint64_t>(batch_tokens, max_num_tokens_);
    for (Req* r : to_chunk) {
      const std::uint32_t suggested = r->chunk;
      std::uint64_t actual = std::min<std::uint64_t>(capacity, suggested);
      if (actual != suggested) actual = actual / tpb_ * tpb_;
      r->chunk = static_cast<std::uint32_t>(actual);
      capacity -= actual;
    }
  }
  for (Req* r : to_chunk) {
    if (r->chunk > 0) contexts.push_back(r);
  }
}

void TrtllmScheduler::push_block(Req& req, BlockId b) {
  if (req.blocks.empty()) ++tables_;
  if (!req.blocks.empty() && req.blocks.back() + 1 == b) ++continued_;
  ++entries_;
  req.blocks.push_back(b);
}

bool TrtllmScheduler::take_block(Req& req) {
  // WindowBlockManager::getFreeBlock.
  auto b = tree_.take_free();
  if (!b) return false;
  pool_.set_filled(*b, 0);
  push_block(req, *b);
  return true;
}

bool TrtllmScheduler::add_sequence(Req& req) {
  // KVCacheManager::addSequence -> WindowBlockManager::addSequence ->
  // loadOrAllocateBlocks: the prompt's ceil(prompt / tokens_per_block)
  // blocks, keyed by the tokens [0, prompt - 1) (the last token's KV is
  // recomputed). Down the tree from the root, a block whose tokens are
  // stored is reused (held); a partial match (a stored block holding fewer
  // tokens, or sharing only its first ones) is reused by copying its tokens
  // into a new block when it is held or has children, else taken from the
  // tree; after a miss or a partial match, new blocks.
  const std::uint32_t usable = req.prompt - 1;
  const auto blocks = static_cast<std::uint32_t>(ceil_div(req.prompt, tpb_));
  BlockId parent = TrtBlockTree::kRoot;
  bool searching = reuse_;
  std::uint32_t matched = 0;
  std::size_t cursor = 0;
  req.loaded = 0;
  for (std::uint32_t bi = 0; bi < blocks; ++bi) {
    const std::uint32_t start = bi * tpb_;
    std::optional<TrtBlockTree::Match> m;
    if (searching && start < usable && tree_.has_children(parent)) {
      const std::uint32_t end = std::min(start + tpb_, usable);
      m = tree_.find_exact(parent, start, end, id_at(req.seq, end - 1, cursor));
      if (!m && options_.enable_partial_reuse) {
        m = tree_.find(parent, block_key_of(req.seq, start, end), true,
                       options_.copy_on_partial_reuse);
      }
    }
    if (!m) {
      searching = false;
      ++missed_blocks_;
      if (!take_block(req)) return false;
      continue;
    }
    matched += m->tokens;
    ++reused_blocks_;
    const bool host = tree_.on_host(m->block);
    if (host) req.loaded += m->tokens;
    if (!m->partial) {
      // onboardBlock: a host block comes back to the GPU first.
      BlockId b = m->block;
      if (host) {
        auto onboarded = tree_.onboard(b);
        if (!onboarded) return false;
        b = *onboarded;
        pool_.set_filled(b, tpb_);
      } else {
        tree_.hold(b);
      }
      push_block(req, b);
      parent = b;
      continue;
    }
    searching = false;
    if (tree_.holders(m->block) > 0 || !tree_.is_leaf(m->block)) {
      // Copied: kvCacheTransferManager's onboard of numMatched tokens.
      if (!take_block(req)) return false;
      if (host) tree_.read_host(m->block);
      ++partial_copies_;
      ++shell_.totals.cow_copies;
      shell_.totals.cow_bytes += std::uint64_t{m->tokens} * config_.kv.bytes_per_token();
    } else if (host) {
      auto b = tree_.claim_host_leaf(m->block);
      if (!b) return false;
      push_block(req, *b);
      ++partial_claims_;
    } else {
      tree_.claim_leaf(m->block);
      push_block(req, m->block);
      ++partial_claims_;
    }
    pool_.set_filled(req.blocks.back(), m->tokens);
  }
  req.has_seq = true;
  ++started_;
  req.num_tokens = req.prompt;
  // LlmRequest::setPrepopulatedPromptLen: the context starts after the
  // reused tokens; a chunk that does not end the prompt ends on a block
  // boundary.
  if (matched > 0) {
    if (matched + req.chunk < req.prompt) {
      req.chunk = (matched + req.chunk) / tpb_ * tpb_ - matched;
    } else {
      req.chunk = req.prompt - matched;
    }
    req.context_pos = matched;
    logical_ += matched;
  }
  count_admission(req);
  return true;
}

void TrtllmScheduler::count_admission(Req& req) {
  // The prompt tokens looked up and reused (WindowBlockManager's
  // mReusedTokens over mTotalInputTokens); a paused request's re-admission
  // apart.
  // The GPU's hits are the prefix cache's; those brought back from the host
  // tier are the cpu tier's hit_tokens (as the other engines count them).
  const std::uint32_t all = req.context_pos;
  const std::uint32_t hit = all - std::min(all, req.loaded);
  if (host_ && req.loaded > 0) {
    OffloadTierFigures& f = host_->figures(0);
    (req.admitted_before ? f.preempted_hit_tokens : f.hit_tokens) += std::min(all, req.loaded);
  }
  if (req.admitted_before) {
    sim_.preempted_queries += req.prompt;
    sim_.preempted_hits += hit;
    return;
  }
  req.admitted_before = true;
  sim_.queries += req.prompt;
  sim_.hits += hit;
  req.times->cached_tokens = std::max(req.times->cached_tokens, all);
  sim_.query_tokens += req.prompt;
  sim_.hit_tokens += hit;
  sim_.hit_blocks += hit / tpb_;
  sim_.hit_rate_sum += static_cast<double>(hit) / static_cast<double>(req.prompt);
  ++sim_.hit_rate_requests;
}

void TrtllmScheduler::store_blocks(Req& req, std::uint32_t tokens, bool full_only) {
  // WindowBlockManager::storeBlocks: down the tree while the blocks' tokens
  // are stored; from the first that is not, each block is stored as the
  // child of the one before (storeContextBlocks: the full blocks only;
  // storeBlocksForReuse: a partial last block too).
  const std::uint64_t count = full_only ? tokens / tpb_ : ceil_div(tokens, tpb_);
  BlockId parent = TrtBlockTree::kRoot;
  bool need_match = true;
  std::size_t cursor = 0;
  for (std::uint32_t i = 0; i < count && i < req.blocks.size(); ++i) {
    const std::uint32_t start = i * tpb_;
    const std::uint32_t end = std::min(start + tpb_, tokens);
    const BlockId b = req.blocks[i];
    if (need_match) {
      if (auto m = tree_.find_exact(parent, start, end, id_at(req.seq, end - 1, cursor))) {
        parent = m->block;
        continue;
      }
      need_match = false;
    }
    if (tree_.stored(b)) return;  // stored under another chain: nothing below it is new
    tree_.store(parent, block_key_of(req.seq, start, end), b);
    parent = b;
  }
}

void TrtllmScheduler::remove_sequence(Req& req) {
  // KVCacheManager::removeSequence -> BlockManager::releaseBlocks: the
  // blocks are stored for reuse, then released tail first. kvreplay stores
  // the tokens whose KV was computed (a request paused inside its context
  // has computed only part of its prompt; TensorRT-LLM keys its blocks by
  // all of it).
  if (reuse_) store_blocks(req, req.computed(), false);
  for (auto it = req.blocks.rbegin(); it != req.blocks.rend(); ++it) tree_.release(*it);
  entries_ -= req.blocks.size();
  tables_ -= req.blocks.empty() ? 0 : 1;
  for (std::size_t i = 1; i < req.blocks.size(); ++i) {
    continued_ -= req.blocks[i] == req.blocks[i - 1] + 1 ? 1 : 0;
  }
  logical_ -= req.computed();
  req.blocks.clear();
  if (req.has_seq) --started_;
  req.has_seq = false;
}

void TrtllmScheduler::pause(Req& req) {
  // The executor's pause (LlmRequest::pause): its KV freed, the request
  // returns to its context with every token so far as its prompt, and
  // max_new_tokens less what it generated.
  remove_sequence(req);
  req.prompt += req.generated;
  req.max_new -= req.generated;
  req.generated = 0;
  req.context_pos = 0;
  req.num_tokens = 0;
  req.generating = false;
  ++req.pauses;
  ++pauses_;
  ++sim_.preemptions;
  if (req.times) ++req.times->preemptions;
}

void TrtllmScheduler::finished(Req& req) {
  req.done = true;
  any_done_ = true;
  if (--*req.siblings_left == 0) {
    ++sim_.finished;
    shell_.request_done(req.times);
  }
}

void TrtllmScheduler::fill(Req& req, std::uint32_t from, std::uint32_t to) {
  for (std::uint32_t i = from / tpb_; i < req.blocks.size() && std::uint64_t{i} * tpb_ < to; ++i) {
    pool_.set_filled(req.blocks[i], std::min(tpb_, to - i * tpb_));
  }
}

bool TrtllmScheduler::fail(std::string invariant, std::string message) {
  shell_.violation = Violation{sim_.steps + 1, 0, std::move(invariant), std::move(message)};
  return false;
}

void TrtllmScheduler::host_step_start() {
  const double now = shell_.step_start;
  OffloadTierFigures& f = host_->figures(0);
  for (const OffloadConnector::Job& job : host_->take_landed(now)) {
    if (!job.load) continue;
    f.loaded += job.keys.size();
    f.load_ms.add((job.done - job.issued) * 1000.0);
  }
  host_->start_queued(now);
}

void TrtllmScheduler::host_step_end() {
  // kvCacheTransferManager: the offloads (getFreeBlock) are copies on their
  // own stream; the onboards (onboardBlock) must land before the forward
  // pass reads them.
  OffloadTierFigures& f = host_->figures(0);
  std::vector<std::uint64_t> out = tree_.take_offloaded();
  if (!out.empty()) {
    f.stored += out.size();
    host_->queue_store(0, std::move(out), {});
  }
  std::vector<std::uint64_t> in = tree_.take_onboarded();
  if (!in.empty()) {
    host_->issue_load(0, std::move(in), nullptr, shell_.step_start);
    shell_.step_waits = std::max(shell_.step_waits, host_->jobs().back().done);
  }
  f.evicted = tree_.host_evicted();
}

bool TrtllmScheduler::step() {
  ++shell_.tick;
  if (host_) host_step_start();
  // PyExecutor._fetch_new_requests: the queue's head joins the active
  // requests up to max_num_active_requests (max_batch_size).
  while (!queue_.empty() && active_.size() < max_batch_size_) {
    active_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  max_active_ = std::max<std::uint64_t>(max_active_, active_.size());
  // PyExecutor._schedule: the capacity scheduler, the paused requests'
  // blocks freed, then the micro-batch scheduler.
  std::vector<Req*> fitting;
  std::vector<Req*> paused;
  if (options_.capacity_policy == CapacityPolicy::kGuaranteedNoEvict) {
    capacity_no_evict(fitting);
  } else {
    capacity_max_utilization(fitting, paused);
  }
  for (Req* r : paused) pause(*r);
  std::vector<Req*> contexts;
  std::vector<Req*> generations;
  micro_batch(fitting, contexts, generations);
  // KVCacheManager.prepare_resources: a first context chunk adds its
  // sequence, each generation request a token (addToken: a block when the
  // token starts one).
  for (Req* r : contexts) {
    if (!r->has_seq && !add_sequence(*r))
      return fail("T4", "no free block for a context the capacity scheduler admitted");
  }
  for (Req* r : generations) {
    // The tokens it keeps: 1, or 1 + the drafts accepted (engine/speculative.h).
    r->emitting = shell_.decode_tokens(r->times.get(), r->request.line, r->prompt + r->generated,
                                       r->max_new - r->generated);
    for (std::uint32_t t = 0; t < r->emitting; ++t) {
      if (r->num_tokens % tpb_ == 0 && !take_block(*r))
        return fail("T4", "no free block for a generation step the capacity scheduler admitted");
      ++r->num_tokens;
    }
  }
  if (host_) host_step_end();
  sim_.max_running = std::max<std::uint64_t>(sim_.max_running, started_);
  // The forward pass: each context computes its chunk (the last one samples
  // the first token and stores the prompt's full blocks: storeContextBlocks,
  // resource_manager.update_resources), each generation request a token.
  for (Req* r : contexts) {
    shell_.schedule_work(r->times.get(), r->context_pos, r->chunk, true);
    sim_.prompt_tokens_computed += r->chunk;
    fill(*r, r->context_pos, r->context_pos + r->chunk);
    r->context_pos += r->chunk;
    logical_ += r->chunk;
    if (r->context_pos < r->prompt) {
      ++context_chunks_;
      continue;
    }
    if (reuse_) store_blocks(*r, r->prompt - 1, true);
    r->generating = true;
    ++r->generated;
    ++sim_.output_tokens;
    shell_.first_token(r->times);
    if (r->generated >= r->max_new) finished(*r);
  }
  for (Req* r : generations) {
    const std::uint32_t kept = r->emitting;
    shell_.schedule_work(r->times.get(), r->num_tokens - kept, shell_.verify_tokens(), false);
    fill(*r, r->num_tokens - kept, r->num_tokens);
    logical_ += kept;
    r->generated += kept;
    sim_.output_tokens += kept;
    if (r->generated >= r->max_new) finished(*r);
  }
  // PyExecutor._handle_responses -> _terminate_request: the finished
  // requests' sequences are removed after the step.
  if (any_done_) {
    for (const auto& r : active_) {
      if (r->done) remove_sequence(*r);
    }
    std::erase_if(active_, [](const auto& r) { return r->done; });
    any_done_ = false;
  }
  for (const TrtBlockTree::Change& c : changes_) {
    shell_.events.pages.push_back(PageChange{c.hash, c.parent, c.stored, c.host});
  }
  changes_.clear();
  return true;
}

}  // namespace kvreplay
