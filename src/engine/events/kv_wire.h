// vLLM's KV events on the wire (vllm/distributed/kv_events.py): the msgpack
// payload of one ZmqEventPublisher message, a KVEventBatch, decoded into the
// JSON line `kvreplay events` checks (engine/events/events_check.h), the
// schema `simulate --kv-events` writes (engine/events/kv_events.h).
//
// Both encodings vLLM has used, told apart value by value:
//   - the batch (EventBatch: ts, events, data_parallel_rank): msgspec's
//     array_like form [ts, [events...], data_parallel_rank] (data_parallel_rank
//     left off as a default by omit_defaults), or a map {"ts", "events",
//     "data_parallel_rank"};
//   - each event (KVCacheEvent, tag=True): an array with the tag first,
//       ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//        lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
//        kv_cache_spec_sliding_window]
//       ["BlockRemoved", block_hashes, medium, group_idx]
//       ["AllBlocksCleared"]
//     (the fields in their declaration order; an older vLLM's shorter form,
//     without medium and what follows, too), or a map with the tag under
//     "type" and the fields by name.
// A block hash (ExternalBlockHash = bytes | int) is written as a string: an
// integer in decimal (up to 2^64-1, or negative as an older vLLM's Python
// hash()), bytes as lowercase hex, so that no JSON reader rounds it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/result.h"

namespace kvreplay {

// What one batch held.
struct WireBatchCounts {
  std::uint64_t stored = 0;   // BlockStored events
  std::uint64_t removed = 0;  // BlockRemoved events
  std::uint64_t cleared = 0;  // AllBlocksCleared events
  std::uint64_t events() const { return stored + removed + cleared; }
};

// The largest payload decoded (a step's batch is kilobytes; the line it makes
// must stay within what `kvreplay events` reads).
inline constexpr std::size_t kMaxWirePayload = std::size_t{16} << 20;

// The batch's JSON line, newline included: {"data_parallel_rank": r (when
// sent), "events": [...], "ts": t}, each event as kvreplay writes it
// ({"type", "block_hashes", "parent_block_hash", "token_ids", "block_size",
// "lora_id", "medium"}, medium null when not sent) plus the later fields vLLM
// sent (lora_name, extra_keys, group_idx, kv_cache_spec_kind,
// kv_cache_spec_sliding_window; bytes inside them as hex). Adds the batch's
// events to `counts`. Error: why it is not a KVEventBatch, naming the field
// ("events[2].block_hashes[0]: expected an integer or bytes, got a string").
Result<std::string, std::string> kv_batch_line_from_msgpack(std::span<const std::uint8_t> payload,
                                                            WireBatchCounts& counts);

}  // namespace kvreplay
