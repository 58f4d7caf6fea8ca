// The sglang engine's HiCache (engine/sglang/sglang_scheduler.h): the host pool's
// transfers, timed on the link of --offload's cpu tier, and its gauges. The
// tree's rules are in engine/sglang/radix_cache.cc; each names the function of
// SGLang's HiRadixCache (python/sglang/srt/mem_cache/hiradix_cache.py) it
// comes from.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "engine/sglang/sglang_req.h"
#include "engine/sglang/sglang_scheduler.h"

namespace kvreplay {

void SglangScheduler::load_back(Req& req) {
  // HiRadixCache.init_load_back: the chain loads whole or not at all; when it
  // does, the request's lock moves to its last node (add_one_req locks
  // req.last_node, now the host node), which the load keeps locked too
  // until it lands.
  std::vector<std::uint64_t> host;
  std::vector<BlockId> pages;
  const std::uint32_t tokens = tree_.load_back(req.host_node, host, pages);
  if (tokens == 0) return;
  tree_.dec_lock_ref(req.match_node);
  req.match_node = req.host_node;
  tree_.inc_lock_ref(req.match_node);
  req.prefix += tokens;
  req.loaded += tokens;
  req.host_hit = 0;
  hicache_->issue_load(0, host, req.match_node, shell_.step_start);
  shell_.step_waits = std::max(shell_.step_waits, hicache_->jobs().back().done);
  if (trace_ != nullptr) {
    for (std::size_t i = 0; i < host.size(); ++i) trace_->load(0, host[i], pages[i]);
  }
}

void SglangScheduler::hicache_step_start() {
  // check_hicache_events: writing_check and loading_check, then the writes
  // queued in the last step start on the device-to-host link.
  const double now = shell_.step_start;
  for (const OffloadConnector::Job& job : hicache_->take_landed(now)) hicache_landed(job);
  hicache_->start_queued(now);
}

void SglangScheduler::hicache_landed(const OffloadConnector::Job& job) {
  // loading_check: the load's node is unlocked, its pages counted as loaded
  // and its time taken; writing_check: the written node is unlocked (its
  // pages were counted as stored when queued) and evictable again. The
  // running batch's batch_is_full stays as it is: SGLang clears it only when
  // that batch shrinks or is replaced (get_next_batch_to_run).
  OffloadTierFigures& f = hicache_->figures(0);
  auto* node = static_cast<RadixCache::Node*>(const_cast<void*>(job.owner));
  if (job.load) {
    tree_.load_done(node);
    f.loaded += job.keys.size();
    f.load_ms.add((job.done - job.issued) * 1000.0);
  } else {
    tree_.write_done(node, job.keys);
  }
}

void SglangScheduler::hicache_step_end() {
  hicache_->figures(0).evicted = tree_.host_evicted();
  for (RadixCache::HostWrite& write : tree_.take_host_writes()) {
    if (trace_ != nullptr) {
      // The trace stores a page of a sequence: a sequence holding the
      // node's path (all cached), its last pages stored, then freed.
      const std::uint32_t end = write.node->end;
      std::vector<BlockId> path(end / page_);
      path_pages(write.node, 0, end, path);
      const std::uint64_t seq = trace_->admit(end, path);
      const std::size_t first = path.size() - write.host.size();
      for (std::size_t i = 0; i < write.host.size(); ++i) {
        trace_->store(seq, static_cast<std::uint32_t>(first + i), 0, write.host[i]);
      }
      trace_->free(seq);
      trace_moved_pages_ += path.size();
    }
    // A page counts as stored once its write is issued, as the emitted
    // trace's `store` is written then and the host's resident pages count it
    // (the paged engines' tiers count the same): stored = resident + evicted.
    hicache_->figures(0).stored += write.host.size();
    hicache_->queue_store(0, std::move(write.host), std::move(write.pages), write.node);
  }
  if (trace_ != nullptr) {
    for (std::uint64_t page : trace_drops_) trace_->drop(0, page);
  }
  trace_drops_.clear();
}

TierGauge SglangScheduler::offload_gauge(std::size_t t) const {
  (void)t;
  const OffloadTierFigures& f = hicache_->figures(0);
  return TierGauge{hicache_->tier_options(0).medium,
                   tree_.host_capacity(),
                   tree_.host_used(),
                   f.stored,
                   f.loaded,
                   tree_.host_evicted()};
}

bool SglangScheduler::end_run() {
  // The run's end: no request is left, but the host writes of the last steps
  // may still be queued or in flight. They land now, as the emitted trace has
  // them (its `store` copied the page when it was written): the nodes are
  // unlocked with their host copies, as the paged engines' stores land at the
  // end. So does the load of a request that finished in the last step (its
  // step ended no earlier than the load landed), counted as every landing
  // is, its time included. The run's time stays its last step's end; no KV
  // events are sent.
  if (!hicache_ || has_requests()) return true;
  hicache_->start_queued(shell_.step_start);
  for (const OffloadConnector::Job& job :
       hicache_->take_landed(std::numeric_limits<double>::infinity())) {
    hicache_landed(job);
  }
  hicache_->figures(0).evicted = tree_.host_evicted();
  return true;
}

std::optional<double> SglangScheduler::wake_at() const {
  if (!hicache_) return std::nullopt;
  return hicache_->next_landing();
}

}  // namespace kvreplay
