#include "engine/events/kv_events.h"

#include <nlohmann/json.hpp>

#include "engine/offload/offload_connector.h"
#include "engine/offload/offload_media.h"

namespace kvreplay {

namespace {

nlohmann::json stored(nlohmann::json hashes, nlohmann::json parent, std::uint32_t block_size,
                      std::string_view medium) {
  return {{"type", "BlockStored"},
          {"block_hashes", std::move(hashes)},
          {"parent_block_hash", std::move(parent)},
          {"token_ids", nlohmann::json::array()},
          {"block_size", block_size},
          {"lora_id", nullptr},
          {"medium", medium}};
}

nlohmann::json removed(nlohmann::json hashes, std::string_view medium) {
  return {{"type", "BlockRemoved"}, {"block_hashes", std::move(hashes)}, {"medium", medium}};
}

}  // namespace

std::string kv_event_batch_line(double ts, const KvEventLog& events, std::uint32_t page_tokens,
                                std::optional<std::uint32_t> instance) {
  nlohmann::json list = nlohmann::json::array();
  // BlockPool.cache_full_blocks sends one BlockStored per run of new blocks,
  // _maybe_evict_cached_block one BlockRemoved per block: consecutive changes
  // of one kind are one event here, a stored run while each block's parent
  // is the block before it.
  const auto& gpu = events.gpu;
  for (std::size_t i = 0; i < gpu.size();) {
    nlohmann::json hashes = nlohmann::json::array();
    const bool is_stored = gpu[i].stored;
    const std::optional<PageKey> parent = gpu[i].parent;
    std::size_t j = i;
    do {
      hashes.push_back(block_key(gpu[j].key));
      ++j;
    } while (j < gpu.size() && gpu[j].stored == is_stored &&
             (!is_stored || gpu[j].parent == gpu[j - 1].key));
    if (is_stored) {
      list.push_back(stored(std::move(hashes),
                            parent ? nlohmann::json(block_key(*parent)) : nlohmann::json(nullptr),
                            page_tokens, "GPU"));
    } else {
      list.push_back(removed(std::move(hashes), "GPU"));
    }
    i = j;
  }
  // The sglang engine's pages: one BlockStored or BlockRemoved a page, as
  // SGLang's KVCacheEventMixin sends them.
  // HiCache's host pages (host) as the host-memory medium's (CPU), without a
  // parent, as the offload tiers' blocks.
  for (const PageChange& change : events.pages) {
    nlohmann::json hashes = nlohmann::json::array({change.hash});
    const std::string_view medium = change.host ? event_medium(host_memory_medium()) : "GPU";
    list.push_back(change.stored ? stored(std::move(hashes),
                                          change.parent ? nlohmann::json(*change.parent)
                                                        : nlohmann::json(nullptr),
                                          change.host ? 0 : page_tokens, medium)
                                 : removed(std::move(hashes), medium));
  }
  for (const KvEventLog::TierChange& change : events.tiers) {
    nlohmann::json hashes(change.event.keys);
    const std::string_view medium = event_medium(change.medium);
    list.push_back(change.event.removed ? removed(std::move(hashes), medium)
                                        : stored(std::move(hashes), nullptr, 0, medium));
  }
  nlohmann::json batch = {{"ts", ts}, {"events", std::move(list)}};
  if (instance) batch["instance"] = *instance;
  return batch.dump() + "\n";
}

}  // namespace kvreplay
