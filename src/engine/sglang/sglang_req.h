// The sglang engine's request (SGLang's Req, schedule_batch.py), private to
// the engine's files: engine/sglang/sglang_scheduler.cc runs the rules,
// engine/sglang/sglang_checks.cc records, checks and reports.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/block_pool.h"
#include "engine/replay/trace_emitter.h"
#include "engine/sglang/radix_cache.h"
#include "engine/sglang/sglang_scheduler.h"
#include "engine/sim_types.h"
#include "formats/requests/request.h"

namespace kvreplay {

struct SglangScheduler::Req {
  Request request;
  TokenRuns seq;  // every token's id: prompt, then the request's own output
  std::shared_ptr<RequestTimes> times;
  std::shared_ptr<std::uint32_t> siblings_left;  // children of an n > 1 request not done
  std::uint32_t generated = 0;                   // len(output_ids)
  // req_to_token's row: one page per page_tokens tokens of KV (seq_lens).
  std::vector<BlockId> kv;
  std::uint32_t kv_len = 0;
  // kv's first tree_len tokens are the tree's pages, locked through last_node
  // (the root when none); the rest are the request's own.
  std::uint32_t tree_len = 0;
  RadixCache::Node* last_node = nullptr;
  // This round (init_next_round_input): fill_ids' length, the prefix matched
  // while waiting, and the tokens to compute.
  std::uint32_t fill = 0;
  std::uint32_t prefix = 0;
  RadixCache::Node* match_node = nullptr;
  // HiCache: the match's host part (host_hit_length, last_host_node), and
  // the tokens of the prefix loaded back from it since it was last admitted
  // (a load whose request was refused after it counts at its admission).
  std::uint32_t host_hit = 0;
  RadixCache::Node* host_node = nullptr;
  std::uint32_t loaded = 0;
  std::uint32_t extend = 0;
  bool truncated = false;  // this round computes a chunk, not the rest
  bool admitted_before = false;
  bool deprioritized = false;  // _compute_prefix_matches's temporary_deprioritized
  bool done = false;
  std::uint32_t retractions = 0;
  std::uint64_t trace_seq = TraceEmitter::kNoSeq;  // --emit-trace: kv's sequence
  std::uint64_t continued = 0;  // consecutive_pages(kv, 0, kv.size()), kept as kv changes
  std::uint32_t remaining() const {
    return request.output > generated ? request.output - generated : 0;
  }
};

// The pages i of kv in [lo, hi) that continue page i - 1's block (the
// report's layout: physically contiguous runs of a request's KV).
std::uint64_t consecutive_pages(const std::vector<BlockId>& kv, std::size_t lo, std::size_t hi);

}  // namespace kvreplay
