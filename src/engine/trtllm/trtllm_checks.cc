// The trtllm engine's gauges, invariant checks and report section
// (engine/trtllm/trtllm_scheduler.h); the rules are in
// engine/trtllm/trtllm_scheduler.cc.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>

#include "engine/trtllm/trtllm_req.h"
#include "engine/trtllm/trtllm_scheduler.h"

namespace kvreplay {

void TrtllmScheduler::record() {
  ReplayState& state = shell_.state;
  const std::uint64_t entries = entries_;
  state.live_sequences = tables_;
  state.logical_tokens = logical_;
  state.table_entries = entries_;
  state.seq_pages = entries_;
  state.seq_continued = continued_;
  state.seq_tables = tables_;
  record_event(state, shell_.totals, pool_.used_count(), pool_.filled_total(), tpb_);
  // In use: blocks some request holds (the stored blocks no request holds
  // are the cache's, free to be taken).
  const std::uint32_t resident = tree_.free_stored_blocks();
  const std::uint32_t in_use = pool_.used_count() - resident;
  sim_.in_use_sum += in_use;
  sim_.peak_cache_resident = std::max(sim_.peak_cache_resident, resident);
  if (sim_.steps <= 1 || in_use > sim_.peak_in_use) {
    sim_.peak_in_use = in_use;
    const std::uint64_t referenced = std::min<std::uint64_t>(entries, pool_.total());
    sim_.saved_blocks_at_peak = referenced > in_use ? referenced - in_use : 0;
  }
  shell_.totals.saved_blocks_at_peak = static_cast<std::int64_t>(sim_.saved_blocks_at_peak);
}

bool TrtllmScheduler::check() {
  ++shell_.totals.checks;
  auto failed = [&](std::string invariant, std::string message) {
    shell_.violation = Violation{sim_.steps, 0, std::move(invariant), std::move(message)};
    return false;
  };
  // Q1: a started request holds a block per tokens_per_block tokens of its
  // sequence (its whole prompt from its first chunk), each once; a request
  // not started holds none.
  std::vector<std::uint32_t> refs(pool_.total(), 0);
  std::vector<BlockId> holds;
  for (const auto& r : active_) {
    const std::uint64_t want = r->has_seq ? (std::uint64_t{r->num_tokens} + tpb_ - 1) / tpb_ : 0;
    if (r->blocks.size() != want || r->computed() > r->num_tokens) {
      return failed("Q1",
                    fmt::format("request {}: {} blocks for {} tokens ({} computed)", r->request.id,
                                r->blocks.size(), r->num_tokens, r->computed()));
    }
    for (BlockId b : r->blocks) {
      if (b >= pool_.total()) return failed("Q1", fmt::format("block {} out of range", b));
      ++refs[b];
      holds.push_back(b);
    }
  }
  for (const auto& r : queue_) {
    if (!r->blocks.empty()) return failed("Q1", "a queued request holds blocks");
  }
  // Q3: the figures record() reports, recounted.
  std::uint64_t entries = 0;
  std::uint64_t continued = 0;
  std::uint64_t tables = 0;
  std::uint64_t logical = 0;
  for (const auto& r : active_) {
    if (!r->has_seq) continue;
    entries += r->blocks.size();
    tables += r->blocks.empty() ? 0 : 1;
    logical += r->computed();
    for (std::size_t i = 1; i < r->blocks.size(); ++i) {
      continued += r->blocks[i] == r->blocks[i - 1] + 1 ? 1 : 0;
    }
  }
  if (entries != entries_ || continued != continued_ || tables != tables_ || logical != logical_ ||
      tables != started_) {
    return failed("Q3", fmt::format("blocks, contiguous blocks, tables and tokens counted {}, {}, "
                                    "{}, {}; recounted {}, {}, {}, {}",
                                    entries_, continued_, tables_, logical_, entries, continued,
                                    tables, logical));
  }
  // T1-T3: the tree, its queue and its holders against the tables.
  if (auto problem = tree_.check(refs)) return failed(problem->substr(0, 2), *problem);
  // I1-I3 over the requests' and the tree's holds.
  tree_.stored_list(holds);
  if (auto found = checker_.check(pool_, tpb_, {}, holds)) return failed("Q2", found->message);
  return true;
}

std::vector<std::vector<std::vector<BlockId>>> TrtllmScheduler::running_group_tables() const {
  std::vector<std::vector<std::vector<BlockId>>> out;
  for (const auto& r : active_) {
    if (r->has_seq) out.push_back({r->blocks});
  }
  return out;
}

void TrtllmScheduler::add_figures(nlohmann::json& report) const {
  report["trtllm"] = {
      {"capacity_scheduler_policy", std::string(to_string(options_.capacity_policy))},
      {"tokens_per_block", tpb_},
      {"max_batch_size", max_batch_size_},
      {"max_num_tokens", max_num_tokens_},
      {"enable_block_reuse", reuse_},
      {"enable_partial_reuse", options_.enable_partial_reuse},
      {"copy_on_partial_reuse", options_.copy_on_partial_reuse},
      {"enable_chunked_context", options_.enable_chunked_context},
      {"max_active_requests", max_active_},
      {"paused_requests", pauses_},
      {"context_chunks", context_chunks_},
      {"reused_blocks", reused_blocks_},
      {"missed_blocks", missed_blocks_},
      {"partial_reuse_copies", partial_copies_},
      {"partial_reuse_taken", partial_claims_},
      {"skipped_for_reuse", skipped_for_reuse_},
      {"reused_tokens", sim_.hit_tokens},
      {"stored_blocks", tree_.stored_blocks()},
      {"evicted_blocks", tree_.evicted()}};
  if (host_) {
    // The host tier is the cpu tier; its eviction is the secondary free
    // queue's (least recently released first).
    const TierResidency host{tree_.host_slots(), tree_.host_used()};
    add_offload_figures(report, *host_, "lru", std::span(&host, 1), sim_);
  }
}

TierGauge TrtllmScheduler::offload_gauge(std::size_t t) const {
  (void)t;
  const OffloadTierFigures& f = host_->figures(0);
  return TierGauge{
      host_->tier_options(0).medium, tree_.host_slots(), tree_.host_used(), f.stored, f.loaded,
      tree_.host_evicted()};
}

bool TrtllmScheduler::end_run() {
  // The run's end: the copies still on the link land (the loads were waited
  // for by their steps; the moves out are counted when made).
  if (!host_ || !active_.empty() || !queue_.empty()) return true;
  host_->start_queued(shell_.step_start);
  OffloadTierFigures& f = host_->figures(0);
  for (const OffloadConnector::Job& job :
       host_->take_landed(std::numeric_limits<double>::infinity())) {
    if (!job.load) continue;
    f.loaded += job.keys.size();
    f.load_ms.add((job.done - job.issued) * 1000.0);
  }
  return true;
}

}  // namespace kvreplay
