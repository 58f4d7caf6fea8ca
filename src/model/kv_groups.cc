#include "model/kv_groups.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvreplay {

std::vector<KvCacheGroupSpec> form_kv_cache_groups(std::span<const LayerAttention> layers) {
  // Specs in order of first appearance, with their layer counts (vLLM's
  // same_type_layers, a dict filled in layer order).
  std::vector<KvCacheGroupSpec> specs;
  for (const LayerAttention& layer : layers) {
    const KvCacheGroupSpec spec{
        layer.attention, layer.attention == KvCacheGroupSpec::kFull ? 0 : layer.window_tokens, 1};
    auto it = std::find_if(specs.begin(), specs.end(),
                           [&](const KvCacheGroupSpec& s) { return s.same_spec(spec); });
    if (it == specs.end()) {
      specs.push_back(spec);
    } else {
      ++it->layers;
    }
  }
  // _get_kv_cache_groups_uniform_type: one spec, one group of every layer.
  if (specs.size() <= 1) return specs;
  // _get_kv_cache_groups_uniform_page_size: group_size is the fewest layers of
  // any spec, or the most when that is under 1.25 times the fewest.
  std::uint32_t fewest = specs[0].layers, most = specs[0].layers;
  for (const KvCacheGroupSpec& s : specs) {
    fewest = std::min(fewest, s.layers);
    most = std::max(most, s.layers);
  }
  const std::uint32_t group_size = most * 4 < fewest * 5 ? most : fewest;
  std::vector<KvCacheGroupSpec> groups;
  for (const KvCacheGroupSpec& s : specs) {
    // ceil(n / group_size) groups, group i holding layers i, i + g, i + 2g...
    const std::uint32_t num_groups = (s.layers + group_size - 1) / group_size;
    for (std::uint32_t i = 0; i < num_groups; ++i) {
      const std::uint32_t count = (s.layers - i + num_groups - 1) / num_groups;
      groups.push_back(KvCacheGroupSpec{s.attention, s.window_tokens, count});
    }
  }
  return groups;
}

std::uint32_t kv_group_size(std::span<const KvCacheGroupSpec> groups) {
  std::uint32_t size = 0;
  for (const KvCacheGroupSpec& g : groups) size = std::max(size, g.layers);
  return size;
}

std::uint64_t kv_block_bytes(const PagedKvConfig& config,
                             std::span<const KvCacheGroupSpec> groups) {
  const std::uint64_t per_layer_page =
      config.bytes_per_token() / config.layers * config.page_tokens;
  return per_layer_page * (groups.empty() ? config.layers : kv_group_size(groups));
}

std::optional<std::string> kv_groups_error(std::span<const KvCacheGroupSpec> groups,
                                           std::uint32_t layers) {
  if (groups.empty()) return std::nullopt;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const KvCacheGroupSpec& g = groups[i];
    if (g.layers == 0) return fmt::format("KV-cache group {} has no layers", i);
    if (g.attention == KvCacheGroupSpec::kSliding && g.window_tokens == 0) {
      return fmt::format("KV-cache group {} is sliding-window without a window", i);
    }
    if (g.attention == KvCacheGroupSpec::kFull && g.window_tokens != 0) {
      return fmt::format("KV-cache group {} is full attention with a window", i);
    }
    total += g.layers;
  }
  if (total != layers) {
    return fmt::format("the KV-cache groups hold {} layers, the model has {}", total, layers);
  }
  return std::nullopt;
}

}  // namespace kvreplay
