// What the engines that key their caches by token share (the sglang engine's
// radix tree, the trtllm engine's tree of blocks): a sequence's tokens as
// runs of ids, the prompt's runs as the trace names them, and the pages such
// a tree logs as KV events.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "formats/requests/request.h"

namespace kvreplay {

// Tokens [the previous run's end, end) are named `id`.
struct TokenRun {
  std::uint64_t id = 0;
  std::uint32_t end = 0;
};
using TokenRuns = std::vector<TokenRun>;

// The runs of `request`'s prompt the trace names: each hash block's tokens by
// its hash id, else a named prefix's tokens by the prefix's key
// (engine/key_spaces.h: kPrefixKeyBase + its index in `prefix_ids`, a name
// seen first taking the next index); empty when the trace names none. The
// caller names the rest of the prompt, and the output, as the request's own.
TokenRuns named_prompt_runs(const Request& request,
                            std::map<std::string, std::uint64_t>& prefix_ids);
// The same without naming a prefix seen for the first time: such a prefix's
// tokens, which nothing can have cached, give no run.
TokenRuns known_prompt_runs(const Request& request,
                            const std::map<std::string, std::uint64_t>& prefix_ids);

// --kv-events: a page of a tree (the engine's KV-event block) cached or
// freed, named by its chained hash: the hash of the page before it on its
// path (none for a path's first page) mixed with its tokens' ids. Equal
// hashes mean equal tokens from the start, wherever the tree holds them.
struct PageChange {
  std::uint64_t hash = 0;
  std::optional<std::uint64_t> parent;
  bool stored = false;
  bool host = false;  // a host pool's copy (medium CPU, no parent): SGLang's HiCache
};

}  // namespace kvreplay
