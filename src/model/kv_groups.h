// KV-cache groups: how a hybrid model's layers share one paged pool, as vLLM's
// hybrid KV cache manager forms them (vllm/v1/core/kv_cache_utils.py,
// _get_kv_cache_groups_uniform_page_size; vllm/v1/core/kv_cache_coordinator.py,
// HybridKVCacheCoordinator).
//
// Layers of one attention spec (full attention, or a sliding window of a given
// width) are split into groups of `group_size` layers, group_size being the
// fewest layers of any spec (the most when the counts are within 25%), so that
// every group has the same page size. A block of the one pool is one page (of
// page_tokens tokens) for the layers of one group, padded to group_size layers:
//   bytes per block = page_tokens * group_size * bytes per token per layer,
//   num_gpu_blocks  = KV memory / bytes per block.
// Each request holds one block table per group; a step allocates in every group.
//
// Every layer is assumed to have the same KV geometry (heads, head_dim, dtype);
// groups differ only by attention type.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/config.h"

namespace kvreplay {

struct KvCacheGroupSpec {
  enum Attention : std::uint8_t { kFull, kSliding };
  Attention attention = kFull;
  std::uint32_t window_tokens = 0;  // sliding: the window, in tokens; full: 0
  std::uint32_t layers = 0;         // the group's layers (padding excluded)
  bool operator==(const KvCacheGroupSpec&) const = default;
  // Same spec: layers of one spec share a manager (SingleTypeKVCacheManager).
  bool same_spec(const KvCacheGroupSpec& other) const {
    return attention == other.attention && window_tokens == other.window_tokens;
  }
};

// One layer of a model, as its config names it (layer_types + sliding_window).
struct LayerAttention {
  KvCacheGroupSpec::Attention attention = KvCacheGroupSpec::kFull;
  std::uint32_t window_tokens = 0;
};

// vLLM's groups for a model with these layers, in its order: one group of
// every layer when all layers share one spec (_get_kv_cache_groups_uniform_type);
// otherwise, per spec in order of first appearance, ceil(n / group_size)
// groups holding layers[i::num_groups] (kv_cache_utils.py,
// _get_kv_cache_groups_uniform_page_size). Empty for no layers.
std::vector<KvCacheGroupSpec> form_kv_cache_groups(std::span<const LayerAttention> layers);

// The layers a pool block is a page for: the largest group (every group is
// padded to it). 0 for no groups.
std::uint32_t kv_group_size(std::span<const KvCacheGroupSpec> groups);

// Bytes of one pool block: page_tokens * group_size * bytes per token per
// layer; with no groups, config.block_bytes() (one group of every layer).
// REQUIRES: config.is_valid().
std::uint64_t kv_block_bytes(const PagedKvConfig& config, std::span<const KvCacheGroupSpec> groups);

// What is wrong with `groups` for a model of `layers` layers, or nullopt:
// a group without layers, a sliding group without a window, a full group with
// one, or group layers that do not add up to the model's layers.
std::optional<std::string> kv_groups_error(std::span<const KvCacheGroupSpec> groups,
                                           std::uint32_t layers);

}  // namespace kvreplay
