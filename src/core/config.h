// PagedKvConfig: the geometry of a paged KV cache, and the parsing of memory
// sizes ("80GiB"). Model presets are one layer up, in model/presets.h.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace kvreplay {

using BlockId = std::uint32_t;
inline constexpr BlockId kInvalidBlock = 0xFFFFFFFFu;

enum class Dtype : std::uint8_t { kFp32, kFp16, kBf16, kFp8 };

std::uint32_t dtype_bytes(Dtype dtype);
std::string_view to_string(Dtype dtype);
std::optional<Dtype> parse_dtype(std::string_view name);
std::vector<std::string> dtype_names();  // in table order, for the command line

// Order in which BlockPool hands out free blocks. All are deterministic.
//   lifo:   the most recently freed block first (initially 0, 1, 2, ...)
//   fifo:   the least recently freed block first (initially 0, 1, 2, ...)
//   lowest: the lowest-numbered free block first
//   vllm:   vLLM's FreeKVCacheBlockQueue (vllm/v1/core/kv_cache_utils.py): in
//           the pool, lifo's order; a run on it (replay, simulate) first takes
//           block 0 as vLLM's null block (BlockPool.__init__), held for the
//           life of the pool, so N - 1 blocks hold KV.
enum class AllocOrder : std::uint8_t { kLifo, kFifo, kLowest, kVllm };

std::string_view to_string(AllocOrder order);
std::optional<AllocOrder> parse_alloc_order(std::string_view name);

struct PagedKvConfig {
  std::uint32_t layers = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  Dtype dtype = Dtype::kBf16;
  std::uint32_t page_tokens = 16;
  std::uint32_t pool_blocks = 0;
  std::uint32_t max_seq_tokens = 32768;
  // Vectors a token keeps per layer and head: 2, a K and a V (SPEC 1); 1, one
  // latent (MLA: DeepSeek's kv_lora_rank + qk_rope_head_dim values, kv_heads 1).
  std::uint32_t kv_tensors = 2;
  // Layers one pool block holds a page of: 0 for every layer; a hybrid model's
  // KV-cache group size under simulate (model/kv_groups.h: a block is one page
  // of one group, padded to group_size layers). bytes_per_token stays every
  // layer's, what a replay writes.
  std::uint32_t block_layers = 0;

  // Empty when valid; otherwise what is wrong, e.g. "page_tokens must be >= 1".
  // Rejects zeros, byte counts that overflow 64 bits, pools of 2^32-1 blocks
  // or more (kInvalidBlock must never be a real block), and kv_tensors other
  // than 1 and 2.
  std::optional<std::string> validate() const;
  bool is_valid() const { return !validate().has_value(); }

  // REQUIRES: is_valid() for the derived sizes below.
  // kv_tensors (2: K and V) * layers * kv_heads * head_dim * dtype_bytes
  std::uint64_t bytes_per_token() const;
  // bytes_per_token * page_tokens, or with block_layers: bytes_per_token / layers
  // * block_layers * page_tokens
  std::uint64_t block_bytes() const;
  std::uint64_t pool_bytes() const;     // block_bytes * pool_blocks
  std::uint32_t pages_per_seq() const;  // ceil(max_seq_tokens / page_tokens)
  // Entries of a single-sequence GPU plan: layers * pages_per_seq.
  std::uint64_t required_single_sequence_blocks() const;

  bool operator==(const PagedKvConfig&) const = default;
};

// Parses a memory size: a plain byte count ("1048576"), or a number with a
// binary (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB) unit, e.g. "80GiB",
// "512MiB", "1.5GiB". A fractional result is rounded down to whole bytes.
// Errors name the problem ("unknown unit 'GX'").
Result<std::uint64_t, std::string> parse_memory_size(std::string_view text);

// pool_blocks = floor(kv_memory / block_bytes). Errors if that is 0 or does
// not fit (>= 2^32-1). REQUIRES: the geometry part of config is valid.
Result<std::uint32_t, std::string> pool_blocks_for_memory(const PagedKvConfig& config,
                                                          std::uint64_t kv_memory);

}  // namespace kvreplay
