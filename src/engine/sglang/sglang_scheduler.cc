// The sglang engine, rule by rule. Each rule names the SGLang function it
// comes from: python/sglang/srt/managers/scheduler.py (Scheduler),
// schedule_policy.py (SchedulePolicy, PrefillAdder), schedule_batch.py (Req,
// ScheduleBatch) and mem_cache/radix_cache.py (RadixCache), as of SGLang
// v0.5. Where kvreplay differs, the comment says so.
#include "engine/sglang/sglang_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>

#include "core/enum_names.h"
#include "engine/key_spaces.h"
#include "engine/sglang/sglang_req.h"

namespace kvreplay {

namespace {

constexpr EnumName<SchedulePolicy> kPolicyNames[] = {
    {SchedulePolicy::kFcfs, "fcfs"},
    {SchedulePolicy::kLpm, "lpm"},
};
static_assert(enum_names_unique(kPolicyNames));

// Token ids of a request's own tokens (those the trace names for no other
// request) and of a trace's named prefixes, above every trace hash id (the
// readers refuse larger ones; engine/key_spaces.h, as the vllm engine's keys).
constexpr std::uint64_t kOwnBase = kOwnKeyBase;
constexpr std::uint32_t kOpenEnd = std::numeric_limits<std::uint32_t>::max();

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

std::uint64_t consecutive_pages(const std::vector<BlockId>& kv, std::size_t lo, std::size_t hi) {
  std::uint64_t n = 0;
  for (std::size_t i = std::max<std::size_t>(lo, 1); i < std::min(hi, kv.size()); ++i) {
    n += kv[i] == kv[i - 1] + 1 ? 1 : 0;
  }
  return n;
}

std::string_view to_string(SchedulePolicy policy) {
  return enum_name(kPolicyNames, policy);
}
std::optional<SchedulePolicy> parse_schedule_policy(std::string_view name) {
  return enum_parse(kPolicyNames, name);
}
std::vector<std::string> schedule_policy_names() {
  return enum_names(kPolicyNames);
}

std::uint32_t sglang_chunked_prefill_default(double gpu_gib) {
  if (gpu_gib < 35) return 2048;
  if (gpu_gib < 60) return 4096;
  if (gpu_gib < 160) return 8192;
  return 16384;
}

// PrefillAdder: the budgets of one prefill batch.
class SglangScheduler::Adder {
 public:
  explicit Adder(SglangScheduler& s)
      : s_(s),
        rem_input_(s.options_.max_prefill_tokens),
        chunking_(s.chunk_limit_.has_value()),
        rem_chunk_(s.chunk_limit_.value_or(0)) {
    // __init__: the running requests' future decode, reserved at new_token_ratio
    // (_get_running_request_total_token_offset), their remaining output
    // clipped at CLIP_MAX_NEW_TOKENS.
    for (const auto& r : s.running_) {
      total_offset_ += std::min(r->remaining(), kClipMaxNewTokens) * s.new_token_ratio_;
    }
  }
  // rem_total_tokens and cur_rem_tokens: free and evictable tokens less what
  // is reserved (total) and what this batch computes (cur).
  double room() const {
    return static_cast<double>(s_.pool_.free_count()) * s_.page_ +
           static_cast<double>(s_.tree_.evictable_size());
  }
  double rem_total() const { return room() - total_offset_; }
  double cur_rem() const { return room() - cur_offset_; }

  AddResult budget_state() const {
    if (rem_total() <= 0 || cur_rem() <= 0) return AddResult::kNoToken;
    if (rem_input_ <= 0 || (chunking_ && rem_chunk_ <= 0)) return AddResult::kOther;
    return AddResult::kContinue;
  }

  // _update_prefill_budget: page-ceiled extend tokens against every budget,
  // and the output to come against the total.
  void update_budget(std::uint32_t extend, std::uint32_t max_new) {
    const auto tokens = static_cast<std::int64_t>(ceil_div(extend, s_.page_) * s_.page_);
    total_offset_ += static_cast<double>(tokens) + max_new;
    cur_offset_ += static_cast<double>(tokens);
    rem_input_ -= tokens;
    if (chunking_) rem_chunk_ -= tokens;
  }

  // add_chunked_req: the chunked request's next chunk, without a memory
  // check (its prompt was checked whole when it was admitted).
  void add_chunked(Req& req) {
    const std::uint32_t rest = req.fill - req.kv_len;
    // A chunked request exists only with chunking on; without it, no limit.
    const std::int64_t left = chunking_ ? rem_chunk_ : std::numeric_limits<std::uint32_t>::max();
    const auto limit = static_cast<std::uint32_t>(std::max<std::int64_t>(left, 0));
    req.truncated = rest > limit;
    // A chunk that stops short stops on a page boundary.
    req.extend = req.truncated ? std::max(limit / s_.page_ * s_.page_, s_.page_) : rest;
    req.truncated = req.extend < rest;
    can_run.push_back(&req);
    update_budget(req.extend, req.truncated ? 0 : std::min(req.remaining(), kClipMaxNewTokens));
  }

  // add_one_req (not ignore_eos: traces give output lengths, not stop rules).
  AddResult add_one(Req& req) {
    const std::uint32_t max_new = std::min(req.remaining(), kClipMaxNewTokens);
    std::uint32_t extend = req.fill - req.prefix;
    // The page is the paged allocator's overhead (per_req_token_overhead).
    const double total = static_cast<double>(extend) + max_new + s_.page_;
    if (total >= rem_total()) return AddResult::kNoToken;
    // Without chunking, the first request may exceed the input budget. With
    // HiCache, what the host holds is not weighed (real_input_tokens) until
    // it is loaded.
    auto paged = [this](std::uint32_t tokens) {
      return static_cast<std::int64_t>(ceil_div(tokens, s_.page_) * s_.page_);
    };
    auto over_input = [&](std::int64_t tokens) {
      return !chunking_ && !can_run.empty() && tokens >= rem_input_;
    };
    if (over_input(paged(extend - req.host_hit))) return AddResult::kOther;
    auto input_tokens = paged(extend);
    // _lock_node: the prefix is not evictable while the request is weighed,
    // and stays locked once it is admitted (inc_lock_ref(req.last_node)).
    s_.tree_.inc_lock_ref(req.match_node);
    if (total > rem_total()) {
      s_.tree_.dec_lock_ref(req.match_node);
      return AddResult::kNoToken;
    }
    if (req.host_hit > 0) {
      // HiCache: the host part of the match is loaded back now, and the
      // input budget is weighed again on what is left to compute.
      s_.load_back(req);
      extend = req.fill - req.prefix;
      input_tokens = paged(extend);
      if (over_input(input_tokens)) {
        s_.tree_.dec_lock_ref(req.match_node);
        return AddResult::kOther;
      }
    }
    if (!chunking_ || input_tokens <= rem_chunk_) {
      req.extend = extend;
      req.truncated = false;
      can_run.push_back(&req);
      update_budget(extend, max_new);
    } else {
      // Chunked prefill: the chunk fills what is left of the chunk budget.
      const auto trunc = static_cast<std::uint32_t>(rem_chunk_ / s_.page_ * s_.page_);
      if (trunc == 0) {
        s_.tree_.dec_lock_ref(req.match_node);
        return AddResult::kOther;
      }
      req.extend = trunc;
      req.truncated = true;
      can_run.push_back(&req);
      new_chunked = &req;
      update_budget(trunc, 0);
    }
    return budget_state();
  }

  std::vector<Req*> can_run;
  Req* new_chunked = nullptr;

 private:
  SglangScheduler& s_;
  double total_offset_ = 0;
  double cur_offset_ = 0;
  std::int64_t rem_input_;
  bool chunking_;           // rem_chunk_tokens is not None
  std::int64_t rem_chunk_;  // rem_chunk_tokens, while chunking_
};

SglangScheduler::SglangScheduler(EngineShell& shell)
    : shell_(shell),
      config_(shell.config),
      options_(shell.options.sglang),
      sim_(shell.sim),
      page_(std::max<std::uint32_t>(shell.config.kv.page_tokens, 1)),
      pool_(shell.config.kv.pool_blocks, shell.config.alloc_order),
      tree_(&pool_, page_),
      waiting_tree_(nullptr, 1),
      caching_(shell.options.prefix_cache) {
  groups_ = config_.kv_groups;
  if (groups_.empty()) {
    groups_.push_back(KvCacheGroupSpec{KvCacheGroupSpec::kFull, 0, config_.kv.layers});
  }
  // --kv-events: the tree's pages as SGLang's KVCacheEventMixin reports them
  // (the waiting queue's keys-only tree is no cache: it reports nothing).
  if (shell.options.kv_events) tree_.log_changes(&shell_.events.pages);
  if (shell.options.offload.any()) {
    // HiCache's host pool: --offload's one cpu tier, in pages of every layer
    // (MHATokenToKVPoolHost holds the same page layout as the device).
    const std::uint64_t block = kv_block_bytes(config_.kv, groups_);
    hicache_ = std::make_unique<OffloadConnector>(shell.options.offload, block);
    const std::uint64_t pages =
        shell.options.offload.tiers[0].bytes / std::max<std::uint64_t>(block, 1);
    tree_.enable_host(static_cast<std::uint32_t>(
        std::min<std::uint64_t>(pages, std::numeric_limits<std::uint32_t>::max())));
  }
  // ModelRunner: max_num_reqs = min(max(max_total_num_tokens / context_len *
  // 512, 2048), 4096) unless --max-running-requests is given.
  const std::uint64_t pool_tokens = std::uint64_t{pool_.total()} * page_;
  max_running_ = options_.max_running_requests;
  if (max_running_ == 0) {
    const std::uint64_t context = std::max<std::uint64_t>(config_.kv.max_seq_tokens, 1);
    max_running_ = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(std::max<std::uint64_t>(pool_tokens * 512 / context, 2048), 4096));
  }
  // A chunk holds at least a page.
  if (options_.chunked_prefill_size > 0)
    chunk_limit_ = std::max(options_.chunked_prefill_size, page_);
  // Scheduler.__init__: init_new_token_ratio = min(SGLANG_INIT_NEW_TOKEN_RATIO
  // x schedule_conservativeness, 1), the minimum a factor of it, decayed
  // linearly over SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS decode steps.
  init_new_token_ratio_ = std::min(kInitNewTokenRatio * options_.schedule_conservativeness, 1.0);
  min_new_token_ratio_ = std::min(init_new_token_ratio_ * kMinNewTokenRatioFactor, 1.0);
  new_token_ratio_decay_ =
      (init_new_token_ratio_ - min_new_token_ratio_) / kNewTokenRatioDecaySteps;
  new_token_ratio_ = init_new_token_ratio_;
  min_ratio_seen_ = new_token_ratio_;
}

SglangScheduler::~SglangScheduler() = default;

std::size_t SglangScheduler::num_running() const {
  std::size_t n = chunked_ ? 1 : 0;
  for (const auto& r : running_) n += r->done ? 0 : 1;
  for (const auto& r : prefilled_) n += r->done ? 0 : 1;
  return n;
}

std::optional<SkipReason> SglangScheduler::never_fits(const Request& request,
                                                      std::uint64_t& need) const {
  // TokenizerManager._validate_one_request: a prompt of context_len tokens or
  // more, or one whose max_new_tokens would pass context_len, is refused.
  const std::uint64_t total = std::uint64_t{request.prompt} + request.output;
  if (request.prompt >= config_.kv.max_seq_tokens || total > config_.kv.max_seq_tokens) {
    need = total;
    return SkipReason::kTooLong;
  }
  // Scheduler.max_req_len is below max_total_num_tokens: a request whose
  // prompt and output do not fit the pool with a page to spare would wait
  // for ever (SGLang clips its max_new_tokens; kvreplay keeps the trace's
  // output and skips it). `need` is in pages.
  const std::uint64_t pool_tokens = std::uint64_t{pool_.total()} * page_;
  if (total + page_ >= pool_tokens) {
    need = ceil_div(total + page_, page_);
    return SkipReason::kPoolTooSmall;
  }
  return std::nullopt;
}

std::uint32_t SglangScheduler::cached_prompt_tokens(const Request& request) const {
  if (!shell_.options.prefix_cache) return 0;
  // The prompt's tokens named by the trace, as add_request names them; the
  // request's own tokens are cached nowhere before it runs.
  const TokenRuns named = known_prompt_runs(request, prefix_ids_);
  if (named.empty()) return 0;
  return tree_.peek_prefix(named, named.back().end);
}

void SglangScheduler::add_request(Request request) {
  // The trace names each prompt token by its hash block (or named prefix);
  // the rest of the prompt, and the output, are the request's own.
  TokenRuns prompt = named_prompt_runs(request, prefix_ids_);
  const std::uint64_t prompt_uid = next_uid_++;
  const std::uint32_t named = prompt.empty() ? 0 : prompt.back().end;
  if (named < request.prompt) prompt.push_back(TokenRun{kOwnBase + prompt_uid, request.prompt});
  // n > 1: the tokenizer manager sends n requests of the same prompt; they
  // share it through the tree.
  const std::uint32_t n = request.n;
  auto left = std::make_shared<std::uint32_t>(n);
  auto times = std::make_shared<RequestTimes>(request_times(request));
  for (std::uint32_t k = 0; k < n; ++k) {
    auto req = std::make_unique<Req>();
    req->request = request;
    req->request.n = 1;
    req->seq = prompt;
    req->seq.push_back(TokenRun{kOwnBase + next_uid_++, kOpenEnd});
    req->times = times;
    req->siblings_left = left;
    req->last_node = tree_.root();
    req->match_node = tree_.root();
    waiting_.push_back(std::move(req));
  }
}

void SglangScheduler::init_next_round(Req& req) {
  // Req.init_next_round_input: fill_ids = origin_input_ids + output_ids, the
  // prefix matched in the tree capped at input_len - 1 (_compute_max_prefix_len:
  // the last token is computed to sample the next).
  req.fill = req.request.prompt + req.generated;
  if (!caching_) {
    // --no-prefix-cache is SGLang's --disable-radix-cache (ChunkCache): no
    // match, nothing kept after a request.
    req.prefix = 0;
    req.match_node = tree_.root();
    return;
  }
  // The pages are read from the path when the request is admitted (path_pages).
  // HiCache: the match goes on into the host (HiRadixCache.match_prefix).
  RadixCache::HostMatch host;
  req.prefix = tree_.match_prefix(req.seq, req.fill - 1, nullptr, req.match_node,
                                  hicache_ ? &host : nullptr);
  req.host_hit = host.tokens;
  req.host_node = host.node;
  // Tokens loaded back in an earlier round whose request was then refused
  // (add_one_req returned OTHER after init_load_back) are on the device now:
  // matched there, they still count as the host's when it is admitted, so
  // that the loaded pages are the host hits. Those evicted again before it
  // is admitted were loaded for nothing (loads_unused_).
  const std::uint32_t kept = std::min(req.loaded, req.prefix);
  loads_unused_ += (req.loaded - kept) / page_;
  req.loaded = kept;
}

void SglangScheduler::sort_longest_prefix() {
  // SchedulePolicy.calc_priority: lpm matches every waiting request and sorts
  // by the longest prefix (_sort_by_longest_prefix, stable), unless more than
  // 128 wait (_determine_active_policy: fcfs then). In-batch prefix caching
  // (_compute_prefix_matches): a request with at most 32 cached tokens whose
  // prompt shares at least 32 with an earlier waiting one is put last, so
  // that one computes the shared part first.
  if (waiting_.size() > kLpmQueueLimit) return;
  waiting_tree_.reset();
  for (auto& r : waiting_) {
    init_next_round(*r);
    r->deprioritized = false;
    if (r->prefix > kInBatchThreshold) continue;
    RadixCache::Node* node = nullptr;
    const std::uint32_t in_batch = waiting_tree_.match_prefix(r->seq, r->fill, nullptr, node);
    if (in_batch >= kInBatchThreshold) {
      r->deprioritized = true;
    } else {
      waiting_tree_.insert(r->seq, r->fill, {});
    }
  }
  std::stable_sort(waiting_.begin(), waiting_.end(), [](const auto& a, const auto& b) {
    const double ka = a->deprioritized ? std::numeric_limits<double>::infinity()
                                       : -static_cast<double>(a->prefix);
    const double kb = b->deprioritized ? std::numeric_limits<double>::infinity()
                                       : -static_cast<double>(b->prefix);
    return ka < kb;
  });
}

void SglangScheduler::new_prefill_batch(std::vector<Req*>& batch) {
  // Scheduler.get_new_batch_prefill.
  if ((batch_is_full_ || waiting_.empty()) && !chunked_) return;
  const std::size_t running_bs = running_.size();
  if (running_bs >= max_running_ && !chunked_) {
    batch_is_full_ = true;
    return;
  }
  // _validate_and_adjust_policy: without the tree, lpm is fcfs.
  if (options_.policy == SchedulePolicy::kLpm && caching_) sort_longest_prefix();
  Adder adder(*this);
  if (chunked_) {
    chunked_->fill = chunked_->request.prompt + chunked_->generated;
    adder.add_chunked(*chunked_);
  }
  for (auto& r : waiting_) {
    if (running_bs + adder.can_run.size() >= max_running_) {
      batch_is_full_ = true;
      break;
    }
    init_next_round(*r);
    const AddResult result = adder.add_one(*r);
    if (result != AddResult::kContinue) {
      // NO_TOKEN fills the batch. With HiCache only when a request is
      // admitted or running ("set batch_is_full after making sure there are
      // requests that can be served"): pages locked by host writes in flight
      // free up without a request leaving.
      if (result == AddResult::kNoToken) {
        batch_is_full_ = !hicache_ || !adder.can_run.empty() || !running_.empty();
      }
      break;
    }
  }
  batch = std::move(adder.can_run);
}

bool SglangScheduler::make_room(std::uint64_t tokens, std::uint64_t pages) {
  // alloc_token_slots / _evict_tree_cache_if_needed: when fewer tokens are
  // free than asked, the tree evicts that many.
  if (std::uint64_t{pool_.free_count()} * page_ < tokens) {
    tree_.evict(static_cast<std::uint32_t>(std::min<std::uint64_t>(tokens, kOpenEnd)));
  }
  return pool_.free_count() >= pages;
}

void SglangScheduler::extend_kv(Req& req, std::uint32_t tokens) {
  const std::uint32_t old_len = req.kv_len;
  const std::uint32_t new_len = old_len + tokens;
  if (old_len % page_ != 0) {
    const BlockId last = req.kv.back();
    pool_.set_filled(last, pool_.filled(last) + std::min(tokens, page_ - old_len % page_));
  }
  const std::size_t old_pages = req.kv.size();
  const auto pages = static_cast<std::size_t>(ceil_div(new_len, page_));
  if (pages > old_pages) {
    pool_.take_free_filled(static_cast<std::uint32_t>(pages - old_pages),
                           new_len - static_cast<std::uint32_t>(old_pages) * page_, page_, req.kv);
    const std::uint64_t more = consecutive_pages(req.kv, old_pages, pages);
    req.continued += more;
    layout_continued_ += more;
    if (old_pages == 0) ++layout_tables_;
  }
  in_use_entries_ += pages - old_pages;
  req.kv_len = new_len;
  if (trace_ == nullptr) return;
  if (req.trace_seq == TraceEmitter::kNoSeq) {
    // Admitted on the tree's pages it matched, which the trace's cache holds.
    req.trace_seq =
        trace_->admit(new_len, std::span<const BlockId>(req.kv).first(req.tree_len / page_));
  } else {
    trace_->append(req.trace_seq, tokens);
  }
}

bool SglangScheduler::attach_trace(TraceEmitter& trace) {
  const bool hybrid = groups_.size() > 1 || groups_[0].attention == KvCacheGroupSpec::kSliding;
  if (hybrid) return false;
  trace_ = &trace;
  tree_.log_evictions(&trace.evictions());
  if (hicache_) tree_.log_host_drops(&trace_drops_);
  return true;
}

void SglangScheduler::trace_free(Req& req) {
  if (trace_ == nullptr || req.trace_seq == TraceEmitter::kNoSeq) return;
  trace_->free(req.trace_seq);
  req.trace_seq = TraceEmitter::kNoSeq;
}

void SglangScheduler::drop_kv(Req& req, std::size_t own_from) {
  own_from = std::min(own_from, req.kv.size());
  (void)pool_.release_each(std::span<const BlockId>(req.kv).subspan(own_from));
  layout_continued_ -= req.continued;
  req.continued = 0;
  if (!req.kv.empty()) --layout_tables_;
  in_use_entries_ -= req.kv.size();
  req.kv.clear();
}

void SglangScheduler::path_pages(const RadixCache::Node* node, std::uint32_t from, std::uint32_t to,
                                 std::vector<BlockId>& kv) const {
  for (; node != nullptr && node->end > from; node = node->parent) {
    const std::uint32_t lo = std::max(node->start, from);
    const std::uint32_t hi = std::min(node->end, to);
    for (std::uint32_t t = lo; t < hi; t += page_)
      kv[t / page_] = node->pages[(t - node->start) / page_];
  }
}

std::uint32_t SglangScheduler::insert_own(Req& req, std::uint32_t aligned) {
  const std::uint32_t present =
      tree_.insert(req.seq, aligned, std::span<const BlockId>(req.kv).first(aligned / page_));
  const std::size_t lo = req.tree_len / page_;
  const std::size_t hi = std::max<std::size_t>(lo, present / page_);
  (void)pool_.release_each(std::span<const BlockId>(req.kv).subspan(lo, hi - lo));
  if (trace_ != nullptr && req.trace_seq != TraceEmitter::kNoSeq) {
    for (std::size_t p = hi; p < aligned / page_; ++p) {
      trace_->cache(req.trace_seq, static_cast<std::uint32_t>(p), req.kv[p]);
    }
  }
  return present;
}

void SglangScheduler::cache_unfinished(Req& req) {
  // RadixCache.cache_unfinished_req: the tokens computed so far, whole pages,
  // enter the tree; the request's own pages the tree already had are freed,
  // and the request continues on the tree's pages (match_prefix again), its
  // lock moved to the new last node. The partial last page stays its own.
  if (!caching_) return;
  const std::uint32_t aligned = req.kv_len / page_ * page_;
  const std::uint32_t present = insert_own(req, aligned);
  const std::size_t lo = req.tree_len / page_;
  const std::size_t hi = std::max<std::size_t>(lo, present / page_);
  // The tree's pages replace those freed; below tree_len they were the
  // tree's already, from `present` on they are the request's, now the tree's.
  RadixCache::Node* node = nullptr;
  const std::uint32_t matched = tree_.match_prefix(req.seq, aligned, nullptr, node);
  assert(matched == aligned);
  (void)matched;
  const std::uint64_t before = consecutive_pages(req.kv, lo, hi + 1);
  path_pages(node, req.tree_len, present, req.kv);
  const std::uint64_t after = consecutive_pages(req.kv, lo, hi + 1);
  req.continued += after - before;
  layout_continued_ += after - before;
  tree_.dec_lock_ref(req.last_node);
  tree_.inc_lock_ref(node);
  req.last_node = node;
  req.tree_len = aligned;
  if (hi > lo && trace_ != nullptr) {
    // Its pages [lo, hi) are now the tree's copies: in the trace, a new
    // sequence on the tree's pages (all cached), the partial page rewritten.
    trace_free(req);
    req.trace_seq =
        trace_->admit(req.kv_len, std::span<const BlockId>(req.kv).first(aligned / page_));
    trace_moved_pages_ += aligned / page_;
  }
}

void SglangScheduler::cache_finished(Req& req) {
  // RadixCache.cache_finished_req: every token with KV (input + output but
  // the last, which was sampled and never computed), whole pages, enters the
  // tree; the duplicates and the partial last page are freed; the lock goes.
  if (!caching_) {
    drop_kv(req, 0);
    trace_free(req);
    req.kv_len = 0;
    return;
  }
  const std::uint32_t aligned = req.kv_len / page_ * page_;
  insert_own(req, aligned);
  drop_kv(req, aligned / page_);  // the partial last page, if any
  trace_free(req);
  tree_.dec_lock_ref(req.last_node);
  req.last_node = tree_.root();
  req.kv_len = req.tree_len = 0;
}

void SglangScheduler::release(Req& req, bool retraction) {
  // ScheduleBatch.release_req (retract_decode): the request's own pages are
  // freed, its lock released (what the tree holds stays cached), and
  // reset_for_retract: it keeps its output and will re-prefill input + output.
  drop_kv(req, req.tree_len / page_);
  trace_free(req);
  tree_.dec_lock_ref(req.last_node);
  req.last_node = tree_.root();
  req.kv_len = req.tree_len = 0;
  if (!retraction) return;
  ++req.retractions;
  ++retracted_;
  ++sim_.preemptions;
  if (req.times) ++req.times->preemptions;
}

void SglangScheduler::finished(Req& req) {
  req.done = true;
  cache_finished(req);
  if (--*req.siblings_left == 0) {
    if (req.times->skipped) {
      ++sim_.skipped;
      ++sim_.skipped_stalled;
      shell_.request_skipped(*req.times);
    } else {
      ++sim_.finished;
      shell_.request_done(req.times);
    }
  }
}

void SglangScheduler::count_admission(const Req& req) {
  // PrefillAdder's log_hit_tokens and log_input_tokens (#cached-token,
  // #new-token), as the prefix cache's queries and hits; a retracted
  // request's readmission apart (reprocessed_log_*).
  // The prefix cache's hits are the device's; HiCache's loads are the cpu
  // tier's hit_tokens.
  const bool readmission = req.retractions > 0;
  const std::uint32_t gpu = req.prefix - req.loaded;
  (readmission ? sim_.preempted_queries : sim_.queries) += req.fill;
  (readmission ? sim_.preempted_hits : sim_.hits) += gpu;
  if (hicache_ && req.loaded > 0) {
    OffloadTierFigures& f = hicache_->figures(0);
    (readmission || req.admitted_before ? f.preempted_hit_tokens : f.hit_tokens) += req.loaded;
  }
  if (readmission || req.admitted_before) return;
  // Req.cached_tokens as the response's meta_info reports it (host hits too).
  req.times->cached_tokens = std::max(req.times->cached_tokens, req.prefix);
  sim_.query_tokens += req.request.prompt;
  sim_.hit_tokens += gpu;
  sim_.hit_blocks += gpu / page_;
  sim_.hit_rate_sum += static_cast<double>(gpu) / static_cast<double>(req.request.prompt);
  ++sim_.hit_rate_requests;
}

bool SglangScheduler::prefill_step(std::vector<Req*>& batch) {
  ++prefill_batches_;
  // The batch's requests leave the waiting queue (the chunked one is held
  // apart); a new one takes the prefix it matched, locked by add_one_req.
  std::vector<std::unique_ptr<Req>> owned;
  for (Req* r : batch) {
    if (chunked_ && chunked_.get() == r) {
      owned.push_back(std::move(chunked_));
      continue;
    }
    auto it =
        std::find_if(waiting_.begin(), waiting_.end(), [r](const auto& w) { return w.get() == r; });
    owned.push_back(std::move(*it));
    waiting_.erase(it);
    Req& req = *owned.back();
    count_admission(req);
    req.admitted_before = true;
    req.loaded = 0;
    req.kv.resize(req.prefix / page_);
    path_pages(req.match_node, 0, req.prefix, req.kv);
    in_use_entries_ += req.kv.size();
    req.continued = consecutive_pages(req.kv, 0, req.kv.size());
    layout_continued_ += req.continued;
    if (!req.kv.empty()) ++layout_tables_;
    req.kv_len = req.tree_len = req.prefix;
    req.last_node = req.match_node;
    if (req.truncated) ++chunked_prefills_;
  }
  // ScheduleBatch.prepare_for_extend: the batch's tokens at once
  // (alloc_token_slots, evicting first). PrefillAdder keeps them within the
  // free and evictable tokens; a chunk of the request being prefilled in
  // chunks is not checked again, and where SGLang would stop with "Prefill
  // out of memory", kvreplay puts requests back from the batch's end (the
  // chunked one released as a retraction) until the rest fits.
  auto pages_needed = [&] {
    std::uint64_t pages = 0;
    std::uint64_t tokens = 0;
    for (const auto& r : owned) {
      pages += ceil_div(r->kv_len + r->extend, page_) - r->kv.size();
      tokens += r->extend + (page_ > 1 ? page_ : 0);
    }
    return std::pair{tokens, pages};
  };
  for (;;) {
    auto [tokens, pages] = pages_needed();
    if (make_room(tokens, pages)) break;
    ++prefill_out_of_memory_;
    std::unique_ptr<Req> back = std::move(owned.back());
    owned.pop_back();
    release(*back, false);
    back->truncated = false;
    waiting_.insert(waiting_.begin(), std::move(back));
    if (owned.empty()) return true;
  }
  last_prefill_size_ = owned.size();
  sim_.max_running = std::max<std::uint64_t>(sim_.max_running, running_.size() + owned.size());
  for (auto& r : owned) {
    shell_.schedule_work(r->times.get(), r->kv_len, r->extend, true);
    sim_.prompt_tokens_computed += r->extend;
    extend_kv(*r, r->extend);
  }
  // Scheduler.process_batch_result_prefill: a chunk that is not the last
  // enters the tree (the chunked request is cached before the next batch is
  // formed, get_next_batch_to_run); a finished prefill samples a token, and
  // the request finishes or enters the tree and joins the running batch.
  for (auto& r : owned) {
    if (r->truncated) {
      cache_unfinished(*r);
      chunked_ = std::move(r);
      continue;
    }
    ++r->generated;
    ++sim_.output_tokens;
    shell_.first_token(r->times);
    if (r->generated >= r->request.output) {
      finished(*r);
      continue;
    }
    cache_unfinished(*r);
    prefilled_.push_back(std::move(r));
  }
  return true;
}

bool SglangScheduler::decode_room(std::size_t count) {
  // ScheduleBatch.check_decode_mem: a page for each request whose next token
  // starts one (new_page_count_next_decode), evicting if needed.
  // With drafts, room for the 1 + K tokens a verify may keep
  // (engine/speculative.h).
  const std::uint64_t grow = shell_.verify_tokens();
  std::uint64_t pages = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t len = running_[i]->kv_len;
    pages += ceil_div(len + grow, page_) - ceil_div(len, page_);
  }
  return make_room(pages * page_, pages);
}

void SglangScheduler::retract_decode() {
  // ScheduleBatch.retract_decode: sorted by (output tokens, -input tokens)
  // descending, requests leave from the end (the fewest output tokens, the
  // longest prompt among equals) until one decode step fits, at least one,
  // never the last. Each freed request gives its memory at once
  // (release_req: eviction for SGLANG_RETRACT_DECODE_STEPS tokens of each
  // remaining request). They rejoin the waiting queue at its end
  // (_extend_requests_to_queue).
  std::stable_sort(running_.begin(), running_.end(), [](const auto& a, const auto& b) {
    if (a->generated != b->generated) return a->generated > b->generated;
    return a->request.prompt < b->request.prompt;
  });
  bool first = true;
  while (first || !decode_room(running_.size())) {
    if (running_.size() == 1) break;
    first = false;
    std::unique_ptr<Req> victim = std::move(running_.back());
    running_.pop_back();
    release(*victim, true);
    const std::uint64_t tokens = std::uint64_t{kRetractDecodeSteps} * running_.size();
    make_room(tokens, 0);
    waiting_.push_back(std::move(victim));
  }
  // The new ratio: (decoded + SGLANG_RETRACT_DECODE_STEPS x requests) over
  // their max_new_tokens, at most 1.
  double decoded = 0;
  double max_new = 0;
  for (const auto& r : running_) {
    decoded += r->generated;
    max_new += r->request.output;
  }
  new_token_ratio_ =
      std::min(1.0, (decoded + double{kRetractDecodeSteps} * static_cast<double>(running_.size())) /
                        (max_new + 1));
}

bool SglangScheduler::decode_step() {
  // Scheduler.update_running_batch (finished requests were filtered out by
  // step()): retract when a decode step does not fit, else let the ratio decay.
  if (!decode_room(running_.size())) {
    const std::size_t before = running_.size();
    retract_decode();
    if (running_.size() < before) batch_is_full_ = false;
    if (!decode_room(running_.size())) {
      shell_.violation = Violation{sim_.steps + 1, running_.front()->request.line, "S3",
                                   "a lone running request cannot decode: the pool is full"};
      return false;
    }
  } else {
    new_token_ratio_ = std::max(new_token_ratio_ - new_token_ratio_decay_, min_new_token_ratio_);
  }
  min_ratio_seen_ = std::min(min_ratio_seen_, new_token_ratio_);
  ++decode_batches_;
  sim_.max_running = std::max<std::uint64_t>(sim_.max_running, running_.size());
  // prepare_for_decode: a slot for each request's last token; the step
  // samples the next; a request that reaches its output finishes
  // (process_batch_result_decode: cache_finished_req).
  // With drafts (engine/speculative.h): a verify of 1 + K tokens, keeping
  // the 1 + a it emits.
  for (auto& r : running_) {
    shell_.schedule_work(r->times.get(), r->kv_len, shell_.verify_tokens(), false);
    const std::uint32_t emitted = shell_.decode_tokens(
        r->times.get(), r->request.line, r->generated, r->request.output - r->generated);
    extend_kv(*r, emitted);
    r->generated += emitted;
    sim_.output_tokens += emitted;
    if (r->generated >= r->request.output) finished(*r);
  }
  return true;
}

void SglangScheduler::skip_stalled() {
  // With nothing running, the head of the queue was refused: it never fits
  // (never_fits rules most such requests out). Skipped, as the vllm engine
  // skips a stalled request.
  std::unique_ptr<Req> req = std::move(waiting_.front());
  waiting_.erase(waiting_.begin());
  ++stalled_;
  loads_unused_ += req->loaded / page_;
  batch_is_full_ = false;
  auto& first = shell_.first_skipped[static_cast<std::size_t>(SkipReason::kPoolTooSmall)];
  if (!first) {
    first =
        SkippedRequest{req->request.line, req->request.id,
                       ceil_div(std::uint64_t{req->request.prompt} + req->request.output, page_)};
  }
  req->times->skipped = true;
  if (--*req->siblings_left == 0) {
    ++sim_.skipped;
    ++sim_.skipped_stalled;
    shell_.request_skipped(*req->times);
  }
}

bool SglangScheduler::step() {
  ++shell_.tick;
  if (hicache_) hicache_step_start();
  const bool ok = step_batch();
  if (hicache_) hicache_step_end();
  return ok;
}

void SglangScheduler::merge_prefilled() {
  // Scheduler.get_next_batch_to_run: the last prefill batch (last_batch) is
  // filtered (filter_batch drops its finished requests and the chunked one);
  // if that shrank it, the running batch's batch_is_full is cleared. What is
  // left joins the running batch: an empty running batch is replaced by it
  // (running_batch = last_batch, a batch ScheduleBatch.init_new made, whose
  // batch_is_full is false), a non-empty one takes its requests and keeps
  // its flag (merge_batch).
  if (last_prefill_size_ > 0) {
    if (prefilled_.size() < last_prefill_size_) batch_is_full_ = false;
    if (!prefilled_.empty() && running_.empty()) batch_is_full_ = false;
  }
  last_prefill_size_ = 0;
  for (auto& r : prefilled_) running_.push_back(std::move(r));
  prefilled_.clear();
}

bool SglangScheduler::step_batch() {
  // Scheduler.get_next_batch_to_run: the last prefill batch joins the running
  // batch; a new prefill batch when one can be formed, else a decode step.
  merge_prefilled();
  std::vector<Req*> batch;
  new_prefill_batch(batch);
  if (!batch.empty()) return prefill_step(batch);
  // update_running_batch: finished requests leave; a smaller batch may admit
  // again (batch_is_full cleared, as when the batch ends empty).
  const std::size_t before = running_.size();
  std::erase_if(running_, [](const auto& r) { return r->done; });
  if (running_.size() < before) batch_is_full_ = false;
  if (!running_.empty()) return decode_step();
  // An idle round: the ratio starts over (Scheduler.self_check_during_idle
  // resets new_token_ratio), and admission is tried with nothing running.
  new_token_ratio_ = init_new_token_ratio_;
  new_prefill_batch(batch);
  if (!batch.empty()) return prefill_step(batch);
  // A host write in flight keeps its pages locked: the head may fit once it
  // lands (wake_at), so it is not given up on yet.
  if (hicache_ && hicache_->next_landing()) return true;
  if (!waiting_.empty()) skip_stalled();
  return true;
}

}  // namespace kvreplay
