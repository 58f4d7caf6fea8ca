#include "engine/events/kv_events.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/offload/offload_connector.h"
#include "engine/offload/offload_media.h"

namespace kvreplay {

namespace {

// The fields in the order vLLM's msgspec structs declare them (tag first):
// BlockStored {block_hashes, parent_block_hash, token_ids, block_size,
// lora_id, medium}, BlockRemoved {block_hashes, medium}
// (vllm/distributed/kv_events.py, SPEC 3.8; later versions' lora_name,
// extra_keys and group_idx are not written: a consumer skips what it lacks).
using Ordered = nlohmann::ordered_json;

// A block hash as the stream writes it: kvreplay's chained key, as a string.
std::string hash_text(std::uint64_t key) {
  return std::to_string(key);
}

Ordered stored(Ordered hashes, Ordered parent, std::uint32_t block_size, std::string_view medium) {
  Ordered event = Ordered::object();
  event["type"] = "BlockStored";
  event["block_hashes"] = std::move(hashes);
  event["parent_block_hash"] = std::move(parent);
  event["token_ids"] = Ordered::array();  // a trace names hash blocks, not tokens
  event["block_size"] = block_size;
  event["lora_id"] = nullptr;
  event["medium"] = medium;
  return event;
}

Ordered removed(Ordered hashes, std::string_view medium) {
  Ordered event = Ordered::object();
  event["type"] = "BlockRemoved";
  event["block_hashes"] = std::move(hashes);
  event["medium"] = medium;
  return event;
}

Ordered key_text(const std::optional<PageKey>& key) {
  return key ? Ordered(hash_text(block_key(*key))) : Ordered(nullptr);
}

// One caching call's stores, gpu[begin, end): one BlockStored a KV-cache
// group (each SingleTypeKVCacheManager calls BlockPool.cache_full_blocks for
// its own group), the group's blocks in the order cached; a block whose
// parent is not the block before it starts another event (a run the engine
// broke, which vLLM's contiguous new_full_blocks never does).
void stored_call(const std::vector<PrefixCache::KeyChange>& gpu, std::size_t begin, std::size_t end,
                 std::uint32_t page_tokens, Ordered& list) {
  std::vector<std::uint32_t> groups;
  for (std::size_t i = begin; i < end; ++i) {
    const std::uint32_t g = gpu[i].key.group;
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  for (std::uint32_t g : groups) {
    const PrefixCache::KeyChange* previous = nullptr;
    Ordered hashes = Ordered::array();
    std::optional<PageKey> parent;
    for (std::size_t i = begin; i < end; ++i) {
      const PrefixCache::KeyChange& change = gpu[i];
      if (change.key.group != g) continue;
      if (previous != nullptr && change.parent != previous->key) {
        list.push_back(stored(std::move(hashes), key_text(parent), page_tokens, "GPU"));
        hashes = Ordered::array();
        previous = nullptr;
      }
      if (previous == nullptr) parent = change.parent;
      hashes.push_back(hash_text(block_key(change.key)));
      previous = &change;
    }
    list.push_back(stored(std::move(hashes), key_text(parent), page_tokens, "GPU"));
  }
}

}  // namespace

std::string kv_event_batch_line(double ts, const KvEventLog& events, std::uint32_t page_tokens,
                                std::optional<std::uint32_t> instance) {
  Ordered list = Ordered::array();
  // BlockPool's queue (vllm/v1/core/block_pool.py), in order: one BlockStored
  // per cache_full_blocks call listing every block it cached (a hash another
  // block holds included), one BlockRemoved per block
  // _maybe_evict_cached_block evicts.
  const auto& gpu = events.gpu;
  for (std::size_t i = 0; i < gpu.size();) {
    std::size_t j = i + 1;
    if (gpu[i].stored) {
      while (j < gpu.size() && gpu[j].stored && gpu[j].call == gpu[i].call) ++j;
      stored_call(gpu, i, j, page_tokens, list);
    } else {
      list.push_back(removed(Ordered::array({hash_text(block_key(gpu[i].key))}), "GPU"));
    }
    i = j;
  }
  // The tree engines' pages (sglang, trtllm): one BlockStored or BlockRemoved
  // a page, as SGLang's KVCacheEventMixin sends them. HiCache's host pages
  // (host) as the host-memory medium's (CPU), without a parent, as the
  // offload tiers' blocks.
  for (const PageChange& change : events.pages) {
    Ordered hashes = Ordered::array({hash_text(change.hash)});
    const std::string_view medium = change.host ? event_medium(host_memory_medium()) : "GPU";
    list.push_back(change.stored ? stored(std::move(hashes),
                                          change.parent ? Ordered(hash_text(*change.parent))
                                                        : Ordered(nullptr),
                                          change.host ? 0 : page_tokens, medium)
                                 : removed(std::move(hashes), medium));
  }
  // The offload connector's events (OffloadingConnectorScheduler.take_events),
  // after the block pool's, as Scheduler.update_from_output appends them.
  for (const KvEventLog::TierChange& change : events.tiers) {
    Ordered hashes = Ordered::array();
    for (std::uint64_t key : change.event.keys) hashes.push_back(hash_text(key));
    const std::string_view medium = event_medium(change.medium);
    list.push_back(change.event.removed ? removed(std::move(hashes), medium)
                                        : stored(std::move(hashes), nullptr, 0, medium));
  }
  // KVEventBatch {ts, events} (data_parallel_rank omitted at its default),
  // and kvreplay's instance in fleets.
  Ordered batch = Ordered::object();
  batch["ts"] = ts;
  batch["events"] = std::move(list);
  if (instance) batch["instance"] = *instance;
  return batch.dump() + "\n";
}

}  // namespace kvreplay
