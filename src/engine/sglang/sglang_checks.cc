// The sglang engine's gauges, invariant checks and report section
// (engine/sglang/sglang_scheduler.h); the rules are in engine/sglang/sglang_scheduler.cc.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "engine/sglang/sglang_req.h"
#include "engine/sglang/sglang_scheduler.h"

namespace kvreplay {

void SglangScheduler::record() {
  ReplayState& state = shell_.state;
  std::uint64_t live = 0;
  std::uint64_t logical = 0;
  auto add = [&](const Req& r) {
    if (r.done) return;
    ++live;
    logical += r.kv_len;
  };
  for (const auto& r : running_) add(*r);
  for (const auto& r : prefilled_) add(*r);
  if (chunked_) add(*chunked_);
  state.live_sequences = live;
  state.logical_tokens = logical;
  state.table_entries = in_use_entries_;
  state.seq_pages = in_use_entries_;
  state.seq_continued = layout_continued_;
  state.seq_tables = layout_tables_;
  record_event(state, shell_.totals, pool_.used_count(), pool_.filled_total(), page_);
  // token_usage as SGLang logs it: tokens neither free nor evictable, over the pool.
  const std::uint32_t resident = cache_resident_blocks();
  const std::uint32_t in_use = pool_.used_count() - resident;
  const double usage = static_cast<double>(in_use) / std::max<double>(pool_.total(), 1);
  token_usage_sum_ += usage;
  token_usage_peak_ = std::max(token_usage_peak_, usage);
  sim_.in_use_sum += in_use;
  sim_.peak_cache_resident = std::max(sim_.peak_cache_resident, resident);
  if (sim_.steps <= 1 || in_use > sim_.peak_in_use) {
    sim_.peak_in_use = in_use;
    const std::uint64_t referenced = std::min<std::uint64_t>(in_use_entries_, pool_.total());
    sim_.saved_blocks_at_peak = referenced > in_use ? referenced - in_use : 0;
  }
  shell_.totals.saved_blocks_at_peak = static_cast<std::int64_t>(sim_.saved_blocks_at_peak);
}

bool SglangScheduler::check() {
  ++shell_.totals.checks;
  // R1-R5: the tree itself, each unfinished request holding one lock.
  std::vector<const RadixCache::Node*> locked;
  std::vector<const Req*> live;
  for (const auto& r : running_) live.push_back(r.get());
  for (const auto& r : prefilled_) live.push_back(r.get());
  if (chunked_) live.push_back(chunked_.get());
  for (const Req* r : live) {
    if (!r->done && r->last_node != tree_.root()) locked.push_back(r->last_node);
  }
  // HiCache: a node is locked while its write or load is in flight.
  if (hicache_) {
    for (const OffloadConnector::Job& job : hicache_->jobs()) {
      locked.push_back(static_cast<const RadixCache::Node*>(job.owner));
    }
  }
  auto fail = [&](std::string invariant, std::string message) {
    shell_.violation = Violation{sim_.steps, 0, std::move(invariant), std::move(message)};
    return false;
  };
  if (auto problem = tree_.check(locked)) return fail(problem->invariant, problem->message);
  // S1: a request's first tree_len tokens are the pages on its locked node's
  // path, its KV fills its pages, and a waiting request holds nothing.
  std::vector<BlockId> holds;
  tree_.pages(holds);
  std::uint64_t entries = 0;
  std::uint64_t continued = 0;
  std::uint64_t tables = 0;
  for (const Req* r : live) {
    if (r->done) {
      if (!r->kv.empty())
        return fail("S1", fmt::format("request {} finished with pages", r->request.id));
      continue;
    }
    if (r->kv.size() != (r->kv_len + page_ - 1) / page_ || r->tree_len > r->kv_len ||
        r->tree_len % page_ != 0 || r->last_node->end != r->tree_len) {
      return fail("S1", fmt::format("request {}: {} pages for {} tokens, {} in the tree, its "
                                    "node ends at {}",
                                    r->request.id, r->kv.size(), r->kv_len, r->tree_len,
                                    r->last_node->end));
    }
    std::vector<BlockId> path;
    for (const RadixCache::Node* n = r->last_node; n != nullptr; n = n->parent) {
      path.insert(path.begin(), n->pages.begin(), n->pages.end());
    }
    if (!std::equal(path.begin(), path.end(), r->kv.begin())) {
      return fail("S1", fmt::format("request {}: its first {} tokens are not its tree path's pages",
                                    r->request.id, r->tree_len));
    }
    holds.insert(holds.end(), r->kv.begin() + r->tree_len / page_, r->kv.end());
    entries += r->kv.size();
    continued += consecutive_pages(r->kv, 0, r->kv.size());
    tables += r->kv.empty() ? 0 : 1;
  }
  for (const auto& r : waiting_) {
    if (!r->kv.empty() || r->last_node != tree_.root()) {
      return fail("S1", fmt::format("waiting request {} holds pages or a lock", r->request.id));
    }
  }
  if (entries != in_use_entries_ || continued != layout_continued_ || tables != layout_tables_) {
    return fail("S1", fmt::format("request pages, contiguous pages and rows counted {}, {}, {}; "
                                  "recounted {}, {}, {}",
                                  in_use_entries_, layout_continued_, layout_tables_, entries,
                                  continued, tables));
  }
  // S2: every live page is held exactly once, by the tree or by one request's
  // own tail (I1-I3 over those holds: refcounts, the free list, fills).
  if (auto found = checker_.check(pool_, page_, {}, holds)) {
    return fail("S2", found->message);
  }
  return true;
}

std::vector<BlockId>& SglangScheduler::running_kv(std::size_t i) {
  return running_.at(i)->kv;
}

std::vector<std::vector<std::vector<BlockId>>> SglangScheduler::running_group_tables() const {
  std::vector<std::vector<std::vector<BlockId>>> out;
  for (const auto& r : running_) {
    if (!r->done) out.push_back({r->kv});
  }
  return out;
}

void SglangScheduler::add_figures(nlohmann::json& report) const {
  const double steps = static_cast<double>(std::max<std::uint64_t>(sim_.steps, 1));
  report["sglang"] = {
      {"schedule_policy", std::string(to_string(options_.policy))},
      {"page_size", page_},
      {"chunked_prefill_size", options_.chunked_prefill_size},
      {"max_prefill_tokens", options_.max_prefill_tokens},
      {"max_running_requests", max_running_},
      {"max_total_num_tokens", std::uint64_t{pool_.total()} * page_},
      {"retracted_requests", retracted_},
      {"prefill_batches", prefill_batches_},
      {"decode_batches", decode_batches_},
      {"chunked_prefills", chunked_prefills_},
      {"prefill_out_of_memory", prefill_out_of_memory_},
      {"cached_tokens", sim_.hit_tokens},
      {"token_usage", {{"peak", token_usage_peak_}, {"mean", token_usage_sum_ / steps}}},
      {"new_token_ratio",
       {{"init", init_new_token_ratio_}, {"min", min_ratio_seen_}, {"final", new_token_ratio_}}},
      {"radix_nodes", tree_.nodes()}};
  if (hicache_) {
    // HiCache's host pool is the cpu tier; its eviction is the tree's
    // (evict_host: host-only leaves, least recently used first).
    const TierResidency host{tree_.host_capacity(), tree_.host_used()};
    add_offload_figures(report, *hicache_, "lru", std::span(&host, 1), sim_);
    report["sglang"]["hicache"] = {{"write_policy", "write_through"},
                                   {"load_back_threshold", RadixCache::kLoadBackThreshold},
                                   {"loaded_unused", loads_unused_}};
  }
}

std::optional<std::string> SglangScheduler::skip_rule(SkipReason reason,
                                                      const SkippedRequest& first) const {
  if (reason != SkipReason::kPoolTooSmall) return std::nullopt;
  // SGLang's max_req_len: prompt + output within the pool, a page to spare.
  return fmt::format(
      "prompt and output need more than the pool of {} pages less one (first: line {}, {} "
      "pages; give a larger --kv-memory or --pool-blocks)",
      config_.kv.pool_blocks, first.line, first.need);
}

}  // namespace kvreplay
