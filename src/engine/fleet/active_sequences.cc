#include "engine/fleet/active_sequences.h"

#include <algorithm>
#include <utility>

#include "core/mix64.h"
#include "engine/fleet/routing_policy.h"

namespace kvreplay {

namespace {

// A named page's key: its run's id and where the page ends within the run
// (the paged engine's PageKey), mixed into one word.
std::uint64_t page_key(std::uint64_t id, std::uint64_t end) {
  return mix64_finalize(splitmix64(id) + end);
}

}  // namespace

RouterBlocks router_blocks(const Request& request, std::uint32_t page_tokens) {
  RouterBlocks blocks;
  const std::uint64_t page = std::max<std::uint32_t>(page_tokens, 1);
  const std::uint64_t full = request.prompt / page;
  const std::uint64_t hash_block = std::max<std::uint32_t>(request.hash_block_tokens, 1);
  for (std::uint64_t p = 0; p < full; ++p) {
    const std::uint64_t end = (p + 1) * page;
    if (!request.hash_ids.empty()) {
      const std::uint64_t k = (end - 1) / hash_block;
      if (k >= request.hash_ids.size()) break;
      blocks.named.push_back(page_key(request.hash_ids[k], end - k * hash_block));
    } else if (!request.prefix.empty() && end <= request.prefix_tokens) {
      blocks.named.push_back(page_key(prefix_key(request.prefix), end));
    } else {
      break;
    }
  }
  blocks.own = full - blocks.named.size();
  return blocks;
}

std::uint64_t ActiveSequences::new_blocks(const RouterBlocks& blocks) const {
  std::uint64_t count = blocks.own;
  for (const std::uint64_t key : blocks.named) {
    if (!named_.contains(key)) ++count;
  }
  return count;
}

void ActiveSequences::add(std::uint64_t tag, RouterBlocks blocks, std::uint64_t prefill_tokens) {
  if (active_.contains(tag)) return;  // Dynamo ignores a duplicate add
  for (const std::uint64_t key : blocks.named) ++named_[key];
  own_ += blocks.own;
  active_tokens_ += prefill_tokens;
  active_.emplace(tag, Active{std::move(blocks), prefill_tokens});
}

void ActiveSequences::prefill_done(std::uint64_t tag) {
  auto it = active_.find(tag);
  if (it == active_.end()) return;
  active_tokens_ -= it->second.prefill_tokens;
  it->second.prefill_tokens = 0;
}

void ActiveSequences::free(std::uint64_t tag) {
  auto it = active_.find(tag);
  if (it == active_.end()) return;
  active_tokens_ -= it->second.prefill_tokens;
  for (const std::uint64_t key : it->second.blocks.named) {
    auto at = named_.find(key);
    if (--at->second == 0) named_.erase(at);
  }
  own_ -= it->second.blocks.own;
  active_.erase(it);
}

}  // namespace kvreplay
