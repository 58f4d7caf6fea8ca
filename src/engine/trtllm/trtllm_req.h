// The trtllm engine's request (TensorRT-LLM's LlmRequest with its
// GenerationRequest sequence), private to the engine's files.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/block_pool.h"
#include "engine/sim_types.h"
#include "engine/trtllm/block_tree.h"
#include "engine/trtllm/trtllm_scheduler.h"
#include "formats/requests/request.h"

namespace kvreplay {

struct TrtllmScheduler::Req {
  Request request;
  TokenRuns seq;  // every token's id: the prompt, then the request's own output
  std::shared_ptr<RequestTimes> times;
  std::shared_ptr<std::uint32_t> siblings_left;  // samples of an n > 1 request not done
  std::uint32_t prompt = 0;       // mPromptLen: grows by the tokens generated at a pause
  std::uint32_t max_new = 0;      // mMaxNewTokens, likewise shrinks
  std::uint32_t generated = 0;    // tokens generated since the context (re)started
  std::uint32_t context_pos = 0;  // getContextCurrentPosition
  std::uint32_t chunk = 0;        // this step's context chunk (getContextChunkSize)
  std::uint32_t num_tokens = 0;   // the sequence's tokens (GenerationRequest::getNumTokens)
  std::uint32_t emitting = 1;     // this generation step's tokens kept (1 + drafts accepted)
  bool has_seq = false;           // addSequence done: the request is started
  bool generating = false;        // isGenerationInProgressState
  bool done = false;
  bool admitted_before = false;
  std::uint32_t loaded = 0;  // of the reused tokens at the last admission, those on the host
  std::uint32_t pauses = 0;
  std::vector<BlockId> blocks;  // the sequence's cache block ids, in order
  // new_context_block's answer for the prompt, while the tree's version and
  // the prompt stay as they were.
  mutable std::uint64_t walked_version = ~std::uint64_t{0};
  mutable std::uint32_t walked_prompt = 0;
  mutable std::optional<TrtBlockKey> walked;
  // KV computed: the tokens whose blocks hold their KV.
  std::uint32_t computed() const { return generating ? num_tokens : context_pos; }
};

}  // namespace kvreplay
