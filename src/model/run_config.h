// Resolving a run's configuration: a trace header's config object, overridden
// by command-line options.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "core/config.h"
#include "io/input_error.h"

namespace kvreplay {

// Options given on the command line; unset ones fall back to the header.
struct ConfigOverrides {
  std::optional<std::string> model;
  std::optional<std::uint32_t> layers;
  std::optional<std::uint32_t> kv_heads;
  std::optional<std::uint32_t> head_dim;
  std::optional<std::string> dtype;
  std::optional<std::uint32_t> page_tokens;
  std::optional<std::uint32_t> pool_blocks;
  std::optional<std::string> kv_memory;
  std::optional<std::uint32_t> max_seq_tokens;
  std::optional<std::string> alloc_order;
};

// The largest pool a run accepts. The pool keeps a refcount, a filled count and
// a free-list slot per block up front (12 bytes), and the invariant checker a
// reference count and a free-list mark per block (5 bytes) when it runs, so
// 2^28 blocks is 4.25 GiB of bookkeeping; SPEC's bound (below 2^32-1) would be 68 GiB.
inline constexpr std::uint32_t kMaxSupportedPoolBlocks = 1u << 28;
inline constexpr std::uint64_t kPoolBytesPerBlock = 12;
inline constexpr std::uint64_t kCheckerBytesPerBlock = 5;

struct RunConfig {
  PagedKvConfig kv;
  AllocOrder alloc_order = AllocOrder::kLifo;
  std::string model;                       // empty when the geometry was given by hand
  std::optional<std::uint64_t> kv_memory;  // bytes, when the pool was sized by memory

  nlohmann::json to_json() const;  // the report's resolved "config" object
};

// Header keys: model | layers, kv_heads, head_dim; dtype; page_tokens (default 16);
// pool_blocks | kv_memory (one required); max_seq_tokens (default 32768);
// alloc_order (default lifo). A command-line option replaces the header's value;
// --model replaces the header's geometry, --pool-blocks its kv_memory and
// --kv-memory its pool_blocks. Errors name `file`, `line` and the key
// ("config.page_tokens", or "--page-tokens" for an option).
InputResult<RunConfig> resolve_run_config(const nlohmann::json& header, const ConfigOverrides& cli,
                                          const std::string& file, std::uint64_t line);

}  // namespace kvreplay
