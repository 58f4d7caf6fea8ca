// --kv-events (SPEC 3.8): a simulation's cache changes as vLLM's KV-event
// stream (vllm/distributed/kv_events.py), one KVEventBatch per step as a JSON
// line; `kvreplay events` (app/events.cc) reads it back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/scheduler.h"

namespace kvreplay {

// One step's batch: {"events": [...], "instance": i (fleets), "ts": ts} and
// a newline. The events, as vLLM's with a "type" key (PR #42892's map form):
//   BlockStored {block_hashes, parent_block_hash, token_ids, block_size,
//                lora_id, medium}: a run of GPU blocks whose keys became
//                cached, each the parent of the next (block_size the page's
//                tokens; token_ids empty: a request trace names hash blocks,
//                not tokens); an offload tier's stored keys (parent null,
//                block_size 0, as vLLM's OffloadingConnector sends them);
//   BlockRemoved {block_hashes, medium}: keys no longer cached;
// the hashes kvreplay's block keys (engine/offload/offload_connector.h: block_key),
// unsigned 64-bit integers.
std::string kv_event_batch_line(double ts, const KvEventLog& events, std::uint32_t page_tokens,
                                std::optional<std::uint32_t> instance);

}  // namespace kvreplay
