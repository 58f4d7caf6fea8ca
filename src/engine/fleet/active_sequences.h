// ActiveSequences: what Dynamo's KV router counts of the requests it sent to
// one worker and that have not finished (ActiveSequences in
// lib/llm/src/kv_router/sequence.rs, the version beside the
// DefaultWorkerSelector of lib/llm/src/kv_router/scheduler.rs at
// ai-dynamo/dynamo db19bd2a):
//   - active blocks: the unique blocks of their prompts (unique_blocks: a
//     block several of them name counts once), held until the request is
//     freed (free: its stream ended);
//   - active tokens: the prompt tokens each still has to compute there
//     (prefill_tokens: its prompt less the blocks the worker had cached when
//     it was routed, new_tokens), until its first token (mark_prefill_completed)
//     or its end, whichever comes first.
// A request's blocks are its prompt's full pages (Dynamo hashes whole blocks
// only: compute_block_hash_for_seq, chunks_exact), each keyed as the paged
// engine keys it (the trace's hash id and the page's end within its hash
// block, or the named prefix and the page's end); a page the trace names no
// hash for is the request's own: it shares with no one.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "formats/requests/request.h"

namespace kvreplay {

// The router's blocks of a prompt: the keys of its named full pages, in
// order, and how many of its full pages are its own.
struct RouterBlocks {
  std::vector<std::uint64_t> named;
  std::uint64_t own = 0;
  std::uint64_t count() const { return named.size() + own; }
};
RouterBlocks router_blocks(const Request& request, std::uint32_t page_tokens);

class ActiveSequences {
 public:
  // Dynamo's active_blocks(): unique blocks of the active requests.
  std::uint64_t active_blocks() const { return named_.size() + own_; }
  // Dynamo's active_tokens: prompt tokens routed here, not yet prefilled.
  std::uint64_t active_tokens() const { return active_tokens_; }
  // new_blocks: the request's blocks not already active here.
  std::uint64_t new_blocks(const RouterBlocks& blocks) const;
  // add_request: `prefill_tokens` = new_tokens(isl, overlap) on this worker.
  void add(std::uint64_t tag, RouterBlocks blocks, std::uint64_t prefill_tokens);
  // mark_prefill_completed: its prefill tokens stop counting (once).
  void prefill_done(std::uint64_t tag);
  // free: its blocks leave (a block shared with another active request stays).
  void free(std::uint64_t tag);
  std::size_t requests() const { return active_.size(); }

 private:
  struct Active {
    RouterBlocks blocks;
    std::uint64_t prefill_tokens = 0;  // 0 once prefilled
  };
  std::unordered_map<std::uint64_t, Active> active_;
  std::unordered_map<std::uint64_t, std::uint32_t> named_;  // key -> active requests naming it
  std::uint64_t own_ = 0;
  std::uint64_t active_tokens_ = 0;
};

}  // namespace kvreplay
